"""The process counters a session records: CPU % and RSS that follow what the program does."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flameprof.collect.engine.counters import resident_bytes
from flameprof.model.counters import CPU_PERCENT, RSS_BYTES
from flameprof.profiler import SESSION, Profiler


def spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


@pytest.mark.parametrize("native", ["1", "0"])
def test_counters_follow_busy_idle_and_a_large_allocation(native, monkeypatch):
    monkeypatch.setenv("FLAMEPROF_NATIVE", native)
    with Profiler(rate=100) as profiler:
        start = SESSION.now()  # the counters' time base
        spin(1.0)
        busy_until = SESSION.now()
        time.sleep(1.0)
        idle_until = SESSION.now()
        block = np.ones(300 * 2**20, dtype=np.uint8)  # 300 MiB, touched
        time.sleep(0.6)
        del block
    times, cpu = profiler.profile.counters[CPU_PERCENT]
    rss_times, rss = profiler.profile.counters[RSS_BYTES]
    assert len(times) >= 10 and np.array_equal(times, rss_times)
    busy = cpu[(times > start + 0.3) & (times < busy_until)]
    idle = cpu[(times > busy_until + 0.3) & (times < idle_until)]
    assert busy.size and idle.size
    assert 60 < np.median(busy) < 140, cpu
    assert np.median(idle) < 20, cpu
    before, after = rss[times < idle_until].max(), rss[times > idle_until + 0.3].max()
    assert after - before > 250 * 2**20


def test_resident_bytes_is_this_process_rss():
    before = resident_bytes()
    block = np.ones(100 * 2**20, dtype=np.uint8)
    assert resident_bytes() - before > 90 * 2**20
    del block
