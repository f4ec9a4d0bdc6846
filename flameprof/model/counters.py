"""The names of the process counters a profile holds (``Profile.counters``): collectors record
them, renderers draw them."""

CPU_PERCENT = "cpu_percent"  # CPU time of the whole process per wall second, in % (can exceed 100)
RSS_BYTES = "rss_bytes"  # resident set size
