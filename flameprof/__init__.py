"""flameprof: a sampling profiler for deep-learning workloads."""

__version__ = "0.1.0"
