"""GPU counters for the whole run: each NVIDIA GPU's utilisation and memory in use (NVML, through
nvidia-ml-py), and the torch CUDA allocator's allocated and reserved bytes once the program has
initialised CUDA. Read on the sampler thread with the counters (``counters.py``).

Inert without a GPU: the NVML library is looked for only where the NVIDIA driver is loaded, and a
failure of any kind turns the reader off for the rest of the run, silently. flameprof never
initialises CUDA itself.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ...model.counters import GPU_MEMORY_BYTES, GPU_UTIL_PERCENT, TORCH_ALLOCATED_BYTES, TORCH_RESERVED_BYTES

DRIVER = "/proc/driver/nvidia"  # present where the NVIDIA kernel driver is loaded


def device_counter(name: str, device: int) -> str:
    """The counter name of one device: ``gpu_util_percent.0``."""
    return f"{name}.{device}"


class GpuCounters:
    """``read()`` returns ``{counter name: value}`` for this moment (empty when there is nothing to read)."""

    def __init__(self, driver: str = DRIVER) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._tried = not os.path.exists(driver)

    def _start(self) -> None:
        self._tried = True
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception:  # no nvidia-ml-py, no library, no permission: no NVML counters
            self._nvml, self._handles = None, []

    def read(self) -> dict[str, float]:
        if not self._tried:
            self._start()
        out: dict[str, float] = {}
        nvml = self._nvml
        if nvml is not None:
            try:
                for index, handle in enumerate(self._handles):
                    out[device_counter(GPU_UTIL_PERCENT, index)] = float(
                        nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    )
                    out[device_counter(GPU_MEMORY_BYTES, index)] = float(
                        nvml.nvmlDeviceGetMemoryInfo(handle).used
                    )
            except Exception:
                self._nvml = None
        out.update(_torch_allocator())
        return out


def _torch_allocator() -> dict[str, float]:
    """The CUDA caching allocator's bytes on the current device, once the program initialised CUDA."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return {}
        return {
            TORCH_ALLOCATED_BYTES: float(cuda.memory_allocated()),
            TORCH_RESERVED_BYTES: float(cuda.memory_reserved()),
        }
    except Exception:
        return {}
