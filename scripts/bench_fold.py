"""BatchNorm folding on a ResNet-style CNN in eval mode: the saving the report's ``fold_batchnorm``
advice estimates from the profile (the BatchNorm layers' time per step) next to the saving
``flameprof.check_folding`` measures on a folded copy, and their ratio (target: within 20 %).

    python scripts/bench_fold.py [--channels 16] [--size 64] [--steps 100] [--rounds 3] [--no-mkldnn]

Each round profiles an inference loop at 1 kHz, then times the original and the folded copy
alternately; the medians over the rounds are printed. oneDNN (``mkldnn``) may pick another
convolution kernel for a convolution with a bias: ``--no-mkldnn`` compares the two on ATen's own
convolution.

It runs twice, each in a process of its own: with glibc's allocator as it is, and with it keeping
the memory it is given back (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``), as jemalloc or
tcmalloc would. As it is, glibc often hands each 2 MB activation back to the system when it is
freed and the next one is page-faulted in anew, in whichever op first writes it: the forward then
takes 30-50 ms instead of 20 (in some processes it does not), and folding moves some of those
faults, counted in the convolutions, ReLUs and adds around the BatchNorms, by an amount no profile
of the original shows (the advice says so). With the memory kept, the saving is the BatchNorm ops'
time, which the advice estimates; the target applies there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flameprof  # noqa: E402
from flameprof.analyze.report import report_of  # noqa: E402
from flameprof.examples.resnet import ResNetish  # noqa: E402

# glibc keeps what is freed: no block is mapped anew below 32 MB, the heap is trimmed past 256 MB
KEPT = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-mkldnn", action="store_true")
    parser.add_argument("--child", choices=("as-is", "kept"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is None:
        for child, env in (("as-is", {}), ("kept", KEPT)):
            argv = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--child", child]
            inherited = {k: v for k, v in os.environ.items() if k not in KEPT}  # "as it is": glibc's own
            subprocess.run(argv, env={**inherited, **env}, check=True)
        return
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = not args.no_mkldnn
    model = ResNetish(args.channels).eval()
    x = torch.randn(8, 3, args.size, args.size)
    estimates, measured, speedups, originals = [], [], [], []
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
        originals.append(check.original)
    estimate, saving = statistics.median(estimates), statistics.median(measured)
    original = statistics.median(originals)
    allocator = "as it is" if args.child == "as-is" else "keeping its memory"
    print(
        f"ResNet-style CNN ({args.channels} channels, {args.size}x{args.size}, mkldnn "
        f"{'off' if args.no_mkldnn else 'on'}, glibc's allocator {allocator}): estimated saving "
        f"{estimate * 1e3:.2f} ms a step, measured {saving * 1e3:.2f} ms (forward {original * 1e3:.1f} ms, "
        f"speed-up {statistics.median(speedups):.3f}x, largest output difference {check.max_difference:.2e})"
    )
    ratio = estimate / saving if saving > 0 else float("nan")
    if args.child == "kept":
        print(f"estimate / measured: {ratio:.2f} (target 0.8-1.2)")
    else:
        print(f"allocator as it is, estimate over measured: {ratio:.2f}")


if __name__ == "__main__":
    main()
