"""Speed of the deep-learning analysis on a large profile: a million samples, 20 000 steps.

The profile is a real small training loop's stacks (recorded here at 1000 Hz for ~1 s), resampled
to SAMPLES samples with step marks; the script prints the median time of the analysis and its report.
Run: python scripts/bench_analysis.py [--samples 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.report import build_report
from flameprof.model.profile import Mark
from flameprof.model.records import SAMPLE_COLUMNS
from flameprof.profiler import Profiler


class Items(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        return torch.randn(64), torch.tensor(i % 4)


def recorded_profile():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    profiler = Profiler(rate=1000).start()
    start = time.perf_counter()
    for x, y in DataLoader(Items(), batch_size=32):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if time.perf_counter() - start > 1.0:
            break
    return profiler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    profile = recorded_profile()
    rng = np.random.default_rng(0)
    pick = rng.integers(0, profile.num_samples, args.samples)
    for name in SAMPLE_COLUMNS:  # every per-sample column; the times are drawn anew below
        setattr(profile, name, getattr(profile, name)[pick])
    span = float(args.samples) / 100.0
    profile.sample_time = np.sort(rng.random(args.samples) * span)
    thread = int(np.bincount(profile.sample_thread).argmax())
    profile.marks = [Mark(float(t), thread, "step") for t in np.linspace(0.0, span, args.steps + 1)]
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        report = build_report(profile, analyze(profile))
        times.append(time.perf_counter() - t0)
    print(
        f"analysis and report: {args.samples} samples, {len(profile.stack_parent)} stacks, "
        f"{report.steps.count} steps: "
        f"median {statistics.median(times):.3f} s over {args.repeat} runs"
    )


if __name__ == "__main__":
    main()
