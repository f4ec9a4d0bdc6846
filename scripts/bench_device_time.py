"""What stamping the device at every phase boundary costs a training loop: the same loop under
``flameprof.Profiler`` with device stamps off and on (``FLAMEPROF_DEVICE_TIME``: ``host`` on a CPU,
``auto``, i.e. CUDA events, on a GPU), alternated in one run, median step time of each and their
ratio (target: at most 1 % slower). Also the cost of one stamp, timed alone.

    python scripts/bench_device_time.py [--steps 200] [--rounds 5] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from flameprof.collect.engine import device_phases  # noqa: E402
from flameprof.profiler import Profiler  # noqa: E402


def loop(steps: int, device: str) -> float:
    """Median step seconds of a small MLP's training loop fed by a DataLoader."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 32, 512), torch.randn(steps * 32, 512))
    times = []
    for x, y in torch.utils.data.DataLoader(data, batch_size=32):
        t0 = time.perf_counter()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            loss.item()  # the loop's own sync, as a training loop logs its loss
        times.append(time.perf_counter() - t0)
    return statistics.median(times[len(times) // 5 :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    on = "auto" if args.device == "cuda" else "host"
    medians: dict[str, list[float]] = {"off": [], on: []}
    for _ in range(args.rounds):
        for setting in medians:
            os.environ[device_phases.ENV] = setting
            with Profiler(rate=100) as prof:
                medians[setting].append(loop(args.steps, args.device))
            stamped = sum(m.name == device_phases.MARK for m in prof.profile.marks)
            assert (stamped > 0) == (setting != "off"), (setting, stamped)
    off, stamped = statistics.median(medians["off"]), statistics.median(medians[on])
    clock = device_phases.HostClock() if args.device == "cpu" else device_phases.CudaClock(torch)
    phases = device_phases.DevicePhases(lambda: clock, time.perf_counter())
    t0 = time.perf_counter()
    for _ in range(10_000):
        phases.boundary("batch")
    each = (time.perf_counter() - t0) / 10_000
    print(f"device {args.device}: step {off * 1e3:.3f} ms without stamps, {stamped * 1e3:.3f} ms with ({on})")
    print(f"stamped / plain step time: {stamped / off:.3f} (target <= 1.01); one stamp {each * 1e6:.1f} us")


if __name__ == "__main__":
    main()
