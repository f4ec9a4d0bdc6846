"""Import a big torch.profiler (Kineto) trace: flameprof's time, MB/s and peak memory, next to Holistic
Trace Analysis' (``TraceAnalysis`` + temporal breakdown) on the same file when it is installed.

    python scripts/bench_kineto_import.py [--trace T.json(.gz)] [--size-mb 300] [--gzip] [--no-hta]
        [--no-report] [--repeat N]

The trace (a real one, e.g. one of HTA's test traces; a synthetic GPU step when none is given) is
repeated, each copy shifted in time and in correlation ids, until the file has ``--size-mb``. Every
tool runs in a fresh process, so its peak RSS is its own: the trace is written by another process
too, since a child's peak RSS counts the memory of the process that started it (Linux keeps the
high-water mark across fork and exec), and the source trace decoded takes hundreds of MB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAMEPROF = [sys.executable, "-m", "flameprof"]
HTA_SNIPPET = """
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_temporal_breakdown(visualize=False)
"""


def _source(path: str | None) -> dict:
    if path is None:
        sys.path.insert(0, REPO)
        from tests.kineto_traces import gpu_step

        return gpu_step()
    with open(path, "rb") as fh:
        data = fh.read()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _shifted(event: dict, dt: float, dc: int) -> dict:
    if not isinstance(event, dict) or event.get("ph") == "M":
        return event
    event = dict(event)
    if isinstance(event.get("ts"), (int, float)):
        event["ts"] = event["ts"] + dt
    args = event.get("args")
    if isinstance(args, dict):
        args = event["args"] = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += dc
    if isinstance(event.get("id"), int):
        event["id"] += dc
    return event


def write_trace(doc: dict, size_mb: float, path: str, compress: bool) -> tuple[int, int]:
    """``doc`` repeated into ``path`` until it holds ``size_mb`` of JSON; returns (bytes, events)."""
    events = doc["traceEvents"]
    times = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e, dict) and "ts" in e]
    span = max(times) - min(times) + 1000
    corr = 1 + max(
        [e["args"].get(k, 0) for e in events if isinstance(e.get("args"), dict) for k in ("correlation",)]
        + [0]
    )
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    head = json.dumps(header)[:-1] + (', "traceEvents": [\n' if header else '"traceEvents": [\n')
    opener = gzip.open if compress else open
    written, count, copy = 0, 0, 0
    with opener(path, "wt") as fh:
        fh.write(head)
        while written < size_mb * 1e6:
            parts = [
                json.dumps(_shifted(e, copy * span, copy * int(corr)))
                for e in events
                if copy == 0 or not (isinstance(e, dict) and e.get("ph") == "M")
            ]
            text = (",\n" if copy else "") + ",\n".join(parts)
            fh.write(text)
            written += len(text)
            count += len(parts)
            copy += 1
        fh.write("\n]}\n")
    return written, count


def measure(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB and the last line of output of ``cmd`` run in its own process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:4])} failed: {out.strip().splitlines()[-1:]}")
    return wall, usage.ru_maxrss / 1024, out.strip().splitlines()[-1] if out.strip() else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="a Kineto trace to repeat (.json or .json.gz)")
    parser.add_argument("--size-mb", type=float, default=300.0, help="uncompressed size to repeat it to")
    parser.add_argument("--gzip", action="store_true", help="write (and import) the trace gzipped")
    parser.add_argument("--no-hta", action="store_true", help="skip Holistic Trace Analysis")
    parser.add_argument("--no-report", action="store_true", help="skip flameprof report of the import")
    parser.add_argument("--keep", help="directory to keep the trace in (default: a temporary one)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="import this many times, the fastest counted (a small trace's "
        "time is mostly the interpreter's start, and noisy)",
    )
    parser.add_argument("--write-to", help=argparse.SUPPRESS)  # the writing child: write, print, exit
    args = parser.parse_args()
    if args.write_to:
        print(*write_trace(_source(args.trace), args.size_mb, args.write_to, args.gzip))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        traces = os.path.join(work, "traces")  # HTA reads every trace in a directory
        os.makedirs(traces, exist_ok=True)
        path = os.path.join(traces, "rank-0.pt.trace.json" + (".gz" if args.gzip else ""))
        writer = [
            sys.executable,
            os.path.abspath(__file__),
            "--size-mb",
            str(args.size_mb),
            "--write-to",
            path,
        ]
        writer += ["--trace", os.path.abspath(args.trace)] if args.trace else []
        written = subprocess.run(
            [*writer, *(["--gzip"] if args.gzip else [])], capture_output=True, text=True
        )
        if written.returncode:
            raise SystemExit(f"writing the trace failed: {written.stderr.strip().splitlines()[-1:]}")
        size, events = map(int, written.stdout.split())
        on_disk = os.path.getsize(path)
        print(f"trace: {size / 1e6:.0f} MB of JSON ({on_disk / 1e6:.0f} MB on disk), {events} events")
        out = os.path.join(work, "big.flameprof")
        wall, peak, _ = min(
            measure([*FLAMEPROF, "import", path, "-o", out]) for _ in range(max(args.repeat, 1))
        )
        print(
            f"flameprof import: {wall:.2f} s, {size / 1e6 / wall:.0f} MB/s, "
            f"peak {peak:.0f} MB ({peak * 2**20 / size:.2f}x the JSON)"
        )
        if not args.no_report:
            report_wall, report_peak, _ = measure([*FLAMEPROF, "report", out, "-o", os.devnull])
            print(f"flameprof report: {report_wall:.2f} s, peak {report_peak:.0f} MB")
        if args.no_hta:
            return 0
        try:
            import hta  # noqa: F401
        except ImportError:
            print("HTA: not installed (pip install HolisticTraceAnalysis)")
            return 0
        hta_wall, hta_peak, _ = measure([sys.executable, "-c", HTA_SNIPPET, traces])
        print(f"HTA TraceAnalysis + temporal breakdown: {hta_wall:.2f} s, peak {hta_peak:.0f} MB")
        print(f"flameprof import vs HTA: {hta_wall / wall:.1f}x faster, {hta_peak / peak:.1f}x less memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
