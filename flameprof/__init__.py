"""flameprof: a sampling profiler for deep-learning workloads."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The public API, imported on first use so ``import flameprof`` stays light inside a profiled program.
_EXPORTS = {
    "profile": "profiler",
    "Profiler": "profiler",
    "scope": "collect.engine.scopes",
    "scope_start": "collect.engine.scopes",
    "scope_end": "collect.engine.scopes",
    "step": "collect.engine.scopes",
    "check_folding": "fold_check",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'flameprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext flameprof``: the ``%%flameprof`` cell magic and ``%flameprof`` line magic (IPython
    is imported only then, like the rest of the API, on first use)."""
    importlib.import_module(".integrations.notebook", __name__).load(ipython)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
