"""User scopes and step marks: ``flameprof.scope``, ``scope_start``/``scope_end`` and ``flameprof.step``.

While no profiler runs, each call costs one read of a module global. While one runs, entering a
scope pushes ``(frame that entered it, Frame)`` on the thread's list in ``sampler.scopes`` and the
sampler shows the scope's frame just leafward of that frame. A scope that declares a phase is
recorded in the profile's ``meta["scope_phases"]`` (``{scope name: phase}``) for the analysis.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ...model.records import Frame, Mark

F = TypeVar("F", bound=Callable[..., Any])

_SCOPES: dict | None = None  # the running sampler's ``scopes``; None while not profiling
_SAMPLER: Any = None
_BUILDER: Any = None
_PHASES: dict[str, str] = {}
_FRAMES: dict[tuple[str, str], Frame] = {}
_get_ident = threading.get_ident
_THREAD = threading.local()  # .index: (session, pid, this thread's index in the builder), see mark()
_SESSION = 0  # counts activate() calls
user_steps = False  # set once flameprof.step() was called in this session: it then defines the steps
step_listeners: list[Callable[[], None]] = []  # called at each flameprof.step() (the traced window)


def activate(sampler: Any, builder: Any) -> None:
    """Start recording scopes and marks into ``sampler``/``builder`` (called when a session starts)."""
    global _SCOPES, _SAMPLER, _BUILDER, _PHASES, _SESSION, user_steps
    _SESSION += 1
    _PHASES = builder.meta.setdefault("scope_phases", {})
    _SAMPLER, _BUILDER, user_steps = sampler, builder, False
    _SCOPES = sampler.scopes


def deactivate(sampler: Any) -> None:
    """Stop recording into ``sampler`` (called when its session ends); scopes become no-ops again."""
    global _SCOPES, _SAMPLER, _BUILDER
    if _SAMPLER is sampler:
        _SCOPES = _SAMPLER = _BUILDER = None


def _frame(name: str, kind: str) -> Frame:
    """The scope's Frame, made once per name (the sampler then interns it by identity, cheaply)."""
    key = (name, kind)
    frame = _FRAMES.get(key)
    if frame is None:
        if len(_FRAMES) > 4096:  # names built per call (f"step {i}") must not grow this forever
            _FRAMES.clear()
        frame = _FRAMES[key] = Frame(str(name), kind=kind)
    return frame


def push(entered_in: Any, name: str, phase: str | None = None, kind: str = "scope") -> None:
    """Open a scope on this thread, shown leafward of the frame ``entered_in``."""
    scopes = _SCOPES
    if scopes is None:
        return
    ident = _get_ident()
    stack = scopes.get(ident)
    if stack is None:
        stack = scopes[ident] = []
    stack.append((entered_in, _frame(name, kind)))
    if phase is not None:
        _PHASES[name] = phase


def pop(entered_in: Any, name: str, kind: str = "scope", ident: int | None = None) -> None:
    """Close the innermost open scope of this thread (or thread ``ident``) entered in ``entered_in``."""
    scopes = _SCOPES
    if scopes is None:
        return
    stack = scopes.get(_get_ident() if ident is None else ident)
    if not stack:
        return
    for i in range(len(stack) - 1, -1, -1):
        frame_in, frame = stack[i]
        if frame_in is entered_in and frame.name == name and frame.kind == kind:
            del stack[i]
            return


class Scope:
    """A named user scope: a context manager and decorator, stateless so one instance serves every use."""

    __slots__ = ("name", "phase")

    def __init__(self, name: str, phase: str | None = None) -> None:
        self.name = name
        self.phase = phase

    def __enter__(self) -> Scope:
        scopes = _SCOPES
        if scopes is not None:  # push(), inlined: this is the hot path of a profiled loop
            name = self.name
            frame = _FRAMES.get((name, "scope")) or _frame(name, "scope")
            ident = _get_ident()
            stack = scopes.get(ident)
            if stack is None:
                stack = scopes[ident] = []
            stack.append((sys._getframe(1), frame))
            if self.phase is not None:
                _PHASES[name] = self.phase
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        scopes = _SCOPES
        if scopes is not None:
            stack = scopes.get(_get_ident())
            if stack:
                entered_in, frame = stack[-1]
                caller = sys._getframe(1)
                if entered_in is caller and frame.name == self.name and frame.kind == "scope":
                    stack.pop()
                else:
                    pop(caller, self.name)

    def __call__(self, func: F) -> F:
        name, phase = self.name, self.phase

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _SCOPES is None:
                return func(*args, **kwargs)
            caller = sys._getframe(1)
            push(caller, name, phase)
            try:
                return func(*args, **kwargs)
            finally:
                pop(caller, name)

        return wrapper  # type: ignore[return-value]


