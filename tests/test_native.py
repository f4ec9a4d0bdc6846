"""The C sampler: same profile as the Python sampler, and never a crash or a hang in the target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest
from conftest import REPO

from flameprof import _native
from flameprof.collect.engine import choose_sampler
from flameprof.collect.engine.c_sampler import CSampler
from flameprof.collect.engine.choose_sampler import make_sampler
from flameprof.collect.engine.interning import MAX_DEPTH
from flameprof.collect.engine.python_sampler import PythonSampler
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.records import GIL_HELD, GIL_NOT_HELD, Frame
from flameprof.model.validate import check_profile

FLAMEPROF_DIR = os.path.join(REPO, "flameprof")


class Parked:
    """A thread parked at a known stack: ``target -> level_1 .. level_n -> Event.wait``."""

    def __init__(
        self, depth: int = 3, name: str = "parked", scope: Frame | None = None, scopes: dict | None = None
    ) -> None:
        self.release = threading.Event()
        self.ready = threading.Event()
        self.depth = depth
        self.scope = scope
        self.scopes = scopes
        self.frames: list = []
        self.thread = threading.Thread(target=self.target, name=name, daemon=True)

    def target(self) -> None:
        self.level(self.depth)

    def level(self, n: int) -> None:
        self.frames.append(sys._getframe())
        if n > 1:
            return self.level(n - 1)
        if self.scope is not None and self.scopes is not None:
            self.scopes[threading.get_ident()] = [(sys._getframe(1), self.scope)]
        self.ready.set()
        self.release.wait()

    def __enter__(self) -> Parked:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join()


@pytest.fixture(autouse=True)
def no_clock_left_running():
    """A failed test must not leave the process's one native clock running for the next ones."""
    yield
    _native.stop_clock()


def frame_name(function) -> str:
    """The name the samplers give a function's frames (``co_qualname`` from 3.11 on)."""
    return getattr(function.__code__, "co_qualname", function.__code__.co_name)


TARGET, LEVEL = frame_name(Parked.target), frame_name(Parked.level)


def stacks_by_thread(builder: ProfileBuilder) -> dict[str, Counter]:
    """Thread name -> Counter of stacks (tuples of frame names, root first)."""
    profile = builder.build()
    check_profile(profile)
    stacks = profile.all_stack_frames()
    out: dict[str, Counter] = {}
    for thread, sid in zip(profile.sample_thread.tolist(), profile.sample_stack.tolist()):
        names = tuple(profile.frames[f].name for f in stacks[sid]) if sid >= 0 else ()
        out.setdefault(profile.threads[thread].name, Counter())[names] += 1
    return out


def both_samplers() -> list:
    return [PythonSampler(ProfileBuilder()), CSampler(ProfileBuilder())]


def test_make_sampler_prefers_native_and_env_forces_python(monkeypatch):
    monkeypatch.delenv("FLAMEPROF_NATIVE", raising=False)
    assert make_sampler(ProfileBuilder()).kind == "native"
    monkeypatch.setenv("FLAMEPROF_NATIVE", "0")
    assert make_sampler(ProfileBuilder()).kind == "python"


def test_failed_native_import_warns_once_and_falls_back(monkeypatch, capsys):
    monkeypatch.delenv("FLAMEPROF_NATIVE", raising=False)
    import flameprof

    monkeypatch.setitem(sys.modules, "flameprof._native", None)  # makes the import fail
    monkeypatch.delattr(flameprof, "_native")
    monkeypatch.delitem(sys.modules, "flameprof.collect.engine.c_sampler")
    monkeypatch.setattr(choose_sampler, "_warned", False)
    kinds = [make_sampler(ProfileBuilder()).kind for _ in range(3)]
    assert kinds == ["python"] * 3
    err = capsys.readouterr().err
    assert err.count("flameprof: warning:") == 1 and "pure-Python sampler" in err


def test_parked_threads_give_identical_stacks_in_both_samplers():
    with Parked(depth=4, name="worker-a"), Parked(depth=2, name="worker-b"):
        results = []
        for sampler in both_samplers():
            for _ in range(5):
                sampler.sample()
            assert sampler.ticks == 5
            results.append(stacks_by_thread(sampler.builder))
    python, native = results
    assert python == native
    worker_a = list(native["worker-a"])
    assert len(worker_a) == 1 and native["worker-a"][worker_a[0]] == 5
    assert worker_a[0][-7:-2] == (TARGET,) + (LEVEL,) * 4


