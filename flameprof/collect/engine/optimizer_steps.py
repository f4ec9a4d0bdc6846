"""What an optimizer's ``step`` does, told apart at run time: its own update, the closure it calls back,
and a step nested in another step of the same call.

torch wraps every ``Optimizer`` subclass's ``step`` in one function (``Optimizer.profile_hook_step``)
that runs the global step hooks, wherever the class is defined. So the optimizer's own code is
whatever runs inside that wrapper, except a closure passed to ``step``: LBFGS and Lightning's
automatic optimisation run the program's forward and backward there. A global step pre-hook
replaces the closure with a ``MarkedClosure``, which puts ``records.CLOSURE`` on the stack while the
closure runs; the analysis gives the frames below it the phases they would have without the
optimizer. A subclass whose ``step`` calls ``super().step()`` runs the wrapper twice (once per
class whose ``step`` was wrapped): only the outermost counts as a step.
"""

from __future__ import annotations

import sys
from typing import Any

from ...model.records import CLOSURE
from . import scopes

NESTED_DEPTH = 16  # frames between an outer step's wrapper and a nested one, at most


class MarkedClosure:
    """A closure passed to ``optimizer.step``, called as it would be, under the closure marker."""

    __slots__ = ("closure",)

    def __init__(self, closure: Any) -> None:
        self.closure = closure

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        scopes.push(caller, CLOSURE.name, kind=CLOSURE.kind)
        try:
            return self.closure(*args, **kwargs)
        finally:
            scopes.pop(caller, CLOSURE.name, CLOSURE.kind)

    def __getattr__(self, name: str) -> Any:
        if name == "closure":  # not set yet (a copy being built): no delegation
            raise AttributeError(name)
        return getattr(self.closure, name)


def mark_closure(optimizer: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """torch's global optimizer step pre-hook: the step's arguments with its closure marked (keyword
    ``closure``, or the first positional argument when it is callable), or None to leave them."""
    closure = kwargs.get("closure")
    if closure is not None:
        if callable(closure) and not isinstance(closure, MarkedClosure):
            return args, {**kwargs, "closure": MarkedClosure(closure)}
        return None
    if len(args) > 1 and callable(args[1]) and not isinstance(args[1], MarkedClosure):
        return (args[0], MarkedClosure(args[1]), *args[2:]), kwargs
    return None


def is_nested_step(wrapper_frame: Any) -> bool:
    """Whether the step wrapper running in ``wrapper_frame`` was called from another step wrapper
    (``super().step()`` of a subclass): the same code a few frames further out."""
    code = wrapper_frame.f_code
    frame = wrapper_frame.f_back
    for _ in range(NESTED_DEPTH):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
