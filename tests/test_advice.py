"""Each piece of advice against the profile that triggers it and one that must not: a remedy is
named only when the profile shows what it assumes."""

from __future__ import annotations

import numpy as np
import pytest
from test_report import STACKS, TORCH, stepped

from flameprof.analyze.advice import FAULTS_ADVICE, KERNEL_ADVICE
from flameprof.analyze.breakdown import analyze
from flameprof.analyze.report import report_of
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark

DL = TORCH + "utils/data/dataloader.py"


def advice(profile) -> list[str]:
    return report_of(profile).verdict.advice


def has(profile, text: str) -> bool:
    return any(text in a for a in advice(profile))


def test_batches_built_in_the_training_process():
    assert has(stepped({"fetch": 3, "forward": 7}), "in the training process")
    assert not has(stepped({"fetch": 1, "forward": 99}), "in the training process")  # under 5%
    assert not has(stepped({"wait": 3, "forward": 7}), "in the training process")  # workers make them


def with_workers(worker_busy: float, steps: int = 4):
    """A main process whose loop waits 0.3 s a step for batches (then computes 0.7 s) and one DataLoader
    worker process that spends ``worker_busy`` of each wait in the dataset, the rest waiting for indices."""
    b = ProfileBuilder({"duration": 0.0})
    main_root, worker_root = Frame("main", kind="process"), Frame("dataloader worker 0", kind="process")
    main = b.thread_id(1, 1, "MainThread")
    worker = b.thread_id(2, 2, "MainThread")
    loop = {
        name: b.stack_id([b.frame(f) for f in [main_root, *STACKS[name]]]) for name in ("wait", "forward")
    }
    loop_body = Frame("_worker_loop", TORCH + "utils/data/_utils/worker.py", 240)
    fetching = b.stack_id(
        [
            b.frame(f)
            for f in (worker_root, loop_body, Frame("fetch", TORCH + "utils/data/_utils/fetch.py", 49))
        ]
    )
    waiting = b.stack_id(
        [
            b.frame(f)
            for f in (worker_root, loop_body, Frame("Queue.get", "/usr/lib/python3.11/queues.py", 98))
        ]
    )
    t = 0.0
    for _ in range(steps):
        b.marks.append(Mark(t, main, "step"))
        for k in range(30):  # the wait, in 10 ms samples on both processes
            t += 0.01
            b.add_sample(t, main, loop["wait"], 0.01, 0.0)
            b.add_sample(t, worker, fetching if k < 30 * worker_busy else waiting, 0.01, 0.01)
        t += 0.7
        b.add_sample(t, main, loop["forward"], 0.7, 0.7)
        b.add_sample(t, worker, waiting, 0.7, 0.0)
    b.marks.append(Mark(t, main, "step"))
    b.meta["duration"] = t
    return b.build()


def test_more_workers_only_when_the_workers_are_busy_while_the_loop_waits():
    busy = with_workers(0.9)
    assert has(busy, "raise num_workers") and has(busy, "busy building them 90%")
    idle = with_workers(0.1)
    assert not has(idle, "raise num_workers")
    assert has(idle, "handing batches over") and has(idle, "more workers will not help")


def test_waiting_for_workers_that_were_not_profiled_says_so():
    text = " ".join(advice(stepped({"wait": 3, "forward": 7})))
    assert "not in this profile" in text and "if they idle" in text
    assert not has(stepped({"wait": 1, "forward": 99}), "worker batches")  # under 5%


def test_persistent_workers_only_when_workers_restart_during_the_run():
    start = [STACKS["wait"][0], Frame("_MultiProcessingDataLoaderIter.__init__", DL, 1050)]
    STACKS["start"] = start
    try:
        restarting = stepped({"start": 1, "fetch": 2, "forward": 7})  # each step starts its workers
        assert has(restarting, "persistent_workers=True")
        b = ProfileBuilder()  # one start before the first step only
        main = b.thread_id(1, 1, "MainThread")
        b.add_sample(1.0, main, b.stack_id([b.frame(f) for f in start]), 1.0, 1.0)
        fetch = b.stack_id([b.frame(f) for f in STACKS["fetch"]])
        for i in range(4):
            b.marks.append(Mark(1.0 + i, main, "step"))
            b.add_sample(1.5 + i, main, fetch, 0.5, 0.5)
            b.add_sample(2.0 + i, main, b.stack_id([b.frame(f) for f in STACKS["forward"]]), 0.5, 0.5)
        b.marks.append(Mark(5.0, main, "step"))
        assert not has(b.build(), "persistent_workers")
    finally:
        del STACKS["start"]


def test_pinned_memory_only_when_the_program_runs_on_a_gpu():
    assert has(stepped({"wait": 3, "forward": 7, "sync": 1}), "not pinned")
    assert not has(stepped({"wait": 3, "forward": 7, "seed": 1}), "not pinned")  # seeding CUDA is no GPU use


def test_host_synchronisation_from_two_percent():
    assert has(stepped({"forward": 90, "sync": 10}), ".item()")
    assert not has(stepped({"forward": 99, "sync": 1}), ".item()")


