"""A ResNet-style CNN (conv-BatchNorm-ReLU blocks with residuals), small enough for a CPU: what the
BatchNorm-folding advice is measured on (``scripts/bench_fold.py``, ``tests/test_graph_advice.py``)."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


class ResNetish(nn.Module):
    def __init__(self, c: int = 16, blocks: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.layer1 = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer1(self.stem(x)).mean((2, 3)))