def test_thread_identity_wall_and_cpu_match_the_python_semantics():
    with Parked(name="idle-worker") as parked:
        for sampler in both_samplers():
            sampler.start()
            time.sleep(0.2)
            sampler.stop()
            profile = sampler.builder.build()
            names = {t.name: t for t in profile.threads}
            assert names["idle-worker"].tid == parked.thread.native_id
            assert names["idle-worker"].pid == os.getpid()
            mask = profile.sample_thread == profile.threads.index(names["idle-worker"])
            # wall: each sample stands for the time since the thread's previous one, so the sum
            # covers the sampled window; an idle thread uses almost no CPU
            assert 0.15 < profile.sample_wall[mask].sum() < 0.6
            assert profile.sample_cpu[mask].sum() < 0.05
            assert (profile.sample_time[mask] > 0).all()
            # the time since its previous sample, the tick hooks' runs (microseconds here) moved on
            times, walls = profile.sample_time[mask], profile.sample_wall[mask]
            moved = walls[1:] - (times[1:] - times[:-1])
            assert abs(moved).max() < 0.001 and abs(moved.sum()) < 0.001, moved


def profile_a_thread(sampler, target, name: str, after: float = 0.0):
    """(profile, thread index) of a thread running ``target``, started ``after`` seconds into sampling."""
    sampler.start()
    time.sleep(after)
    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()
    sampler.stop()
    profile = sampler.builder.build()
    return profile, [t.name for t in profile.threads].index(name)


def spin_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("sampler_class", [CSampler, PythonSampler])
def test_a_thread_started_while_sampling_has_all_its_cpu_time_recorded(sampler_class):
    """Its CPU clock starts with it: the time before its first sample is counted too."""
    cpu = {}

    def work() -> None:
        spin_cpu(0.2)
        cpu["spun"] = time.thread_time()
        time.sleep(0.2)  # alive, so a later sample closes the interval the spin ended in

    # long intervals: the first one matters
    profile, index = profile_a_thread(sampler_class(ProfileBuilder(), rate=20.0), work, "late", after=0.1)
    recorded = float(profile.sample_cpu[profile.sample_thread == index].sum())
    assert cpu["spun"] - 0.005 <= recorded <= cpu["spun"] + 0.02, (recorded, cpu)


HOOK_RUN = 0.06  # seconds a run of the slow hook spins: past any wait for the GIL (5 ms slices)


@pytest.mark.parametrize("sampler_class", [CSampler, PythonSampler])
def test_a_long_run_of_the_tick_hooks_is_shared_by_the_ticks_after_it(sampler_class):
    """The tick hooks run on the sampler's thread, which takes no sample meanwhile: a long run of
    them (folding samples past the memory limit) gave its whole length to the next sample,
    wherever the program was by then. The ticks after it now share that time."""
    spun = []

    def slow_hook() -> None:  # a run every 200 ms, as the C clock runs its hooks
        start = time.perf_counter()
        if spun and start < spun[-1] + 0.2:
            return
        while time.perf_counter() < start + HOOK_RUN:
            pass
        spun.append(start)

    def work() -> None:
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            sum(range(100))

    sampler = sampler_class(ProfileBuilder(), rate=1000)
    sampler.tick_hooks.append(slow_hook)
    profile, index = profile_a_thread(sampler, work, "worker")
    walls = profile.sample_wall[profile.sample_thread == index]
    assert len(spun) >= 4
    assert walls.max() < HOOK_RUN / 2, walls.max()  # never a whole run of the hooks
    # the thread's samples cover its second (a run near its end is given to the threads after it)
    assert 1.0 - HOOK_RUN - 0.02 < walls.sum() < 1.02, walls.sum()


def spinning(seconds: float) -> None:
    spin_cpu(seconds)


def sleeping(seconds: float) -> None:
    time.sleep(seconds)


