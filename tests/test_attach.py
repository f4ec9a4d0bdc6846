"""flameprof attach: real target processes, attached by injection and with py-spy."""

from __future__ import annotations

import ast
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import REPO, assert_one_error_line, flameprof_cmd, run_flameprof

from flameprof.collect.attach.bootstrap import bootstrap_source
from flameprof.collect.attach.pyspy import find_pyspy
from flameprof.collect.attach.target import ptrace_denial, python_version
from flameprof.model import storage

# Prints "tick N" with consecutive N; on SIGUSR1 prints what attaching must not change; SIGUSR2 ends it.
# Every line is one write (say): the handler can run in the middle of a print, whose pieces reach an
# unbuffered output one by one, and would land inside another line.
TARGET = r"""
import os, signal, sys, threading, time

def say(*words):
    os.write(1, (" ".join(map(str, words)) + "\n").encode())

def spin_here():
    total = 0
    for i in range(300000):  # longer than the GIL switch interval, so samplers see it
        total += i * i
    return total

def state(*_):
    names = sorted(t.name for t in threading.enumerate())
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1)
    handlers = [str(signal.getsignal(s)) for s in watched]
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "torch"))
    say("state", names, handlers, sorted(globals()), sys.path[:3], heavy, sys.getswitchinterval())

signal.signal(signal.SIGUSR1, state)
signal.signal(signal.SIGUSR2, lambda *_: sys.exit(0))
worker = threading.Thread(target=lambda: time.sleep(3600), name="worker", daemon=True)
worker.start()
say("ready")
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    spin_here()
    n += 1
    if n % 5 == 0:
        say("tick", n // 5)
    time.sleep(0.001)
say("done")
"""


class Target:
    """A Python process running TARGET (or ``source``) whose output lines are collected."""

    def __init__(
        self, tmp_path, seconds: float = 60.0, python: str = sys.executable, source: str = TARGET
    ) -> None:
        script = tmp_path / "target.py"
        script.write_text(source)
        # Appending: the target and its children share these files' offset with this process, whose
        # seek(0) to read them must not make their next write overwrite the start.
        self.stdout = open(tmp_path / "target.out", "a+")
        self.stderr = open(tmp_path / "target.err", "a+")
        self.proc = subprocess.Popen(
            [python, str(script), str(seconds)],
            stdout=self.stdout,
            stderr=self.stderr,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        self.wait_for("ready")

    @property
    def pid(self) -> str:
        return str(self.proc.pid)

    def lines(self) -> list[str]:
        self.stdout.seek(0)
        return self.stdout.read().splitlines()

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 20.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.lines() if line.startswith(prefix)]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"target never printed {prefix!r}: {self.lines()[-5:]}")

    def state(self, count: int) -> str:
        self.proc.send_signal(signal.SIGUSR1)
        return self.wait_for("state", count)[-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stdout.close()
        self.stderr.close()


@pytest.fixture
def target(tmp_path):
    t = Target(tmp_path)
    yield t
    t.close()


def functions(profile) -> set[str]:
    return {f.name for f in profile.frames}


def channels(tmpdir: str) -> set[str]:
    return set(glob.glob(os.path.join(tmpdir, "flameprof-attach-*")))


def attach_until_ctrl_c(pid: str, out, env: dict | None = None) -> subprocess.CompletedProcess:
    """``flameprof attach PID`` without --duration, stopped with SIGINT half a second after it started."""
    proc = subprocess.Popen(
        flameprof_cmd("attach", pid, "-o", str(out)),
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO, **(env or {})),
    )
    first = proc.stderr.readline()
    assert "until Ctrl-C" in first
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=60), "", first + rest)


