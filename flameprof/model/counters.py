"""The names of the process counters a profile holds (``Profile.counters``): collectors record
them, renderers draw them."""

CPU_PERCENT = "cpu_percent"  # CPU time of the whole process per wall second, in % (can exceed 100)
RSS_BYTES = "rss_bytes"  # resident set size
SYSTEM_CPU_PERCENT = "system_cpu_percent"  # the process's CPU time in the kernel per wall second, in %
PAGE_FAULTS_PER_S = "page_faults_per_s"  # minor page faults of the process a second (fresh memory)
TORCH_ALLOCATED_BYTES = "torch_allocated_bytes"  # the torch allocator's total (traced window, or CUDA)
TORCH_RESERVED_BYTES = "torch_reserved_bytes"  # what the CUDA caching allocator holds from the driver
GPU_UTIL_PERCENT = "gpu_util_percent"  # NVML: share of time a kernel ran on the GPU, in %
GPU_MEMORY_BYTES = "gpu_memory_bytes"  # NVML: device memory in use, all processes
