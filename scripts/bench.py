"""Every benchmark in scripts/bench_*.py in a quick mode, each figure next to its target and to the value
last recorded in docs/benchmarks.json, so that a loss shows before anyone has to notice it.

    python scripts/bench.py [--flamegraph DIR] [--only collapse,render] [--record]

A figure more than 20 % worse than its recorded value is flagged LOSS; one that must hold in a quick
run too (identical outputs) is flagged MISS when it does not. Targets are the full runs'. Timings on
a shared machine are noisy (a quick mode more so): this is a warning light, not a CI gate; confirm a
flagged figure with the benchmark's own full run. ``--record`` writes the figures of this run into
docs/benchmarks.json. FlameGraph (``--flamegraph``, a checkout of
brendangregg/FlameGraph, or FLAMEGRAPH_DIR) gives the Perl scripts the ratios are measured against;
without it those figures are skipped.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(REPO, "docs", "benchmarks.json")
LOSS = 0.2  # a figure this much worse than its record is flagged


@dataclass(frozen=True)
class Figure:
    """One number a benchmark prints: found by ``pattern`` (its first group), better when higher or lower.
    ``target`` is the full run's (shown for reference); only a ``quick_target`` is checked here, since
    the quick run's smaller input gives a smaller ratio (the process start weighs more)."""

    name: str
    pattern: str
    target: float | None
    higher_is_better: bool = True
    quick_target: float | None = None


@dataclass(frozen=True)
class Quick:
    """How to run one benchmark quickly: its arguments ({flamegraph} is FlameGraph's directory) and the
    figures it prints; ``needs_flamegraph`` skips it without FlameGraph."""

    args: tuple[str, ...]
    figures: tuple[Figure, ...]
    needs_flamegraph: bool = False


QUICK: dict[str, Quick] = {
    "collapse": Quick(
        ("--perl-script", "{flamegraph}/stackcollapse-perf.pl", "--size-mb", "100", "--runs", "1"),
        (
            Figure("CPU ratio to stackcollapse-perf.pl", r"CPU (\d+\.\d+)x", 20.0),
            Figure("outputs identical (1 = yes)", r"outputs identical: (True|False)", 1.0, quick_target=1.0),
        ),
        needs_flamegraph=True,
    ),
    "render": Quick(
        ("--flamegraph-pl", "{flamegraph}/flamegraph.pl", "--lines", "100000", "--repeat", "1"),
        (
            Figure("CPU ratio to flamegraph.pl (100k lines)", r"(\d+\.\d+)x CPU", 30.0),
            Figure("SVG size / flamegraph.pl's", r"flamegraph.pl: (\d+\.\d+)", 0.5, higher_is_better=False),
        ),
        needs_flamegraph=True,
    ),
    "kineto_import": Quick(
        ("--size-mb", "30", "--no-hta"),
        (
            Figure("MB/s (30 MB synthetic trace)", r"import: \d+\.\d+ s, (\d+) MB/s", 100.0),
            Figure("peak RSS / JSON size", r"\((\d+\.\d+)x the JSON\)", 0.25, higher_is_better=False),
        ),
    ),
}


def run(name: str, quick: Quick, flamegraph: str | None) -> tuple[dict[str, float], str]:
    """The figures one benchmark printed (by name) and a note: its time, or why it gave none."""
    if quick.needs_flamegraph and not flamegraph:
        return {}, "skipped: needs --flamegraph"
    args = [a.format(flamegraph=flamegraph) for a in quick.args]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", f"bench_{name}.py"), *args],
        capture_output=True,
        text=True,
    )
    note = f"{time.perf_counter() - start:.0f} s"
    if proc.returncode not in (0, 1):
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {}, f"failed ({proc.returncode}): {lines[-1] if lines else ''}"
    values = {}
    for figure in quick.figures:
        m = re.search(figure.pattern, proc.stdout)
        if m:
            text = m.group(1)
            values[figure.name] = {"True": 1.0, "False": 0.0}.get(text) or float(text)
    return values, note


def verdict(figure: Figure, value: float, recorded: float | None) -> str:
    """MISS when the target is missed, LOSS when more than 20 % worse than the record."""
    flags = []
    if figure.quick_target is not None:
        target = figure.quick_target
        flags.append("ok" if (value >= target if figure.higher_is_better else value <= target) else "MISS")
    if recorded:
        change = value / recorded if figure.higher_is_better else recorded / value if value else 0.0
        if change < 1 - LOSS:
            flags.append(f"LOSS {100 * (1 - change):.0f} %")
    return ", ".join(flags)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flamegraph", default=os.environ.get("FLAMEGRAPH_DIR"), help="FlameGraph checkout")
    parser.add_argument("--only", help="comma-separated benchmark names (bench_NAME.py)")
    parser.add_argument(
        "--record", action="store_true", help="write this run's figures to docs/benchmarks.json"
    )
    args = parser.parse_args()
    names = sorted(
        os.path.basename(p)[len("bench_") : -len(".py")]
        for p in glob.glob(os.path.join(REPO, "scripts", "bench_*.py"))
    )
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    with open(RECORD) as fh:
        record = json.load(fh)
    flagged = 0
    print(f"{'benchmark / figure':58s} {'now':>9s} {'target':>8s} {'recorded':>9s}  verdict")
    for name in names:
        quick = QUICK.get(name)
        if quick is None:
            print(f"{name:58s} no quick mode yet: run scripts/bench_{name}.py itself")
            continue
        values, note = run(name, quick, args.flamegraph)
        print(f"{name:58s} ({note})")
        for figure in quick.figures:
            key = f"{name}: {figure.name}"
            value = values.get(figure.name)
            recorded = record.get(key, {}).get("value")
            target = "" if figure.target is None else f"{figure.target:g}"
            if value is None:
                print(f"  {figure.name:56s} {'-':>9s} {target:>8s} {recorded or '-':>9}")
                continue
            flag = verdict(figure, value, recorded)
            flagged += "MISS" in flag or "LOSS" in flag
            print(f"  {figure.name:56s} {value:9.2f} {target:>8s} {recorded or '-':>9}  {flag}")
            if args.record:
                record[key] = {
                    "value": round(value, 2),
                    "target": figure.target,
                    "date": time.strftime("%Y-%m-%d"),
                }
    if args.record:
        with open(RECORD, "w") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print(f"recorded in {os.path.relpath(RECORD, REPO)}")
    print(f"{flagged} figure(s) flagged" if flagged else "nothing flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
