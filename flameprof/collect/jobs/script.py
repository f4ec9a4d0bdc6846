"""Runs a script or module in this interpreter with ``__main__`` semantics, as ``python`` would.

A script's code is compiled here and run by ``exec_target``; a module runs through ``runpy``, as
``python -m`` does, so its ``__spec__``, ``sys.argv`` and tracebacks are Python's own.
``exec_target`` and runpy's ``_run_code`` are boundary frames (``boundary_codes``), and so is every
frame that called flameprof (runpy's for ``python -m flameprof``, a console script's ``<module>``):
the sampler drops them and everything rootward of them, so the profile starts at the target's
``<module>``, and a tick while the command starts or unwinds takes no runner frame.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import runpy
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
    module_name: str | None = None  # a module run as ``python -m`` runs it (through runpy)


def _main_module(file: str, spec=None) -> types.ModuleType:
    module = types.ModuleType("__main__")
    module.__file__ = file
    module.__spec__ = spec
    module.__loader__ = (
        spec.loader if spec is not None else importlib.machinery.SourceFileLoader("__main__", file)
    )
    module.__package__ = spec.parent if spec is not None else None
    module.__dict__["__builtins__"] = __builtins__
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
    """Resolve ``python -m name args...``. As ``python -m``, the current directory comes first on
    ``sys.path`` (set here, since finding the module may import its package)."""
    path0 = os.getcwd()
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
    except (ImportError, ValueError) as exc:
        raise FlameprofError(f"cannot find module {name}: {exc}") from None
    if spec is None or spec.loader is None:
        raise FlameprofError(f"no module named {name}")
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = __builtins__
    return Target(None, module, [spec.origin or name, *args], path0, f"-m {name}", module_name=name)


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
    if target.module_name is not None:
        # runpy's private runner (what ``python -m`` uses), absent from the stubs
        runpy._run_module_as_main(target.module_name, alter_argv=False)  # type: ignore[attr-defined]
        return
    if target.syntax_error is not None:
        raise target.syntax_error
    assert target.code is not None  # a script target without a syntax error has its code
    exec(target.code, target.module.__dict__)


def boundary_codes() -> set[types.CodeType]:
    """Where the profile's stacks start: these frames and everything rootward of them are dropped.
    The runners of the target, and the code of every frame on the calling stack."""
    # runpy's private runner, absent from the stubs
    codes = {exec_target.__code__, runpy._run_code.__code__}  # type: ignore[attr-defined]
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        codes.add(frame.f_code)
        frame = frame.f_back
    return codes


def print_target_exception(exc: BaseException, target: Target) -> None:
    """Print ``exc`` through ``sys.excepthook`` as Python would, without flameprof's frames: from
    the target's code, or for a module from runpy's, as ``python -m`` shows them."""
    # runpy's private runner, absent from the stubs
    main_runner = runpy._run_module_as_main  # type: ignore[attr-defined]
    first = main_runner.__code__ if target.module_name is not None else target.code
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not first:
        tb = tb.tb_next
    # the hook prints exc.__traceback__ when set, so trim it there
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
