#!/usr/bin/env python3
"""Benchmark: every ``--format`` export of a 1,000,000-sample profile, each in its own subprocess, with
its wall time and the subprocess's peak RSS (issue 7's target: each under 10 s and under 1 GB); and
``all``: every format and the run's summary from one rendering, as ``run --format all`` writes them.

The profile is synthetic and built for the timeline exports' worst realistic case: 4 threads of a
training job at 100 Hz, deep stacks (10-60 frames, some of them layer scopes) drawn from a few thousand
distinct call paths, and the stack changing on about half of the samples by returning from a few frames
and calling into others. Runs are interleaved by
format and the median is printed. The 1,000,000-line folded-to-SVG target (>= 10x flamegraph.pl) is
measured by ``scripts/bench_render.py``.

    python scripts/bench_exports.py [--samples 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from flameprof.model import storage  # noqa: E402
from flameprof.model.profile import Frame, ProcessInfo, Profile, ThreadInfo  # noqa: E402
from flameprof.render.formats import FORMATS  # noqa: E402

TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 1024.0

# Runs in the subprocess: load, export one format, report seconds for the export and peak RSS.
_CHILD = """
import json, resource, sys, time
from flameprof.model import storage
from flameprof.render.formats import FORMATS, Rendering, write_formats
from flameprof.render.options import OutputOptions
from flameprof.render.summary import format_summary
profile = storage.load(sys.argv[1])
t0 = time.perf_counter()
if sys.argv[3] == "all":
    rendering = Rendering(profile, OutputOptions(formats=tuple(FORMATS)))
    format_summary(rendering, write_formats(rendering, sys.argv[2], tuple(FORMATS)))
elif sys.argv[3] != "load-only":
    write_formats(Rendering(profile, OutputOptions()), sys.argv[2], (sys.argv[3],))
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def synthetic_profile(samples: int, seed: int = 7) -> Profile:
    rng = np.random.default_rng(seed)
    frames = [Frame(f"fn_{i}", f"/work/pkg/mod_{i % 97}.py", 1 + i % 500) for i in range(3000)]
    frames += [Frame(f"Net.block.{i} (Block)", kind="layer") for i in range(200)]
    n_stacks = 6000
    parent = np.full(n_stacks, -1, dtype=np.int32)
    frame = np.zeros(n_stacks, dtype=np.int32)
    depth = np.zeros(n_stacks, dtype=np.int32)
    roots = 8
    frame[:roots] = rng.integers(0, 3000, roots)
    for i in range(roots, n_stacks):  # each path extends an earlier one by one frame, to depth 60
        p = int(rng.integers(max(0, i - 400), i))
        while depth[p] >= 59:
            p = int(parent[p])
        parent[i], depth[i] = p, depth[p] + 1
        frame[i] = 3000 + int(rng.integers(0, 200)) if rng.random() < 0.1 else int(rng.integers(0, 3000))
    children: list[list[int]] = [[] for _ in range(n_stacks)]
    for i in range(roots, n_stacks):
        children[int(parent[i])].append(i)
    threads = 4
    per = samples // threads
    stack = np.empty(samples, dtype=np.int32)
    for t in range(threads):
        # Program flow: on about half of the samples the stack changes by returning from a few frames
        # (geometric, 2.5 on average) and calling down again into a random callee chain.
        change = rng.random(per) < 0.5
        ups = rng.geometric(0.4, per).tolist()
        picks = rng.random((per, 4)).tolist()
        node = int(rng.integers(roots, n_stacks))
        column = stack[t * per : (t + 1) * per]
        for i, moved in enumerate(change.tolist()):
            if moved:
                for _ in range(ups[i]):
                    if parent[node] >= 0:
                        node = int(parent[node])
                for r in picks[i]:
                    kids = children[node]
                    if not kids or r < 0.15:
                        break
                    node = kids[int(r * len(kids))]
            column[i] = node
    tick = 0.01
    time = np.tile(np.arange(1, per + 1) * tick, threads)
    thread = np.repeat(np.arange(threads, dtype=np.int32), per)
    wall = np.full(samples, tick)
    counter_times = np.arange(0, per * tick, 0.1)  # CPU % and RSS every 100 ms, as recorded
    return Profile(
        frames=frames,
        stack_parent=parent,
        stack_frame=frame,
        threads=[ThreadInfo(1, 1 + t, f"thread-{t}") for t in range(threads)],
        processes=[ProcessInfo(1, "main")],
        sample_time=time,
        sample_thread=thread,
        sample_stack=stack,
        sample_wall=wall,
        sample_cpu=wall * 0.8,
        counters={
            "cpu_percent": (counter_times, np.full(len(counter_times), 95.0)),
            "rss_bytes": (counter_times, np.full(len(counter_times), 2.0**30)),
        },
        meta={"start_time": 1.7e9, "rate": 100.0, "pid": 1, "cwd": "/work"},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default=",".join([*FORMATS, "all"]))
    args = parser.parse_args()
    formats = args.formats.split(",")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.flameprof")
        storage.save(synthetic_profile(args.samples), path)
        print(f"profile: {args.samples} samples, {os.path.getsize(path) / 1e6:.1f} MB .flameprof")
        results: dict[str, list[dict]] = {f: [] for f in ["load-only"] + formats}
        for _ in range(args.repeat):
            for fmt in ["load-only"] + formats:  # interleaved, so machine load hits every format alike
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, path, os.path.join(tmp, "out"), fmt],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                results[fmt].append(json.loads(out.stdout))
        ok = True
        print(
            f"{'format':<11} {'seconds':>8} {'peak MB':>8} {'file MB':>8}  target: < {TIME_LIMIT_S:g} s, "
            f"< {MEMORY_LIMIT_MB:g} MB"
        )
        base = statistics.median(r["peak_mb"] for r in results["load-only"])
        print(f"{'load-only':<11} {'':>8} {base:8.0f} {'':>8}  (reading the profile, for context)")
        for fmt in formats:
            seconds = statistics.median(r["seconds"] for r in results[fmt])
            peak = statistics.median(r["peak_mb"] for r in results[fmt])
            files = FORMATS.values() if fmt == "all" else [FORMATS[fmt]]
            size = sum(os.path.getsize(os.path.join(tmp, "out" + f.suffix)) for f in files) / 1e6
            if fmt == "all":  # the targets are per format; this is the whole run's cost, for comparison
                print(f"{fmt:<11} {seconds:8.2f} {peak:8.0f} {size:8.1f}  (every format and the summary)")
                continue
            good = seconds < TIME_LIMIT_S and peak < MEMORY_LIMIT_MB
            ok &= good
            print(f"{fmt:<11} {seconds:8.2f} {peak:8.0f} {size:8.1f}  {'ok' if good else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