def test_collectives_from_ten_percent():
    assert has(stepped({"forward": 89, "comm": 11}), "Collectives take 11.0%")
    assert not has(stepped({"forward": 91, "comm": 9}), "Collectives")


def test_module_call_overhead_from_ten_percent_of_forward():
    call = STACKS["forward"][:2]  # the leaf in nn.Module's call machinery: dispatch, not an op
    STACKS["dispatch"] = call
    try:
        assert has(stepped({"forward": 80, "dispatch": 20}), "Python overhead in nn.Module calls")
        assert not has(stepped({"forward": 95, "dispatch": 5}), "Python overhead")
    finally:
        del STACKS["dispatch"]


def test_a_compute_bound_loop_gets_no_advice():
    assert advice(stepped({"forward": 99, "fetch": 1})) == []


IDLE_WORKERS = """\
import numpy as np, torch
from torch.utils.data import DataLoader, Dataset

class Lists(Dataset):
    def __len__(self):
        return 1500
    def __getitem__(self, i):  # cheap to build, costly to hand over: 64 arrays pickled per item
        return [np.full(256, i, dtype=np.float64) for _ in range(64)]

if __name__ == "__main__":
    torch.set_num_threads(1)
    model = torch.nn.Linear(256, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in DataLoader(Lists(), batch_size=16, num_workers=2, collate_fn=lambda items: items):
        x = torch.as_tensor(np.stack([np.stack(item) for item in batch])).float().mean(1)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_real_loop_waiting_on_idle_workers_is_told_the_hand_over_costs(tmp_path):
    """The loop waits for its two workers, which idle: batches cost more to send than to make."""
    from conftest import run_flameprof

    from flameprof.model import storage

    (tmp_path / "idle.py").write_text(IDLE_WORKERS)
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "out"), str(tmp_path / "idle.py"), timeout=180)
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    assert has(profile, "handing batches over")
    assert not has(profile, "raise num_workers")


FRESH_MEMORY = """
import sys, time, numpy as np, flameprof
kept = np.empty(16 << 20, dtype=np.float32)
until = time.perf_counter() + 2.5
while time.perf_counter() < until:
    # 64 MB a step: a fresh block is past what glibc ever keeps (32 MB), so each page is faulted in
    a = np.empty(16 << 20, dtype=np.float32) if sys.argv[1] == "fresh" else kept
    a.fill(1.0)
    a.sum()
    flameprof.step()
"""


@pytest.mark.parametrize("memory", ["fresh", "kept"])
def test_a_loop_that_faults_its_memory_in_each_step_is_told_to_keep_it(tmp_path, memory):
    """The same work on a fresh 64 MB block a step, or on one kept: only the first takes page faults
    all the time (the kernel zeroes every page), and only it is told to keep its memory."""
    from conftest import run_flameprof

    from flameprof.model import storage
    from flameprof.model.counters import PAGE_FAULTS_PER_S, SYSTEM_CPU_PERCENT

    (tmp_path / "loop.py").write_text(FRESH_MEMORY)
    proc = run_flameprof(
        "run", "-q", "-o", str(tmp_path / "out"), str(tmp_path / "loop.py"), memory, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    faults, kernel = profile.counters[PAGE_FAULTS_PER_S][1], profile.counters[SYSTEM_CPU_PERCENT][1]
    steps = analyze(profile).steps
    # a rate depends on the machine's speed; faults a step only on the work and the page size
    per_step = float(np.median(faults)) * float(np.median(steps.walls[steps.steady]))
    if memory == "fresh":
        # numpy asks for huge pages for big blocks: 64 MB takes 32 faults at the fewest, 16k at most
        assert 32 <= per_step <= 16_384, (per_step, faults)
        assert np.median(kernel) > 2 * 100 * KERNEL_ADVICE and np.median(faults) > 2 * FAULTS_ADVICE
        assert has(profile, "page faults a second")
    else:
        assert per_step < 1, (per_step, faults)
        assert not has(profile, "page faults a second")


@pytest.mark.parametrize(
    ("key", "kernel", "faults", "told"),
    [
        ("page_faults_per_s", 30.0, 50_000.0, True),
        ("main: page_faults_per_s", 30.0, 50_000.0, True),  # a job's merged counters
        ("page_faults_per_s", 5.0, 50_000.0, False),  # faults, but little time in the kernel
        ("page_faults_per_s", 30.0, 2_000.0, False),  # the kernel busy with something else
    ],
)
def test_the_page_fault_advice_needs_the_faults_and_the_kernel_time_in_the_steps(key, kernel, faults, told):
    profile = stepped({"forward": 10.0}, steps=8)
    times = np.linspace(0.0, 80.0, 41)
    in_steps = (times > 10.0) & (times <= 80.0)  # the first step is the warm-up
    # outside the steady steps (start-up, warm-up) the process faults all the time: that never counts
    profile.counters[key] = (times, np.where(in_steps, faults, 500_000.0))
    profile.counters[key.replace("page_faults_per_s", "system_cpu_percent")] = (
        times,
        np.where(in_steps, kernel, 100.0),
    )
    assert has(profile, "page faults a second") == told
