"""pytest plugin used by scripts/test_pythons.sh: deselects the tests that need PyTorch, in venvs without it.

A test needs torch when its own source imports it, uses ``torch.``/``torchrun``, or reads a
module-level string that imports it (a script the test runs in a subprocess).
"""

from __future__ import annotations

import inspect
import re

USES_TORCH = re.compile(r"\b(import torch|from torch|torch\.|torchrun)")


def needs_torch(function) -> bool:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        source = ""
    if USES_TORCH.search(source):
        return True
    module = inspect.getmodule(function)
    for name in function.__code__.co_names:
        value = getattr(module, name, None)
        if isinstance(value, str) and USES_TORCH.search(value):
            return True
    return False


def pytest_collection_modifyitems(config, items) -> None:
    dropped = [item for item in items if getattr(item, "function", None) and needs_torch(item.function)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
