"""Test helper: the small model the self-timing training and inference loops run."""

import torch


def mlp(classes: int = 4) -> torch.nn.Module:
    """Steps of several ms: a loop whose period is near the sampling interval aliases with it."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, classes),
    )
