"""What the traced window costs, measured side by side in one run (the machine is noisy):

* ``cost``: a 2,000-step CPU training loop sampled at 100 Hz, with and without a 3-step traced
  window, rounds interleaved; prints the whole run's ratio and the slowdown of the traced steps
  themselves (the loop times its own steps);
* ``size``: the bytes the window adds to the .flameprof for 3 steps of a GPT-2-small-sized model
  (12 layers, 768 wide, random weights) on CPU;
* ``import``: importing a ~100 MB torch.profiler trace (a real trace's events repeated): time, and
  peak memory against the file's size.

    python scripts/bench_trace_window.py [--only cost,size,import] [--rounds 3] [--steps 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LOOP = r"""
import json, sys, time, torch
from torch import nn
import flameprof
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
window = json.loads(sys.argv[1])
steps = []
start = time.perf_counter()
with flameprof.Profiler(rate=100, trace_steps=tuple(window) if window else None) as prof:
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        steps.append(time.perf_counter() - t)
wall = time.perf_counter() - start
print(json.dumps({"wall": wall, "steps": steps}))
"""


def cost(rounds: int, steps: int = 2000) -> None:
    window = [steps // 2, steps // 2 + 3]
    runs: dict[str, list] = {"sampling": [], "window": []}
    for _ in range(rounds):
        for name, arg in (("sampling", None), ("window", window)):
            out = subprocess.run(
                [sys.executable, "-c", LOOP, json.dumps(arg), str(steps)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            runs[name].append(json.loads(out.stdout.splitlines()[-1]))
    base = statistics.median(r["wall"] for r in runs["sampling"])
    traced = statistics.median(r["wall"] for r in runs["window"])
    inside = [s for r in runs["window"] for s in r["steps"][window[0] : window[1]]]
    outside = [s for r in runs["window"] for s in r["steps"][max(0, window[0] - 100) : window[0]]]
    print(f"cost: {steps} steps at 100 Hz, median of {rounds} interleaved rounds")
    print(f"  sampling only          {base:.3f} s")
    ratio = traced / base
    print(f"  sampling + 3-step window {traced:.3f} s, ratio {ratio:.4f} ({100 * (ratio - 1):+.2f} %)")
    print(
        f"  traced steps: median {1e3 * statistics.median(inside):.2f} ms against "
        f"{1e3 * statistics.median(outside):.2f} ms just before the window "
        f"({statistics.median(inside) / statistics.median(outside):.1f}x)"
    )


GPT2 = r"""
import os, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
import flameprof
from flameprof.model import storage
torch.manual_seed(0)
config = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=128)
model = GPT2LMHeadModel(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 50257, (1, 64))
with flameprof.Profiler(rate=100, trace_steps=(1, 4)) as prof:
    for _ in range(5):
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
profile = prof.profile
with_trace = len(storage.dumps(profile))
events = profile.trace.num_events
profile.trace = None
print(with_trace, len(storage.dumps(profile)), events)
"""


def size() -> None:
    run = [sys.executable, "-c", GPT2]
    out = subprocess.run(run, capture_output=True, text=True, check=True, cwd=ROOT)
    with_trace, without, events = (int(v) for v in out.stdout.split()[-3:])
    print("size: 3 traced steps of GPT-2 small (124M parameters, batch 1 x 64 tokens) on CPU")
    print(f"  .flameprof {with_trace / 1e6:.2f} MB with the window, {without / 1e6:.2f} MB without")
    print(f"  the window: {(with_trace - without) / 1e6:.2f} MB for {events} events")


MAKE_TRACE = r"""
import json, sys, torch
from torch import nn
model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torch.profiler.profile(record_shapes=True, profile_memory=True, with_flops=True) as prof:
    for _ in range(20):
        opt.zero_grad(); model(torch.randn(16, 64)).sum().backward(); opt.step()
prof.export_chrome_trace(sys.argv[1])
"""

IMPORT = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[2])
from flameprof.collect.importers.load import load_input
start = time.perf_counter()
profile = load_input(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(time.perf_counter() - start, peak, profile.trace.num_events)
"""


def import_trace(target_mb: float = 100.0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "small.json")
        subprocess.run([sys.executable, "-c", MAKE_TRACE, small], check=True, capture_output=True)
        with open(small) as fh:
            doc = json.load(fh)
        events = doc["traceEvents"]
        span = max(e.get("ts", 0) + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float)))
        one = len(json.dumps(events))
        copies = max(1, int(target_mb * 1e6 / one))
        big = os.path.join(tmp, "big.json")
        with open(big, "w") as fh:
            base = doc["baseTimeNanoseconds"]
            fh.write(f'{{"schemaVersion": 1, "baseTimeNanoseconds": {base}, "traceEvents": [')
            for k in range(copies):
                shifted = []
                for e in events:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = e["ts"] + k * span
                    if "args" in e and "Sequence number" in e["args"]:
                        e["args"] = dict(
                            e["args"], **{"Sequence number": e["args"]["Sequence number"] + k * 100000}
                        )
                    shifted.append(json.dumps(e))
                fh.write(("," if k else "") + ",".join(shifted))
            fh.write("]}")
        file_size = os.path.getsize(big)
        out = subprocess.run(
            [sys.executable, "-c", IMPORT, big, ROOT], capture_output=True, text=True, check=True
        )
        seconds, peak, count = out.stdout.split()
        print(f"import: a {file_size / 1e6:.0f} MB torch.profiler trace ({int(count)} events)")
        print(
            f"  {float(seconds):.2f} s, peak memory {int(peak) / 1e6:.0f} MB, "
            f"{int(peak) / file_size:.2f}x the file"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="cost,size,import")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--steps", type=int, default=2000, help="training steps of a cost run (window half way)"
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if "cost" in parts:
        cost(args.rounds, args.steps)
    if "size" in parts:
        size()
    if "import" in parts:
        import_trace()


if __name__ == "__main__":
    main()