def test_the_tick_hooks_run_inside_the_main_threads_sample_leave_its_times_non_negative():
    """The main thread samples itself (a pending call); a layer hook there that lets the GIL go lets
    the clock run its tick hooks in the middle of that sample. Their time, spread over the next
    ticks, moved the previous tick past the one being taken: its rows got negative wall and CPU
    times (-29 ms with these hooks), which made a forked DataLoader worker's part unreadable."""
    proc = run_script("""
        import threading, time
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.builder import ProfileBuilder
        from flameprof.model.records import Frame
        from flameprof.model.validate import check_profile

        waiting, hooks_ran = threading.Event(), threading.Event()

        class Layer:
            def forward(self):
                end = time.perf_counter() + 0.001
                while time.perf_counter() < end:
                    pass

        def layer_hook(frame):
            if threading.current_thread() is threading.main_thread() and not waiting.is_set():
                waiting.set()
                hooks_ran.wait(5)  # the GIL let go until the clock has run its hooks
                time.sleep(0.05)  # and ended that run meanwhile
            return Frame("layer", kind="layer")

        def tick_hook():
            if waiting.is_set() and not hooks_ran.is_set():
                hooks_ran.set()
                end = time.perf_counter() + 0.02
                while time.perf_counter() < end:
                    pass

        builder = ProfileBuilder()
        sampler = CSampler(builder, rate=1000)
        sampler.frame_hooks[Layer.forward.__code__] = layer_hook
        sampler.tick_hooks.append(tick_hook)
        sampler.start()
        layers = []  # kept: a hook's result is cached per object
        end = time.perf_counter() + 10
        while not hooks_ran.is_set() and time.perf_counter() < end:
            layers.append(Layer())
            layers[-1].forward()
        for _ in range(200):
            layers[-1].forward()
        sampler.stop()
        profile = builder.build()
        check_profile(profile)
        print(hooks_ran.is_set(), profile.sample_wall.min() >= 0, profile.sample_cpu.min() >= 0)
    """)
    assert proc.stdout.split() == ["True", "True", "True"], proc.stderr


@pytest.mark.parametrize("sampler_class", [CSampler, PythonSampler])
def test_cpu_time_at_1khz_goes_to_the_stacks_that_spent_it(sampler_class):
    """The C sampler reads a thread's CPU clock at most every 5 ms and shares it over the rows since:
    the thread's total stays whole and the stacks that burned it keep nearly all of it."""
    spent = {}

    def alternate() -> None:
        start = time.thread_time()
        for _ in range(8):
            spinning(0.04)
            sleeping(0.04)
        spent["cpu"] = time.thread_time() - start

    profile, index = profile_a_thread(sampler_class(ProfileBuilder(), rate=1000), alternate, "alternating")
    stacks = profile.all_stack_frames()
    on_spin = on_sleep = 0.0
    for thread_index, sid, cpu in zip(profile.sample_thread, profile.sample_stack, profile.sample_cpu):
        if thread_index != index:
            continue
        names = {profile.frames[f].name for f in stacks[sid]}
        if frame_name(spinning) in names:
            on_spin += cpu
        elif frame_name(sleeping) in names:
            on_sleep += cpu
    assert 0.8 * spent["cpu"] < on_spin + on_sleep < 1.05 * spent["cpu"] + 0.01, (on_spin, on_sleep, spent)
    assert on_sleep < 0.15 * (on_spin + on_sleep), (on_spin, on_sleep)  # measured: 4-8 % in both samplers


def test_hot_stacks_agree_between_samplers_running_together():
    stop = threading.Event()

    def spin_a():
        while not stop.is_set():
            sum(range(200))

    def spin_b():
        while not stop.is_set():
            time.sleep(0.001)

    threads = [
        threading.Thread(target=spin_a, name="spinner", daemon=True),
        threading.Thread(target=spin_b, name="sleeper", daemon=True),
    ]
    samplers = [PythonSampler(ProfileBuilder(), rate=200), CSampler(ProfileBuilder(), rate=200)]
    try:
        for t in threads:
            t.start()
        for s in samplers:
            s.start()
        time.sleep(0.6)
    finally:
        for s in samplers:
            s.stop()
        stop.set()
        for t in threads:
            t.join()
    python, native = (stacks_by_thread(s.builder) for s in samplers)
    assert {"spinner", "sleeper"} <= set(python) & set(native)
    for name in ("spinner", "sleeper"):
        shares = []
        for result in (python, native):
            stacks = result[name]
            total = sum(stacks.values())
            assert total >= 10
            top, n = stacks.most_common(1)[0]
            shares.append((top, n / total))
        (top_py, share_py), (top_native, share_native) = shares
        assert top_py == top_native and top_native[-1].endswith(("spin_a", "spin_b"))
        assert abs(share_py - share_native) < 0.2  # same hot stack, same share within sampling error


