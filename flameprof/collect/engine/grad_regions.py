"""Regions where autograd is off: ``torch.no_grad`` and ``torch.inference_mode`` (as ``with`` blocks
or decorators) put ``records.NO_GRAD`` on the thread's stack, just leafward of the frame that
entered them, while they are open, and ``torch.enable_grad`` puts ``records.GRAD`` (autograd back
on inside such a region, as LBFGS's ``step`` does around its closure). Whether a sample ran under
one cannot be read from its stack; the analysis needs it to tell evaluation (forwards without
autograd in a run that trains) from training.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ...model.records import GRAD, NO_GRAD, Frame
from . import scopes


def install(torch: Any) -> Callable[[], None]:
    """Wrap ``__enter__``/``__exit__`` of ``torch.no_grad``, ``torch.inference_mode`` and
    ``torch.enable_grad``; returns the undo."""
    undo = [
        _wrap(torch.no_grad, NO_GRAD, lambda cm: True),
        _wrap(torch.inference_mode, NO_GRAD, lambda cm: bool(cm.mode)),
        _wrap(torch.enable_grad, GRAD, lambda cm: True),
    ]

    def undo_all() -> None:
        for each in undo:
            each()

    return undo_all


def _wrap(cls: type[Any], marker: Frame, active: Callable[[Any], bool]) -> Callable[[], None]:
    """Mark with ``marker`` the region of each ``cls`` context for which ``active(context)`` holds."""
    enter, leave = cls.__dict__["__enter__"], cls.__dict__["__exit__"]

    def __enter__(self: Any) -> Any:
        result = enter(self)
        if active(self):
            scopes.push(sys._getframe(1), marker.name, kind=marker.kind)
        return result

    def __exit__(self: Any, *exc: Any) -> Any:
        if active(self):
            scopes.pop(sys._getframe(1), marker.name, marker.kind)
        return leave(self, *exc)

    cls.__enter__, cls.__exit__ = __enter__, __exit__

    def undo() -> None:
        if cls.__dict__.get("__enter__") is __enter__:
            cls.__enter__ = enter
        if cls.__dict__.get("__exit__") is __exit__:
            cls.__exit__ = leave

    return undo
