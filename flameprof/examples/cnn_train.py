"""A small CNN training loop on a synthetic in-memory dataset, CPU only, a few seconds long.

Run it under flameprof (``flameprof demo``, or ``flameprof run -m flameprof.examples.cnn_train``).
``--slow-data`` makes each sample cost extra Python work in ``__getitem__`` so the loop becomes
input-bound; ``--workers N`` moves that work into DataLoader worker processes.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import flameprof


class SyntheticImages(Dataset):
    """Random 3x32x32 images with labels, decoded and augmented per item like a real image dataset."""

    def __init__(self, size: int, slow: float = 0.0, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (size, 3, 32, 32), dtype=torch.uint8, generator=gen)
        self.labels = torch.randint(0, 10, (size,), generator=gen)
        self.slow = slow

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        image = self.images[i].float().div_(255.0)
        if i % 2:
            image = image.flip(-1)  # random horizontal flip, deterministic per index
        image = (image - 0.5) / 0.25
        if self.slow:
            decode_jpeg_stand_in(self.slow)
        return image, self.labels[i]


def decode_jpeg_stand_in(seconds: float) -> None:
    """Busy Python work standing in for a slow decoder or transform."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 8 * 8, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default: 0)")
    parser.add_argument(
        "--slow-data",
        nargs="?",
        type=float,
        const=0.002,
        default=0.0,
        metavar="SECONDS",
        help="extra seconds of Python work per sample (default when given: 0.002)",
    )
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
    dataset = SyntheticImages(args.steps * args.batch_size, slow=args.slow_data, seed=args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    start = time.perf_counter()
    for step, (images, labels) in enumerate(loader):
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            with flameprof.scope("log metrics"):
                print(f"step {step:3d}  loss {loss.item():.3f}")
    print(f"{args.steps} steps in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
