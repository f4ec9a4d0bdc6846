"""Memory over long runs: the profile stays under its budget (``--max-memory``) however long the run.

    python scripts/bench_memory.py simulate --hours 72    # 100 Hz x 16 threads, fed at full speed
    python scripts/bench_memory.py threads --seconds 600  # 64 busy threads at 1 kHz, next to py-spy

``simulate`` samples 16 threads with the native sampler as fast as it can, one tick per simulated
10 ms, with a step mark every 10 ticks and the memory limit checked every 100 ticks (once a
simulated second, as its tick hook does); then prints the RSS growth, the profile file's size and
how long ``flameprof report`` takes on it. Each thread moves through 40 functions of its own, a
couple of milliseconds in each, so the folded rows meet many stacks. The sample clock runs at the
speed of the simulation, so fold windows are in simulated-run seconds divided by the speed-up.

``threads`` runs 64 Python threads that count work units, plain, under ``flameprof run`` and
under ``py-spy record``, interleaved; it prints each run's work per second next to the plain
run's, and the growth of the target's RSS over the run (and py-spy's own, which is outside it).

``accuracy`` runs flameprof.examples.budget_loop (1 ms of light and 3 ms of heavy work a step,
beside 16 idle threads) under ``flameprof run --rate 2000 --max-memory 1M``, which folds samples
all the while, and prints how far the profile's light share is from the loop's own timers:

    python scripts/bench_memory.py accuracy --runs 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _rss(pid: int | None = None) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


def _varied_threads(count: int, kinds: int, stop: threading.Event) -> list[threading.Thread]:
    """``count`` threads, each waiting a couple of milliseconds at a time in each of ``kinds``
    functions of its own (distinct code objects), round and round until ``stop``."""
    threads = []
    for i in range(count):
        space: dict = {}
        exec("\n".join(f"def wait_{i}_{k}(stop):\n    stop.wait(0.002)" for k in range(kinds)), space)
        funcs = [space[f"wait_{i}_{k}"] for k in range(kinds)]

        def run(funcs=funcs) -> None:
            while not stop.is_set():
                for f in funcs:
                    f(stop)

        threads.append(threading.Thread(target=run, daemon=True))
    for t in threads:
        t.start()
    return threads


def simulate(hours: float, threads: int = 16, budget: int = 64 * 2**20) -> list[str]:
    from flameprof.collect.engine.c_sampler import CSampler
    from flameprof.collect.engine.memory_limit import MemoryLimit
    from flameprof.model import storage
    from flameprof.model.builder import ProfileBuilder
    from flameprof.model.records import Mark

    release = threading.Event()
    parked = _varied_threads(threads, 40, release)
    me = threading.get_ident()
    builder = ProfileBuilder()
    sampler = CSampler(builder)
    memory = MemoryLimit(builder, budget)
    main = builder.thread_id(os.getpid(), me, "MainThread")
    sampler.sample(exclude=me)
    ticks = int(hours * 3600 * 100)
    before = _rss()
    peak = 0
    start = time.perf_counter()
    for tick in range(1, ticks):
        sampler.sample(exclude=me)
        if tick % 10 == 0:
            builder.marks.append(Mark(time.perf_counter() - sampler.t0, main, "step", "user"))
        if tick % 100 == 0:
            memory.check()
        if tick % 360_000 == 0:  # a simulated hour
            peak = max(peak, _rss() - before)
    elapsed = time.perf_counter() - start
    growth = max(peak, _rss() - before)
    release.set()
    for t in parked:
        t.join()
    samples = builder.num_samples
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "profile.flameprof")
        t0 = time.perf_counter()
        profile = builder.build()
        profile.meta.update(builder.fold_meta(), start_time=time.time())
        storage.save(profile, path)
        written = time.perf_counter() - t0
        size = os.path.getsize(path)
        del profile
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flameprof", "report", path], check=True, capture_output=True)
        report = time.perf_counter() - t0
    f = builder.windowed
    return [
        f"simulated {hours:g} h at 100 Hz x {threads} threads: {samples:,} samples in {elapsed:.0f} s, "
        f"budget {budget / 2**20:.0f} MB",
        f"  RSS growth (peak over the run) {growth / 2**20:.1f} MB   target < budget: "
        f"{'ok' if growth < budget else 'MISSED'}",
        f"  folded {f.samples:,} samples into {len(f):,} rows ({memory.folds} folds, window {f.window:g} s "
        f"of sample clock); raw rows left {len(sampler):,}; marks raw {len(builder.marks):,}, "
        f"folded rows {len(builder.windowed_marks):,}",
        f"  profile file {size / 2**20:.1f} MB (built and written in {written:.1f} s)   target < 50 MB: "
        f"{'ok' if size < 50 * 2**20 else 'MISSED'}",
        f"  flameprof report {report:.1f} s   target < 5 s: {'ok' if report < 5 else 'MISSED'}",
    ]


BUSY = """
import sys, threading, time
count = [0] * {threads}
def work(i):
    n = 0
    end = time.perf_counter() + {seconds}
    while time.perf_counter() < end:
        sum(range(200))
        n += 1
    count[i] = n
ts = [threading.Thread(target=work, args=(i,)) for i in range({threads})]
start = time.perf_counter()
for t in ts:
    t.start()
