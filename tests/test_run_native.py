"""``flameprof run --native``: perf's native stacks grafted under the Python frames that called them,
the Python sampler's totals kept, and a plain Python profile (one warning line) when perf cannot record."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from conftest import run_flameprof

from flameprof.collect.importers.perf_profile import read_perf_script
from flameprof.collect.perf.merge import merge_native
from flameprof.collect.perf.record import PerfRecording, PerfUnavailable
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.records import Frame
from flameprof.model.validate import check_profile
from flameprof.profiler import SESSION, Profiler

LIBZ = "/usr/lib/libz.so.1"
PY = "/usr/lib/libpython3.11.so"


def _perf_sample(tid: str, time: str, period: int, frames: list[str]) -> str:
    lines = "".join(f"\t{i:x} {name} ({dso})\n" for i, (name, dso) in enumerate(f.split("@") for f in frames))
    return f"python3 {tid} {time}:   {period} cpu-clock: \n{lines}\n"


def _stacks(profile) -> list[tuple[list[str], float, float]]:
    return [
        ([profile.frames[f].name for f in profile.stack_frames(int(s))], float(w), float(c))
        for s, w, c in zip(profile.sample_stack, profile.sample_wall, profile.sample_cpu)
    ]


def test_merge_splits_each_python_sample_among_the_native_stacks_in_its_interval():
    builder = ProfileBuilder({"duration": 0.05})
    thread = builder.thread_id(100, 100, "MainThread")
    stack = builder.stack_id(
        [builder.frame(Frame("main", "app.py", 1)), builder.frame(Frame("work", "app.py", 5))]
    )
    for time, wall, cpu in ((0.51, 0.01, 0.01), (0.52, 0.01, 0.004), (0.53, 0.01, 0.01), (0.54, 0.01, 0.01)):
        builder.add_sample(time, thread, stack, wall, cpu)
    profile = builder.build()
    eval_loop = f"_PyEval_EvalFrameDefault@{PY}"
    perf = read_perf_script(
        [
            (
                # leafward of the innermost interpreter frame: the part grafted under "work"
                _perf_sample(
                    "100/100",
                    "10.005",
                    10_000_000,
                    [
                        f"deflate@{LIBZ}",
                        f"zlib_compress@{PY}",
                        eval_loop,
                        f"_PyEval_EvalFrameDefault@{PY}",
                        f"_start@{PY}",
                    ],
                )
                + _perf_sample("100/100", "10.015", 10_000_000, [f"deflate@{LIBZ}", eval_loop])
                # no interpreter frame unwound: the whole stack; in the interpreter itself: the Python stack
                + _perf_sample("100/100", "10.025", 5_000_000, [f"mkl_kernel@{LIBZ}"])
                + _perf_sample("100/100", "10.028", 5_000_000, [eval_loop, f"_start@{PY}"])
                # another process, a thread the Python sampler never saw, a time before any Python sample
                + _perf_sample("200/200", "10.005", 10_000_000, [f"deflate@{LIBZ}"])
                + _perf_sample("100/101", "10.005", 10_000_000, [f"deflate@{LIBZ}"])
                + _perf_sample("100/100", "9.990", 10_000_000, [f"deflate@{LIBZ}"])
            ).encode()
        ]
    )
    # perf's clock reads 9.5 at the profile's time 0
    merged = merge_native(profile, perf, pid=100, offset=perf.meta["time_origin"] - 9.5)
    rows = _stacks(merged)
    assert rows == [
        (["main", "work", "zlib_compress", "deflate"], pytest.approx(0.01), pytest.approx(0.01)),
        (["main", "work", "deflate"], pytest.approx(0.004), pytest.approx(0.004)),  # on-CPU time ...
        (["main", "work"], pytest.approx(0.006), pytest.approx(0.0)),  # ... and the rest
        (["main", "work", "mkl_kernel"], pytest.approx(0.005), pytest.approx(0.005)),
        (["main", "work"], pytest.approx(0.005), pytest.approx(0.005)),
        (["main", "work"], pytest.approx(0.01), pytest.approx(0.01)),  # perf saw nothing
    ]
    native = next(f for f in merged.frames if f.name == "deflate")
    assert (native.kind, native.file) == ("native", LIBZ)
    assert merged.sample_wall.sum() == pytest.approx(profile.sample_wall.sum())
    assert merged.sample_cpu.sum() == pytest.approx(profile.sample_cpu.sum())
    assert merged.meta["native"]["matched_perf_samples"] == 4
    check_profile(merged)


def _compress_a_lot(data: bytes) -> int:
    total = 0
    for _ in range(12):
        total += len(zlib.compress(data, 6))
    return total


def test_merge_of_a_real_perf_recording_keeps_the_python_totals():
    recording = PerfRecording(os.getpid(), 200)
    try:
        recording.start()
    except PerfUnavailable as exc:
        pytest.skip(f"perf cannot record here: {exc}")
    try:
        data = os.urandom(1 << 20) + bytes(1 << 20)
        profiler = Profiler(rate=200).start()
        clock_zero = SESSION.sampler.t0
        _compress_a_lot(data)
        profile = profiler.stop()
        recording.stop()
        perf = read_perf_script(recording.script(), "perf script")
    finally:
        recording.close()
    assert not os.path.exists(recording.data)
    merged = merge_native(profile, perf, os.getpid(), perf.meta["time_origin"] - clock_zero)
    check_profile(merged)
    for thread in range(len(profile.threads)):
        before, after = profile.sample_thread == thread, merged.sample_thread == thread
        assert merged.sample_wall[after].sum() == pytest.approx(profile.sample_wall[before].sum(), rel=1e-9)
        assert merged.sample_cpu[after].sum() == pytest.approx(profile.sample_cpu[before].sum(), rel=1e-9)
    assert merged.meta["native"]["matched_perf_samples"] > 0
    # native frames directly under the Python function that called zlib
    parents = {
        merged.frames[merged.stack_frame[p]].name
        for s, p in enumerate(merged.stack_parent.tolist())
        if p >= 0
        and merged.frames[merged.stack_frame[s]].kind == "native"
        and merged.frames[merged.stack_frame[p]].kind == "python"
    }
    assert "_compress_a_lot" in parents


TARGET = """\
import os, sys, zlib
DATA = os.urandom(1 << 20) + bytes(1 << 20)

