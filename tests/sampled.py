"""Test helper: block until the running sampler has taken samples, so a test does not depend on load."""

import time

from flameprof.profiler import SESSION


def wait_for_samples(count: int = 2, timeout: float = 10.0) -> None:
    """Sleep (GIL released) until the session's sampler has ticked ``count`` more times."""
    sampler = SESSION.sampler
    target = sampler.ticks + count
    deadline = time.perf_counter() + timeout
    while sampler.ticks < target and time.perf_counter() < deadline:
        time.sleep(0.001)