def test_inject_profiles_the_running_loop_and_leaves_it_as_it_was(target, tmp_path):
    before = target.state(1)
    private_tmp = tempfile.mkdtemp(prefix="fpt-", dir="/tmp")  # short: the channel's socket path must fit
    env = {"TMPDIR": private_tmp}  # only this test's channels land here, whatever else runs meanwhile
    for round_ in (1, 2):  # attaching twice in a row works; the second runs until Ctrl-C
        out = tmp_path / f"out{round_}"
        if round_ == 1:
            proc = run_flameprof("attach", target.pid, "--duration", "0.5", "-o", str(out), env=env)
        else:
            proc = attach_until_ctrl_c(target.pid, out, env)
        assert proc.returncode == 0, proc.stderr
        assert "using py-spy" not in proc.stderr
        for name in ("profile.flameprof", "profile.folded", "profile.svg"):
            assert (out / name).stat().st_size > 0
        profile = storage.load(out / "profile.flameprof")
        assert profile.meta["backend"] == "inject"
        assert profile.meta["pid"] == target.proc.pid
        assert "spin_here" in functions(profile)
        assert "spin_here" in (out / "profile.folded").read_text()
        assert "spin_here" in proc.stderr  # the summary's top functions
        thread_names = {t.name for t in profile.threads}
        assert "MainThread" in thread_names and "worker" in thread_names
        assert not any(name.startswith("flameprof") for name in thread_names)
        assert 0.4 < profile.duration < 5
        assert target.proc.poll() is None
    ticks = len(target.wait_for("tick"))
    target.wait_for("tick", ticks + 2)  # still running
    assert target.state(2) == before  # threads, signal handlers, __main__ globals, sys.path, no numpy
    lines = [line for line in target.lines() if line.startswith("tick")]
    assert lines == [f"tick {i}" for i in range(1, len(lines) + 1)]
    assert all(line.startswith(("ready", "tick", "state")) for line in target.lines())
    target.stderr.seek(0)
    assert target.stderr.read() == ""
    assert channels(private_tmp) == set()  # the private channel is removed
    os.rmdir(private_tmp)