def squeeze():
    for _ in range(10):
        zlib.compress(DATA, 6)

squeeze()
print("target output")
sys.exit(3)
"""


def _native_children(profile, name: str) -> float:
    """Wall seconds of samples whose stack has a native frame directly under Python frame ``name``."""
    stacks = profile.all_stack_frames()
    total = 0.0
    for sid, wall in zip(profile.sample_stack.tolist(), profile.sample_wall.tolist()):
        frames = [profile.frames[f] for f in stacks[sid]] if sid >= 0 else []
        if any(
            a.name == name and a.kind == "python" and b.kind == "native" for a, b in zip(frames, frames[1:])
        ):
            total += wall
    return total


def test_run_native_shows_zlib_under_the_calling_function(tmp_path, write_script):
    script = write_script("squeeze.py", TARGET)
    proc = run_flameprof("run", "--native", "-q", "-o", str(tmp_path / "out"), script, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "target output\n"
    if "--native:" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.stderr == ""
    profile = storage.load(str(tmp_path / "out" / "profile.flameprof"))
    assert any(f.kind == "native" and "deflate" in f.name for f in profile.frames)
    main = np.array([t.tid == profile.meta["pid"] for t in profile.threads])[profile.sample_thread]
    # the main thread's wall time still adds up to the run's duration (nothing double counted), and
    # most of its CPU time (squeeze's) is now inside native code under squeeze
    assert profile.sample_wall[main].sum() == pytest.approx(profile.duration, rel=0.05)
    assert _native_children(profile, "squeeze") > 0.5 * profile.sample_cpu[main].sum()


def test_without_perf_the_run_goes_on_with_one_warning_line(tmp_path, write_script):
    script = write_script("squeeze.py", TARGET.replace("range(10)", "range(1)"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "perf"
    fake.write_text(
        "#!/bin/sh\necho 'Error:' >&2\necho 'No permission to enable cpu-clock event.' >&2\nexit 255\n"
    )
    fake.chmod(0o755)
    for path, reason in (
        (str(tmp_path / "empty"), "perf is not installed"),
        (str(bin_dir), "perf could not record: No permission to enable cpu-clock event."),
    ):
        out = tmp_path / f"out{len(reason)}"
        proc = run_flameprof(
            "run", "--native", "-q", "-o", str(out), script, cwd=tmp_path, env={"PATH": path}
        )
        assert proc.returncode == 3 and proc.stdout == "target output\n"
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
            f"flameprof: warning: --native: {reason}"
        )
        assert proc.stderr.endswith("; the profile has Python frames only\n")
        profile = storage.load(str(out / "profile.flameprof"))
        assert not any(f.kind == "native" for f in profile.frames)
        assert any(f.name == "squeeze" for f in profile.frames)