for t in ts:
    t.join()
print("WORK", sum(count) / (time.perf_counter() - start), flush=True)
"""


def _watch(proc: subprocess.Popen, pids: list[int], seconds: float) -> dict[int, list[int]]:
    """RSS of each pid in ``pids`` (0: the process that runs the workload) about once a second."""
    import psutil

    seen: dict[int, list[int]] = {}
    while proc.poll() is None:
        for pid in pids:
            target = pid or proc.pid
            try:
                seen.setdefault(pid, []).append(psutil.Process(target).memory_info().rss)
            except psutil.Error:
                pass
        time.sleep(min(1.0, seconds / 20))
    return seen


def threads_bench(seconds: float, threads: int, rate: int, rounds: int) -> list[str]:
    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "busy.py")
        with open(script, "w") as fh:
            fh.write(BUSY.format(threads=threads, seconds=seconds))
        py = sys.executable
        runs = {
            "plain": [py, script],
            "flameprof": [py, "-m", "flameprof", "run", "-q", "--rate", str(rate), "-o", tmp + "/fp", script],
        }
        pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(py))
        if pyspy:
            record = [pyspy, "record", "--rate", str(rate), "-f", "raw", "-o", tmp + "/ps.txt", "--"]
            runs["py-spy"] = record + [py, script]
        work: dict[str, list[float]] = {name: [] for name in runs}
        growth: dict[str, list[float]] = {name: [] for name in runs}
        own: list[float] = []
        for _ in range(rounds):
            for name, argv in runs.items():
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if name == "py-spy":  # the workload is py-spy's child; py-spy's own memory apart
                    time.sleep(1.0)
                    import psutil

                    children = psutil.Process(proc.pid).children()
                    rss = _watch(proc, [c.pid for c in children] + [proc.pid], seconds)
                    target = rss.get(children[0].pid, [0]) if children else [0]
                    own.append(max(rss.get(proc.pid, [0])) / 2**20)
                else:
                    rss = _watch(proc, [0], seconds)
                    target = rss.get(0, [0])
                out, err = proc.communicate()
                line = [x for x in out.splitlines() if x.startswith("WORK ")]
                if proc.returncode != 0 or not line:
                    raise RuntimeError(f"{name} failed: {err[-2000:]}")
                work[name].append(float(line[-1].split()[1]))
                # growth from the first reading past a tenth of the run to the last before its end
                late = target[: max(1, int(len(target) * 0.97))]
                early = target[min(len(target) - 1, len(target) // 10)]
                growth[name].append((max(late) - early) / 2**20)
    import statistics

    plain = statistics.median(work["plain"])
    lines = [f"{threads} busy threads, {seconds:g} s, {rate} Hz, median of {rounds} interleaved rounds:"]
    for name in runs:
        lines.append(
            f"  {name:10s} work/s {statistics.median(work[name]) / plain:5.3f} of plain   target RSS growth "
            f"{statistics.median(growth[name]):6.1f} MB"
        )
    if own:
        lines.append(f"  py-spy's own RSS (outside the target) {statistics.median(own):.1f} MB")
    return lines


def accuracy(runs: int, seconds: float) -> list[str]:
    import json
    import statistics

    from flameprof.analyze.breakdown import analyze
    from flameprof.examples import budget_loop
    from flameprof.model import storage

    lines, errors = [], []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="flameprof-bench-") as tmp:
            argv = [sys.executable, "-m", "flameprof", "run", "-q", "--rate", "2000", "--max-memory", "1M"]
            argv += ["-o", "out", budget_loop.__file__, str(seconds), "truth.json"]
            env = {**os.environ, "PYTHONPATH": REPO}
            subprocess.run(argv, cwd=tmp, env=env, check=True)
            with open(os.path.join(tmp, "truth.json")) as fh:
                truth = json.load(fh)
            profile = storage.load(os.path.join(tmp, "out", "profile.flameprof"))
            sampled = budget_loop.sampled_seconds(profile, analyze(profile).thread)
        share = sampled["light"] / (sampled["light"] + sampled["heavy"])
        errors.append(100 * (share - truth["light"] / (truth["light"] + truth["heavy"])))
        folded = profile.meta.get("folded", {}).get("samples", 0)
        lines.append(f"  run {run + 1}: light share {errors[-1]:+.2f} points off, {folded} samples folded")
    mean, most = statistics.fmean(abs(e) for e in errors), max(abs(e) for e in errors)
    lines.append(f"past the budget: light share off by {mean:.2f} points on average, {most:.2f} at most")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("simulate")
    s.add_argument("--hours", type=float, default=72.0)
    s.add_argument("--threads", type=int, default=16)
    t = sub.add_parser("threads")
    t.add_argument("--seconds", type=float, default=3600.0)
    t.add_argument("--threads", type=int, default=64)
    t.add_argument("--rate", type=int, default=1000)
    t.add_argument("--rounds", type=int, default=1)
    a = sub.add_parser("accuracy")
    a.add_argument("--runs", type=int, default=5)
    a.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    if args.what == "simulate":
        lines = simulate(args.hours, args.threads)
    elif args.what == "accuracy":
        lines = accuracy(args.runs, args.seconds)
    else:
        lines = threads_bench(args.seconds, args.threads, args.rate, args.rounds)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
