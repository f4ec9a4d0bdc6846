"""Signals end a profiled program exactly as they end it without flameprof, and leave its profile.

Each case runs the same program three ways: plain ``python``, ``flameprof run`` (the program in
flameprof's own process) and ``flameprof run -- python`` (the program as flameprof's child); sends
one signal to the program, to flameprof, or to the whole process group; and compares what the
program printed, its stderr (flameprof's own lines aside) and the exit status.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import termios
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO, flameprof_cmd

PROGRAM = """\
import atexit, os, signal, sys, time
names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT")
print("handlers", [str(signal.getsignal(getattr(signal, n))) for n in names], flush=True)
atexit.register(lambda: print("atexit", flush=True))

def work():
    end = time.monotonic() + 60
    while time.monotonic() < end:
        sum(range(2000))
        time.sleep(0.005)

try:
    print("ready", os.getpid(), flush=True)
    work()
finally:
    print("finally", flush=True)
"""

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGKILL")
WAIT_BEFORE_SIGNAL = 1.4  # past the first flush of the program's part (one a second)


def default_signals() -> None:
    """In the child before exec: Ctrl-C and Ctrl-\\ as a terminal's program gets them (a shell
    starts a background job, such as a test run, with both ignored, and ignored stays ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def run_case(tmp_path, way: str, signame: str, receiver: str) -> dict:
    """Run the program ``way``, send ``signame`` to ``receiver`` once it is ready, and collect."""
    case = tmp_path / f"{way}-{signame}-{receiver}"
    case.mkdir()
    (case / "prog.py").write_text(PROGRAM)
    argv = {
        "plain": [sys.executable, "prog.py"],
        "script": flameprof_cmd("run", "-q", "-o", "out", "prog.py"),
        "command": flameprof_cmd("run", "-q", "-o", "out", "--", sys.executable, "prog.py"),
    }[way]
    env = dict(os.environ, PYTHONPATH=REPO)
    # a session of its own: no terminal, and a process group to signal as a whole
    proc = subprocess.Popen(
        argv,
        cwd=case,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    lines = [proc.stdout.readline().decode(), proc.stdout.readline().decode()]
    program_pid = int(lines[1].split()[1])
    time.sleep(WAIT_BEFORE_SIGNAL)
    signum = getattr(signal, signame)
    if receiver == "group":
        os.killpg(proc.pid, signum)
    else:
        os.kill(program_pid if receiver == "program" else proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    stdout = "".join(lines) + out.decode()
    stderr = _anywhere_in_work(
        [  # tracebacks name the program by its full path, which differs per case
            line.replace(str(program_pid), "PID").replace(str(case), "CASE")
            for line in err.decode().splitlines()
            if line and not line.startswith("flameprof:")
        ]
    )
    return {
        "stdout": stdout.replace(str(program_pid), "PID"),
        "stderr": stderr,
        "status": proc.returncode,
        "dir": case,
    }


def _anywhere_in_work(lines: list[str]) -> list[str]:
    """A traceback's innermost entry in ``work`` without its line: the signal lands on the ``sum``
    or on the ``sleep`` line by chance, with flameprof or without."""
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("  File ") and line.endswith(", in work"):
            out.append(line[: line.rindex(", line ")] + ", in work")
            skipping = True
        elif skipping and line.startswith("    "):
            continue  # the source line and its carets
        else:
            skipping = False
            out.append(line)
    return out


def cases():
    for signame in SIGNALS:
        for receiver in ("program", "group"):
            yield ("plain", signame, receiver)
            yield ("script", signame, receiver)
            yield ("command", signame, receiver)
        yield ("command", signame, "flameprof")


def samples_left(case_dir) -> int:
    """The samples of the profile the run left: its outputs, or else the parts in the output directory."""
    sys.path.insert(0, REPO)
    from flameprof.model import storage

    out = case_dir / "out"
    if (out / "profile.flameprof").exists():
        return storage.load(str(out / "profile.flameprof")).num_samples
    parts = list(out.glob(".flameprof-parts-*/*.flameprof"))
    return sum(storage.load(str(p)).num_samples for p in parts)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("signals")
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {key: pool.submit(run_case, tmp_path, *key) for key in cases()}
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("signame", SIGNALS)
@pytest.mark.parametrize(
    ("way", "receiver", "plain_receiver"),
    [
        ("script", "program", "program"),
        ("script", "group", "group"),
        ("command", "program", "program"),
        ("command", "flameprof", "program"),
        ("command", "group", "group"),
    ],
)
def test_the_signal_ends_the_program_as_without_flameprof(results, signame, way, receiver, plain_receiver):
    plain = results[("plain", signame, plain_receiver)]
    profiled = results[(way, signame, receiver)]
    assert profiled["stdout"] == plain["stdout"]
    assert profiled["stderr"] == plain["stderr"]
    assert profiled["status"] == plain["status"] == -getattr(signal, signame)


@pytest.mark.parametrize("signame", SIGNALS)
@pytest.mark.parametrize(
    ("way", "receiver"),
    [("script", "program"), ("script", "group"), ("command", "program"), ("command", "flameprof")],
)
def test_the_profile_so_far_is_left(results, signame, way, receiver):
    """At least the samples of the first flush (the program ran 1.4 s at 100 Hz before the signal)."""
    assert samples_left(results[(way, signame, receiver)]["dir"]) >= 50


def test_os_exit_keeps_the_profile(tmp_path):
    """``os._exit`` skips atexit: the profile is written from it, in the main process only (a forked
    child ending by ``os._exit``, as multiprocessing's do, writes its part and nothing else)."""
    (tmp_path / "prog.py").write_text(
        "import os, time\n"
        "end = time.monotonic() + 0.5\n"
        "while time.monotonic() < end:\n"
        "    sum(range(1000))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(4)\n"
        "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)\n"
        "os._exit(3)\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    plain = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    profiled = subprocess.run(
        flameprof_cmd("run", "-q", "-o", "out", "prog.py"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert (profiled.returncode, profiled.stdout) == (plain.returncode, plain.stdout) == (3, "child 4\n")
    # Since 3.12 Python warns when a process with several threads forks, and the sampler is a
    # thread: the one line that differs (docs/run.md, limits)
    warning = "is multi-threaded, use of fork() may lead to deadlocks in the child"
    assert [
        line for line in profiled.stderr.splitlines() if warning not in line and "os.fork()" not in line
    ] == []
    assert plain.stderr == ""
    sys.path.insert(0, REPO)
    from flameprof.model import storage

    profile = storage.load(str(tmp_path / "out" / "profile.flameprof"))
    assert profile.num_samples >= 30 and len({p.pid for p in profile.processes}) == 2
    assert not list((tmp_path / "out").glob(".flameprof-parts-*"))


def run_in_terminal(argv: list[str], cwd) -> tuple[int, list[str]]:
    """Run ``argv`` on a terminal of its own, press Ctrl-C once it is ready: (status, its lines)."""
    master, slave = os.openpty()

    def take_the_terminal() -> None:
        default_signals()
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_the_terminal
    )
    os.close(slave)
    output = b""
    while b"ready" not in output:
        output += os.read(master, 4096)
    time.sleep(WAIT_BEFORE_SIGNAL)
    os.write(master, b"\x03")  # the terminal sends SIGINT to its foreground process group
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every process on the terminal has closed it
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    status = proc.wait()
    lines = output.decode().replace(str(proc.pid), "PID").splitlines()
    return status, [line for line in lines if line and not line.startswith("flameprof:")]


@pytest.mark.parametrize("way", ["script", "command"])
def test_ctrl_c_on_a_terminal_reaches_the_program_once(tmp_path, way):
    """With a terminal the command's child stays in the terminal's foreground group: Ctrl-C reaches
    it directly, and flameprof forwards nothing (a second SIGINT would interrupt the finally block)."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    plain = run_in_terminal([sys.executable, "prog.py"], tmp_path)
    argv = flameprof_cmd(
        "run", "-q", "-o", "out", *(["prog.py"] if way == "script" else ["--", sys.executable, "prog.py"])
    )
    profiled = run_in_terminal(argv, tmp_path)
    uncoloured = [[re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines] for _, lines in (plain, profiled)]
    pid_free = [
        _anywhere_in_work([line.split(" ")[0] if line.startswith("ready") else line for line in lines])
        for lines in uncoloured
    ]
    assert pid_free[0] == pid_free[1]
    assert profiled[0] == plain[0] == -signal.SIGINT
    assert "KeyboardInterrupt" in pid_free[1]


@pytest.mark.parametrize("way", ["script", "command"])
def test_snapshots_of_the_job_so_far_appear_while_it_runs(tmp_path, way):
    """``--snapshot-every``: the profile so far, from outside the program, readable at any moment."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    target = ["prog.py"] if way == "script" else ["--", sys.executable, "prog.py"]
    argv = flameprof_cmd("run", "-q", "-o", "out", "--snapshot-every", "0.5", *target)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sys.path.insert(0, REPO)
    from flameprof.model import storage

    snapshot = tmp_path / "out" / "profile.snapshot.flameprof"
    seen = []
    try:
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            if snapshot.exists():
                count = storage.load(str(snapshot)).num_samples  # complete whenever it is read
                if not seen or count > seen[-1]:
                    seen.append(count)
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert len(seen) == 2 and 0 < seen[0] < seen[1], seen  # it grows while the job runs


@pytest.mark.parametrize("way", ["script", "command"])
def test_a_snapshot_on_demand_is_the_job_so_far(tmp_path, way):
    """``flameprof snapshot OUTDIR``: the profile so far of a running job, whenever asked, with no
    signal sent to it (the program's SIGUSR2 stays its own)."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    target = ["prog.py"] if way == "script" else ["--", sys.executable, "prog.py"]
    env = dict(os.environ, PYTHONPATH=REPO)
    assert "no run is writing" in _snapshot(tmp_path / "nothing", env)  # one line, exit 2
    argv = flameprof_cmd("run", "-q", "-o", "out", *target)
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sys.path.insert(0, REPO)
    from flameprof.model import storage

    seen = []
    try:
        proc.stdout.readline()
        proc.stdout.readline()  # "ready": the program runs
        for _ in range(2):
            time.sleep(1.5)  # past a flush of every part
            assert _snapshot(tmp_path / "out", env).startswith("flameprof: wrote")
            profile = storage.load(str(tmp_path / "out" / "profile.snapshot.flameprof"))
            seen.append(profile.num_samples)
        roles = [p.role for p in profile.processes]
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert 0 < seen[0] < seen[1], seen
    assert roles == ["main"]


def _snapshot(outdir, env) -> str:
    (outdir).mkdir(exist_ok=True)
    done = subprocess.run(flameprof_cmd("snapshot", str(outdir)), env=env, capture_output=True, text=True)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.returncode == (0 if lines[0].startswith("flameprof: wrote") else 2), lines
    return lines[0]
