"""Device time per phase for the whole run, without a traced window: a device event at each phase
boundary the torch hooks see, read back once the device has passed it, never by synchronising.

On a GPU, kernels run behind the host: the host's stacks show launches, and the device's own time
shows only in events it stamps as its stream reaches them. At each boundary (a DataLoader wait
begins and ends, the outermost module's forward begins, ``Tensor.backward`` begins and ends, an
optimizer's ``step`` begins and ends) a clock stamps the current stream; stamps are polled in order
at the next boundaries (``query``, never ``synchronize``) and each one the device has passed becomes
a ``device`` mark: at the host time of the boundary, with the boundary's name and the device's time
there (seconds on the sampler's time base: the first stamp's host time plus the device time elapsed
since it); a ``device_clock`` mark names the clock. Between two stamps with no launch in between (a
data wait) the device's elapsed time is its idle time; between the others, the device's time in
that phase (analyze/device_phases.py).

Clocks: ``cuda`` (``torch.cuda.Event``s on the current stream, once the program has initialised
CUDA) and ``host`` (real host time: on a CPU the device is the host, so the same bookkeeping runs,
and is tested, without a GPU). ``FLAMEPROF_DEVICE_TIME`` chooses: ``auto`` (the default: ``cuda``
once the program has initialised CUDA; nothing is installed where torch sees no GPU), ``host`` or
``off``.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from . import scopes

ENV = "FLAMEPROF_DEVICE_TIME"
MARK = "device"  # the marks' name; value: ``<boundary> <device seconds>``
CLOCK_MARK = "device_clock"  # once, when the clock is chosen; value: its name
BOUNDARIES = ("data", "batch", "forward", "backward", "backward_end", "optimizer", "optimizer_end")
MAX_PENDING = 4096  # stamps the device has not reached yet; past it new ones are not taken


ACTIVE: DevicePhases | None = None  # the session's stamps, for the outermost module's forward (loop_steps.py)


class Clock(Protocol):
    name: str

    def stamp(self) -> Any: ...

    def passed(self, stamp: Any) -> bool: ...

    def seconds(self, origin: Any, stamp: Any) -> float: ...


class HostClock:
    """Real host time: a CPU runs its ops as the host calls them, so the host is the device."""

    name = "host"

    def stamp(self) -> float:
        return time.perf_counter()

    def passed(self, stamp: float) -> bool:
        return True

    def seconds(self, origin: float, stamp: float) -> float:
        return stamp - origin


class CudaClock:
    """``torch.cuda.Event``s with timing, recorded on the current stream and polled with ``query``."""

    name = "cuda"

    def __init__(self, torch: Any) -> None:
        self._event = torch.cuda.Event

    def stamp(self) -> Any:
        event = self._event(enable_timing=True)
        event.record()
        return event

    def passed(self, stamp: Any) -> bool:
        return bool(stamp.query())

    def seconds(self, origin: Any, stamp: Any) -> float:
        return float(origin.elapsed_time(stamp)) / 1e3


class DevicePhases:
    """The stamps of one session: taken at boundaries, turned into marks once the device passed them."""

    def __init__(self, choose: Callable[[], Clock | None], t0: float) -> None:
        self._choose = choose  # the clock, once there is one (CUDA initialised later in the run)
        self.clock: Clock | None = None
        self._t0 = t0  # the sampler's time base (perf_counter at its start)
        self._origin: tuple[Any, float] | None = None  # (first stamp, its host time)
        self._pending: deque[tuple[str, float, Any]] = deque()

    def boundary(self, name: str) -> None:
        """Stamp the device at a phase boundary (the program's thread; never raises)."""
        try:
            clock = self.clock
            if clock is None:
                clock = self.clock = self._choose()
                if clock is None:
                    return
                scopes.mark(CLOCK_MARK, clock.name)
            at = time.perf_counter()
            if len(self._pending) < MAX_PENDING:
                stamp = clock.stamp()
                if self._origin is None:
                    self._origin = (stamp, at)
                self._pending.append((name, at, stamp))
            self.drain()
        except Exception:
            pass

    def drain(self) -> None:
        """Marks for the stamps the device has passed, oldest first; stops at the first it has not."""
        clock, origin = self.clock, self._origin
        if clock is None or origin is None:
            return
        pending = self._pending
        while pending and clock.passed(pending[0][2]):
            name, at, stamp = pending.popleft()
            device = origin[1] - self._t0 + clock.seconds(origin[0], stamp)
            scopes.mark(MARK, f"{name} {device!r}", at)


def clock_chooser(torch: Any, setting: str) -> Callable[[], Clock | None] | None:
    """How a session picks its clock for ``FLAMEPROF_DEVICE_TIME``'s ``setting``; None when off."""
    if setting == "host":
        return HostClock
    cuda = getattr(torch, "cuda", None)
    if setting != "auto" or cuda is None or not cuda.is_available():
        return None  # off, or no GPU: nothing is installed, the loop runs untouched

    def cuda_in_use() -> Clock | None:
        return CudaClock(torch) if cuda.is_initialized() else None

    return cuda_in_use


def install(torch: Any, t0: float) -> tuple[DevicePhases | None, Callable[[], None]]:
    """Stamp the device at the loop's phase boundaries: wraps the DataLoader iterator's ``__next__``
    and ``Tensor.backward``, and adds global optimizer step hooks. Returns the recorder (None when
    ``FLAMEPROF_DEVICE_TIME`` is off) and the undo, which drains what the device has passed."""
    choose = clock_chooser(torch, os.environ.get(ENV, "auto").strip().lower())
    if choose is None:
        return None, lambda: None
    phases = DevicePhases(choose, t0)
    at = phases.boundary
    # everything that can fail (a torch without these APIs) before anything is changed
    optimizer = importlib.import_module("torch.optim.optimizer")
    add_pre, add_post = (
        optimizer.register_optimizer_step_pre_hook,
        optimizer.register_optimizer_step_post_hook,
    )
    iterator = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
    next_batch = iterator.__dict__["__next__"]
    backward = torch.Tensor.backward

    @functools.wraps(next_batch)
    def __next__(it: Any) -> Any:
        at("data")
        batch = next_batch(it)
        at("batch")
        return batch

    @functools.wraps(backward)
    def stamped_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        at("backward")
        try:
            return backward(self, *args, **kwargs)
        finally:
            at("backward_end")

    iterator.__next__ = __next__
    torch.Tensor.backward = stamped_backward
    hooks = [add_pre(lambda *_: at("optimizer")), add_post(lambda *_: at("optimizer_end"))]
    global ACTIVE
    ACTIVE = phases

    def undo() -> None:
        global ACTIVE
        if ACTIVE is phases:
            ACTIVE = None
        for hook in hooks:
            hook.remove()
        if torch.Tensor.__dict__.get("backward") is stamped_backward:
            torch.Tensor.backward = backward
        if iterator.__dict__.get("__next__") is __next__:
            iterator.__next__ = next_batch
        phases.drain()

    return phases, undo
