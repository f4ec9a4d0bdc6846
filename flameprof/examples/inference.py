"""An inference loop: batches through a small MLP classifier in eval mode, CPU only, a few seconds long.

Run it under flameprof (``flameprof demo --example inference``). Each batch ends with a host
round-trip (``.tolist()``) as a real service would when returning predictions.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, features: int = 256, hidden: int = 512, classes: int = 100) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(features, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
        )
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.encoder(x)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="batches to serve (default: 100)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default: 0)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default: 1, so the run time is steady on a busy machine)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    requests = TensorDataset(torch.randn(args.steps * args.batch_size, 256))
    loader = DataLoader(requests, batch_size=args.batch_size, num_workers=args.workers)
    model = Classifier().eval()
    served = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for (batch,) in loader:
            predictions = model(batch).argmax(dim=1).tolist()
            served += len(predictions)
    print(f"served {served} requests in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
