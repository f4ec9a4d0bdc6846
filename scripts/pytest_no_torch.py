"""pytest plugin used by scripts/test_pythons.sh: deselects the tests that need PyTorch, in venvs without it.

A test needs torch when its own source or a fixture it uses imports it, uses ``torch.``/``torchrun``,
or reads a module-level string that imports it (a script the test runs in a subprocess).
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


def item_needs_torch(item) -> bool:
    if not getattr(item, "function", None):
        return False
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    functions = [item.function] + [d.func for defs in fixtures.values() for d in defs]
    return any(needs_torch(f) for f in functions)


def pytest_collection_modifyitems(config, items) -> None:
    dropped = [item for item in items if item_needs_torch(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
