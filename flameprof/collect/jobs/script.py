"""Runs a script or module in this interpreter with ``__main__`` semantics, as ``python`` would.

``exec_target`` is the boundary frame: the sampler drops it and everything rootward of it, so the
profile starts at the target's ``<module>`` frame.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass

from ...errors import FlameprofError


@dataclass
class Target:
    """A resolved program: the code to exec and how ``__main__``, ``sys.argv`` and ``sys.path`` look."""

    code: types.CodeType | None
    module: types.ModuleType
    argv: list[str]
    path0: str
    description: str
    syntax_error: SyntaxError | None = None


def _main_module(file: str | None, spec=None) -> types.ModuleType:
    module = types.ModuleType("__main__")
    module.__file__ = file
    module.__spec__ = spec
    module.__loader__ = (
        spec.loader if spec is not None else importlib.machinery.SourceFileLoader("__main__", file)
    )
    module.__package__ = spec.parent if spec is not None else None
    module.__builtins__ = __builtins__
    return module


def script_target(path: str, args: list[str]) -> Target:
    """Resolve ``python path args...``; a missing file or a directory is a FlameprofError."""
    if not os.path.exists(path):
        raise FlameprofError(f"no such script: {path}")
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "__main__.py")):
            path = os.path.join(path, "__main__.py")
        else:
            raise FlameprofError(f"{path} is a directory, not a script (and has no __main__.py)")
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        raise FlameprofError(f"cannot read script {path}: {exc.strerror or exc}") from None
    full = os.path.abspath(path)
    module = _main_module(full)
    try:
        code, error = compile(source, full, "exec", dont_inherit=True), None  # as python: the full path
    except (SyntaxError, ValueError) as exc:  # the target's own error: reported as Python would
        code, error = None, exc if isinstance(exc, SyntaxError) else SyntaxError(str(exc))
    return Target(code, module, [path] + list(args), os.path.dirname(full), path, error)


def module_target(name: str, args: list[str]) -> Target:
    """Resolve ``python -m name args...`` (a package runs its ``__main__``)."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            name = name + ".__main__"
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise FlameprofError(f"cannot find module {name}: {exc}") from None
    if spec is None or spec.loader is None:
        raise FlameprofError(f"no module named {name}")
    try:
        code = spec.loader.get_code(name)
    except SyntaxError as exc:
        return Target(
            None,
            _main_module(spec.origin, spec),
            [spec.origin or name] + list(args),
            os.getcwd(),
            f"-m {name}",
            exc,
        )
    except ImportError as exc:
        raise FlameprofError(f"cannot load module {name}: {exc}") from None
    if code is None:
        raise FlameprofError(f"module {name} has no code to run")
    return Target(
        code, _main_module(spec.origin, spec), [spec.origin or name] + list(args), os.getcwd(), f"-m {name}"
    )


def install(target: Target) -> None:
    """Make this interpreter look as if ``python`` had started the target."""
    sys.argv[:] = target.argv
    if sys.path:
        sys.path[0] = target.path0
    else:
        sys.path.insert(0, target.path0)
    sys.modules["__main__"] = target.module


def exec_target(target: Target) -> None:
    """Run the target's code in its ``__main__`` namespace (the sampler's boundary frame)."""
    if target.syntax_error is not None:
        raise target.syntax_error
    exec(target.code, target.module.__dict__)


def print_target_exception(exc: BaseException, target: Target) -> None:
    """Print ``exc`` through ``sys.excepthook`` as Python would, without flameprof's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not target.code:
        tb = tb.tb_next
    # the hook prints exc.__traceback__ when set, so trim it there
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
