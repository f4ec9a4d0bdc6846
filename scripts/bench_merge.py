"""Merging many rank profiles: N synthetic rank profiles (each a training loop of a few hundred
distinct stacks, SAMPLES samples, step marks) written as .flameprof files, then ``flameprof merge``
of all of them in a subprocess: its wall time and peak memory (targets: 256 ranks in under 30 s and
2 GB).

    python scripts/bench_merge.py [--ranks 256] [--samples 20000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from flameprof.model import storage  # noqa: E402
from flameprof.model.builder import ProfileBuilder  # noqa: E402
from flameprof.model.profile import Frame, Mark, ProcessInfo  # noqa: E402

MERGE = r"""
import resource, sys, time  # timed inside the command: the interpreter's start is left out
sys.argv = ["flameprof", "merge", *sys.argv[1:]]
from flameprof.cli import main
start = time.perf_counter()
try:
    main()
except SystemExit:
    pass
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def rank_profile(rank: int, samples: int, path: str) -> None:
    b = ProfileBuilder(meta={"pid": 1000 + rank, "start_time": 1.7e9 + rank * 0.01, "rate": 100.0})
    thread = b.thread_id(1000 + rank, 1000 + rank, "MainThread")
    b.process(ProcessInfo(1000 + rank, f"rank {rank}", f"node{rank // 8}", "python train.py", 1))
    root = [b.frame(Frame("<module>", "train.py", 1)), b.frame(Frame("train", "train.py", 10))]
    leaves = []
    for layer in range(40):
        for fn in range(8):
            ids = root + [
                b.frame(Frame("Module._call_impl", "torch/nn/modules/module.py", 1782)),
                b.frame(Frame(f"Net.block{layer} (Linear)", kind="layer")),
                b.frame(Frame(f"op{fn}", f"model{layer}.py", fn + 1)),
            ]
            leaves.append(b.stack_id(ids))
    for i in range(samples):
        b.add_sample(i * 0.01, thread, leaves[(i * 7 + rank) % len(leaves)], 0.01, 0.009)
        if i % 50 == 49:
            b.marks.append(Mark(i * 0.01, thread, "step", "optimizer"))
    storage.save(b.build(), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--samples", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"rank{r}.flameprof") for r in range(args.ranks)]
        for rank, path in enumerate(paths):
            rank_profile(rank, args.samples, path)
        size = sum(os.path.getsize(p) for p in paths)
        out = os.path.join(tmp, "job.flameprof")
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", MERGE, *paths, "-o", out], capture_output=True, text=True, cwd=ROOT
        )
        wall = time.perf_counter() - started
        seconds, peak = proc.stdout.split()[-2:]
        print(
            f"merge of {args.ranks} rank profiles ({args.samples} samples each, "
            f"{size / 1e6:.0f} MB of files): "
            f"{float(seconds):.1f} s in the command ({wall:.1f} s with start-up), "
            f"peak memory {int(peak) / 1e9:.2f} GB, result {os.path.getsize(out) / 1e6:.0f} MB"
        )


if __name__ == "__main__":
    main()