def test_user_scope_is_inserted_leafward_of_the_entering_frame():
    scope = Frame("load-batch", kind="scope")
    results = []
    for sampler in both_samplers():
        with Parked(depth=3, name="scoped", scope=scope, scopes=sampler.scopes):
            sampler.sample()
        results.append(stacks_by_thread(sampler.builder)["scoped"])
    python, native = results
    assert python == native
    (stack,) = native
    i = stack.index("load-batch")
    # entered in the frame of level(2), i.e. the caller of the innermost level()
    assert stack[i - 1] == LEVEL and stack[i + 1] == LEVEL and stack[i - 2] == LEVEL


def test_frame_hook_inserts_a_frame_and_native_caches_it_per_self():
    calls = Counter()

    def hook(frame):
        owner = frame.f_locals["self"]
        calls[id(owner)] += 1
        return Frame(f"layer {owner.thread.name}", kind="layer")

    with Parked(depth=2, name="first") as a, Parked(depth=2, name="second") as b:
        counts = {}
        for sampler in both_samplers():
            calls.clear()
            sampler.frame_hooks[Parked.target.__code__] = hook
            for _ in range(4):
                sampler.sample()
            counts[sampler.kind] = dict(calls)
            result = stacks_by_thread(sampler.builder)
            for name in ("first", "second"):
                (stack,) = result[name]
                i = stack.index(TARGET)
                assert stack[i + 1] == f"layer {name}" and stack[i + 2] == LEVEL
    assert counts["python"] == {id(a): 4, id(b): 4}
    assert counts["native"] == {id(a): 1, id(b): 1}  # cached by (code, self): no call per sample


def test_hooks_added_while_the_clock_runs_take_effect():
    with Parked(depth=1, name="late"):
        sampler = CSampler(ProfileBuilder(), rate=500)
        sampler.start()
        time.sleep(0.1)
        sampler.frame_hooks[Parked.target.__code__] = lambda frame: Frame("late-layer", kind="layer")
        time.sleep(0.1)
        sampler.stop()
        stacks = stacks_by_thread(sampler.builder)["late"]
    assert {"late-layer" in s for s in stacks} == {False, True}


def test_own_frames_are_skipped_and_boundary_drops_everything_rootward():
    namespace: dict = {}
    runner_src = "def runner(fn):\n    return fn()\n\ndef helper(fn):\n    return fn()\n"
    exec(compile(runner_src, os.path.join(FLAMEPROF_DIR, "fake_runner.py"), "exec"), namespace)
    results = []
    for sampler in both_samplers():
        sampler.boundary_codes.add(namespace["runner"].__code__)
        stacks = []

        def target(sampler=sampler, stacks=stacks):
            sampler.sample()
            stacks.append(stacks_by_thread(sampler.builder)[threading.current_thread().name])

        def run_helper():
            namespace["helper"](target)

        def outer():
            namespace["runner"](run_helper)

        outer()
        results.append(stacks[0])
    python, native = results
    assert python == native
    (stack,) = native
    # runner and everything rootward of it (outer, the test) are gone; helper (ours) is skipped
    assert stack == (frame_name(run_helper), frame_name(target))


def test_deep_recursion_is_truncated_with_a_marker():
    depth = 1500
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 500)
    try:
        with Parked(depth=depth, name="deep"):
            results = []
            for sampler in both_samplers():
                sampler.sample()
                sampler.sample()
                results.append(stacks_by_thread(sampler.builder)["deep"])
    finally:
        sys.setrecursionlimit(old)
    python, native = results
    assert python == native
    (stack,) = native
    assert len(stack) == MAX_DEPTH
    total = MAX_DEPTH - 1 + int(stack[-1].strip("[").split()[0])
    assert stack[-1].endswith("frames truncated]") and total >= depth
    assert stack[: MAX_DEPTH - 1].count(LEVEL) == MAX_DEPTH - 1 - stack.index(LEVEL)


def descend(n: int, parked: threading.Semaphore, resume: threading.Event) -> None:
    if n:
        return descend(n - 1, parked, resume)
    parked.release()
    resume.wait()


