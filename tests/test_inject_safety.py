"""The injector never harms its target: whatever call the main thread is in, whatever step fails.

Each target blocks its main thread in one kind of call (or keeps it busy) and checks the result of
that call itself: what it returned, and that it did not return early. The injector borrows the
thread twice during the call (an attach, then another), or fails on purpose at each of its steps;
the target must finish with exit status 0 and, where the code was queued, have run it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import run_flameprof

from flameprof.collect.attach.elf_symbols import functions_in, mapped_files, resolve
from flameprof.collect.attach.injector_process import inject, self_test
from flameprof.model import storage

pytestmark = pytest.mark.skipif(
    not (sys.platform == "linux" and os.uname().machine == "x86_64"), reason="the injector is for x86-64"
)

# argv: kind, seconds the call waits. Prints "blocking" before the call, then "ok N" (N: how many
# times the queued code ran) or "WRONG ..." with exit status 1.
TARGET = r"""
import ctypes, os, queue, select, signal, socket, sys, threading, time

kind, WAIT = sys.argv[1], float(sys.argv[2])
usr1 = []
signal.signal(signal.SIGUSR1, lambda *_: usr1.append(1))

def later(fn):
    threading.Timer(WAIT, fn).start()

def check(ok, what):
    if not ok:
        print("WRONG", kind, what, flush=True)
        sys.exit(1)

def timed(fn, *args):
    t = time.perf_counter(); fn(*args); return time.perf_counter() - t