_INSTANCES: dict[str, Scope] = {}


def scope(name: str, phase: str | None = None) -> Scope:
    """``with flameprof.scope("name"):`` or ``@flameprof.scope("name")``: a named frame in the profile.

    ``phase`` (e.g. ``"data"``) tells the analysis which phase the scope's samples belong to. As a
    decorator the scope appears leafward of the caller, around the decorated function. Instances
    are shared per name, so a ``with`` block costs about what an empty one does when not profiling.
    """
    instance = _INSTANCES.get(name)
    if instance is None or instance.phase != phase:
        if len(_INSTANCES) > 4096:  # names built per call (f"step {i}") must not grow this forever
            _INSTANCES.clear()
        instance = _INSTANCES[name] = Scope(name, phase)
    return instance


def scope_start(name: str, phase: str | None = None) -> None:
    """Open a scope in the calling frame, for code that cannot use ``with``; close it with ``scope_end``."""
    if _SCOPES is not None:
        push(sys._getframe(1), name, phase)


def scope_end() -> None:
    """Close this thread's innermost user scope."""
    scopes = _SCOPES
    if scopes is None:
        return
    stack = scopes.get(_get_ident())
    if stack is None:
        return
    for i in range(len(stack) - 1, -1, -1):
        if stack[i][1].kind == "scope":
            del stack[i]
            return


def mark(name: str, value: str = "", at: float | None = None) -> None:
    """Record a timestamped event on this thread, on the sampler's time base (at ``at``, a
    ``time.perf_counter()`` reading, else now).

    Called once per optimizer step in the program's loop, so the thread's index in the builder is
    looked up once per thread, session and process (a thread-local, which a reused thread ident
    cannot mislead, and which keeps no builder alive; a forked child has a new pid), not per call."""
    sampler, builder = _SAMPLER, _BUILDER
    if sampler is None or builder is None:
        return
    now = (time.perf_counter() if at is None else at) - sampler.t0
    cached = getattr(_THREAD, "index", None)
    if cached is None or cached[0] != _SESSION or cached[1] != sampler.pid:
        thread = threading.current_thread()
        index = builder.thread_id(
            sampler.pid, getattr(thread, "native_id", None) or _get_ident(), thread.name
        )
        cached = _THREAD.index = (_SESSION, sampler.pid, index)
    builder.marks.append(Mark(now, cached[2], name, value))


class LeadingOptimizer:
    """Tells the steps of the program's loop from optimizer steps: those of the leading optimizer.

    The first optimizer that steps leads (a GAN's second optimizer steps inside the same step),
    until it is gone or another one steps twice in a row (a second training stage with a new
    optimizer, the first still referenced somewhere): that one then leads from the first of those
    two steps. No steps count once ``flameprof.step()`` is used."""

    def __init__(self) -> None:
        self._leader: Callable[[], Any] | None = None
        self._candidate: Callable[[], Any] | None = None  # the last other optimizer that stepped
        self._pending: Any = None  # what was passed for the candidate's step

    def steps(self, optimizer: Any, now: Any) -> list[Any]:
        """The steps that ``optimizer.step()`` returning at ``now`` ends: [], [now] or, when
        ``optimizer`` takes the lead, [the ``now`` of its previous step, now]."""
        if user_steps:
            return []
        leader = self._leader() if self._leader is not None else None
        if leader is optimizer:
            self._candidate = self._pending = None
            return [now]
        again = self._candidate is not None and self._candidate() is optimizer
        if leader is None or again:  # the leader is gone, or this optimizer stepped twice in a row
            steps = [self._pending, now] if again else [now]
            self._leader, self._candidate, self._pending = weakref.ref(optimizer), None, None
            return steps
        self._candidate, self._pending = weakref.ref(optimizer), now
        return []


def step() -> None:
    """Mark the end of a training or inference step; once called, these marks define the steps."""
    global user_steps
    if _SCOPES is None:
        return
    if not user_steps and _BUILDER is not None:  # explicit steps replace the optimizer-derived ones
        user_steps = True
        _BUILDER.marks[:] = [m for m in _BUILDER.marks if not (m.name == "step" and m.value != "user")]
    mark("step", "user")
    for listener in step_listeners:
        listener()