def test_frames_of_known_code_are_walked_without_making_frame_objects():
    """From 3.11 a frame gets a frame object only when asked; a sample that asked for one per new
    frame allocated in every tick of a training loop (new frames each step)."""
    parked, resumes = threading.Semaphore(0), [threading.Event(), threading.Event()]
    worker = threading.Thread(target=lambda: [descend(40, parked, r) for r in resumes], name="descender")
    worker.start()
    try:
        sampler = CSampler(ProfileBuilder())
        assert parked.acquire(timeout=10)
        sampler.sample()  # meets the code for the first time
        resumes[0].set()
        assert parked.acquire(timeout=10)  # parked again, in 41 new frames of the same code
        before = sys.getallocatedblocks()
        sampler.sample()
        allocated = sys.getallocatedblocks() - before
    finally:
        for r in resumes:
            r.set()
        worker.join()
    assert allocated < 10  # one frame object per frame would be over 40
    (stacks,) = [c for name, c in stacks_by_thread(sampler.builder).items() if name == "descender"]
    (stack,) = stacks  # the walk in place gives the stack the first walk gave
    assert stacks[stack] == 2 and stack.count(frame_name(descend)) == 41


def test_threads_starting_and_ending_while_sampling_at_high_rate():
    sampler = CSampler(ProfileBuilder(), rate=2000)
    sampler.start()

    def short():
        sum(range(20000))

    for _ in range(10):
        batch = [threading.Thread(target=short, name=f"short-{i}") for i in range(10)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    sampler.stop()
    profile = sampler.builder.build()
    check_profile(profile)
    assert len({(t.pid, t.tid) for t in profile.threads}) == len(profile.threads)
    assert sampler.ticks > 0 and not sampler.running


C_BORN_THREADS = """
import ctypes, ctypes.util, time
libc = ctypes.CDLL(ctypes.util.find_library("c"))
START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
born = 0
@START
def body(_):  # run by a pthread: ctypes takes the GIL for it with PyGILState_Ensure()
    global born
    born += 1
libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, START, ctypes.c_void_p]
libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
until = time.perf_counter() + 2.0
while time.perf_counter() < until:
    tids = [ctypes.c_ulong() for _ in range(8)]
    for t in tids:
        libc.pthread_create(ctypes.byref(t), None, body, None)
    for t in tids:
        libc.pthread_join(t.value, None)
print(born)
"""


def test_threads_that_take_the_gil_from_c_while_sampling_at_high_rate(tmp_path):
    """A thread that takes the GIL from C (a torch thread through pybind11, a ctypes callback) makes
    its thread state without the GIL, and 3.11 links it into the list before it fills it in: the
    sampler met one half made and crashed the program (a torchrun rank under ``flameprof run``)."""
    script = tmp_path / "born.py"
    script.write_text(C_BORN_THREADS)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "flameprof", "run", "-q", "--rate", "2000", "-o", str(out), str(script)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) > 1000, proc.stdout  # thousands of thread states made and dropped
    profile = storage.load(out / "profile.flameprof")
    assert profile.num_samples > 1000, profile.num_samples  # about 4,000 ticks


def test_stop_and_restart():
    sampler = CSampler(ProfileBuilder(), rate=500)
    sampler.start()
    time.sleep(0.1)
    sampler.stop()
    first = len(sampler)
    assert not sampler.running and first > 0
    time.sleep(0.05)
    sampler.start()
    assert sampler.running
    time.sleep(0.1)
    sampler.stop()
    assert len(sampler) > first
    assert sampler.builder.num_samples == len(sampler)
    assert 0 < sampler.achieved_rate() <= 600


def test_main_thread_running_python_takes_its_own_samples_without_a_gil_hand_over():
    # A pending call the main thread runs between two bytecodes, on every version (before 3.13 the
    # clock raises the eval-breaker flag for it); the clock thread samples only while it sleeps.
    proc = run_script("""
        import time
        from flameprof import _native
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.builder import ProfileBuilder
        sampler = CSampler(ProfileBuilder(), rate=500)
        sampler.start()
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            sum(range(100))
        time.sleep(0.2)
        sampler.stop()
        stats = _native.clock_stats()
        print(stats["by_pending_call"], stats["by_clock_thread"], stats["frozen"])
    """)
    assert proc.returncode == 0, proc.stderr
    by_pending, by_clock, frozen = map(int, proc.stdout.split())
    assert by_pending >= 100, (by_pending, by_clock)  # about 300 ticks of spinning at 500 Hz
    # About 100 ticks of sleep: nobody holds the GIL, and the clock samples the frozen interpreter.
    # (On a loaded machine it also samples the ticks at which the main thread, holding the GIL,
    # waited for a CPU and could not answer.)
    assert 60 <= frozen <= by_clock, (by_pending, by_clock, frozen)


