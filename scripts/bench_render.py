#!/usr/bin/env python3
"""Benchmark: ``flameprof render`` against ``perl flamegraph.pl`` on a large folded file (the target: at least
30x faster on 1,000,000 lines, and an SVG at most half as large at the same ``--minwidth``).

Generates a realistic collapsed-stack file (deep Python/PyTorch-like stacks, all lines distinct, heavy-tailed
counts), then times both renderers side by side, interleaved, and prints the median times, their
ratio, each one's peak RSS and the output sizes. flamegraph.pl is not shipped with flameprof: pass
its path with ``--flamegraph-pl`` or the ``FLAMEGRAPH_PL`` environment variable; without it only
flameprof is timed.

    python scripts/bench_render.py --lines 1000000 --repeat 3 --flamegraph-pl /path/to/flamegraph.pl
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

_USER = ["train.py", "model.py", "data.py", "utils/metrics.py", "utils/logging.py", "augment.py"]
_LIBS = [
    "numpy/core/fromnumeric.py",
    "tqdm/std.py",
    "PIL/Image.py",
    "transformers/modeling_utils.py",
    "einops/einops.py",
    "numpy/lib/function_base.py",
]
_TORCH = [
    "torch/nn/modules/module.py",
    "torch/nn/modules/linear.py",
    "torch/nn/modules/conv.py",
    "torch/nn/functional.py",
    "torch/autograd/__init__.py",
    "torch/optim/adam.py",
    "torch/utils/data/dataloader.py",
    "torch/utils/data/_utils/collate.py",
    "torch/_tensor.py",
    "torch/optim/optimizer.py",
    "torch/nn/modules/activation.py",
    "torch/_ops.py",
]
_STDLIB = [
    "threading.py",
    "queue.py",
    "multiprocessing/connection.py",
    "selectors.py",
    "functools.py",
    "contextlib.py",
    "json/decoder.py",
    "copy.py",
    "abc.py",
    "collections/__init__.py",
]
_NATIVE = [
    "at::native::addmm_out",
    "at::native::conv2d",
    "c10::impl::dispatch",
    "_PyEval_EvalFrameDefault",
    "at::native::relu_",
    "mkl_blas_sgemm",
    "pthread_cond_wait",
    "__memmove_avx_unaligned",
    "read",
    "at::native::softmax",
    "torch::autograd::Engine::evaluate_function",
    "at::native::copy_",
]
_VERBS = [
    "forward",
    "step",
    "load",
    "collate",
    "compute",
    "update",
    "apply",
    "fetch",
    "run",
    "call",
    "wrapper",
    "backward",
    "zero_grad",
    "get",
    "read",
    "transform",
    "encode",
    "decode",
    "reduce",
    "map",
]
_NOUNS = ["", "_batch", "_impl", "_item", "_layer", "_block", "_grad", "_loss", "_state", "_index", "_inner"]


def _function_pool(rng: random.Random) -> list[list[str]]:
    """Frame labels grouped from shallow (user code) to deep (native), ``name (path:line)`` like py-spy."""

    def labels(paths: list[str], count: int) -> list[str]:
        out = set()
        while len(out) < count:
            name = rng.choice(_VERBS) + rng.choice(_NOUNS)
            out.add(f"{name} ({rng.choice(paths)}:{rng.randint(1, 2500)})")
        return sorted(out)

    native = sorted({f"{rng.choice(_NATIVE)}_{i}" if i else rng.choice(_NATIVE) for i in range(400)})
    return [
        labels(_USER, 300),
        labels(_LIBS + _USER, 800),
        labels(_TORCH, 2500),
        labels(_STDLIB + _TORCH, 1200),
        native,
    ]


def generate(path: str, lines: int, seed: int = 1) -> None:
    """Write ``lines`` distinct collapsed stacks: a random call tree with heavy-tailed fan-out and counts."""
    rng = random.Random(seed)
    pool = _function_pool(rng)
    out: list[str] = []

    def pick(depth: int, taken: set[str]) -> str:
        group = pool[min(len(pool) - 1, depth // 7 + (rng.random() < 0.2))]
        while True:
            label = rng.choice(group)
            if label not in taken:
                taken.add(label)
                return label

    def count() -> int:
        return max(1, int(rng.paretovariate(1.1)))

    def grow(prefix: str, depth: int, budget: int) -> None:
        """Emit exactly ``budget`` lines below ``prefix``."""
        if budget == 1 or depth >= 70:
            chain = [pick(depth + i, set()) for i in range(rng.randint(0, 8))]
            out.append(f"{prefix};{';'.join(chain)} {count()}" if chain else f"{prefix} {count()}")
            for _ in range(budget - 1):  # depth cap reached: siblings as leaves
                out.append(f"{prefix};{pick(depth, set())}_{len(out)} {count()}")
            return
        if rng.random() < 0.25:  # a wrapper frame: one child takes everything
            grow(f"{prefix};{pick(depth, set())}", depth + 1, budget)
            return
        own = 1 if rng.random() < 0.3 else 0  # self time of this frame
        if own:
            out.append(f"{prefix} {count()}")
        rest = budget - own
        fanout = min(rest, max(1, int(rng.paretovariate(0.9))), 40)
        weights = [rng.paretovariate(1.0) for _ in range(fanout)]
        total = sum(weights)
        shares = [max(1, int(rest * w / total)) for w in weights]
        shares[0] += rest - sum(shares)
        while shares[0] < 1:  # rounding took too much from the first child
            j = max(range(1, fanout), key=shares.__getitem__)
            shares[j] -= 1
            shares[0] += 1
        taken: set[str] = set()
        for share in shares:
            grow(f"{prefix};{pick(depth, taken)}", depth + 1, share)

    sys.setrecursionlimit(10000)
    roots = [
        "<module> (train.py:1)",
        "_bootstrap (threading.py:1002)",
        "_worker_loop (torch/utils/data/_utils/worker.py:250)",
    ]
    grow(f"{roots[0]};main (train.py:120)", 2, lines * 7 // 10)
    grow(f"{roots[1]};_bootstrap_inner (threading.py:1045);run (threading.py:982)", 3, lines * 2 // 10)
    grow(roots[2], 1, lines - lines * 7 // 10 - lines * 2 // 10)
    rng.shuffle(out)  # folded files are not always sorted
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(0, len(out), 100_000):
            fh.write("\n".join(out[i : i + 100_000]))
            fh.write("\n")


def _time(cmd: list[str], stdout_path: str | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system; steadier on a shared machine) and peak RSS (MB) of one
    run."""
    start = time.perf_counter()
    with open(stdout_path or os.devnull, "wb") as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own usage, not all children's
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _report(name: str, runs: list[tuple[float, float, float]], path: str) -> tuple[float, float]:
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(
        f"{name:17s} wall {wall:6.2f} s, CPU {cpu:6.2f} s (runs: {', '.join(f'{r[0]:.2f}' for r in runs)}), "
        f"peak RSS {max(r[2] for r in runs):.0f} MB, SVG {os.path.getsize(path) / 1e3:.0f} kB"
    )
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each renderer (median)")
    parser.add_argument("--minwidth", type=float, default=0.1)
    parser.add_argument("--flamegraph-pl", default=os.environ.get("FLAMEGRAPH_PL"))
    parser.add_argument(
        "--keep", metavar="DIR", help="keep the input and outputs in DIR (an input already there is reused)"
    )
    args = parser.parse_args()

    workdir = args.keep or tempfile.mkdtemp(prefix="flameprof-bench-")
    os.makedirs(workdir, exist_ok=True)
    folded = os.path.join(workdir, f"stacks-{args.lines}.folded")
    if not os.path.exists(folded):
        start = time.perf_counter()
        child = multiprocessing.Process(
            target=generate, args=(folded, args.lines)
        )  # its memory is freed after
        child.start()
        child.join()
        print(
            f"generated {folded} ({os.path.getsize(folded) / 1e6:.0f} MB) in "
            f"{time.perf_counter() - start:.1f} s"
        )
    ours_svg = os.path.join(workdir, "flameprof.svg")
    theirs_svg = os.path.join(workdir, "flamegraph-pl.svg")
    ours_cmd = [
        sys.executable,
        "-m",
        "flameprof",
        "render",
        folded,
        "-o",
        ours_svg,
        "--minwidth",
        str(args.minwidth),
    ]
    theirs_cmd = (
        ["perl", args.flamegraph_pl, "--minwidth", str(args.minwidth), folded] if args.flamegraph_pl else None
    )
    if theirs_cmd is None:
        print("flamegraph.pl not given (--flamegraph-pl or FLAMEGRAPH_PL): timing flameprof only")

    ours, theirs = [], []
    for _ in range(args.repeat):
        ours.append(_time(ours_cmd))
        if theirs_cmd:
            theirs.append(_time(theirs_cmd, theirs_svg))
    wall, cpu = _report("flameprof render:", ours, ours_svg)
    if theirs:
        wall_pl, cpu_pl = _report("flamegraph.pl:", theirs, theirs_svg)
        print(
            f"speed-up: {wall_pl / wall:.1f}x wall, {cpu_pl / cpu:.1f}x CPU; SVG size "
            "flameprof/flamegraph.pl: "
            f"{os.path.getsize(ours_svg) / os.path.getsize(theirs_svg):.2f}"
        )
    if not args.keep:
        for path in (folded, ours_svg, theirs_svg):
            if os.path.exists(path):
                os.unlink(path)
        os.rmdir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
