"""Profiles with known contents for the export, diff and check tests: a training loop whose phases,
layers and functions take exactly the time we say, built through the real ProfileBuilder."""

from __future__ import annotations

from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark, ProcessInfo, Profile

TORCH = "/venv/lib/python3.11/site-packages/torch/"
TICK = 0.01  # seconds per sample

MODULE = Frame("<module>", "/work/train.py", 1)
TRAIN = Frame("train", "/work/train.py", 10)
GET_DATA = Frame("_MultiProcessingDataLoaderIter._get_data", TORCH + "utils/data/dataloader.py", 1300)
CALL = Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1740)
ENCODER = Frame("Net.encoder (Encoder)", kind="layer")
HEAD = Frame("Net.head (Linear)", kind="layer")
LINEAR = Frame("linear", TORCH + "nn/functional.py", 2000)
TOKENIZE = Frame("tokenize", "/work/train.py", 40)
BACKWARD = Frame("Tensor.backward", TORCH + "_tensor.py", 570)
STEP = Frame("SGD.step", TORCH + "optim/sgd.py", 80)

PHASE_STACKS = {
    "data": [MODULE, TRAIN, GET_DATA],
    "encoder": [MODULE, TRAIN, CALL, ENCODER, LINEAR],
    "head": [MODULE, TRAIN, CALL, HEAD, LINEAR],
    "tokenize": [MODULE, TRAIN, TOKENIZE],
    "backward": [MODULE, TRAIN, BACKWARD],
    "optimizer": [MODULE, TRAIN, STEP],
}


def training_profile(
    ticks: dict[str, int], steps: int = 10, warmup_ticks: int = 0, worker_ticks: int = 0
) -> Profile:
    """``steps`` steps; in each, ``ticks[name]`` samples of PHASE_STACKS[name] in that order.

    The first step gets ``warmup_ticks`` extra ``tokenize`` samples (a slow warm-up step); each step
    gets ``worker_ticks`` samples on a second thread (idle work outside the loop thread).
    """
    b = ProfileBuilder(
        {"start_time": 1.7e9, "pid": 100, "cwd": "/work", "argv": ["train.py"], "rate": 1 / TICK}
    )
    b.process(ProcessInfo(100, "main"))
    main = b.thread_id(100, 100, "MainThread")
    worker = b.thread_id(100, 101, "pin_memory")
    ids = {name: b.stack_id([b.frame(f) for f in frames]) for name, frames in PHASE_STACKS.items()}
    idle = b.stack_id([b.frame(Frame("Thread.run", "/usr/lib/python3.11/threading.py", 970))])
    t = 0.0
    wt = 0.0
    for step in range(steps):
        b.marks.append(Mark(t + 1e-6, main, "step"))
        order = [(n, c) for n, c in ticks.items()]
        if step == 0 and warmup_ticks:
            order.insert(0, ("tokenize", warmup_ticks))
        for name, count in order:
            for _ in range(count):
                t += TICK
                b.add_sample(t, main, ids[name], TICK, TICK)
        for _ in range(worker_ticks):
            wt += TICK
            b.add_sample(wt, worker, idle, TICK, 0.0)
    b.marks.append(Mark(t + 1e-6, main, "step"))
    b.meta["duration"] = t
    return b.build()
