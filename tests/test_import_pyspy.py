"""py-spy raw (with process/thread root frames) and speedscope JSON import."""

from __future__ import annotations

import io
import json
import os

import pytest

from flameprof.collect.importers.folded import counts_to_seconds
from flameprof.collect.importers.pyspy import read_pyspy_raw, read_speedscope
from flameprof.errors import FlameprofError

DATA = os.path.join(os.path.dirname(__file__), "data", "import")


def stacks_by_thread(profile) -> dict[tuple[int, int], dict[tuple[str, ...], float]]:
    out: dict = {}
    for stack, thread, weight in zip(
        profile.sample_stack.tolist(), profile.sample_thread.tolist(), profile.sample_wall.tolist()
    ):
        info = profile.threads[thread]
        names = tuple(profile.frames[f].name for f in profile.stack_frames(stack))
        per = out.setdefault((info.pid, info.tid), {})
        per[names] = per.get(names, 0.0) + weight
    return out


def test_raw_roots_become_processes_and_threads():
    text = (
        'process 10:"python train.py";thread (10): MainThread;main (train.py:5);step (train.py:9) 3\n'
        'process 10:"python train.py";thread (0x7F00AB): loader;run (loader.py:2) 2\n'
        'process 10:"python train.py";process 11:"python -c import a; a.go()";thread (11);go (a.py:1) 4\n'
        'process 10:"python train.py";thread (10) 1\n'
    )
    profile = read_pyspy_raw(io.StringIO(text), "raw.txt")
    assert profile.meta["weight_unit"] == "count" and profile.meta["collector"] == "py-spy"
    assert {(p.pid, p.role, p.cmdline, p.ppid) for p in profile.processes} == {
        (10, "main", "python train.py", 0),
        (11, "", "python -c import a; a.go()", 10),
    }
    assert {(t.pid, t.tid, t.name) for t in profile.threads} == {
        (10, 10, "MainThread"),
        (10, 0x7F00AB, "loader"),
        (11, 11, ""),
    }
    assert stacks_by_thread(profile) == {
        (10, 10): {("main", "step"): 3.0, (): 1.0},
        (10, 0x7F00AB): {("run",): 2.0},
        (11, 11): {("go",): 4.0},
    }
    step = next(f for f in profile.frames if f.name == "step")
    assert (step.file, step.line, step.kind) == ("train.py", 9, "python")


def test_raw_rate_turns_counts_into_seconds():
    profile = read_pyspy_raw(io.StringIO("main (a.py:1) 50\n"), rate=100.0)
    assert profile.meta["weight_unit"] == "seconds"
    assert profile.sample_wall.tolist() == [0.5] and profile.sample_cpu.tolist() == [0.5]


def test_real_pyspy_raw_with_subprocesses_and_multiline_command():
    # py-spy writes a child's command line as is, newlines included: such a record spans lines.
    with open(os.path.join(DATA, "pyspy_subprocesses.txt")) as fh:
        profile = read_pyspy_raw(fh, "pyspy_subprocesses.txt", strict=True)
    child = next(p for p in profile.processes if p.ppid)
    assert "\n" in child.cmdline and child.cmdline.startswith(
        "/root/.pyenv/versions/3.11.7/bin/python3.11 -c"
    )
    assert {t.name for t in profile.threads} >= {"MainThread", "loader"}
    assert any(t.pid == child.pid for t in profile.threads)
    assert not any(f.name.startswith(("process ", "thread (")) for f in profile.frames)
    assert profile.num_samples == 6


def test_real_pyspy_speedscope_threads():
    with open(os.path.join(DATA, "pyspy_speedscope.json"), "rb") as fh:
        data = fh.read()
    doc = json.loads(data)
    profile = read_speedscope(data, "ss.json")
    assert profile.meta["weight_unit"] == "seconds" and profile.meta["collector"] == "py-spy"
    total = sum(sum(p["weights"]) for p in doc["profiles"])
    assert profile.sample_wall.sum() == pytest.approx(total)
    assert sorted(t.tid for t in profile.threads) == [13481, 13521]
    assert not any(f.name.startswith("thread (") for f in profile.frames)
    # sample times follow the weights within each thread
    first = profile.sample_thread == profile.sample_thread[0]
    assert profile.sample_time[first].tolist() == sorted(profile.sample_time[first].tolist())


def speedscope(profiles, frames=({"name": "main", "file": "app.py", "line": 1}, {"name": "work"})) -> bytes:
    return json.dumps(
        {
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": list(frames)},
            "profiles": profiles,
        }
    ).encode()


def test_speedscope_evented_profile_becomes_timed_samples():
    events = [
        {"type": "O", "frame": 0, "at": 0},
        {"type": "O", "frame": 1, "at": 2},
        {"type": "C", "frame": 1, "at": 5},
        {"type": "C", "frame": 0, "at": 6},
    ]
    profile = read_speedscope(
        speedscope(
            [
                {
                    "type": "evented",
                    "name": 'Thread 7 "w"',
                    "unit": "milliseconds",
                    "startValue": 0,
                    "endValue": 6,
                    "events": events,
                }
            ]
        )
    )
    assert stacks_by_thread(profile) == {
        (0, 7): {("main",): pytest.approx(0.003), ("main", "work"): pytest.approx(0.003)}
    }
    assert profile.threads[0].name == "w"
    assert profile.sample_time.tolist() == pytest.approx([0.0, 0.002, 0.005])


def test_speedscope_bad_samples_are_skipped_or_strict(capsys):
    data = speedscope(
        [
            {
                "type": "sampled",
                "name": "t",
                "unit": "none",
                "samples": [[0, 1], [0, 9], [0]],
                "weights": [2, 1, 3],
            }
        ]
    )
    profile = read_speedscope(data, "s.json", strict=False)
    assert profile.meta["skipped_lines"] == 1 and profile.meta["weight_unit"] == "count"
    assert profile.sample_wall.tolist() == [2.0, 3.0] and profile.sample_time.tolist() == [0.0, 3.0]
    seconds = counts_to_seconds(profile, 10.0)
    assert seconds.meta["weight_unit"] == "seconds"
    assert seconds.sample_wall.tolist() == [0.2, 0.3] and seconds.sample_time.tolist() == [0.0, 0.3]
    assert "skipped 1 malformed speedscope sample(s), first at profile 0 sample 1" in capsys.readouterr().err
    with pytest.raises(FlameprofError, match="profile 0 sample 1: frame index 9 out of range"):
        read_speedscope(data, "s.json", strict=True)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"{not json", "not valid speedscope JSON"),
        (b'{"profiles": []}', "not a speedscope file"),
        (b'{"shared": {"frames": [7]}, "profiles": []}', "bad speedscope frame"),
    ],
)
def test_speedscope_invalid_files_give_one_error(data, message):
    with pytest.raises(FlameprofError, match=message):
        read_speedscope(data, "x.json")
