"""flameprof attach --subprocesses follows the children a live target starts during the attach."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import defaultdict

from conftest import REPO, flameprof_cmd
from test_attach import Target

from flameprof.model import storage

RATE = 100.0
DURATION = 2.0

# Starts (with multiprocessing's CONTEXT) a child running child_spin for CHILD_SECONDS, one after
# the other; each child reports how many threads it has at its end (a sampler's clock or an agent's
# thread adds one). SIGUSR1 prints what the attach must leave as it was; SIGUSR2 prints it again
# and ends the loop. Every line is one write, as in test_attach's TARGET.
CHILDREN = r"""
import multiprocessing as mp, os, signal, sys, threading, time

def say(*words):
    os.write(1, (" ".join(map(str, words)) + "\n").encode())

def child_spin(n):
    end = time.time() + CHILD_SECONDS
    total = 0
    while time.time() < end:
        for i in range(20000):
            total += i * i
    say("child", n, os.getpid(), len(os.listdir("/proc/self/task")))

def state(*_):
    names = sorted(t.name for t in threading.enumerate())
    env = sorted(k for k in os.environ if "FLAMEPROF" in k) + [os.environ.get("PYTHONPATH", "")]
    say("state", names, os._exit.__module__, signal.getsignal(signal.SIGTERM), env)

if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, state)
    stop = []
    signal.signal(signal.SIGUSR2, lambda *_: (state(), stop.append(1)))
    ctx = mp.get_context(CONTEXT)
    say("ready")
    n = 0
    while not stop:
        p = ctx.Process(target=child_spin, args=(n,))
        forked = time.time()  # before the fork: a child that an attach may follow starts after this
        p.start()
        say("started", n, p.pid, forked)
        p.join()
        say("joined", n, p.exitcode)
        n += 1
        time.sleep(0.1)
    say("done")
"""

# A training-like loop whose DataLoader workers are re-created every epoch; SIGUSR2 ends it.
DATALOADER = r"""
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return slow_item(i)

def slow_item(i):
    end = time.time() + 0.03
    total = 0
    while time.time() < end:
        total += sum(range(2000))
    return torch.tensor([i])

loader = DataLoader(Slow(), batch_size=2, num_workers=2, persistent_workers=False)
stop = []
signal.signal(signal.SIGUSR2, lambda *_: stop.append(1))
print("ready", flush=True)
epoch = 0
while not stop:
    forked = time.time()  # before the workers are forked
    it = iter(loader)
    print("epoch", epoch, forked, *[w.pid for w in it._workers], flush=True)
    print("sum", epoch, int(sum(batch.sum() for batch in it)), flush=True)
    epoch += 1
