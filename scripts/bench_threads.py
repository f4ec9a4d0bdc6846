"""What profiling costs a program with many busy Python threads: flameprof and py-spy side by side.

N threads share a fixed amount of pure-Python work; a run prints the seconds it took. Every
configuration runs once per round, in turn (the machine is noisy), and each profiled run is
compared with that round's unprofiled one: throughput = plain seconds / profiled seconds. The
achieved sampling rate is flameprof's own count of ticks over the run.

Targets (issue 12): at 100 Hz, flameprof's cost is at most py-spy's at 8, 32 and 64 threads, below
10 % at 32 threads, and the achieved rate within 10 % of the requested one.
Run: python scripts/bench_threads.py [--threads 1,8,32,64] [--rounds 5] [--rate 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from bench_overhead import FAILURES, timed_run

WORKLOAD = """
import threading, time
THREADS, WORK = {threads}, {work}

def spin(n):
    x = 0
    for i in range(n):
        x += i

time.sleep(0.3)  # the profiler starts (py-spy attaches) before the timed section
workers = [threading.Thread(target=spin, args=(WORK // THREADS,)) for _ in range(THREADS)]
start = time.perf_counter()
for w in workers:
    w.start()
for w in workers:
    w.join()
print("TIMED", time.perf_counter() - start)
"""


def configurations(out: str, rate: int) -> list[tuple[str, list[str], dict]]:
    py = sys.executable
    configs = [
        ("plain", [py], {}),
        (f"flameprof {rate} Hz", [py, "-m", "flameprof", "run", "-q", "-o", out, "--rate", str(rate)], {}),
    ]
    pyspy = shutil.which("py-spy", path=os.pathsep.join([os.path.dirname(py), os.environ.get("PATH", "")]))
    if pyspy:
        configs.append(
            (
                f"py-spy {rate} Hz",
                [
                    pyspy,
                    "record",
                    "--rate",
                    str(rate),
                    "--format",
                    "raw",
                    "-o",
                    os.path.join(out, "pyspy.txt"),
                    "--",
                    py,
                ],
                {},
            )
        )
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--work", type=int, default=40_000_000, help="loop iterations shared by the threads")
    args = parser.parse_args()
    report = [
        f"{args.work:,} iterations of pure Python shared by N threads, {args.rate} Hz, "
        f"median of {args.rounds} interleaved rounds (throughput: profiled / plain)"
    ]
    with tempfile.TemporaryDirectory(prefix="flameprof-threads-") as tmp:
        out = os.path.join(tmp, "out")
        for count in (int(n) for n in args.threads.split(",")):
            path = os.path.join(tmp, f"threads_{count}.py")
            with open(path, "w") as fh:
                fh.write(WORKLOAD.format(threads=count, work=args.work))
            configs = configurations(out, args.rate)
            times: dict[str, list[float]] = {name: [] for name, _, _ in configs}
            achieved: list[float] = []
            for r in range(args.rounds):
                for name, prefix, env in configs:
                    shutil.rmtree(out, ignore_errors=True)
                    os.makedirs(out)
                    seconds, meta = timed_run(prefix + [path], env)
                    times[name].append(seconds)
                    if "achieved_rate" in meta:
                        achieved.append(meta["achieved_rate"])
                print(f"  {count} threads: round {r + 1}/{args.rounds}", file=sys.stderr)
            line = f"{count:3d} threads: plain {statistics.median(times['plain']):.2f} s"
            for name, _, _ in configs[1:]:
                throughput = statistics.median(p / t for p, t in zip(times["plain"], times[name]))
                line += f" | {name} {throughput:.3f}"
            if achieved:
                line += f" | flameprof achieved {statistics.median(achieved):.0f} Hz"
            report.append(line)
    print("\n".join(report))
    for failure in FAILURES:
        print("retried:", failure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
