"""Process counters (CPU %, the kernel's share of it, page faults and RSS, and the GPU's where there
is one: gpu_counters.py), recorded every 200 ms during a profiling session; past 10,000 points a
series thins its older half, so a run of days keeps a coarser but bounded record.

``tick`` runs on the sampler thread after each sample and records at most one point per
interval, so no thread is added to the profiled program. It holds the program's GIL meanwhile, so
it reads the kernel directly: getrusage() and /proc/self/statm take a few microseconds where
psutil's two /proc reads took about 50 (and let the GIL go a dozen times).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...model.counters import CPU_PERCENT, PAGE_FAULTS_PER_S, RSS_BYTES, SYSTEM_CPU_PERCENT
from .gpu_counters import GpuCounters

if TYPE_CHECKING:
    import numpy as np

INTERVAL = 0.2  # the C sampler's clock runs the tick hooks this often (c_sampler.TICK_HOOK_INTERVAL)
MAX_POINTS = 10_000  # per series: past it, the older half is thinned to half as many points


class CounterRecorder:
    """Keeps (time, value) points; times are seconds on the session's clock (``perf_counter() - t0``)."""

    def __init__(self, t0: float, interval: float = INTERVAL, gpu: GpuCounters | None = None) -> None:
        self.t0 = t0
        self.gpu = gpu if gpu is not None else GpuCounters()
        self.extra: dict[str, tuple[list[float], list[float]]] = {}  # the other series: (times, values)
        self.interval = interval
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self._due = 0.0
        self._started = False
        self._last_wall = 0.0
        self._last_cpu = 0.0
        self._last_system = 0.0
        self._last_faults = 0

    def tick(self) -> None:
        now = time.perf_counter()
        if now < self._due:
            return
        self._due = now + 0.9 * self.interval  # a hook run every interval, a little early, records each time
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime
        if not self._started:
            self._started = True
            self._last_wall, self._last_cpu = now, cpu
            self._last_system, self._last_faults = usage.ru_stime, usage.ru_minflt
            return
        rss = resident_bytes()
        if rss is None:
            return
        # values first, time last: a reader trims to the shortest list and never pairs them wrongly
        elapsed = max(now - self._last_wall, 1e-9)
        self.cpu.append(100.0 * (cpu - self._last_cpu) / elapsed)
        self.rss.append(rss)
        self.times.append(now - self.t0)
        rates = {  # the kernel's share and the faults that bring fresh memory in (advice.py reads them)
            SYSTEM_CPU_PERCENT: 100.0 * (usage.ru_stime - self._last_system) / elapsed,
            PAGE_FAULTS_PER_S: (usage.ru_minflt - self._last_faults) / elapsed,
        }
        self._last_wall, self._last_cpu = now, cpu
        self._last_system, self._last_faults = usage.ru_stime, usage.ru_minflt
        for name, value in {**rates, **self.gpu.read()}.items():
            times, values = self.extra.setdefault(name, ([], []))
            values.append(value)
            times.append(now - self.t0)
        if len(self.times) > MAX_POINTS:
            self._thin()

    def _thin(self) -> None:
        """Halve the points of the older half of every series: a pair becomes one point at the later
        time, holding the mean of a rate and the larger of a size (a peak stays a peak)."""
        _halve(self.times, [(self.cpu, _mean), (self.rss, max)])
        for name, (times, values) in self.extra.items():
            _halve(times, [(values, max if name.endswith("_bytes") else _mean)])

    def points(self) -> dict[str, tuple[list[float], list[float]]]:
        """Every (times, values) pair so far as plain lists, for part writers that must not import numpy."""
        n = len(self.times)
        times = self.times[:n]
        out = {CPU_PERCENT: (times, self.cpu[:n]), RSS_BYTES: (times, self.rss[:n])}
        for name, (times, values) in list(self.extra.items()):
            m = len(times)
            out[name] = (times[:m], values[:m])
        return out

    def series(self, start: float, end: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The counters recorded between ``start`` and ``end`` seconds, as the model stores them."""
        import numpy as np

        out = {}
        for name, (times, values) in self.points().items():
            t = np.asarray(times, dtype=np.float64)
            keep = (t >= start) & (t <= end)
            out[name] = (t[keep], np.asarray(values, dtype=np.float64)[keep])
        return out


def _mean(a: float, b: float) -> float:
    return (a + b) / 2


def _halve(times: list[float], series: list[tuple[list[float], Callable[[float, float], float]]]) -> None:
    """Pairs of the older half of ``times`` and of each series' values (merged by its function) become one."""
    half = (len(times) // 4) * 2
    for values, pick in series:
        values[:half] = [pick(values[i], values[i + 1]) for i in range(0, half, 2)]
    times[:half] = times[1:half:2]


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> float | None:
    """This process's resident set size, or None without /proc. Three system calls (a file object
    makes nine): each lets the GIL go, and the sampler's thread waits to take it back."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return float(int(os.read(fd, 256).split()[1]) * _PAGE)
        finally:
            os.close(fd)
    except (OSError, IndexError, ValueError):
        return None
