"""What profiling a whole training job costs: a training loop fed by 4 DataLoader workers, run plain,
under ``flameprof run`` (main process and all workers profiled, 100 Hz) and under
``py-spy record --subprocesses`` (100 Hz).

The workload prints its own training throughput (samples per second over the batches after
warm-up, so worker start-up and interpreter start are not counted) and the CPU time its process
tree (main and workers, with flameprof's samplers inside them) used meanwhile, per sample. On a
shared 2-core machine the throughput is set by the scheduler as much as by the program; the CPU
per sample is a second measure (py-spy's own CPU is in its own process, outside the tree). Both
swing with the load of other jobs, so two steadier measures follow: in each round the plain run
and the profiled ones also run at the same time, sharing whatever the machine has, and their
throughput ratio is taken; and the profile's own account, the seconds flameprof spent sampling
and writing parts in every process over the seconds it profiled them. Configurations run once
per round, in an order that rotates from round to round, and only medians over rounds are
compared.

    python scripts/bench_dataloader.py                  # 5 rounds
    python scripts/bench_dataloader.py --rounds 7 --batches 120
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOAD = """
import sys, time
import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WARMUP = 5

def tree_cpu():
    total = 0.0
    for p in [psutil.Process()] + psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total

class Augmented(Dataset):
    \"\"\"Each item costs real CPU in the worker: a random image, a few augmentations, normalisation.\"\"\"

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, 48, 48, generator=g)
        for _ in range(3):
            image = torch.flip(image, dims=[2]) * 0.9 + 0.05
            image = torch.nn.functional.avg_pool2d(image[None], 3, stride=1, padding=1)[0]
        return (image - image.mean()) / (image.std() + 1e-6), i % 10

def main(batches):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(8), nn.Flatten(),
                          nn.Linear(8 * 64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Augmented(), batch_size=32, num_workers=4, multiprocessing_context="fork")
    start = None
    for step, (x, y) in enumerate(loader):
        if step == WARMUP:
            start, cpu = time.perf_counter(), tree_cpu()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step + 1 == WARMUP + batches:  # measured while the workers still run
            elapsed, cpu = time.perf_counter() - start, tree_cpu() - cpu
            break
    print(f"THROUGHPUT {batches * 32 / elapsed:.3f}")
    print(f"CPU_MS_PER_SAMPLE {1000 * cpu / (batches * 32):.4f}")

if __name__ == "__main__":
    main(int(sys.argv[1]))
"""


def measure_together(commands: list[list[str]], env: dict) -> list[tuple[float, float]]:
    """(samples per second, CPU milliseconds per sample) of runs of the workload started at once."""
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for c in commands
    ]
    out = []
    for command, proc in zip(commands, procs):
        stdout, stderr = proc.communicate(timeout=900)
        values = dict(
            line.split() for line in stdout.splitlines() if line.startswith(("THROUGHPUT ", "CPU_MS"))
        )
        if len(values) != 2:
            raise SystemExit(f"no measurement from {' '.join(command)}:\n{stdout}\n{stderr}")
        out.append((float(values["THROUGHPUT"]), float(values["CPU_MS_PER_SAMPLE"])))
    return out


def profiler_share(path: str) -> float:
    """Seconds flameprof spent in all processes of a merged profile over the seconds it profiled them."""
    sys.path.insert(0, REPO)
    from flameprof.model import storage

    meta = storage.load(path).meta
    return meta["profiler_seconds"] / meta["profiled_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=80, help="timed batches of 32 per run")
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        workload = os.path.join(tmp, "train.py")
        with open(workload, "w") as fh:
            fh.write(WORKLOAD)
        target = [workload, str(args.batches)]
        configs = {
            "plain": [sys.executable, *target],
            "flameprof": [
                sys.executable,
                "-m",
                "flameprof",
                "run",
                "-q",
                "--rate",
                f"{args.rate:g}",
                "-o",
                os.path.join(tmp, "flameprof-out"),
                *target,
            ],
        }
        configs["flameprof, main only"] = (
            configs["flameprof"][:4] + ["--no-subprocesses"] + configs["flameprof"][4:]
        )
        pyspy = shutil.which("py-spy")
        if pyspy:
            configs["py-spy"] = [
                pyspy,
                "record",
                "--subprocesses",
                "-r",
                f"{args.rate:g}",
                "-o",
                os.path.join(tmp, "pyspy.txt"),
                "-f",
                "raw",
                "--",
                sys.executable,
                *target,
            ]
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        own: list[float] = []
        paired: dict[str, list[float]] = {name: [] for name in configs if name != "plain"}
        names = list(configs)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                results[name].append(measure_together([configs[name]], env)[0])
                if name == "flameprof":
                    own.append(profiler_share(os.path.join(tmp, "flameprof-out", "profile.flameprof")))
            together = dict(zip(names, measure_together([configs[n] for n in names], env)))
            for name in paired:
                paired[name].append(together[name][0] / together["plain"][0])
            print(
                f"round {round_ + 1}: "
                + ", ".join(f"{n} {r[-1][0]:.1f}/s {r[-1][1]:.3f} ms" for n, r in results.items()),
                flush=True,
            )
        medians = {
            name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
            for name, rs in results.items()
        }
        plain_rate, plain_cpu = medians["plain"]
        print(
            f"\nDataLoader with 4 workers (fork), {args.batches} timed batches of 32, {args.rate:g} Hz, "
            f"median of {args.rounds} interleaved rounds"
        )
        print(
            f"{'configuration':<22} {'samples/s':>10} {'throughput cost':>16} {'CPU ms/sample':>14} "
            f"{'CPU cost':>9}"
        )
        for name, (rate, cpu) in medians.items():
            print(
                f"{name:<22} {rate:10.1f} {100 * (1 - rate / plain_rate):15.1f}% {cpu:14.3f} "
                f"{100 * (cpu / plain_cpu - 1):8.1f}%"
            )
        print(
            "run at the same time as the plain run, throughput relative to it (median): "
            + ", ".join(f"{name} {100 * (statistics.median(r) - 1):+.1f}%" for name, r in paired.items())
        )
        print(
            f"flameprof's own work (sampling and writing parts, main and 4 workers): "
            f"{100 * statistics.median(own):.2f}% of the profiled processes' time (median)"
        )
        cost = 100 * (1 - statistics.median(paired["flameprof"]))
        print(
            f"flameprof (whole tree) costs {cost:.1f}% of training throughput (side by side, median): "
            f"{'meets' if cost <= 3 else 'misses'} the 3% target"
        )


if __name__ == "__main__":
    main()
