#!/usr/bin/env python3
"""Benchmark: memory and time of ``report``, ``render`` (every format) and ``diff`` on profiles with very deep
stacks, which must grow linearly with the profile's size (the target: a 40,000-frame stack under 1 GB and a
few seconds).

Builds folded files with a few stacks of 10k, 20k and 40k frames (a recursive function repeated at every
level, a chain of distinct functions, shared prefixes branching half way, a recursion under a PyTorch
``Module._call_impl`` frame, and a few shallow stacks), imports each into a ``.flameprof``, then runs every
command as a subprocess and reads its peak RSS from ``os.wait4``. Prints a table of wall seconds and peak
RSS per depth and the ratio of the deepest to the shallowest (linear is about 4x from 10k to 40k; quadratic
about 16x). Exits 1 when any run at the deepest depth fails or needs more than ``--limit-mb``.

    python scripts/bench_deep_stacks.py [--depths 10000,20000,40000] [--limit-mb 1024] [--only report,diff]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FORMATS = ("folded", "svg", "speedscope", "chrome", "pprof", "html")  # render; folded/svg are -o suffixes
REPORTS = ("text", "markdown", "json")
LAYER = "layer:"  # frames named so become nn.Module layer frames once imported


def deep_lines(depth: int, variant: int = 0) -> list[str]:
    """Folded lines with a few stacks ``depth`` frames deep; ``variant`` 1 changes counts and adds a stack
    (the NEW side of a diff)."""
    main = "main (train.py:5)"
    rec = "recurse (train.py:10)"
    distinct = [f"d{i} (deep.py:{i + 1})" for i in range(depth - 1)]
    half = depth // 2
    call_impl = "Module._call_impl (torch/nn/modules/module.py:1500)"
    layers = [call_impl if i % 2 else f"{LAYER}model.blocks.{i // 2}" for i in range(depth - 2)]
    lines = [
        (";".join([main] + [rec] * (depth - 1)), 7 + variant),
        (";".join([main] + distinct), 5),
        (";".join([main] + distinct[:half] + ["branch (deep.py:99999)"]), 3 - variant),
        (";".join([main] + [rec] * half + ["leaf (train.py:20)"]), 2),
        (";".join([main, "train_step (train.py:30)", call_impl] + [rec] * (depth - 3)), 4 + 2 * variant),
        (f"{main};train_step (train.py:30);{call_impl};forward (model.py:3)", 11),
        (";".join([main, "train_step (train.py:30)"] + layers), 3),
        (f"{main};load_batch (data.py:8)", 6),
        (main, 1),
    ]
    if variant:
        lines.append((";".join([main] + distinct[: depth // 4] + ["new_leaf (deep.py:77777)"]), 5))
    return [f"{stack} {count}\n" for stack, count in lines]


def write_profiles(directory: str, depth: int) -> tuple[str, str]:
    """``deep-DEPTH.flameprof`` and ``deep-DEPTH-b.flameprof`` in ``directory``: the folded files imported at
    100 Hz, then given sample times (one line after the other, for the Chrome trace) and layer frames."""
    sys.path.insert(0, ROOT)
    import numpy as np

    from flameprof.model import storage
    from flameprof.model.records import Frame

    out = []
    for variant, suffix in ((0, ""), (1, "-b")):
        folded = os.path.join(directory, f"deep-{depth}{suffix}.folded")
        with open(folded, "w") as fh:
            fh.writelines(deep_lines(depth, variant))
        profile = folded[: -len(".folded")] + ".flameprof"
        subprocess.run(
            [sys.executable, "-m", "flameprof", "import", folded, "-o", profile, "--rate", "100"],
            check=True,
            stderr=subprocess.DEVNULL,
            env=_env(),
        )
        p = storage.load(profile)
        p.sample_time = np.cumsum(p.sample_wall)
        p.frames = [
            Frame(f.name[len(LAYER) :], kind="layer") if f.name.startswith(LAYER) else f for f in p.frames
        ]
        storage.save(p, profile)
        out.append(profile)
    return out[0], out[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def measure(argv: list[str], cwd: str) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit code, last stderr line) of ``python -m flameprof *argv``."""
    err_path = os.path.join(cwd, "stderr.txt")
    with open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "flameprof", *argv],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(err_path, errors="replace") as fh:
        tail = fh.read().strip().splitlines()
    return wall, usage.ru_maxrss / 1024, proc.returncode, tail[-1] if tail else ""


def commands(profile: str, other: str) -> list[tuple[str, list[str]]]:
    runs = [(f"report {fmt}", ["report", profile, "--format", fmt]) for fmt in REPORTS]
    runs.append(("render folded", ["render", profile, "-o", "out.folded"]))
    runs.append(("render svg", ["render", profile, "-o", "out.svg"]))
    for fmt in FORMATS[2:]:  # exports are written beside an SVG (measured alone above)
        runs.append((f"render {fmt}", ["render", profile, "-o", "out.svg", "--format", fmt]))
    runs.append(("diff", ["diff", profile, other, "-o", "diff.svg"]))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--depths", default="10000,20000,40000", help="comma-separated stack depths")
    parser.add_argument("--limit-mb", type=float, default=1024, help="peak RSS allowed at the deepest depth")
    parser.add_argument(
        "--only", help="run only the commands whose name contains one of these comma-separated texts"
    )
    parser.add_argument("--keep", metavar="DIR", help="write the profiles and outputs to DIR and keep them")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    work = args.keep or tempfile.mkdtemp(prefix="flameprof-deep-")
    os.makedirs(work, exist_ok=True)
    results: dict[str, dict[int, tuple[float, float, int, str]]] = {}
    try:
        for depth in depths:
            profile, other = write_profiles(work, depth)
            for name, argv in commands(profile, other):
                if args.only and not any(part in name for part in args.only.split(",")):
                    continue
                results.setdefault(name, {})[depth] = result = measure(argv, work)
                print(
                    f"  {depth:>6} {name:<18} {result[0]:7.2f} s {result[1]:8.0f} MB  rc={result[2]}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    first, last = depths[0], depths[-1]
    head = " ".join(f"{f'{d // 1000}k s':>8} {f'{d // 1000}k MB':>8}" for d in depths)
    print(f"{'command':<18} {head}  {'time x':>7} {'RSS x':>6}")
    failed = []
    for name, by_depth in results.items():
        cells = " ".join(f"{by_depth[d][0]:8.2f} {by_depth[d][1]:8.0f}" for d in depths)
        t_ratio = by_depth[last][0] / by_depth[first][0]
        m_ratio = by_depth[last][1] / by_depth[first][1]
        print(f"{name:<18} {cells}  {t_ratio:6.1f}x {m_ratio:5.1f}x")
        for d in depths:
            if by_depth[d][2] != 0:
                failed.append(f"{name} at {d} exited {by_depth[d][2]}: {by_depth[d][3]}")
        if by_depth[last][1] > args.limit_mb:
            failed.append(
                f"{name} at {last} frames took {by_depth[last][1]:.0f} MB (limit {args.limit_mb:.0f})"
            )
    for line in failed:
        print(f"FAIL: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
