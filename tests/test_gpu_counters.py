"""GPU counters: NVML per device and the torch CUDA allocator, and nothing at all without a GPU."""

import sys
import time
import types

import torch  # noqa: F401  (the test run without torch leaves this file out, as every torch test)

from flameprof.collect.engine.counters import CounterRecorder
from flameprof.collect.engine.gpu_counters import GpuCounters
from flameprof.model.counters import GPU_MEMORY_BYTES, GPU_UTIL_PERCENT


def _fake_nvml(utilisation: list[int], used: list[int]) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(utilisation)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=utilisation[h], memory=0)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=used[h], total=80 << 30)
    return nvml


def test_nvml_counters_per_device_reach_the_profile_series(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([87, 12], [3 << 30, 1 << 30]))
    recorder = CounterRecorder(time.perf_counter(), interval=0.0, gpu=GpuCounters(driver=str(tmp_path)))
    for _ in range(4):
        recorder.tick()
        time.sleep(0.002)
    series = recorder.series(0.0, float("inf"))
    assert list(series[f"{GPU_UTIL_PERCENT}.0"][1]) == [87.0] * 3  # the first tick only starts the clock
    assert list(series[f"{GPU_UTIL_PERCENT}.1"][1]) == [12.0] * 3
    assert list(series[f"{GPU_MEMORY_BYTES}.0"][1]) == [float(3 << 30)] * 3


def test_no_driver_means_no_nvml_and_no_counters(monkeypatch):
    def refuse(*args):
        raise AssertionError("NVML was looked for on a machine without the NVIDIA driver")

    broken = types.ModuleType("pynvml")
    broken.nvmlInit = refuse
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert GpuCounters(driver="/nonexistent/driver/nvidia").read() == {}


def test_real_nvml_without_a_gpu_is_silent(tmp_path, capfd):
    import pynvml  # nvidia-ml-py, from the test extra: the real library's failure path

    assert pynvml.nvmlInit
    counters = GpuCounters(driver=str(tmp_path))  # as if the driver were loaded: NVML init fails here
    assert counters.read() == {} and counters.read() == {}
    assert capfd.readouterr() == ("", "")
