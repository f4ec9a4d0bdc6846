"""The live view: ``flameprof top PID`` in a real terminal (tmux), its plain lines when stdout is not
a terminal, and ``run --live``."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import torch  # noqa: F401  (the runs without torch leave this file out, as every torch test)
from conftest import REPO, assert_one_error_line, run_flameprof

TRAINER = r"""
import time, torch
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)

class Slow(Dataset):
    def __len__(self):
        return 10 ** 9

    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.randn(256), torch.randint(0, 10, ())

model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("ready", flush=True)
for x, y in DataLoader(Slow(), batch_size=32):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


@pytest.fixture
def trainer():
    proc = subprocess.Popen([sys.executable, "-c", TRAINER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _pane(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_for(tmux: list[str], session: str, pattern: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _pane(tmux, session)
        if re.search(pattern, screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} never appeared; the pane:\n{_pane(tmux, session)}")


def test_top_in_a_terminal_shows_the_job_and_q_detaches(trainer, tmp_path):
    assert shutil.which("tmux"), "tmux is installed by scripts/test.sh"
    session = f"fp-top-{os.getpid()}"
    socket = str(tmp_path / "tmux.sock")
    command = (
        f"cd {shlex.quote(REPO)} && PYTHONPATH={shlex.quote(REPO)} {shlex.quote(sys.executable)} "
        f"-m flameprof top {trainer.pid} --rate 500; echo EXITED $?; sleep 60"
    )
    tmux = ["tmux", "-S", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "150", "-y", "45", command], check=True)
    try:
        screen = _wait_for(tmux, session, r"\d+ steps in \d+ s; last 20: p50")
        assert f"flameprof top: process {trainer.pid}" in screen and "q: quit and detach" in screen
        screen = _wait_for(tmux, session, r"top layers")
        assert re.search(r"phases \(last 20 steps\): data \d+\.\d% +fwd \d+\.\d%", screen), screen
        assert "Sequential.0 (Linear)" in screen or "Sequential.2 (Linear)" in screen, screen
        assert "input-bound" in screen, screen  # the Dataset's sleep is most of each step
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        screen = _wait_for(tmux, session, r"EXITED \d+")
        assert "EXITED 0" in screen and f"detached from process {trainer.pid}; it runs on" in screen
        time.sleep(0.5)
        assert trainer.poll() is None  # the job trains on
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_top_without_a_terminal_prints_a_line_a_second(trainer):
    proc = run_flameprof("top", str(trainer.pid), "--duration", "4", "--rate", "1000", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert 1 <= len(lines) <= 5, lines
    assert all(re.match(r" *\d+\.\d s \| \d+ steps, p50 [\d.]+ ms", line) for line in lines), lines
    assert "| data " in lines[-1] and "top layer Sequential" in lines[-1]
    assert trainer.poll() is None


def test_top_of_no_such_process_is_one_error_line():
    proc = run_flameprof("top", "999999999")
    assert_one_error_line(proc, "999999999")


def test_run_live_prints_lines_while_the_program_runs(tmp_path, write_script):
    script = write_script(
        "train.py",
        "import time, torch\n"
        "model, opt = torch.nn.Linear(64, 64), None\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "start = time.time()\n"
        "while time.time() - start < 3.5:\n"
        "    opt.zero_grad(); model(torch.randn(8, 64)).sum().backward(); opt.step(); time.sleep(0.002)\n"
        "print('done')\n",
    )
    proc = run_flameprof("run", "--live", "5", "-o", str(tmp_path / "out"), script, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"  # the program's output is its own; the lines go to stderr
    live = [line for line in proc.stderr.splitlines() if line.startswith("flameprof live:")]
    assert len(live) >= 2, proc.stderr
    assert re.search(r"\d+ steps, p50 [\d.]+ ms", live[-1]), live
    assert (tmp_path / "out" / "profile.flameprof").exists()
