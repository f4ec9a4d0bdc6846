"""Every benchmark in scripts/bench_*.py in a quick mode, each figure next to its target and to the value
last recorded in docs/benchmarks.json, so that a loss shows before anyone has to notice it.

    python scripts/bench.py [--flamegraph DIR] [--only collapse,render] [--record]

A figure more than 20 % worse than its recorded value is flagged LOSS; one that must hold in a quick
run too (identical outputs) is flagged MISS when it does not. Targets are the full runs'. Timings on
a shared machine are noisy (a quick mode more so): this is a warning light, not a CI gate; confirm a
flagged figure with the benchmark's own full run. ``--record`` writes the figures of this run into
docs/benchmarks.json. FlameGraph (``--flamegraph``, a checkout of
brendangregg/FlameGraph, or FLAMEGRAPH_DIR) gives the Perl scripts the ratios are measured against;
without it those benchmarks are skipped, as are those that need perf or ptrace where they are missing.
The whole run takes 6-8 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(REPO, "docs", "benchmarks.json")
LOSS = 0.2  # a figure this much worse than its record is flagged
TIMEOUT_S = 600  # a quick run longer than this has hung
# the tools installed beside this interpreter (py-spy in a virtualenv) come first
PATH = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])


@dataclass(frozen=True)
class Figure:
    """One number a benchmark prints: found by ``pattern`` (its first group), better when higher or lower.
    ``target`` is the full run's (shown for reference); only a ``quick_target`` is checked here, since
    the quick run's smaller input gives a smaller ratio (the process start weighs more).

    ``percent``: the benchmark prints a change in percent (``+1.5 %``), shown and compared as the
    ratio ``1 + p / 100``, so that a 20 % loss means the same as for any other ratio. ``ideal``: the
    figure is best at this value (an estimate over what it estimates) and worse the farther from it;
    ``target`` is then the distance allowed. ``slack``: a change from the record no larger than
    this, in the figure's own unit, is never flagged (the sampling noise of a short run, for errors
    in points that sit near zero, where a fifth of the value is no signal)."""

    name: str
    pattern: str
    target: float | None
    higher_is_better: bool = True
    quick_target: float | None = None
    percent: bool = False
    ideal: float | None = None
    slack: float = 0.0


@dataclass(frozen=True)
class Quick:
    """How to run one benchmark quickly: its arguments ({flamegraph} is FlameGraph's directory) and the
    figures it prints; ``needs`` names what it cannot run without (see ``missing``), else skipped."""

    args: tuple[str, ...]
    figures: tuple[Figure, ...]
    needs: tuple[str, ...] = ()


def _slowdown(name: str, pattern: str, target: float | None = None) -> Figure:
    """A time printed as a change in percent against a plain run: compared as the ratio, lower better."""
    return Figure(name, pattern, target, higher_is_better=False, percent=True)


def _lower(name: str, pattern: str, target: float | None = None, slack: float = 0.0) -> Figure:
    return Figure(name, pattern, target, higher_is_better=False, slack=slack)


def _blocks(workload: str, label: str) -> tuple[Figure, ...]:
    """bench_overhead's in-process blocks of one workload: a second unprofiled block (the noise) and
    the native sampler at 100 Hz and 1 kHz, each over that round's unprofiled block."""
    line = r"(?s){}:.*?{} +([-+]\d+\.\d+) %"
    return (
        _slowdown(f"{label}: unprofiled again (noise)", line.format(workload, "again")),
        _slowdown(f"{label}: native 100 Hz / unprofiled", line.format(workload, "native 100 Hz"), 1.01),
        _slowdown(f"{label}: native 1 kHz / unprofiled", line.format(workload, "native 1000 Hz"), 1.03),
    )


_DEEP = r"(?m)^{} .* +\d+\.\dx +(\d+\.\d)x$"  # bench_deep_stacks: a command's 40k RSS over its 10k RSS
_DEEP_40K = r"(?m)^diff +[\d.]+ +\d+ +{} "  # diff's 40k seconds and MB, after its 10k ones

QUICK: dict[str, Quick] = {
    "accuracy": Quick(
        ("--seconds", "3", "--rate", "1000"),
        (
            _lower("largest phase error, points (1 kHz, 3 s)", r"phases (\d+\.\d+) points", 2.0, slack=1.0),
            _lower("largest layer error, points", r"layers (\d+\.\d+) points", 3.0, slack=1.0),
        ),
    ),
    "analysis": Quick(
        ("--repeat", "1"),
        (_lower("analysis and report of 1M samples, s", r"median (\d+\.\d+) s"),),
    ),
    "attach": Quick(
        ("--rounds", "2", "--no-gdb"),
        (
            *(
                _lower(f"{config}: longest stall of the target, ms", rf"{config} +(\d+) ms", slack=5.0)
                for config in ("inject", "py-spy", "no attach")  # no attach: the machine's own noise
            ),
        ),
        needs=("ptrace",),
    ),
    "blocking": Quick(
        ("--seconds", "2", "--rates", "1000", "--bursts", "1,2", "--blocks", "sleep,queue"),
        (
            _lower(
                "largest work-share difference, points (1 kHz, 8 cases)",
                r"largest difference (\d+\.\d+) points",
                2.0,
                slack=1.0,
            ),
        ),
    ),
    "collapse": Quick(
        ("--perl-script", "{flamegraph}/stackcollapse-perf.pl", "--size-mb", "100", "--runs", "1"),
        (
            Figure("CPU ratio to stackcollapse-perf.pl", r"CPU (\d+\.\d+)x", 20.0),
            Figure("outputs identical (1 = yes)", r"outputs identical: (True|False)", 1.0, quick_target=1.0),
        ),
        needs=("flamegraph",),
    ),
    "dataloader": Quick(
        ("--rounds", "1", "--batches", "20"),
        (
            Figure(
                "flameprof (whole tree) throughput / plain, side by side",
                r"relative to it \(median\): flameprof ([-+]\d+\.\d+)%",
                0.97,
                percent=True,
            ),
            Figure("py-spy throughput / plain, side by side", r"py-spy ([-+]\d+\.\d+)%", None, percent=True),
            _lower("flameprof's own work, % of the profiled time", r"own work .*?: (\d+\.\d+)% of"),
        ),
    ),
    "deep_stacks": Quick(
        ("--depths", "10000,40000", "--only", "report text,render svg,diff"),
        (  # peak RSS is steady from run to run, one run's time is not (its ratio swung 2.4x to 9.7x)
            _lower("report text: peak RSS 40k frames / 10k (linear: 4)", _DEEP.format("report text"), 4.0),
            _lower("render svg: peak RSS 40k / 10k", _DEEP.format("render svg"), 4.0),
            _lower("diff: peak RSS 40k / 10k", _DEEP.format("diff"), 4.0),
            _lower("diff at 40k frames: peak RSS, MB", _DEEP_40K.format(r"[\d.]+ +(\d+)"), 1024.0),
            _lower("diff at 40k frames: s", _DEEP_40K.format(r"([\d.]+) +\d+")),
        ),
    ),
    "device_time": Quick(
        ("--steps", "30", "--rounds", "2"),
        (
            _lower("stamped / plain step time", r"stamped / plain step time: (\d+\.\d+)", 1.01),
            _lower("one stamp, us", r"one stamp (\d+\.\d+) us"),
        ),
    ),
    "exports": Quick(
        ("--repeat", "1", "--formats", "chrome,firefox,all"),
        (
            _lower("chrome export of 1M samples, s", r"(?m)^chrome +(\d+\.\d+)", 10.0),
            _lower("firefox export, s", r"(?m)^firefox +(\d+\.\d+)", 10.0),
            _lower("firefox export: peak RSS, MB", r"(?m)^firefox +[\d.]+ +(\d+)", 1024.0),
            _lower("every format and the summary, s", r"(?m)^all +(\d+\.\d+)"),
        ),
    ),
    "fold": Quick(
        ("--steps", "30", "--rounds", "3"),
        (
            Figure(
                "BatchNorm folding, memory kept: estimated / measured",
                r"estimate / measured: (\d+\.\d+)",
                0.2,
                ideal=1.0,
                slack=0.3,
            ),
        ),
    ),
    "kineto_import": Quick(
        ("--size-mb", "30", "--no-hta", "--repeat", "3"),
        (
            Figure("MB/s (30 MB synthetic trace)", r"import: \d+\.\d+ s, (\d+) MB/s", 100.0),
            Figure("peak RSS / JSON size", r"\((\d+\.\d+)x the JSON\)", 0.25, higher_is_better=False),
        ),
    ),
    "memory": Quick(
        ("simulate", "--hours", "4"),
        (
            _lower(
                "4 simulated hours x 16 threads: RSS growth, MB",
                r"RSS growth \(peak over the run\) (\d+\.\d+) MB",
                64.0,
            ),
            _lower("profile file, MB", r"profile file (\d+\.\d+) MB", 50.0),
            _lower("flameprof report of it, s", r"flameprof report (\d+\.\d+) s", 5.0),
        ),
    ),
    "merge": Quick(
        (),
        (
            _lower("merge of 256 ranks, s", r"(\d+\.\d+) s in the command", 30.0),
            _lower("merge of 256 ranks: peak memory, GB", r"peak memory (\d+\.\d+) GB", 2.0),
        ),
    ),
    "native": Quick(
        ("--runs", "3", "--rounds", "30"),
        (
            _lower("--native / flameprof run: the workload's time", r"workload (\d+\.\d+)x"),
            _lower("--native / flameprof run: the whole command", r"whole command (\d+\.\d+)x"),
        ),
        needs=("perf",),
    ),
    "overhead": Quick(
        ("--only", "micro,memory,size,blocks", "--rounds", "2"),
        (
            _lower("native sample(), 50-frame stack, us", r"native (\d+\.\d+) us", 10.0),
            Figure("Python sampler's cost / native's", r"native is (\d+\.\d+)x cheaper", 5.0),
            _lower("1 h at 100 Hz x 8 threads: RSS growth, MB", r"RSS growth (\d+\.\d+) MB", 50.0),
            _lower("1M synthetic samples: file, MB", r"synthetic \(.*?\) +(\d+\.\d+) MB", 20.0),
            *_blocks("pure-python", "pure Python"),
            *_blocks("torch-train", "PyTorch loop"),
        ),
    ),
    "render": Quick(
        ("--flamegraph-pl", "{flamegraph}/flamegraph.pl", "--lines", "100000", "--repeat", "1"),
        (
            Figure("wall-time ratio to flamegraph.pl (100k lines)", r"(\d+\.\d+)x wall", 30.0),
            Figure("CPU ratio to flamegraph.pl (100k lines)", r"(\d+\.\d+)x CPU", 30.0),
            Figure("SVG size / flamegraph.pl's", r"flamegraph.pl: (\d+\.\d+)", 0.5, higher_is_better=False),
        ),
        needs=("flamegraph",),
    ),
    "scopes": Quick(
        ("--repeats", "3"),
        (
            _lower("scope, not profiling / empty with", r"scope, not profiling +\d+ ns +(\d+\.\d+)x"),
            _lower("scope, profiling / empty with", r"scope, profiling +\d+ ns +(\d+\.\d+)x"),
            _lower("layer hook, ns", r"layer hook, .*?: (\d+) ns"),
            _lower("CNN step profiled / not", r"(?m)^  profiled +[\d.]+ ms +(\d+\.\d+)x"),
            _lower("CNN step profiled, backward layers / not", r"backward layers +[\d.]+ ms +(\d+\.\d+)x"),
        ),
    ),
    "threads": Quick(
        ("--threads", "32", "--rounds", "3", "--work", "20000000"),
        (
            Figure("32 threads: flameprof 100 Hz throughput / plain", r"flameprof 100 Hz (\d+\.\d+)", 0.9),
            Figure("32 threads: py-spy 100 Hz throughput / plain", r"py-spy 100 Hz (\d+\.\d+)", None),
            Figure("32 threads: flameprof's achieved rate, Hz", r"achieved (\d+) Hz", 90.0),
        ),
    ),
    "trace_window": Quick(
        ("--only", "cost", "--rounds", "1", "--steps", "600"),
        (
            _lower("600 steps with a 3-step window / without", r"ratio (\d+\.\d+) \("),
            _lower("traced steps / the steps before", r"just before the window \((\d+\.\d+)x\)"),
        ),
    ),
}


def missing(need: str, flamegraph: str | None) -> str | None:
    """Why a benchmark that needs ``need`` cannot run here, or None when it can."""
    if need == "flamegraph":
        if flamegraph and os.path.isdir(flamegraph):
            return None
        return "needs --flamegraph DIR (a checkout of brendangregg/FlameGraph)"
    if need == "ptrace":
        return _no_ptrace()
    return None if shutil.which(need, path=PATH) else f"needs {need} on PATH"


def _no_ptrace() -> str | None:
    """Why this process may not ptrace a process that is not its child (attach), or None."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as fh:
            scope = int(fh.read())
    except OSError:
        return None  # no Yama: same user is enough
    if scope == 0:
        return None
    if scope < 3:
        with open("/proc/self/status") as fh:
            caps = next((line.split()[1] for line in fh if line.startswith("CapEff:")), "0")
        if int(caps, 16) >> 19 & 1:  # CAP_SYS_PTRACE
            return None
    return f"needs ptrace (kernel.yama.ptrace_scope is {scope}: root, CAP_SYS_PTRACE or a scope of 0)"


def run(name: str, quick: Quick, flamegraph: str | None) -> tuple[dict[str, float], str]:
    """The figures one benchmark printed (by name) and a note: its time, or why it gave none."""
    reasons = [r for r in (missing(need, flamegraph) for need in quick.needs) if r]
    if reasons:
        return {}, "skipped: " + "; ".join(reasons)
    args = [a.format(flamegraph=flamegraph) for a in quick.args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, "scripts", f"bench_{name}.py"), *args],
            capture_output=True,
            text=True,
            env=dict(os.environ, PATH=PATH),
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {}, f"failed: still running after {TIMEOUT_S} s"
    note = f"{time.perf_counter() - start:.0f} s"
    values = {}
    for figure in quick.figures:
        m = re.search(figure.pattern, proc.stdout)
        if m:
            text = m.group(1)
            value = {"True": 1.0, "False": 0.0}[text] if text in ("True", "False") else float(text)
            values[figure.name] = 1 + value / 100 if figure.percent else value
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    last = lines[-1] if lines else ""
    if proc.returncode not in (0, 1) or (proc.returncode and not values):
        return {}, f"failed ({proc.returncode}): {last}"
    if proc.returncode and len(values) < len(quick.figures):  # a part failed; exit 1 alone is a missed target
        note += f", exit {proc.returncode}: {last}"
    return values, note


def met(figure: Figure, value: float, target: float) -> bool:
    if figure.ideal is not None:
        return abs(value - figure.ideal) <= target
    return value >= target if figure.higher_is_better else value <= target


def loss(figure: Figure, value: float, recorded: float) -> float:
    """How much worse than its record a figure is: 1 less now over the record when higher is better,
    the record over now when lower is; 0 when not worse, or worse by no more than its slack."""
    higher = figure.higher_is_better
    if figure.ideal is not None:
        value, recorded, higher = abs(value - figure.ideal), abs(recorded - figure.ideal), False
    worse_by = recorded - value if higher else value - recorded
    if worse_by <= figure.slack:
        return 0.0
    return worse_by / max(value, recorded)  # the larger of the two: worse_by > 0 makes it positive


def verdict(figure: Figure, value: float, recorded: float | None) -> str:
    """MISS when the quick target is missed, LOSS when more than 20 % worse than the record."""
    flags = []
    if figure.quick_target is not None:
        flags.append("ok" if met(figure, value, figure.quick_target) else "MISS")
    if recorded is not None and loss(figure, value, recorded) > LOSS:
        flags.append(f"LOSS {100 * loss(figure, value, recorded):.0f} %")
    return ", ".join(flags)


def shown_target(figure: Figure) -> str:
    if figure.target is None:
        return ""
    if figure.ideal is not None:
        return f"{figure.ideal - figure.target:g}-{figure.ideal + figure.target:g}"
    return f"{'>=' if figure.higher_is_better else '<='}{figure.target:g}"


def save_record(new: dict[str, dict]) -> None:
    """Merge this run's figures into docs/benchmarks.json as the file is now (others may have
    recorded theirs while this run went on), written whole or not at all."""
    with open(RECORD) as fh:
        record = json.load(fh)
    record.update(new)
    tmp = f"{RECORD}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, RECORD)


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
    new: dict[str, dict] = {}
    flagged = 0
    began = time.perf_counter()
    print(f"{'benchmark / figure':58s} {'now':>9s} {'target':>8s} {'recorded':>9s}  verdict", flush=True)
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
            shown = "-" if recorded is None else f"{recorded:.4g}"
            if value is None:
                print(f"  {figure.name:56s} {'-':>9s} {shown_target(figure):>8s} {shown:>9s}")
                continue
            flag = verdict(figure, value, recorded)
            flagged += "MISS" in flag or "LOSS" in flag
            print(f"  {figure.name:56s} {value:9.4g} {shown_target(figure):>8s} {shown:>9s}  {flag}")
            new[key] = {
                "value": float(f"{value:.4g}"),
                "target": figure.target,
                "date": time.strftime("%Y-%m-%d"),
            }
        sys.stdout.flush()
    if args.record and new:
        save_record(new)
        print(f"recorded in {os.path.relpath(RECORD, REPO)}: {len(new)} figure(s)")
    print(f"{flagged} figure(s) flagged" if flagged else "nothing flagged", end="")
    print(f"; {len(names)} benchmark(s) in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
