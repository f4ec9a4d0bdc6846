"""The Python API: Profiler start/stop/save, context manager, decorator, nesting and reuse."""

import threading
import time

import pytest

import flameprof
from flameprof.profiler import SESSION, Profiler


def spin(seconds, ticks=3):
    """Busy for ``seconds`` and at least until the sampler has ticked ``ticks`` more times (load-proof)."""
    end = time.perf_counter() + seconds
    sampler = SESSION.sampler
    target = sampler.ticks + ticks if sampler is not None and sampler.running else 0
    while time.perf_counter() < end or (target and sampler.ticks < target and sampler.running):
        pass


def frame_names(profile):
    return {
        profile.frames[f].name
        for s in set(profile.sample_stack.tolist())
        if s >= 0
        for f in profile.stack_frames(s)
    }


def test_start_stop_returns_this_windows_samples():
    profiler = Profiler(rate=500)
    t0 = time.perf_counter()
    profiler.start()
    spin(0.2, ticks=20)
    profile = profiler.stop()
    elapsed = time.perf_counter() - t0
    assert profile.num_samples >= 20
    assert "spin" in frame_names(profile)
    assert 0.2 <= profile.duration <= elapsed
    assert not SESSION.users and not SESSION.sampler.running


def test_context_manager_saves_outputs(tmp_path):
    with flameprof.profile(output=tmp_path / "out", rate=500):
        spin(0.1)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "profile.flameprof",
        "profile.folded",
        "profile.svg",
    ]
    assert "spin (" in (tmp_path / "out" / "profile.folded").read_text()


def test_decorator_profiles_each_call(tmp_path):
    decorator = Profiler(output=tmp_path / "dec", rate=500)

    @decorator
    def work(x):
        spin(0.05)
        return x * 2

    assert work(21) == 42
    first = decorator.profile
    assert work(1) == 2
    assert decorator.profile is not first and decorator.profile.num_samples > 0
    assert (tmp_path / "dec" / "profile.svg").exists()


def test_nested_profilers_share_one_sampler_and_see_their_own_windows():
    outer = Profiler(rate=500).start()
    spin(0.1)
    t0 = time.perf_counter()
    inner = Profiler(rate=500).start()
    assert SESSION.users == 2
    spin(0.1)
    inner_profile = inner.stop()
    inner_elapsed = time.perf_counter() - t0
    assert SESSION.sampler.running
    spin(0.1)
    outer_profile = outer.stop()
    assert not SESSION.sampler.running
    assert outer_profile.sample_wall.sum() > inner_profile.sample_wall.sum()
    assert outer_profile.duration > 0.3
    assert 0.1 <= inner_profile.duration <= inner_elapsed


def test_misuse_raises_clear_errors():
    profiler = Profiler()
    with pytest.raises(RuntimeError, match="not running"):
        profiler.stop()
    with pytest.raises(RuntimeError, match="stop"):
        profiler.save("x")
    profiler.start()
    with pytest.raises(RuntimeError, match="already running"):
        profiler.start()
    profiler.stop()
    with pytest.raises(ValueError):
        Profiler(rate=0)


def test_threads_started_and_finished_while_sampling_are_recorded():
    def worker():
        spin(0.1)

    with Profiler(rate=500) as profiler:
        threads = [threading.Thread(target=worker, name=f"w{i}") for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    names = {t.name for t in profiler.profile.threads}
    assert {"w0", "w1", "w2"} <= names
    for i, t in enumerate(profiler.profile.threads):
        if t.name.startswith("w"):
            wall = profiler.profile.sample_wall[profiler.profile.sample_thread == i].sum()
            assert wall > 0.02  # lived >= 0.1 s; a starved sampler loses up to a tick at each end


def test_deep_recursion_is_truncated_with_a_marker():
    def recurse(n):
        if n == 0:
            spin(0.1)
            return
        recurse(n - 1)

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        with Profiler(rate=500) as profiler:
            recurse(1500)
    finally:
        sys.setrecursionlimit(limit)
    profile = profiler.profile
    markers = [f for f in profile.frames if f.kind == "marker"]
    assert markers and "truncated" in markers[0].name
    assert max(len(profile.stack_frames(s)) for s in set(profile.sample_stack.tolist()) if s >= 0) <= 1024


def test_a_profiler_stops_when_sys_argv_is_gone(tmp_path):
    """Lightning's profiler stops from ``__del__``, which may run late in a program's life, when
    ``sys.argv`` can be None: the profile is still taken."""
    import subprocess
    import sys

    script = tmp_path / "finalizer.py"
    script.write_text(
        "import sys\n"
        "from flameprof.profiler import Profiler\n"
        "class Holder:\n"
        "    def __init__(self):\n"
        "        self.profiler = Profiler(rate=1000).start()\n"
        "    def __del__(self):\n"
        "        profile = self.profiler.stop()\n"
        "        print(profile.num_samples > 0, profile.meta['argv'], flush=True)\n"
        "holder = Holder()\n"
        "sum(i * i for i in range(300000))\n"
        "sys.argv = None\n"
        "del holder\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "True []\n", "")
