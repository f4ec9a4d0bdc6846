"""Benchmark: the cost of ``flameprof run --native`` against ``flameprof run``, side by side.

Runs one workload (zlib compression and a pure-Python loop, ``--torch`` adds matrix products)
plain, under ``flameprof run`` and under ``flameprof run --native``, interleaved, and prints the
medians: the workload's own time (what the target feels while perf records) and the whole command's
time (which adds perf's start, stop and ``perf script`` after the run).

    python scripts/bench_native.py [--runs 3] [--rounds 60] [--torch]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD = """\
import os, sys, time, zlib
TORCH = {torch}
if TORCH:
    import torch
    torch.set_num_threads(1)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
data = os.urandom(1 << 19) + bytes(1 << 19)

def compress():
    zlib.compress(data, 6)

def python_loop():
    return sum(i * i for i in range(100_000))

def matmul():
    for _ in range(20):
        a @ b

start = time.perf_counter()
for _ in range({rounds}):
    compress()
    python_loop()
    if TORCH:
        matmul()
print(f"WORK {{time.perf_counter() - start:.6f}}")
"""


def _run(cmd: list[str]) -> tuple[float, float]:
    """(workload seconds as the target measured them, whole command seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    total = time.perf_counter() - t0
    work = next(float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("WORK "))
    if "--native:" in proc.stderr:
        sys.exit(f"perf could not record: {proc.stderr.strip()}")
    return work, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=60, help="workload length (rounds of compress and loop)"
    )
    parser.add_argument("--torch", action="store_true", help="add PyTorch matrix products to the workload")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flameprof-bench-native-") as tmp:
        script = os.path.join(tmp, "work.py")
        with open(script, "w") as fh:
            fh.write(WORKLOAD.format(torch=args.torch, rounds=args.rounds))
        flameprof = [sys.executable, "-m", "flameprof", "run", "-q", "-o", os.path.join(tmp, "out")]
        variants = {
            "plain python": [sys.executable, script],
            "flameprof run": flameprof + [script],
            "flameprof run --native": flameprof + ["--native", script],
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, cmd in variants.items():
                results[name].append(_run(cmd))
    medians = {
        name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        for name, runs in results.items()
    }
    for name, (work, total) in medians.items():
        print(f"{name:24s} workload {work:6.2f} s   whole command {total:6.2f} s   (median of {args.runs})")
    base_work, base_total = medians["flameprof run"]
    work, total = medians["flameprof run --native"]
    print(
        f"--native vs flameprof run: workload {work / base_work:.3f}x, whole command "
        f"{total / base_total:.3f}x "
        f"(+{total - base_total:.2f} s)"
    )


if __name__ == "__main__":
    main()
