"""``flameprof dump``: a running job's stacks with their phase and layers, read-only, and one error
line for a process that cannot be read."""

from __future__ import annotations

import json
import subprocess
import sys

import torch  # noqa: F401  (the target runs a torch model)
from conftest import assert_one_error_line, run_flameprof

TARGET = """\
import subprocess, sys, time, torch

class Stuck(torch.nn.Module):
    def forward(self, x):
        time.sleep(60)  # a hang inside a layer
        return x

WAITING = "import time\\ndef waiting():\\n    time.sleep(60)\\nwaiting()"
child = subprocess.Popen([sys.executable, "-c", WAITING])
print(child.pid, flush=True)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), Stuck())
model(torch.zeros(4))
"""


def test_dump_shows_the_phase_and_layers_of_a_stuck_job_and_its_children(tmp_path):
    target = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    try:
        child = int(target.stdout.readline())
        for _ in range(50):  # until the model is inside the stuck layer
            proc = run_flameprof("dump", "--json", str(target.pid))
            data = json.loads(proc.stdout)
            [main] = [t for t in data["threads"] if t["thread"] == "MainThread"]
            if main["layers"] == ["Sequential", "Stuck"]:
                break
        assert main["phase"] == "forward" and main["layers"] == ["Sequential", "Stuck"]
        assert main["stack"][-1].startswith("Stuck.forward (")
        text = run_flameprof("dump", str(target.pid)).stdout
        assert "thread MainThread" in text and ": forward; in Sequential > Stuck" in text
        both = json.loads(run_flameprof("dump", "--json", "--subprocesses", str(target.pid)).stdout)
        assert {t["pid"] for t in both["threads"]} == {target.pid, child}
        assert any(t["stack"] and t["stack"][-1].startswith("waiting (") for t in both["threads"])
    finally:
        target.kill()
        target.wait()
    assert_one_error_line(run_flameprof("dump", str(target.pid)), "no such process")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert_one_error_line(run_flameprof("dump", str(sleeper.pid)), "not a Python process")
    finally:
        sleeper.kill()
