"""Steps of loops that have no optimizer: a ``forward`` mark when an outermost module call returns
(an inference loop; value: the root module's path) and a ``backward`` mark when ``Tensor.backward``
returns (a training loop that updates its weights by hand; with an optimizer and gradient
accumulation, its micro-steps). The analysis uses them only when no optimizer or
``flameprof.step()`` marked steps (steps.py); the traced window counts them so too (``listeners``).

Only the root module's class pays: ``Module.__call__`` is wrapped until an outermost module call
that called other modules returns (the model, not a transform module a Dataset calls per item);
then that class gets its own ``__call__`` wrapper, which counts the calls in progress on the
thread so that a nested instance of the same class (a ``Sequential`` in a ``Sequential``) is no
step, and ``Module.__call__`` is restored. A call torch.compile traces is passed through untouched.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import device_phases, scopes
from .layers import NAMER

listeners: list[Callable[[str], None]] = []  # called with "forward" or "backward" after each mark


def _mark(name: str, value: str = "") -> None:
    scopes.mark(name, value)
    for listener in listeners:
        try:
            listener(name)
        except Exception:  # the program's forward or backward call never fails for a listener
            pass


def install(torch: Any) -> Callable[[], None]:
    """Wrap ``torch.nn.Module.__call__`` until the root module's class is known, then that class's,
    and ``torch.Tensor.backward``; returns the undo."""
    module_cls, tensor_cls = torch.nn.Module, torch.Tensor
    call, backward = module_cls.__call__, tensor_cls.backward
    compiling = torch.compiler.is_compiling
    depth = threading.local()
    wrapped: list[type] = []  # the root's class, once known
    impl_codes = (call.__code__, module_cls._call_impl.__code__)

    def root_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if compiling():
            return call(self, *args, **kwargs)
        if getattr(depth, "n", 0):
            return call(self, *args, **kwargs)
        depth.n = 1
        stamp = device_phases.ACTIVE
        if stamp is not None:  # the device's time at the outermost module's forward
            stamp.boundary("forward")
        try:
            return call(self, *args, **kwargs)
        finally:
            depth.n = 0
            try:
                _mark("forward", NAMER.path_of(self, sys._getframe()))
            except Exception:
                pass

    @functools.wraps(call)
    def finding_root(self: Any, *args: Any, **kwargs: Any) -> Any:
        if wrapped or compiling():
            return call(self, *args, **kwargs)
        if getattr(depth, "n", 0):
            depth.nested = True
            return call(self, *args, **kwargs)
        if _inside(sys._getframe(1), impl_codes):  # attached during a forward: not the root's call
            return call(self, *args, **kwargs)
        depth.n, depth.nested = 1, False
        try:
            return call(self, *args, **kwargs)
        finally:
            depth.n = 0
            cls = type(self)
            if depth.nested and not wrapped and "__call__" not in cls.__dict__:
                cls.__call__ = functools.wraps(call)(root_call)
                wrapped.append(cls)
                if module_cls.__dict__.get("__call__") is finding_root:
                    module_cls.__call__ = call
                _mark("forward", NAMER.path_of(self, sys._getframe()))

    @functools.wraps(backward)
    def backward_marked(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = backward(self, *args, **kwargs)
        _mark("backward")
        return result

    module_cls.__call__ = finding_root
    tensor_cls.backward = backward_marked

    def undo() -> None:
        if module_cls.__dict__.get("__call__") is finding_root:
            module_cls.__call__ = call
        for cls in wrapped:
            if getattr(cls.__dict__.get("__call__"), "__wrapped__", None) is call:
                del cls.__call__
        if tensor_cls.__dict__.get("backward") is backward_marked:
            tensor_cls.backward = backward

    return undo


def _inside(frame: Any, codes: tuple) -> bool:
    """Whether ``frame`` or a caller of it runs one of ``codes`` (a module call in progress)."""
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False
