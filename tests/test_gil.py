"""The GIL per thread: the share of each thread's time it held the GIL, waited for it and ran C code
without it, against what the threads measure of themselves; and profiles that cannot tell.

Two threads compete for the GIL: a loop alternating pure-Python work with a hash of a few megabytes
(``hashlib`` lets the GIL go while it hashes) and a helper that runs Python only. Each thread times
its own sections with its wall clock, its CPU clock and the kernel's count of its time waiting for
a CPU (``/proc/thread-self/schedstat``): Python work on a CPU is time holding the GIL, a hash on a
CPU is time running without it, and the rest of its wall time it waited for the GIL (to run its
Python, or to take it back after a hash).

Time waiting for a CPU is ambiguous, to the thread and to the sampler alike: a thread waiting for a
CPU in its Python section may hold the GIL (preempted) or not yet (woken to take it), and the
sampler, which reads the GIL's holder, counts the first as holding it, while it sees no CPU time in
either. Each truth is therefore a range as wide as the time the thread waited for a CPU in the
sections concerned, and flameprof must be within 3 points of it. On a quiet machine (CI) the
ranges are a few points wide; on this 2-CPU machine, shared with other work, the threads often
waited up to two thirds of their time for a CPU: a run whose threads waited more than a tenth of
their time is skipped, naming the share (ranges that wide say nothing), never run again.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
import zipfile

import numpy as np
import pytest
from conftest import assert_one_error_line, run_flameprof

import flameprof
from flameprof.analyze.gil import gil_section
from flameprof.analyze.report import report_of
from flameprof.collect.engine.c_sampler import CSampler
from flameprof.collect.jobs.parts import PartWriter
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.merge import merge_profiles
from flameprof.model.profile import ProcessInfo, Profile, ThreadInfo
from flameprof.model.records import GIL_HELD, GIL_NOT_HELD, GIL_UNKNOWN, GIL_WAITING, Frame
from flameprof.model.validate import check_profile
from flameprof.render.formats import FORMATS, Rendering
from flameprof.render.options import OutputOptions
from flameprof.render.report import render_report

POINTS = 3.0  # the bound
BUSY = 10.0  # percent of their time the threads may wait for a CPU for the comparison to mean something
DATA = bytes(64 << 20)  # hashed in about 40 ms, without the GIL
_LIBC = ctypes.PyDLL(None)  # PyDLL: its calls keep the GIL (a release would hand it to the other thread)
_LIBC.pread.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long)
_LIBC.pread.restype = ctypes.c_ssize_t


def spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


class Timed(threading.Thread):
    """A thread that times its sections: ``seconds[kind]`` is (wall, cpu, waiting for a CPU) summed
    over its sections of that kind."""

    def __init__(self, name: str, stop: float) -> None:
        super().__init__(name=name)
        self.stop = stop
        self.seconds = {"python": [0.0, 0.0, 0.0], "c": [0.0, 0.0, 0.0]}
        self._buffer = ctypes.create_string_buffer(128)
        self._schedstat = -1

    def now(self) -> tuple[float, float, float]:
        """(wall, CPU, seconds waited for a CPU) of this thread, without letting the GIL go."""
        delay = 0.0
        n = _LIBC.pread(self._schedstat, self._buffer, 127, 0) if self._schedstat >= 0 else -1
        if n > 0:
            delay = int(self._buffer.raw[:n].split()[1]) * 1e-9
        return time.perf_counter(), time.thread_time(), delay

    def section(self, kind: str, start: tuple[float, float, float]) -> tuple[float, float, float]:
        now = self.now()
        for i in range(3):
            self.seconds[kind][i] += now[i] - start[i]
        return now

    def run(self) -> None:
        try:
            self._schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            pass  # no run delays: the ranges are points
        try:
            self.work()
        finally:
            if self._schedstat >= 0:
                os.close(self._schedstat)

    def work(self) -> None:
        raise NotImplementedError

    def truth(self) -> dict[str, tuple[float, float]]:
        """Percent of its wall time, as (low, high): held, waiting, without; and ``busy``, the time it
        waited for a CPU."""
        (py_wall, py_cpu, py_busy), (c_wall, c_cpu, c_busy) = self.seconds["python"], self.seconds["c"]
        wall = py_wall + c_wall
        rest = wall - py_cpu - c_cpu
        ranges = {
            "held": (py_cpu, py_cpu + py_busy),
            "waiting": (rest - py_busy - c_busy, rest),
            # read from the CPU clock beyond the time holding the GIL: short of a hash's time waiting
            # for a CPU, and of the time holding the GIL while waiting for one
            "without": (c_cpu - py_busy, c_cpu + c_busy),
            "busy": (py_busy + c_busy, py_busy + c_busy),
        }
        return {k: (100 * max(lo, 0.0) / wall, 100 * hi / wall) for k, (lo, hi) in ranges.items()}


class Loop(Timed):
    def work(self) -> None:
        mark = self.now()
        while time.monotonic() < self.stop:
            spin(1_200_000)  # about 32 ms
            mark = self.section("python", mark)
            hashlib.sha256(DATA).digest()
            mark = self.section("c", mark)


class Helper(Timed):
    def work(self) -> None:
        mark = self.now()
        while time.monotonic() < self.stop:
            spin(10_000)
        self.section("python", mark)


def compete(seconds: float = 3.0, rate: float = 1000.0) -> tuple[dict[str, dict], dict[str, dict]]:
    """Run the two threads under the C sampler: (truth, measured) per thread name, in percent."""
    with flameprof.Profiler(rate=rate) as profiler:
        stop = time.monotonic() + seconds
        threads = [Loop("loop", stop), Helper("helper", stop)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    profile = profiler.profile
    assert profile is not None and profile.meta.get("sampler") == "native"
    section = gil_section(profile)
    assert section is not None
    measured = {row.thread.split(" (tid")[0]: row.__dict__ for row in section.threads}
    return {t.name: t.truth() for t in threads}, measured


def off_by(value: float, span: tuple[float, float]) -> float:
    """How far ``value`` lies outside ``span`` (0 inside it)."""
    return max(span[0] - value, value - span[1], 0.0)


def test_each_threads_gil_shares_are_within_3_points_of_its_own_timing():
    """3 s at 1 kHz. At each tick the sampler asks the thread holding the GIL to let it go, and a
    thread waiting for it takes it: with two threads competing, a turn with the GIL begins at a
    tick. One that ends between ticks (the loop's Python done, its hash begun) is read at the next
    tick as what followed it, so each section boundary moves up to a tick's interval out of the
    thread's time holding the GIL: with 4 ms of Python and a 5 ms hash the shares were up to 5
    points off at 500 Hz and 3.2 at 1 kHz, and 15-20 ms sections still missed by 0.2 points in about
    one run in ten (helper held 68.6 % against [62.5, 65.4]). The sections here last 30-40 ms, as
    a training step's phases do. What remained (helper waiting 38.2 % against [42.2, 46.8] once in CI)
    was the main thread, blocked in join(), read as waiting in place of the two (asserted below);
    since, the largest miss in 27 runs on 3.10-3.13 was 1.5 points."""
    truth, measured = compete()
    busy = max(t["busy"][0] for t in truth.values())
    if busy > BUSY:  # the truth's ranges are as wide as this: a comparison would mean nothing
        pytest.skip(f"the machine is busy: the threads waited {busy:.0f}% of their time for a CPU")
    for name in ("loop", "helper"):
        for part in ("held", "waiting", "without"):
            assert off_by(measured[name][part], truth[name][part]) <= POINTS, (name, part, truth, measured)
    # the scenario happened: both threads competed, and the loop let the GIL go for its hashes (not
    # a bound on flameprof: 3.13 runs the loop's Python slower beside the same hash, and its time
    # without the GIL ranged 14-24 %, against 29-33 % on 3.11)
    assert truth["loop"]["without"][0] > 10 and truth["loop"]["waiting"][0] > 10
    assert truth["helper"]["waiting"][0] > 10
    # the main thread, blocked in join(), never waited for the GIL: taken for a waiter once (a woken
    # waiter counts until it runs), it was kept one ahead of the thread that had just let the GIL
    # go, and 3-4 % of its time was read as waiting, taken from the two threads
    assert measured["MainThread"]["waiting"] < 1.0, measured["MainThread"]


def test_a_thread_alone_with_the_gil_takes_it_back_at_once_after_each_tick():
    """1 s at 1 kHz of one thread computing, the main thread blocked: at each tick the thread lets
    the GIL go for the sample, then waits for a switch to take it back. With nobody else wanting
    it, the sampler wakes it at once; when it took the GIL and gave it back instead, the thread
    computed 91 % of its time (9 % lost to the sampler), and 98 % since."""
    with flameprof.Profiler(rate=1000):
        helper = Helper("helper", time.monotonic() + 1.0)
        helper.start()
        helper.join()
    wall, cpu, busy = helper.seconds["python"]
    if 100 * busy / wall > BUSY:
        pytest.skip(f"the machine is busy: the thread waited {100 * busy / wall:.0f}% of its time for a CPU")
    assert cpu / (wall - busy) > 0.95, (wall, cpu, busy)


def _profile(states: list[int], threads: int = 2) -> Profile:
    """Samples of ``threads`` threads, one frame each, 10 ms apart, with the given GIL states."""
    b = ProfileBuilder()
    ids = [b.thread_id(1, 10 + i, f"t{i}") for i in range(threads)]
    stack = b.stack_id([b.frame(Frame("work", "/w/a.py", 1))])
    for k, _ in enumerate(states):
        b.add_sample(0.01 * (k + 1), ids[k % threads], stack, 0.01, 0.0)
    profile = b.build()
    profile.sample_gil = np.asarray(states, dtype=np.uint8)
    return profile


def test_shares_add_up_and_running_without_the_gil_is_cpu_beyond_holding_it():
    # the threads' samples alternate, t0 first: t0 held the GIL twice, t1 waited once
    profile = _profile([GIL_HELD, GIL_WAITING, GIL_NOT_HELD, GIL_NOT_HELD, GIL_HELD, GIL_NOT_HELD])
    profile.sample_cpu[:] = [0.01, 0.0, 0.01, 0.01, 0.005, 0.0]
    section = gil_section(profile)
    assert section is not None and section.unknown_samples == 0
    rows = {r.thread: r for r in section.threads}
    t0, t1 = rows["t0 (tid 10)"], rows["t1 (tid 11)"]
    assert (t0.held, t0.waiting) == pytest.approx((200 / 3, 0.0))
    assert (t0.without, t0.other) == pytest.approx((100 / 6, 100 / 6))  # 15 ms of CPU, 10 ms held
    assert (t1.held, t1.waiting, t1.without, t1.other) == pytest.approx((0.0, 100 / 3, 100 / 3, 100 / 3))
    assert profile.weights("gil").tolist() == [0.0, 0.01, 0.0, 0.0, 0.0, 0.0]
    only = profile.waiting_for_gil()
    assert only.num_samples == 1 and profile.num_samples == 6


def test_profiles_without_gil_states_say_unknown(monkeypatch, tmp_path):
    """The pure-Python sampler cannot tell who holds the GIL: its samples' states are unknown, the
    report says so, and --mode gil draws nothing rather than failing."""
    monkeypatch.setenv("FLAMEPROF_NATIVE", "0")
    with flameprof.Profiler(rate=200) as profiler:
        spin(300_000)
    profile = profiler.profile
    assert profile is not None and profile.meta.get("sampler") == "python"
    assert set(profile.sample_gil.tolist()) == {GIL_UNKNOWN} and not profile.has_gil_states
    report = report_of(profile)
    assert report.gil is None
    assert "GIL: unknown: only the C sampler" in render_report(report, "text")
    assert "GIL unknown: only the C sampler" in render_report(report, "markdown")
    assert '"gil": null' in render_report(report, "json")
    assert not profile.weights("gil").any() and profile.waiting_for_gil().num_samples == 0

    imported = Profile(
        frames=[Frame("f")], stack_parent=[-1], stack_frame=[0], threads=[ThreadInfo(1, 1)],
        sample_time=[0.1], sample_thread=[0], sample_stack=[0], sample_wall=[0.1], sample_cpu=[0.1],
    )  # fmt: skip
    assert imported.sample_gil.tolist() == [GIL_UNKNOWN] and gil_section(imported) is None


def test_native_profile_knows_every_samples_state_and_merge_keeps_them():
    with flameprof.Profiler(rate=500) as profiler:
        spin(3_000_000)
        time.sleep(0.02)
    profile = profiler.profile
    assert profile is not None and profile.meta.get("sampler") == "native"
    assert GIL_UNKNOWN not in set(profile.sample_gil.tolist())
    main = [r for r in gil_section(profile).threads if r.thread.startswith("MainThread")]  # type: ignore[union-attr]
    assert main and main[0].held > 50  # it ran Python most of the time, and slept
    other = _profile([GIL_WAITING, GIL_HELD])
    merged = merge_profiles([profile, other])
    check_profile(merged)
    assert sorted(merged.sample_gil.tolist()) == sorted(profile.sample_gil.tolist() + [GIL_WAITING, GIL_HELD])


def test_a_state_past_the_known_ones_is_refused():
    profile = _profile([GIL_HELD, 7])
    with pytest.raises(ValueError, match="sample_gil"):
        check_profile(profile)


def test_a_saved_profile_keeps_its_gil_states_and_a_file_from_before_them_loads_as_unknown(tmp_path):
    profile = _profile([GIL_HELD, GIL_WAITING, GIL_NOT_HELD, GIL_UNKNOWN])
    path = tmp_path / "p.flameprof"
    storage.save(profile, path)
    assert storage.load(path).sample_gil.tolist() == profile.sample_gil.tolist()
    assert storage.loads(storage.dumps(profile)).sample_gil.tolist() == profile.sample_gil.tolist()

    with zipfile.ZipFile(path) as zf:  # the same file as flameprof wrote it before the column
        members = {name: zf.read(name) for name in zf.namelist() if name != "sample_gil.npy"}
    old = tmp_path / "old.flameprof"
    with zipfile.ZipFile(old, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    loaded = storage.load(old)
    assert loaded.num_samples == 4 and set(loaded.sample_gil.tolist()) == {GIL_UNKNOWN}
    assert report_of(loaded).gil is None


def test_part_files_carry_the_gil_states(tmp_path):
    """A job's processes write parts without numpy: the C sampler's states, and the unknown states of
    rows recorded in Python, come back from the part as they were."""
    builder = ProfileBuilder()
    sampler = CSampler(builder)
    for _ in range(3):
        sampler.sample()  # from Python: the calling thread holds the GIL
    builder.add_sample(1.0, builder.thread_id(1, 2, "listed"), -1, 0.01)
    writer = PartWriter(str(tmp_path), builder, "host", 1)
    writer.write(ProcessInfo(1), {"start_time": 0.0}, {}, final=True)
    part = storage.load(writer.path)
    assert part.sample_gil.tolist() == builder.build().sample_gil.tolist()
    assert part.sample_gil.tolist() == [GIL_HELD] * 3 + [GIL_UNKNOWN]


def test_mode_gil_draws_only_the_samples_that_waited(tmp_path):
    """--mode gil: each sample that waited for the GIL weighs its wall time, and the others are left
    out, their counts too; a profile that cannot tell is refused with one line."""
    path = tmp_path / "p.flameprof"
    storage.save(_profile([GIL_HELD, GIL_WAITING, GIL_NOT_HELD, GIL_WAITING, GIL_WAITING, GIL_HELD]), path)
    folded = run_flameprof("render", str(path), "-o", str(tmp_path / "g.folded"), "--mode", "gil")
    assert folded.returncode == 0, folded.stderr
    assert (tmp_path / "g.folded").read_text() == "work (/w/a.py:1) 3\n"
    svg = run_flameprof("render", str(path), "-o", str(tmp_path / "g.svg"), "--mode", "gil")
    assert svg.returncode == 0, svg.stderr
    assert "30 ms waiting for the GIL, 3 samples" in (tmp_path / "g.svg").read_text()

    storage.save(_profile([GIL_UNKNOWN, GIL_UNKNOWN]), path)
    assert_one_error_line(run_flameprof("render", str(path), "-o", "-", "--mode", "gil"), "no GIL states")


def test_the_html_report_has_the_gil_table():
    profile = _profile([GIL_HELD, GIL_WAITING, GIL_NOT_HELD, GIL_HELD])
    page = FORMATS["html"].text(Rendering(profile, OutputOptions(mode="gil")))  # type: ignore[misc]
    table = page[page.index('<table id="fp-gil">') :]
    table = table[: table.index("</table>")]
    assert "<td>t0 (tid 10)</td>" not in table and '<td class="name">t0 (tid 10)</td>' in table
    assert "<td>2</td><td>50.0%</td>" in table  # t0 held the GIL at one of its two ticks
    assert "time waiting for the GIL" in page

    unknown = FORMATS["html"].text(Rendering(_profile([GIL_UNKNOWN] * 2), OutputOptions()))  # type: ignore[misc]
    assert "GIL unknown: only the C sampler" in unknown