TORCH_TARGET = r"""
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
print("ready", flush=True)
while True:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def test_inject_into_a_torch_training_loop_has_layers_and_phases(tmp_path):
    from flameprof.analyze.phases import phase_of_samples
    from flameprof.model.phase_names import LEAF_PHASES

    trainer = subprocess.Popen([sys.executable, "-c", TORCH_TARGET], stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout.readline() == "ready\n"
        out = tmp_path / "out"
        proc = run_flameprof("attach", str(trainer.pid), "--duration", "1", "-q", "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        profile = storage.load(out / "profile.flameprof")
        assert profile.meta["backend"] == "inject"
        layers = {f.name for f in profile.frames if f.kind == "layer"}
        assert {"Sequential", "Sequential.0 (Linear)"} <= layers, layers
        phases = {LEAF_PHASES[i] for i in set(phase_of_samples(profile).tolist())}
        assert {"forward", "backward", "optimizer"} <= phases, phases
        assert trainer.poll() is None
    finally:
        trainer.kill()
        trainer.wait()


def test_attach_traces_the_next_steps(tmp_path):
    from dataclasses import asdict

    from flameprof.analyze.ops import ops_report

    trainer = subprocess.Popen([sys.executable, "-c", TORCH_TARGET], stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout.readline() == "ready\n"
        out = tmp_path / "out"
        proc = run_flameprof(
            "attach", str(trainer.pid), "--duration", "1.5", "--trace-steps", "3", "-q", "-o", str(out)
        )
        assert proc.returncode == 0, proc.stderr
        data = asdict(ops_report(storage.load(out / "profile.flameprof")))
        assert data["ops"]["steps"] == 3
        layers = {r["name"]: r for r in data["ops"]["layers"]}
        assert (
            layers["Sequential.0 (Linear)"]["forward"] > 0 and layers["Sequential.0 (Linear)"]["backward"] > 0
        )
        assert trainer.poll() is None  # and it trains on, with the window's hooks gone
    finally:
        trainer.kill()
        trainer.wait()


WATCHER = r"""
import os, signal, subprocess, sys
events = []
signal.signal(signal.SIGCHLD, lambda *a: events.append("SIGCHLD"))
child = subprocess.Popen([sys.executable, "-c", "while True: sum(range(10000))"])
print(child.pid, flush=True)
sys.stdin.readline()
state = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WSTOPPED | os.WCONTINUED | os.WNOHANG)
print(events, state, flush=True)
child.kill()
"""


def test_the_targets_parent_sees_no_stop_and_no_sigchld(tmp_path):
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = watcher.stdout.readline().strip()
    try:
        proc = run_flameprof("attach", child, "--duration", "0.5", "-q", "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        watcher.stdin.write("report\n")
        watcher.stdin.flush()
        assert watcher.stdout.readline() == "[] None\n"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the watcher kills and reaps it after its report
            os.kill(int(child), signal.SIGKILL)
        watcher.kill()
        watcher.wait()


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_target_ending_during_attach_keeps_the_samples_so_far(target, tmp_path, how):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        flameprof_cmd("attach", target.pid, "--duration", "60", "-q", "-o", str(out)),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert "profiling process" in proc.stderr.readline()
    if how == "exit":  # the target ends itself with sys.exit(0): its atexit handlers run
        time.sleep(0.5)
        target.proc.send_signal(signal.SIGUSR2)
    else:  # nothing runs in the target: what the agent wrote last (every 2 s) is kept
        part = os.path.join(tempfile.gettempdir(), "flameprof-attach-*", f"part-*-{target.pid}.flameprof")
        deadline = time.monotonic() + 30
        while not glob.glob(part) and time.monotonic() < deadline:
            time.sleep(0.1)
        target.proc.kill()
    assert proc.wait(timeout=30) == 0
    assert ("exited during the attach" if how == "exit" else "ended abruptly") in proc.stderr.read()
    assert "spin_here" in functions(storage.load(out / "profile.flameprof"))
    assert target.proc.wait(timeout=10) == (0 if how == "exit" else -signal.SIGKILL)


@pytest.mark.parametrize("backend", ["inject", "py-spy"])
def test_subprocesses_covers_the_children(tmp_path, backend):
    (tmp_path / "child.py").write_text(
        "def child_spin():\n    while True:\n        sum(range(10000))\nchild_spin()\n"
    )
    (tmp_path / "parent.py").write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, 'child.py'])\n"
        "other = subprocess.Popen(['sleep', '60'])\n"
        "print(child.pid, other.pid, flush=True)\n"
        "while True:\n    time.sleep(0.02)\n"
    )
    parent = subprocess.Popen([sys.executable, "parent.py"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    children = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        out = tmp_path / "out"
        proc = run_flameprof(
            "attach",
            str(parent.pid),
            "--backend",
            backend,
            "--subprocesses",
            "--duration",
            "1",
            "-q",
            "-o",
            str(out),
        )
        assert proc.returncode == 0, proc.stderr
        assert "leaving out" not in proc.stderr and "using py-spy" not in proc.stderr  # sleep is no Python
        profile = storage.load(out / "profile.flameprof")
        assert profile.meta["backend"] == backend
        assert "child_spin" in functions(profile)
        assert {p.pid for p in profile.processes} == {parent.pid, children[0]}
        sampled = {profile.threads[i].pid for i in set(profile.sample_thread.tolist())}
        assert sampled == {parent.pid, children[0]}
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


# Once in about a dozen runs on a machine at load 10+, the 3.12 target's SIGUSR1 handler did not run
# after the attach: the kernel could deliver the signal to the sampler's clock thread, and before
# 3.13 a handler tripped there does not wake the main thread. The sampler threads block the
# program's signals (test_native.py checks it).
@pytest.mark.parametrize("version", ["3.10.13", "3.12.1", "3.13.0"])
def test_inject_into_other_python_versions(tmp_path, version):
    """These pyenv interpreters have no numpy: the agent must not need it."""
    python = os.path.expanduser(f"~/.pyenv/versions/{version}/bin/python{version[: version.rindex('.')]}")
    if not os.path.exists(python):
        pytest.skip(f"no Python {version} in ~/.pyenv")
    t = Target(tmp_path, python=python)
    try:
        before = t.state(1)
        proc = run_flameprof("attach", t.pid, "--duration", "0.5", "-q", "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        profile = storage.load(tmp_path / "out" / "profile.flameprof")
        assert profile.meta["backend"] == "inject", proc.stderr
        assert profile.meta["python"] == version
        assert "spin_here" in functions(profile)
        assert t.state(2) == before
        t.stderr.seek(0)
        assert t.stderr.read() == ""
    finally:
        t.close()


# flameprof as installed where the injector could not be built (no compiler at install time)
WITHOUT_INJECTOR = (
    "import sys; sys.modules['flameprof._inject'] = None; from flameprof.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def test_without_the_injector_falls_back_to_pyspy_and_without_both_fails(target, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "py-spy").symlink_to(find_pyspy())
    python = bin_dir / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    env = {"PATH": str(bin_dir), "PYTHONPATH": REPO + os.pathsep + os.pathsep.join(p for p in sys.path if p)}
    argv = [str(python), "-c", WITHOUT_INJECTOR, "attach", str(target.pid), "--duration", "1"]
    proc = subprocess.run(
        [*argv, "-q", "-o", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "the injector was not built" in proc.stderr and "using py-spy instead" in proc.stderr
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    assert profile.meta["backend"] == "py-spy" and profile.meta["pid"] == target.proc.pid
    spin = [f for f in profile.frames if f.name == "spin_here"]
    first_line = TARGET.splitlines().index("def spin_here():") + 1
    assert spin and spin[0].file.endswith("target.py") and spin[0].line == first_line  # full path, first line
    assert {t.pid for t in profile.threads} == {target.proc.pid}
    assert target.proc.poll() is None
    (bin_dir / "py-spy").unlink()  # an interpreter with no py-spy beside it
    proc = subprocess.run(
        [*argv, "-o", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60
    )
    assert_one_error_line(proc, "the injector was not built", "py-spy")


def can_unshare() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-m", "true"]).returncode == 0


@pytest.mark.skipif(not can_unshare(), reason="cannot make a mount namespace here (needs CAP_SYS_ADMIN)")
@pytest.mark.parametrize("private_tmp", [False, True])
def test_a_process_with_its_own_mount_namespace(tmp_path, private_tmp):
    """Like a systemd service: same files (inject works) or a private /tmp (no channel: py-spy)."""
    loop = "def spin_here():\n    while True:\n        sum(range(10000))\nspin_here()\n"
    setup = "mount -t tmpfs none /tmp && " if private_tmp else ""
    python = os.path.realpath(sys.executable)  # not a venv that may live under the hidden /tmp
    target = subprocess.Popen(["unshare", "-m", "sh", "-c", f'{setup}exec "$0" -c "$1"', python, loop])
    try:
        deadline = time.monotonic() + 10
        while not os.readlink(f"/proc/{target.pid}/exe").rsplit("/", 1)[-1].startswith("python"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        proc = run_flameprof("attach", str(target.pid), "--duration", "1", "-q", "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        profile = storage.load(tmp_path / "out" / "profile.flameprof")
        assert "spin_here" in functions(profile)
        assert profile.meta["backend"] == ("py-spy" if private_tmp else "inject"), proc.stderr
        assert ("a private /tmp" in proc.stderr) == private_tmp
    finally:
        target.kill()
        target.wait()


def test_an_agent_that_cannot_load_is_reported_and_py_spy_used(tmp_path):
    # The process has a module called flameprof that is not flameprof: the bootstrap's import fails.
    code = (
        "import sys, types\nsys.modules['flameprof'] = types.ModuleType('flameprof')\n"
        "def spin_here():\n    while True:\n        sum(range(10000))\nspin_here()\n"
    )
    target = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        proc = run_flameprof("attach", str(target.pid), "--duration", "1", "-q", "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        assert "the agent failed to load in the process: ModuleNotFoundError" in proc.stderr
        assert "using py-spy instead" in proc.stderr
        assert "spin_here" in functions(storage.load(tmp_path / "out" / "profile.flameprof"))
        assert target.poll() is None
    finally:
        target.kill()
        assert target.communicate()[1] == ""  # the failed bootstrap wrote nothing on the target's stderr


def test_no_such_process(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert_one_error_line(
        run_flameprof("attach", str(gone.pid), "--duration", "1", "-o", str(tmp_path)),
        "no such process",
        str(gone.pid),
    )


def assert_attach_refused(tmp_path, argv: list[str], *needles: str) -> None:
    """Attaching to a process running ``argv`` fails with one error line containing ``needles``."""
    other = subprocess.Popen(argv)
    try:
        assert_one_error_line(
            run_flameprof("attach", str(other.pid), "--duration", "1", "-o", str(tmp_path)), *needles
        )
    finally:
        other.kill()
        other.wait()


def test_not_a_python_process(tmp_path):
    assert_attach_refused(tmp_path, ["sleep", "30"], "not a Python process", "sleep")


def test_a_launcher_process_points_to_its_python_child(tmp_path):
    launcher = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(30)'; true"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while (
            not os.path.exists(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
            or not open(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read().split()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = open(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read().split()[0]
        while not os.readlink(f"/proc/{child}/exe").rsplit("/", 1)[-1].startswith("python"):  # exec done
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert_one_error_line(
            run_flameprof("attach", str(launcher.pid), "--duration", "1", "-o", str(tmp_path)),
            "not a Python process (",
            f"its child {child} is: flameprof attach {child}",
        )
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def test_unsupported_python_version(tmp_path):
    python = os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python3.9")
    if not os.path.exists(python):
        pytest.skip("no Python 3.9 in ~/.pyenv")
    assert_attach_refused(
        tmp_path, [python, "-c", "import time; time.sleep(30)"], "Python 3.9", "3.10 to 3.13"
    )


def test_python_version_from_exe_or_maps():
    assert python_version("/usr/bin/python3.12", "") == (3, 12)
    maps = "7f00-7f01 r-xp 0 08:01 1 /opt/py/lib/libpython3.10.so.1.0\n"
    assert python_version("/opt/app/uwsgi", maps) == (3, 10)
    assert python_version(
        "/venv/bin/python", "7f-7f r--p 0 0 0 /usr/lib/python3.13/lib-dynload/_json.so"
    ) == (3, 13)
    assert python_version("/bin/sleep", "7f-7f r-xp 0 0 0 /lib/libc.so.6") is None


def test_permission_diagnosis_names_cause_and_fix():
    full = 1 << 19  # CAP_SYS_PTRACE
    assert ptrace_denial(5, 1000, euid=1000, caps=0, scope=0) is None
    assert ptrace_denial(5, 1000, euid=0, caps=full, scope=1) is None
    other = ptrace_denial(5, 1001, euid=1000, caps=0, scope=0)
    assert "another user (uid 1001)" in other and "sudo" in other
    yama1 = ptrace_denial(5, 1000, euid=1000, caps=0, scope=1, descendant=False)
    assert "kernel.yama.ptrace_scope = 1" in yama1 and "sysctl kernel.yama.ptrace_scope=0" in yama1
    assert ptrace_denial(5, 1000, euid=1000, caps=0, scope=1, descendant=True) is None
    assert "root" in ptrace_denial(5, 1000, euid=1000, caps=0, scope=2)
    assert "disabled" in ptrace_denial(5, 1000, euid=0, caps=full, scope=3)


def test_bootstrap_cannot_be_hijacked_by_a_path():
    evil = "/tmp/x'\n__import__('os').system('touch /tmp/pwned')#\"\\"
    outer = ast.parse(bootstrap_source(evil, "/pkg'\n).system(").decode())
    assert len(outer.body) == 1 and isinstance(outer.body[0], ast.Try)
    strings = [n.value for n in ast.walk(outer) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    body = ast.parse(next(s for s in strings if "serve(" in s))
    calls = {
        n.func.id: n.args for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert [a.value for a in calls["serve"]] == [evil]
    assert "system" not in {n.attr for n in ast.walk(body) if isinstance(n, ast.Attribute)}
