"""Ranks that wait for each other: torchrun on CPU (gloo) with one rank made slow on purpose; the
report names the straggler, the phase that makes it slow, and how long the others wait for it."""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest
import torch  # noqa: F401  (the runs without torch leave this file out, as every torch test)
from conftest import run_flameprof

DDP = r"""
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def load_batch():
    end = time.perf_counter() + (0.012 if rank == 1 else 0.002)  # rank 1's data loading: +10 ms
    while time.perf_counter() < end:
        pass
    return torch.randn(32, 64), torch.randn(32, 1)

for step in range(60):
    x, y = load_batch()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The same loop with gradients averaged by hand: the wait is in all_reduce's own frame, phase comm.
MANUAL = DDP.replace("model = DDP(", "model = (").replace(
    "    opt.step()\n",
    "    for p in model.parameters():\n        dist.all_reduce(p.grad)\n    opt.step()\n",
)


@pytest.mark.parametrize("program", ["ddp", "manual"])
def test_torchrun_straggler_and_the_others_wait(tmp_path, program):
    script = tmp_path / "ddp.py"
    script.write_text(DDP if program == "ddp" else MANUAL)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = tmp_path / "out"
    proc = run_flameprof(
        "run", "--rate", "500", "--phase", "data=ddp.py:load_batch", "-o", str(out), "--",
        torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        str(script),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(run_flameprof("report", "--format", "json", str(out / "profile.flameprof")).stdout)
    ranks = report["processes"]
    assert ranks["straggler"] == "rank 1" and ranks["fastest_rank"] == "rank 0", ranks["lines"]
    assert ranks["straggler_phase"] == "data.fetch", ranks["lines"]
    loops = {loop["role"]: loop for loop in ranks["loops"]}
    # both ranks step together; rank 0 spends rank 1's extra 10 ms waiting (in all_reduce)
    assert abs(loops["rank 0"]["step_p50"] - loops["rank 1"]["step_p50"]) < 0.002
    waits = {role: loop["wait_per_step"] for role, loop in loops.items()}
    assert 0.006 < waits["rank 0"] - waits["rank 1"] < 0.014, ranks["lines"]
    extra = loops["rank 1"]["phase_per_step"]["data.fetch"] - loops["rank 0"]["phase_per_step"]["data.fetch"]
    assert 0.008 < extra < 0.012
    comm = {role: loop["phase_per_step"].get("comm", 0.0) for role, loop in loops.items()}
    if program == "manual":  # rank 0 waits in its all_reduce calls for rank 1's extra 10 ms
        assert 0.007 < comm["rank 0"] - comm["rank 1"] < 0.013, ranks["lines"]
    else:  # DDP's all_reduce runs in C++ inside backward: its waits are backward's, off-CPU
        assert comm["rank 0"] < 0.001 and comm["rank 1"] < 0.001, ranks["lines"]


def test_two_nodes_profiled_apart_merge_into_one_job(tmp_path):
    """``flameprof run -- torchrun --nnodes 2 ...`` on each "node" (two torchrun invocations here,
    rendezvous on 127.0.0.1), then ``flameprof merge``: one job, its ranks, the straggler named."""
    import subprocess

    from conftest import flameprof_cmd

    script = tmp_path / "ddp.py"
    script.write_text(DDP.replace("range(60)", "range(40)"))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    port = str(_free_port())
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    nodes = []
    for node in (0, 1):
        argv = flameprof_cmd(
            "run", "--rate", "500", "--phase", "data=ddp.py:load_batch", "-o", str(tmp_path / f"node{node}"),
            "--", torchrun, "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1",
            "--master_addr", "127.0.0.1", "--master_port", port, str(script),
        )  # fmt: skip
        nodes.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    for proc in nodes:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    merged = tmp_path / "job.flameprof"
    proc = run_flameprof(
        "merge", str(tmp_path / "node0" / "profile.flameprof"), str(tmp_path / "node1" / "profile.flameprof"),
        "-o", str(merged),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(run_flameprof("report", "--format", "json", str(merged)).stdout)["processes"]
    assert sorted(loop["role"] for loop in ranks["loops"] if loop["steps"]) == ["rank 0", "rank 1"]
    assert ranks["straggler"] == "rank 1" and ranks["straggler_phase"] == "data.fetch", ranks["lines"]
