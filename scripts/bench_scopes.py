"""Cost of flameprof's deep-learning instrumentation, measured side by side in one run.

1. ``with flameprof.scope("x"):`` while no profiler runs, while one runs, and an empty ``with``
   of a trivial context manager (the floor), in ns per block;
2. the layer hook (what the sampler pays per nn.Module frame in a sample, name cached), in ns;
3. a training step of the CNN example without a profiler, with torch's global backward hooks doing
   nothing (torch's share of ``--backward-layers``), profiled, and profiled with
   ``backward_layers=True``, in ms per step.

Each figure is the median of interleaved repeats. Usage: python scripts/bench_scopes.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import warnings

import flameprof
from flameprof import Profiler


class Empty:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def with_empty(n: int) -> float:
    """ns per ``with Empty():`` block: the floor any context manager pays."""
    start = time.perf_counter()
    for _ in range(n):
        with Empty():
            pass
    return (time.perf_counter() - start) / n * 1e9


def with_scope(n: int) -> float:
    """ns per ``with flameprof.scope("x"):`` block."""
    scope = flameprof.scope
    start = time.perf_counter()
    for _ in range(n):
        with scope("x"):
            pass
    return (time.perf_counter() - start) / n * 1e9


def scope_costs(repeats: int, n: int) -> dict[str, float]:
    runs: dict[str, list[float]] = {"empty with": [], "scope, not profiling": [], "scope, profiling": []}
    for _ in range(repeats):
        runs["empty with"].append(with_empty(n))
        runs["scope, not profiling"].append(with_scope(n))
        with Profiler(rate=100):
            runs["scope, profiling"].append(with_scope(n))
    return {k: statistics.median(v) for k, v in runs.items()}


def hook_cost(n: int) -> float:
    """ns per layer-hook call on a live ``_call_impl`` frame whose module name is cached."""
    import torch
    from torch import nn

    from flameprof.collect.engine.layers import NAMER

    NAMER.call_code = nn.Module._call_impl.__code__
    ready, done = threading.Event(), threading.Event()

    class Waiter(nn.Module):
        def forward(self, x):
            ready.set()
            done.wait()
            return x

    model = nn.Sequential(nn.Sequential(Waiter()))
    worker = threading.Thread(target=model, args=(torch.zeros(1),))
    worker.start()
    ready.wait()
    frame = sys._current_frames()[worker.ident]
    frames = []
    while frame is not None:
        if frame.f_code is NAMER.call_code:
            frames.append(frame)
        frame = frame.f_back
    try:
        for f in frames:
            NAMER.hook(f)  # names computed and cached
        start = time.perf_counter()
        for _ in range(n):
            for f in frames:
                NAMER.hook(f)
        return (time.perf_counter() - start) / (n * len(frames)) * 1e9
    finally:
        done.set()
        worker.join()


def step_costs(repeats: int, steps: int) -> dict[str, float]:
    import torch
    from torch import nn
    from torch.nn.modules import module as module_hooks

    from flameprof.examples.cnn_train import SmallCNN

    torch.set_num_threads(1)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()

    def train() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return (time.perf_counter() - start) / steps * 1e3

    def with_noop_backward_hooks() -> float:
        """torch's own cost of global backward hooks, without flameprof."""
        pre = module_hooks.register_module_full_backward_pre_hook(lambda module, grad_output: None)
        post = module_hooks.register_module_full_backward_hook(lambda module, grad_input, grad_output: None)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return train()
        finally:
            pre.remove()
            post.remove()

    train()  # warm-up
    runs: dict[str, list[float]] = {
        "no profiler": [],
        "no-op backward hooks": [],
        "profiled": [],
        "profiled, backward layers": [],
    }
    for _ in range(repeats):
        runs["no profiler"].append(train())
        runs["no-op backward hooks"].append(with_noop_backward_hooks())
        with Profiler(rate=100):
            runs["profiled"].append(train())
        with Profiler(rate=100, backward_layers=True):
            runs["profiled, backward layers"].append(train())
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    scopes = scope_costs(args.repeats, 30_000)
    floor = scopes["empty with"]
    print(f"user scopes, ns per `with` block (median of {args.repeats}):")
    for name, ns in scopes.items():
        print(f"  {name:28s} {ns:8.0f} ns   {ns / floor:5.2f}x empty with")

    print(f"layer hook, per nn.Module frame in a sample (name cached): {hook_cost(20_000):.0f} ns")

    steps = step_costs(args.repeats, 5)
    base = steps["no profiler"]
    print(f"CNN training step (batch 32, 1 thread), ms per step (median of {args.repeats}):")
    for name, ms in steps.items():
        print(f"  {name:28s} {ms:8.2f} ms   {ms / base:5.2f}x no profiler")


if __name__ == "__main__":
    main()