print("done", flush=True)
"""


def children_source(context: str, seconds: float) -> str:
    return f"CONTEXT, CHILD_SECONDS = {context!r}, {seconds}\n" + CHILDREN


def attach(pid: int, out, duration: float = DURATION) -> tuple[float, float, list[str]]:
    """Attach with --subprocesses; (time profiling began, time the CLI ended, the CLI's stderr)."""
    proc = subprocess.Popen(
        flameprof_cmd(
            "attach",
            str(pid),
            "--subprocesses",
            "--duration",
            str(duration),
            "--rate",
            str(RATE),
            "-q",
            "-o",
            str(out),
        ),
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    lines = []
    began = None
    for line in proc.stderr:
        lines.append(line)
        if "profiling process" in line:
            began = time.time()
    assert proc.wait(timeout=60) == 0, "".join(lines)
    assert began is not None, "".join(lines)
    return began, time.time(), lines


def attach_begun(target: Target, out, duration: float) -> tuple[subprocess.Popen, str]:
    """An attach with --subprocesses running in the background, and its first line (profiling began)."""
    proc = subprocess.Popen(
        flameprof_cmd(
            "attach", target.pid, "--subprocesses", "--duration", str(duration), "-q", "-o", str(out)
        ),
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert proc.stderr is not None
    return proc, proc.stderr.readline()


def attach_and_end(
    target: Target, out, duration: float, prefix: str, more: int
) -> tuple[float, float, list[str]]:
    """Attach, let the target print ``more`` lines that start with ``prefix`` after the detach, end it
    with SIGUSR2; (time profiling began, time the CLI ended, the target's output, the CLI's stderr)."""
    try:
        began, ended, notes = attach(target.proc.pid, out, duration)
        target.wait_for(prefix, len(target.wait_for(prefix)) + more)
        target.proc.send_signal(signal.SIGUSR2)
        assert target.proc.wait(timeout=30) == 0
        return began, ended, target.lines(), notes
    finally:
        target.close()


def seconds_in(profile, function: str) -> dict[int, float]:
    """Sampled wall seconds per pid of the samples that are inside ``function``."""
    frames = profile.all_stack_frames()
    wanted = {i for i, f in enumerate(profile.frames) if f.name == function}
    out: dict[int, float] = defaultdict(float)
    for thread, stack, wall in zip(
        profile.sample_thread.tolist(), profile.sample_stack.tolist(), profile.sample_wall.tolist()
    ):
        if stack >= 0 and wanted.intersection(frames[stack]):
            out[profile.threads[thread].pid] += wall
    return out


def test_children_forked_during_the_attach_are_profiled_and_released(tmp_path):
    target = Target(tmp_path, source=children_source("fork", 0.2))
    before = target.state(1)
    began, ended, lines, _ = attach_and_end(target, tmp_path / "out", DURATION, "child", 3)
    # threads, os._exit, the SIGTERM handler and the environment after the detach as before it
    assert [line for line in lines if line.startswith("state")] == [before, before]
    assert lines[-1] == "done"
    started = started_children(lines)
    joined = [line for line in lines if line.startswith("joined")]
    assert joined == [f"joined {n} 0" for n in range(len(joined))]  # every child ran and ended well
    tasks = {int(w[1]): int(w[3]) for w in (line.split() for line in lines) if w[0] == "child"}

    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    spin = seconds_in(profile, "child_spin")
    during = [n for n, (_, t) in started.items() if began < t < began + DURATION - 0.3]
    assert len(during) >= 3, (began, started)
    for n in during:  # forked during the attach: profiled, in their own process, with their own role
        pid = started[n][0]
        assert spin.get(pid, 0) > 0.05, (n, pid, dict(spin))
        assert tasks[n] == 2  # the main thread and the sampler's
    roles = {p.pid: p.role for p in profile.processes}
    assert all(roles[started[n][0]].startswith("ForkProcess-") for n in during)
    assert roles[target.proc.pid] == "main"
    # about 0.2 s of child_spin per child that ran wholly in the window; most of it is captured
    whole = [n for n in during if started[n][1] + 0.3 < began + DURATION]
    captured = sum(spin.get(started[n][0], 0) for n in whole) / (0.2 * len(whole))
    assert captured > 0.6, captured
    for n, (pid, t) in started.items():
        if t > ended:  # forked after the detach: not profiled, no sampler thread
            assert tasks[n] == 1, n
            assert pid not in roles
    assert "flameprof-detach" not in {t.name for t in profile.threads}


def started_children(lines: list[str]) -> dict[int, tuple[int, float]]:
    """n -> (pid, time before its fork) of the children the CHILDREN target reported."""
    return {
        int(w[1]): (int(w[2]), float(w[3])) for w in (line.split() for line in lines) if w[0] == "started"
    }


def test_children_spawned_during_the_attach_are_injected_as_they_appear(tmp_path):
    # each child spins 2.5 s: injecting one takes about 0.1 s (the injector's process starts), then
    # its agent imports flameprof beside the busy main thread (about 0.1 s: see bootstrap.py); one
    # starts every 2.6-2.8 s, so the 3.5 s in which a child starts late and ends before the detach
    # always hold one
    target = Target(tmp_path, source=children_source("spawn", 2.5))
    began, ended, lines, notes = attach_and_end(target, tmp_path / "out", 6.0, "child", 2)
    started = started_children(lines)
    tasks = {int(w[1]): int(w[3]) for w in (line.split() for line in lines) if w[0] == "child"}
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    roles = {p.pid: p.role for p in profile.processes}
    spin = seconds_in(profile, "child_spin")
    # started after the initial injection (so seen only by the watcher), ended before the detach
    late = [pid for pid, t in started.values() if began < t < began + 6.0 - 2.5]
    assert late, (began, started)
    for pid in late:  # the start of each child is missed, most of the rest is not
        assert roles.get(pid, "").startswith("SpawnProcess-"), (pid, roles, notes)
        assert spin.get(pid, 0) > 1.5, (pid, dict(spin), notes)
    for n, (pid, t) in started.items():
        if t > ended:  # started after the detach: not profiled, no agent thread
            assert tasks[n] == 1 and pid not in roles, n


# On SIGUSR1, starts a child whose main thread sleeps in one call from its first moments, so an agent
# queued in it cannot start before the attach ends; it then prints and exits with status 3.
SLEEPING_CHILD = r"""
import signal, subprocess, sys, time
go = []
signal.signal(signal.SIGUSR1, lambda *_: go.append(1))
print("ready", flush=True)
while not go:
    time.sleep(0.01)
child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(5); print('woke', flush=True)"
                          "; raise SystemExit(3)"])
print("started", child.pid, flush=True)
print("exit", child.wait(), flush=True)
"""


def test_a_child_injected_late_whose_agent_cannot_start_is_named_and_runs_on(tmp_path):
    # The injection lands at least the injector's start (about 0.1 s) after the child appears; with
    # -S the child is in its sleep about 10 ms after its start.
    target = Target(tmp_path, source=SLEEPING_CHILD)
    try:
        proc, head = attach_begun(target, tmp_path, 2.0)
        assert "profiling process" in head, head
        target.proc.send_signal(signal.SIGUSR1)
        pid = int(target.wait_for("started")[0].split()[1])
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, rest
        assert (
            f"leaving out child process {pid}: the process's main thread ran no Python code during the attach"
            in rest
        ), rest
        assert target.wait_for("exit", timeout=20)[-1] == "exit 3"  # it ran on, as it would have
        assert "woke" in target.lines()
        assert target.proc.wait(timeout=10) == 0
    finally:
        target.close()


# A spawned child that spins until SIGTERM; on SIGUSR1 the target ends it, then forks two children
# that spin 0.6 s each.
ENDING_CHILD = r"""
import multiprocessing as mp, signal, sys, time

def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        for i in range(20000):
            pass

def until_term():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        spin(0.1)

def child_spin():
    spin(0.6)

if __name__ == "__main__":
    go = []
    signal.signal(signal.SIGUSR1, lambda *_: go.append(1))
    first = mp.get_context("spawn").Process(target=until_term)
    first.start()
    time.sleep(0.5)  # its interpreter is up
    print("ready", first.pid, flush=True)
    while not go:
        time.sleep(0.01)
    first.terminate()
    first.join()
    print("first", first.exitcode, flush=True)
    for n in range(2):
        p = mp.get_context("fork").Process(target=child_spin)
        p.start()
        p.join()
        print("forked", p.pid, p.exitcode, flush=True)
    time.sleep(30)
"""


def test_a_child_that_ends_during_the_attach_leaves_the_later_forks_followed(tmp_path):
    # The first child is injected at the start; its exit once marked the whole attach as ended, so
    # every child forked after it stopped profiling at its first tick.
    target = Target(tmp_path, source=ENDING_CHILD)
    try:
        proc, head = attach_begun(target, tmp_path, 4.0)
        assert "and 1 child process(es)" in head, head
        time.sleep(0.5)  # the child's agent has started following forks
        target.proc.send_signal(signal.SIGUSR1)
        forked = [int(line.split()[1]) for line in target.wait_for("forked", 2)]
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, rest
        assert target.lines()[1] == "first 0"  # it ended as it would have
    finally:
        target.close()
    profile = storage.load(tmp_path / "profile.flameprof")
    roles = {p.pid: p.role for p in profile.processes}
    spin = seconds_in(profile, "child_spin")
    for pid in forked:
        assert roles.get(pid, "").startswith("ForkProcess-"), (pid, roles, rest)
        assert spin.get(pid, 0) > 0.4, (pid, dict(spin), rest)


def test_dataloader_workers_of_each_epoch_are_followed(tmp_path):
    began, ended, lines, notes = attach_and_end(
        Target(tmp_path, source=DATALOADER), tmp_path / "out", DURATION, "sum", 2
    )
    assert lines[-1] == "done"
    assert not [line for line in lines[:-1] if not line.startswith(("ready", "epoch", "sum"))]
    sums = [line.split() for line in lines if line.startswith("sum")]
    assert all(int(total) == 28 for _, _, total in sums)  # every epoch saw every item once
    epochs = [line.split() for line in lines if line.startswith("epoch")]
    during = [
        (int(w[1]), [int(p) for p in w[3:]]) for w in epochs if began < float(w[2]) < began + DURATION - 0.5
    ]
    assert len(during) >= 2, (began, ended, epochs[-3:])
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    roles = {p.pid: p.role for p in profile.processes}
    spin = seconds_in(profile, "slow_item")
    for epoch, workers in during:
        assert [roles.get(pid) for pid in workers] == ["dataloader worker 0", "dataloader worker 1"], (
            epoch,
            notes,
        )
        assert all(spin.get(pid, 0) > 0 for pid in workers), (epoch, workers, dict(spin), notes)