def test_under_run_a_thread_other_than_the_main_one_is_sampled_frozen(tmp_path):
    """``flameprof run`` starts stacks above its own frames (boundary codes), which are therefore never
    learned: walking on to them made every frozen sample fail, and each tick at which another thread
    held the GIL waited for the GIL instead (beside 64 computing threads, 400 of 1,000 ticks a second
    were taken, and the program ran at half its speed)."""
    script = tmp_path / "spin.py"
    script.write_text(
        textwrap.dedent("""
        import threading, time
        from flameprof import _native
        def spin():
            end = time.perf_counter() + 0.5
            while time.perf_counter() < end:
                sum(range(100))
        worker = threading.Thread(target=spin)
        worker.start()
        worker.join()
        stats = _native.clock_stats()
        print(stats["by_clock_thread"], stats["frozen"])
    """)
    )
    out = str(tmp_path / "p.flameprof")
    command = [sys.executable, "-m", "flameprof", "run", "-q", "--rate", "500", "-o", out, str(script)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    by_clock, frozen = map(int, proc.stdout.split())
    assert by_clock > 150 and frozen > 0.9 * by_clock, (by_clock, frozen)


def _blocked_signals(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as fh:
        return int(next(line for line in fh if line.startswith("SigBlk:")).split()[1], 16)


@pytest.mark.parametrize("sampler_class", [CSampler, PythonSampler])
def test_sampler_thread_leaves_the_programs_signals_to_the_programs_threads(sampler_class):
    # Before 3.13 a Python signal handler tripped in a thread other than the main one may never run.
    bit = lambda sig: 1 << (sig - 1)  # noqa: E731
    before = set(os.listdir("/proc/self/task"))
    main_mask = _blocked_signals(threading.get_native_id())
    sampler = sampler_class(ProfileBuilder(), rate=200)
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while sampler.achieved_rate() == 0 and time.monotonic() < deadline:  # its thread has begun
            time.sleep(0.01)
        new = set(os.listdir("/proc/self/task")) - before
        assert len(new) == 1
        mask = _blocked_signals(int(new.pop()))
    finally:
        sampler.stop()
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGALRM):
        assert mask & bit(sig), sig
    for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT):
        assert not mask & bit(sig), sig
    assert _blocked_signals(threading.get_native_id()) == main_mask


def test_one_native_clock_per_process():
    first, second = CSampler(ProfileBuilder()), CSampler(ProfileBuilder())
    first.start()
    try:
        with pytest.raises(RuntimeError):
            second.start()
    finally:
        first.stop()


