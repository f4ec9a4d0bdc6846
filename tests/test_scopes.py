"""User scopes and step marks: flameprof.scope / scope_start / scope_end / step."""

import gc
import os
import threading
import time

from sampled import wait_for_samples

import flameprof
from flameprof.collect.engine import scopes
from flameprof.profiler import SESSION, Profiler


def stacks_of(profile, thread_name=None):
    """Sampled stacks as tuples of (kind, name), root first, optionally of one thread."""
    out = set()
    for sid, tid in set(zip(profile.sample_stack.tolist(), profile.sample_thread.tolist())):
        if sid >= 0 and (thread_name is None or profile.threads[tid].name == thread_name):
            out.add(
                tuple((profile.frames[f].kind, profile.frames[f].name) for f in profile.stack_frames(sid))
            )
    return out


def names(stack):
    return [name for _, name in stack]


def at(stack, suffix):
    """Index of the first frame whose (qualified) name ends with ``suffix``."""
    return next(i for i, name in enumerate(stack) if name.endswith(suffix))


def test_nested_scopes_appear_leafward_of_the_frame_that_entered_them():
    def outer_fn():
        with flameprof.scope("outer"):
            wait_for_samples()
            with flameprof.scope("inner"):
                wait_for_samples()

    with Profiler(rate=1000) as p:
        outer_fn()
    stacks = [names(s) for s in stacks_of(p.profile)]
    nested = [s for s in stacks if "inner" in s]
    assert nested and all(
        s[at(s, "outer_fn") + 1 : at(s, "outer_fn") + 3] == ["outer", "inner"] for s in nested
    )
    assert ["outer", "wait_for_samples"] in [s[-2:] for s in stacks]
    assert all(("scope", "inner") not in s or ("scope", "outer") in s for s in stacks_of(p.profile))
    assert all(not v for v in SESSION.sampler.scopes.values())  # every scope was closed


def test_decorator_puts_the_scope_between_caller_and_function_and_records_its_phase():
    @flameprof.scope("load batch", phase="data")
    def load():
        wait_for_samples()

    def caller():
        load()

    # No collection meanwhile: one may start in the decorator's wrapper, between the scope's entry
    # and the call of ``load``, and run the gc callbacks another library left registered in this
    # process (hypothesis's ``gc_callback``): a sample then shows that callback under the scope
    # (failed on 3.10 in CI)
    gc.disable()
    try:
        with Profiler(rate=1000) as p:
            caller()
    finally:
        gc.enable()
    # qualified names from 3.11 on, bare names before
    scoped = [names(s) for s in stacks_of(p.profile) if ("scope", "load batch") in s]
    stacks = [[f.split(".")[-1] for f in s] for s in scoped]
    around = [s[s.index("load batch") - 1 : s.index("load batch") + 2] for s in stacks]
    assert ["caller", "load batch", "load"] in around
    # the scope is the leaf in a sample of the wrapper's own work around the call (a tick's sample
    # can be taken late, after ``load`` returned: wait_for_samples counts ticks when they are asked for)
    assert all(a in (["caller", "load batch", "load"], ["caller", "load batch"]) for a in around), around
    assert p.profile.meta["scope_phases"] == {"load batch": "data"}


def test_scope_start_and_end_for_code_that_cannot_use_with():
    with Profiler(rate=1000) as p:
        flameprof.scope_start("manual")
        wait_for_samples()
        flameprof.scope_end()
        wait_for_samples()
    stacks = [names(s) for s in stacks_of(p.profile)]
    here = "test_scope_start_and_end_for_code_that_cannot_use_with"
    assert [here, "manual", "wait_for_samples"] in [s[-3:] for s in stacks]
    assert [here, "wait_for_samples"] in [s[-2:] for s in stacks]


def test_scopes_are_per_thread():
    barrier = threading.Barrier(2)

    def worker(label):
        with flameprof.scope(f"scope-{label}"):
            barrier.wait()
            wait_for_samples(3)

    with Profiler(rate=1000) as p:
        threads = [threading.Thread(target=worker, args=(x,), name=f"worker-{x}") for x in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for me, other in (("a", "b"), ("b", "a")):
        mine = stacks_of(p.profile, f"worker-{me}")
        assert any(("scope", f"scope-{me}") in s for s in mine)
        assert not any(("scope", f"scope-{other}") in s for s in mine)


def test_scopes_and_steps_cost_nothing_visible_and_record_nothing_when_not_profiling():
    assert scopes._SCOPES is None
    with flameprof.scope("idle"):
        flameprof.scope_start("idle2")
        flameprof.scope_end()
        flameprof.step()
    with Profiler(rate=1000) as p:
        time.sleep(0.01)
    assert p.profile.marks == [] and "idle" not in {f.name for f in p.profile.frames}


def test_scope_entered_before_profiling_started_is_not_popped_by_mistake():
    s = flameprof.scope("early")
    s.__enter__()
    with Profiler(rate=1000) as p:
        with flameprof.scope("late"):
            s.__exit__(None, None, None)  # exits a scope that was never pushed
            wait_for_samples()
    assert any(("scope", "late") in st for st in stacks_of(p.profile))


def test_step_marks_count_the_loop_iterations_on_the_sampler_time_base():
    with Profiler(rate=1000) as p:
        for _ in range(9):
            time.sleep(0.005)
            flameprof.step()
    marks = [m for m in p.profile.marks if m.name == "step"]
    assert len(marks) == 9 and all(m.value == "user" for m in marks)
    times = [m.time for m in marks]
    assert times == sorted(times)
    assert p.profile.meta["window_start"] < times[0] and times[-1] - times[0] >= 8 * 0.005
    assert p.profile.threads[marks[0].thread].name == threading.current_thread().name


def test_scopes_named_per_call_are_all_closed_and_their_caches_stay_bounded():
    with Profiler(rate=1000):
        for i in range(5000):
            with flameprof.scope(f"item {i}"):
                flameprof.scope("inner")(lambda: None)()
        open_scopes = list(SESSION.sampler.scopes.get(threading.get_ident(), []))
    assert open_scopes == []
    assert len(scopes._INSTANCES) <= 4097 and len(scopes._FRAMES) <= 4097


def test_marks_name_the_thread_of_each_session_and_process_that_made_them():
    """mark() keeps a thread's index per thread: a new session, another thread or a forked
    child (the same builder under a new pid) must each get their own."""
    for _ in range(2):  # the second session's builder starts from scratch
        with Profiler() as p:
            flameprof.step()
            other = threading.Thread(target=flameprof.step, name="other-stepper")
            other.start()
            other.join()
            SESSION.sampler.pid += 1  # what a forked child's sampler has
            try:
                flameprof.step()
            finally:
                SESSION.sampler.pid -= 1
        threads = [
            (p.profile.threads[m.thread].name, p.profile.threads[m.thread].pid)
            for m in p.profile.marks
            if m.name == "step"
        ]
        me, pid = threading.current_thread().name, os.getpid()
        assert threads == [(me, pid), ("other-stepper", pid), (me, pid + 1)]
