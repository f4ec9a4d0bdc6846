"""BatchNorm folding on a ResNet-style CNN in eval mode: the saving the report's ``fold_batchnorm``
advice estimates from the profile (the BatchNorm layers' time per step) next to the saving
``flameprof.check_folding`` measures on a folded copy, and their ratio (target: within 20 %).

    python scripts/bench_fold.py [--channels 16] [--size 64] [--steps 100] [--rounds 3] [--no-mkldnn]

Each round profiles an inference loop at 1 kHz, then times the original and the folded copy
alternately; the medians over the rounds are printed. oneDNN (``mkldnn``) may pick another
convolution kernel for a convolution with a bias, which moves the measured saving by more than the
BatchNorm's own time: ``--no-mkldnn`` compares the two on ATen's own convolution.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flameprof  # noqa: E402
from flameprof.analyze.report import report_of  # noqa: E402
from flameprof.examples.resnet import ResNetish  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-mkldnn", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = not args.no_mkldnn
    model = ResNetish(args.channels).eval()
    x = torch.randn(8, 3, args.size, args.size)
    estimates, measured, speedups = [], [], []
    for _ in range(args.rounds):
        with torch.inference_mode():
            with flameprof.Profiler(rate=1000) as prof:
                for _ in range(args.steps):
                    model(x)
        fold = [a for a in report_of(prof.profile).graph_advice if a.kind == "fold_batchnorm"]
        estimates.append(fold[0].saving if fold else 0.0)
        check = flameprof.check_folding(model, x)
        measured.append(check.saving)
        speedups.append(check.speedup)
    estimate, saving = statistics.median(estimates), statistics.median(measured)
    print(
        f"ResNet-style CNN ({args.channels} channels, {args.size}x{args.size}, mkldnn "
        f"{'off' if args.no_mkldnn else 'on'}): estimated saving {estimate * 1e3:.2f} ms a step, measured "
        f"{saving * 1e3:.2f} ms (speed-up {statistics.median(speedups):.3f}x, largest output difference "
        f"{check.max_difference:.2e})"
    )
    print(f"estimate / measured: {estimate / saving if saving > 0 else float('nan'):.2f} (target 0.8-1.2)")


if __name__ == "__main__":
    main()