def run_script(source: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO, FLAMEPROF_NATIVE="1")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def test_fork_while_sampling_does_not_hang_and_child_can_restart():
    proc = run_script("""
        import os, time
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.builder import ProfileBuilder
        sampler = CSampler(ProfileBuilder(), rate=2000)
        sampler.start()
        for i in range(20):
            pid = os.fork()
            if pid == 0:
                ok = True
                if i % 2:  # half the children restart sampling in the child
                    sampler.reset_after_fork()
                    before = len(sampler)
                    sampler.start()
                    t = time.perf_counter()
                    while time.perf_counter() - t < 0.05:
                        sum(range(100))
                    sampler.stop()
                    ok = len(sampler) > before
                os._exit(0 if ok else 3)
            sum(range(20000))
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
        sampler.stop()
        print("ok", len(sampler) > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok True"


def test_optimizer_steps_recorded_in_c_before_a_fork_stay_with_the_parent():
    proc = run_script("""
        import os
        from flameprof import _native
        class Optimizer: pass
        first, other = Optimizer(), Optimizer()
        recorder = _native.StepRecorder()
        recorder(first, (), {}); recorder(other, (), {}); recorder(first, (), {})
        pid = os.fork()
        if pid == 0:
            before = len(recorder.take())
            recorder(first, (), {})
            rows = recorder.take()
            os._exit(0 if before == 0 and len(rows) == 1 and rows[0][2] == os.getpid() else 3)
        _, status = os.waitpid(pid, 0)
        rows = recorder.take()
        print(os.waitstatus_to_exitcode(status), len(rows), rows[0][2] == os.getpid())
    """)
    assert proc.stdout.split() == ["0", "2", "True"], proc.stderr


def test_a_step_nested_in_another_steps_wrapper_is_not_recorded():
    """torch runs the step hook inside its step wrapper; a subclass's step calling super().step()
    runs that wrapper twice, and only the outer call is a step. The C hook walks the callers' frames
    to tell (before 3.11 with a function the main header does not declare: built without its
    declaration, the first frame it returned was a truncated pointer)."""
    proc = run_script("""
        from flameprof import _native
        class Optimizer: pass
        recorder, opt = _native.StepRecorder(), Optimizer()
        def wrapper(inner):  # stands for torch's step wrapper, which calls the hook
            if inner:
                subclass_step()
            recorder(opt, (), {})
        def subclass_step():
            wrapper(False)
        def train(steps):
            for _ in range(steps):
                wrapper(True)
        train(3)
        nested_alone = len(recorder.take())
        subclass_step()  # a wrapper called from elsewhere than another wrapper counts
        print(nested_alone, len(recorder.take()))
    """)
    assert proc.stdout.split() == ["3", "1"], proc.stderr


def test_tick_hooks_run_with_a_short_switch_interval_and_the_programs_comes_back():
    # A hook's system calls let the GIL go; with the program's 5 ms switch interval each took a
    # switch interval to come back while the program ran Python, and the clock stopped ticking.
    # The hooks run at a tick's interval (1 ms at 1 kHz: an eighth of it cut the hooks' Python into
    # slices that each waited for the program's busy threads).
    proc = run_script("""
        import sys, time
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.builder import ProfileBuilder
        sys.setswitchinterval(0.002)
        seen = []
        def hook():
            seen.append(sys.getswitchinterval())
            with open("/proc/self/stat") as f:
                f.read()
        sampler = CSampler(ProfileBuilder(), rate=1000)
        sampler.tick_hooks.append(hook)
        sampler.start()
        end = time.perf_counter() + 0.5
        while time.perf_counter() < end or len(seen) < 2:
            sum(range(100))
        sampler.stop()
        print(round(min(seen) * 1e6), round(max(seen) * 1e6), sys.getswitchinterval())
    """)
    assert proc.stdout.split() == ["1000", "1000", "0.002"], proc.stderr


def test_interpreter_exit_while_sampling_is_clean():
    proc = run_script("""
        import threading, time
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.builder import ProfileBuilder
        sampler = CSampler(ProfileBuilder(), rate=5000)
        sampler.start()
        def spin():
            while True:
                sum(range(100))
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.2)
        print("exiting", sampler.running)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "exiting True" and "Fatal" not in proc.stderr