def block(kind):
    t0 = time.monotonic()
    if kind == "sleep":
        check(time.sleep(WAIT) is None, "sleep")
    elif kind == "select":
        r, w = os.pipe()
        check(select.select([r], [], [], WAIT) == ([], [], []), "select")
    elif kind == "poll":
        r, w = os.pipe(); p = select.poll(); p.register(r, select.POLLIN)
        check(p.poll(WAIT * 1000) == [], "poll")
    elif kind == "epoll":
        r, w = os.pipe(); e = select.epoll(); e.register(r, select.EPOLLIN)
        check(e.poll(WAIT) == [], "epoll")
    elif kind == "lock":
        lock = threading.Lock(); lock.acquire(); later(lock.release)
        check(lock.acquire(timeout=60) is True, "lock")
    elif kind == "condition":
        cond = threading.Condition()
        with cond:
            check(cond.wait(WAIT) is False, "condition")
    elif kind == "queue":
        q = queue.Queue(); later(lambda: q.put("item"))
        check(q.get(timeout=60) == "item", "queue")
    elif kind == "socket":
        a, b = socket.socketpair(); later(lambda: b.sendall(b"payload"))
        check(a.recv(100) == b"payload", "recv")
    elif kind == "pipe":
        r, w = os.pipe(); later(lambda: os.write(w, b"bytes"))
        check(os.read(r, 100) == b"bytes", "read")
    elif kind == "waitpid":
        pid = os.fork()
        if pid == 0:
            time.sleep(WAIT); os._exit(7)
        got, status = os.waitpid(pid, 0)
        check(got == pid and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, "waitpid")
    elif kind == "c-without-gil":  # ctypes lets the GIL go; usleep is a nanosleep
        libc = ctypes.CDLL(None, use_errno=True)
        check(libc.usleep(int(WAIT * 1e6)) == 0 and ctypes.get_errno() == 0, "usleep")
    elif kind == "busy-python":
        total = n = 0
        while time.monotonic() - t0 < WAIT:
            total += n; n += 1
        check(total == n * (n - 1) // 2, "loop")
    elif kind == "busy-c":  # one C call holding the GIL, as long as WAIT on this CPU
        per_million = min(timed(sum, range(1_000_000)) for _ in range(3))
        n = int(1_000_000 * WAIT / per_million)
        t0 = time.monotonic()
        check(sum(range(n)) == n * (n - 1) // 2, "sum")
    elapsed = time.monotonic() - t0
    check(elapsed >= WAIT * 0.99 or kind == "busy-c", f"returned after {elapsed:.3f} s of {WAIT}")

stop = threading.Event()
def beside():  # another thread, busy in Python all along
    x = 0
    while not stop.is_set():
        x = (x + 7) % 1000003
    check(x < 1000003, "beside")
helper = threading.Thread(target=beside)
helper.start()
print("blocking", flush=True)
block(kind)
stop.set()
helper.join()
time.sleep(0.05)  # bytecodes, where queued code runs
print("ok", getattr(sys, "_flameprof_test_runs", 0), "usr1", len(usr1), flush=True)
"""

KINDS = [
    "sleep",
    "select",
    "poll",
    "epoll",
    "lock",
    "condition",
    "queue",
    "socket",
    "pipe",
    "waitpid",
    "c-without-gil",
    "busy-python",
    "busy-c",
]
PAYLOAD = b"import sys; sys._flameprof_test_runs = getattr(sys, '_flameprof_test_runs', 0) + 1"
# native/inject.c's steps after which a failure can be forced
STOPPED, SAVED, ERRNO, INITIALIZED, MAPPED, WRITTEN, QUEUED = range(1, 8)


class Blocked:
    """A target running TARGET, its main thread in the call ``kind`` for ``wait`` seconds."""

    def __init__(self, tmp_path, kind: str, wait: float) -> None:
        script = tmp_path / "target.py"
        script.write_text(TARGET)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), kind, str(wait)], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "blocking"
        time.sleep(0.3)  # inside the call

    def finish(self) -> str:
        out = self.proc.stdout.read().strip()
        assert self.proc.wait(timeout=60) == 0, out
        return out


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_call_returns_what_it_would_have(tmp_path, kind):
    target = Blocked(tmp_path, kind, 1.5)
    addresses = resolve(target.proc.pid)
    outcomes = []
    for _ in range(2):  # attach, detach, attach again
        outcomes.append(inject(target.proc.pid, target.proc.pid, addresses, PAYLOAD))
        time.sleep(0.3)
    assert target.finish() == "ok 2 usr1 0"
    for outcome in outcomes:
        assert outcome["status"] == "queued" and outcome["verified"], outcome
    blocked_in = {outcome["syscall"] for outcome in outcomes}
    if kind == "epoll":  # the kernel ends epoll_wait with EINTR on any stop: restarted here
        assert blocked_in == {"restarted-eintr"}
    elif not kind.startswith("busy"):
        assert blocked_in <= {"restarted", "restarted-block"}


@pytest.mark.parametrize("step", [STOPPED, SAVED, ERRNO, INITIALIZED, MAPPED, WRITTEN, QUEUED])
@pytest.mark.parametrize("kind", ["queue", "epoll"])
def test_a_failure_at_any_step_leaves_the_target_unharmed(tmp_path, kind, step):
    target = Blocked(tmp_path, kind, 0.8)
    outcome = inject(target.proc.pid, target.proc.pid, resolve(target.proc.pid), PAYLOAD, fail_at=step)
    assert outcome["status"] == "forced", outcome
    assert outcome["verified"] == (step != STOPPED)  # nothing to restore before the registers are saved
    assert target.finish() == f"ok {1 if step == QUEUED else 0} usr1 0"


def libc_function(pid: int, name: str) -> int:
    for mapping in mapped_files(pid).values():
        if os.path.basename(mapping.path).startswith("libc"):
            found = functions_in(pid, mapping, (name,))
            if found:
                return found[name]
    raise AssertionError(f"no {name} in libc")


def test_a_call_that_faults_is_never_delivered(tmp_path):
    target = Blocked(tmp_path, "queue", 0.8)
    addresses = dict(resolve(target.proc.pid), Py_IsInitialized=8)  # jumps to an unmapped address
    outcome = inject(target.proc.pid, target.proc.pid, addresses, PAYLOAD)
    assert outcome["status"] == "failed" and "faulted" in outcome["detail"] and outcome["verified"]
    assert target.finish() == "ok 0 usr1 0"


def test_a_call_that_never_returns_is_abandoned_and_signals_are_held_back(tmp_path):
    """The borrowed thread sits in pause(), a stand-in for mmap; a SIGUSR1 sent meanwhile is held
    and reaches the program's handler after the thread is given back."""
    target = Blocked(tmp_path, "sleep", 1.5)
    pid = target.proc.pid
    addresses = dict(resolve(pid), mmap=libc_function(pid, "pause"))
    threading.Timer(0.2, os.kill, (pid, signal.SIGUSR1)).start()
    outcome = inject(pid, pid, addresses, PAYLOAD, timeout=0.5)
    assert outcome["status"] == "failed" and "in time" in outcome["detail"] and outcome["verified"]
    assert outcome["stall"] >= 0.5
    assert target.finish() == "ok 0 usr1 1"


def test_the_check_on_a_throwaway_process_passes_here():
    assert self_test() is None


# The main thread goes through every kind of call, 0.15 s each, and checks each one, for the whole
# run; the CLI attaches twice while it does.
CYCLE = TARGET.replace(
    'print("blocking", flush=True)\nblock(kind)',
    'print("blocking", flush=True)\nend = time.monotonic() + float(sys.argv[3])\n'
    "while time.monotonic() < end:\n"
    "    for each in KINDS:\n"
    "        block(each)",
).replace(
    "kind, WAIT = sys.argv[1], float(sys.argv[2])",
    f"kind, WAIT = sys.argv[1], float(sys.argv[2])\nKINDS = {KINDS!r}",
)


def test_attach_detach_and_attach_again_leave_every_call_as_it_was(tmp_path):
    script = tmp_path / "cycle.py"
    script.write_text(CYCLE)
    proc = subprocess.Popen(
        [sys.executable, str(script), "all", "0.15", "9"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "blocking"
    try:
        for n in range(2):
            out = tmp_path / f"out{n}"
            attach = run_flameprof("attach", str(proc.pid), "--duration", "1.5", "-q", "-o", str(out))
            assert attach.returncode == 0, attach.stderr
            profile = storage.load(out / "profile.flameprof")
            assert profile.meta["backend"] == "inject", attach.stderr
            assert any(f.name == "block" for f in profile.frames)
        assert proc.stdout.read().strip() == "ok 0 usr1 0"  # every call checked itself
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_program_without_python_is_refused_before_it_is_touched():
    from flameprof.errors import InjectUnavailable

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)
        with pytest.raises(InjectUnavailable, match="exports no Py_IsInitialized"):
            resolve(sleeper.pid)
        with open(f"/proc/{sleeper.pid}/status") as fh:
            assert "TracerPid:\t0" in fh.read()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stopped_process_stays_stopped_and_then_runs_on(tmp_path):
    target = Blocked(tmp_path, "queue", 1.5)
    pid = target.proc.pid
    os.kill(pid, signal.SIGSTOP)
    time.sleep(0.1)
    outcome = inject(pid, pid, resolve(pid), PAYLOAD)
    assert outcome["status"] == "stopped", outcome
    # let go, its main thread goes back into the group stop (woken for a moment to do so)
    deadline = time.monotonic() + 5
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the stopped process runs"
        time.sleep(0.01)
    time.sleep(0.3)
    assert open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T"
    assert "TracerPid:\t0" in open(f"/proc/{pid}/status").read()
    os.kill(pid, signal.SIGCONT)
    assert target.finish() == "ok 0 usr1 0"


# Another tracer: seizes the process (which goes on running) and holds it until it is ended.
SEIZE = (
    "import ctypes, sys, time; libc = ctypes.CDLL(None, use_errno=True); "
    "assert libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0; "
    "print('seized', flush=True); time.sleep(60)"
)


def test_a_process_under_another_tracer_is_left_to_it(tmp_path):
    from flameprof.collect.attach.ptrace_injector import inject as inject_target
    from flameprof.collect.attach.target import inspect
    from flameprof.errors import InjectUnavailable

    target = Blocked(tmp_path, "queue", 1.5)
    tracer = subprocess.Popen(
        [sys.executable, "-c", SEIZE, str(target.proc.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert tracer.stdout.readline().strip() == "seized"
        with pytest.raises(InjectUnavailable, match=f"traced by process {tracer.pid}"):
            inject_target(inspect(target.proc.pid), PAYLOAD)
    finally:
        tracer.terminate()
        tracer.wait()
    assert target.finish() == "ok 0 usr1 0"
