"""Run a callback right after the profiled program imports a given module or package.

The callback runs in the importing thread once the package's ``__init__`` has finished, a point
where none of the package's code is running, so it can register hooks in the package's tables
without racing the program (the sampler thread could be iterating them mid-call).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class _ThenCall:
    """A loader that runs the real loader, then the callback; everything else is the real loader's."""

    def __init__(self, loader: Any, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        loader = self._loader
        module.__loader__ = loader  # the package sees its real loader, during and after its import
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = loader
        loader.exec_module(module)
        try:
            self._callback()
        except Exception:  # instrumentation must never fail the program's import
            pass


class ImportWatch:
    """A ``sys.meta_path`` finder that wraps the loader of package ``name``; ``remove()`` takes it out."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback
        self._busy = False
        sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._busy:
            return None
        self._busy = True  # other finders may call importlib.util.find_spec themselves
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None) if finder is not self else None
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None:
                    break
            else:
                return None
        except Exception:  # let the normal import machinery find (or fail to find) it
            return None
        finally:
            self._busy = False
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec

    def remove(self) -> None:
        meta_path = sys.meta_path  # None while the interpreter shuts down
        if meta_path is not None and self in meta_path:
            meta_path.remove(self)