def test_garbage_collection_with_finalizers_during_sampling_neither_crashes_nor_hangs():
    # Walking frames makes frame objects; a collection started by that allocation runs __del__
    # methods (Python code) that could switch threads and pop the frames being walked.
    # Each thread makes a bounded number of objects: while one thread is in a collection, running
    # finalizers, the others allocate freely, and with no bound CPython 3.13 went on to one
    # collection of millions of objects (3.4 GB, over a minute) with or without a sampler.
    proc = run_script("""
        import gc, threading, time
        from flameprof.collect.engine.c_sampler import CSampler
        from flameprof.model.records import GIL_HELD, GIL_NOT_HELD, Frame
        from flameprof.model.builder import ProfileBuilder
        from flameprof.model.validate import check_profile

        class Cyclic:
            def __init__(self):
                self.me = self
            def __del__(self):
                deep(5)

        def deep(n):
            return deep(n - 1) if n else sum(range(10))

        def churn(stop):
            for _ in range(1000):
                if stop.is_set():
                    break
                for _ in range(200):
                    Cyclic()
                deep(30)

        def layered(n):
            return layered(n - 1) if n else len([Cyclic() for _ in range(5)])

        gc.set_threshold(50, 5, 5)
        stop = threading.Event()
        threads = [threading.Thread(target=churn, args=(stop,)) for _ in range(3)]
        sampler = CSampler(ProfileBuilder(), rate=5000)
        sampler.frame_hooks[layered.__code__] = lambda frame: Frame("layer", kind="layer")
        for t in threads:
            t.start()
        sampler.start()
        end = time.perf_counter() + 1.5
        for _ in range(40000):
            if time.perf_counter() > end:
                break
            layered(20)
        sampler.stop()
        stop.set()
        for t in threads:
            t.join()
        profile = sampler.builder.build()
        check_profile(profile)
        print("ok", profile.num_samples > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "True"]


def test_profiler_meta_reports_native_sampler_and_achieved_rate():
    proc = run_script("""
        import time
        from flameprof.profiler import Profiler
        p = Profiler(rate=10000)
        p.start()
        time.sleep(0.3)
        meta = p.stop().meta
        starved = meta["sampler_starved"] in (True, False)
        print(meta["sampler"], meta["rate"], meta["achieved_rate"] > 0, starved)
        p = Profiler(rate=200)
        p.start()
        sum(range(30_000_000))  # one C call that holds the GIL: the sampler starves
        meta = p.stop().meta
        print(meta["sampler_starved"], meta["achieved_rate"] < 100)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["native", "10000.0", "True", "True", "True", "True"]


def test_taking_the_oldest_ticks_leaves_the_rest_as_they_were():
    """The memory limit takes ticks off the front of the C buffers: what is taken and what is left
    together are the rows there were, and sample indexes keep counting from the first."""
    import numpy as np

    builder = ProfileBuilder()
    with Parked(name="raw"):
        sampler = CSampler(builder)
        for _ in range(6):
            sampler.sample()
    before = sampler.columns()
    per_tick = np.unique(before[0], return_counts=True)[1]
    assert len(per_tick) == 6 and all(per_tick >= 2)  # the main thread and "raw"
    taken = sampler.take_ticks(4)
    n = int(per_tick[:4].sum())
    after = sampler.columns()
    for i, (old, first, rest) in enumerate(zip(before, taken, after)):
        assert np.allclose(np.asarray(first[:], dtype=float), old[:n]), i
        assert np.allclose(rest, old[n:]), i  # the fifth tick's wall: from the fourth, still
    assert builder.rows_taken_off == n and builder.num_samples == len(before[0])
    assert sampler.completed_ticks == 2 and sampler.discard_all() == len(before[0]) - n
    assert len(sampler) == 0


def test_part_columns_are_the_rows_in_microseconds():
    import numpy as np

    with Parked(name="part"):
        sampler = CSampler(ProfileBuilder())
        for _ in range(5):
            sampler.sample()
    time, thread, stack, wall, cpu, gil = sampler.columns()
    ticks = sampler.completed_ticks
    assert sampler.rows_in(0, ticks) == len(time) and sampler.rows_in(1, 2) < len(time)
    chunks = [[sampler.part_column(w, first, 2) for first in range(0, ticks, 2)] for w in range(6)]
    codes = ("<i8", "<i4", "<i4", "<i8", "<i8", "u1")
    got = [np.frombuffer(b"".join(c), dtype=code) for c, code in zip(chunks, codes)]
    assert np.array_equal(got[0], np.rint(time * 1e6)) and np.array_equal(got[1], thread)
    assert np.array_equal(got[2], stack) and np.array_equal(got[3], np.rint(wall * 1e6))
    assert np.abs(got[4] - cpu * 1e6).max() <= 1
    # asked for from Python, by the thread holding the GIL; "part" neither held it nor waited
    assert np.array_equal(got[5], gil) and set(gil.tolist()) == {GIL_HELD, GIL_NOT_HELD}
    with pytest.raises(ValueError):
        sampler.part_column(6, 0, 1)


class Capturing:
    """A method whose ``self`` a closure captures (a cell, not a plain local, in the frame)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        wait = lambda: self.release.wait()  # noqa: E731
        self.ready.set()
        wait()


def test_layer_hook_cache_finds_self_even_when_a_closure_captures_it():
    calls = Counter()

    def hook(frame):
        calls[id(frame.f_locals["self"])] += 1
        return Frame("captured-layer", kind="layer")

    objects = [Capturing(), Capturing()]
    threads = [threading.Thread(target=o.run, daemon=True) for o in objects]
    for t, o in zip(threads, objects):
        t.start()
        assert o.ready.wait(10)
    try:
        sampler = CSampler(ProfileBuilder())
        sampler.frame_hooks[Capturing.run.__code__] = hook
        for _ in range(5):
            sampler.sample()
    finally:
        for o in objects:
            o.release.set()
        for t in threads:
            t.join()
    assert dict(calls) == {id(objects[0]): 1, id(objects[1]): 1}
    stacks = [s for counter in stacks_by_thread(sampler.builder).values() for s in counter]
    assert sum("captured-layer" in s for s in stacks) == 2
