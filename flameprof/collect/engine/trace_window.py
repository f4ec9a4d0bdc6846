"""The traced window: torch.profiler (Kineto) driven over a few steps of the program's loop.

Sampling goes on through the whole run; for steps ``first`` to ``last - 1`` (0-based, as the
analysis counts steps: an optimizer step of the leading optimizer, or ``flameprof.step()``; in a
loop without them, ``Tensor.backward`` or the model's outermost call: STEP_SOURCES) Kineto
also records every op with its shapes and memory events, and every device kernel and copy when
there is a device. While the window is open, every module call is wrapped in a record_function
annotation named by its layer path (``flameprof.layer: Net.0 (Linear)``, the samples' own names),
and each step in ``flameprof.step#N``, so the importer (``importers/kineto.py``) attributes the
trace exactly. The profiler stops when the window closes, or when the profile is taken first (a run
that ends, fails or is interrupted inside the window keeps what was traced); its trace is read when
the profile is taken, outside the program's loop.

Anything failing here is one warning line: the program and its sampling profile are unaffected.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from types import FrameType
from typing import Any

from . import loop_steps, scopes
from .layers import LayerNamer

LAYER_PREFIX = "flameprof.layer: "
STEP_PREFIX = "flameprof.step#"


def parse_steps(text: str) -> tuple[int, int]:
    """``'20:23'`` -> (20, 23): steps 20, 21 and 22; ``'5'`` -> (5, 6). Raises ValueError."""
    first, sep, last = text.partition(":")
    start = int(first)
    end = int(last) if sep else start + 1
    if start < 0 or end <= start:
        raise ValueError(f"{text!r}: expected FIRST:LAST with 0 <= FIRST < LAST")
    return start, end


# What ends a step, the least telling first: an outermost module call returned (an inference loop's
# step), Tensor.backward returned (a training loop's, without an optimizer: steps.py), an optimizer
# step or flameprof.step(). In a loop with an optimizer all three come in its first step, and each
# count is 1 by then; the window counts by the most telling source seen so far, as the analysis
# does over the whole run. A window a less telling source opened is dropped when a more telling one
# comes (nanoGPT evaluates 40 batches before its first step: an inference loop until then).
STEP_SOURCES = ("forward", "backward", "step")


def _warn(message: str) -> None:
    sys.stderr.write(f"flameprof: warning: traced window: {message}; sampling goes on\n")


class TraceWindow:
    """Opens torch.profiler at the start of step ``first`` and closes it at the end of step ``last - 1``."""

    def __init__(self, first: int, last: int, namer: LayerNamer) -> None:
        self.first, self.last = first, last
        self.namer = namer
        self.steps = 0  # steps completed so far
        self.stopped: list[Any] = []  # stopped torch.profiler objects, their traces not yet read
        self.params: dict[str, tuple[int, int]] = {}  # layer path -> (parameters, bytes)
        self._profiler: Any = None
        self._handles: list[Any] = []  # the step hooks
        self._layer_handles: list[Any] = []  # the module hooks, while the window is open
        self._opened_by = -1  # the source whose steps opened the window (-1: none, or at step 0)
        self._layers = threading.local()  # .open: (module, record_function) of this thread's calls
        self._step: Any = None  # the open step annotation
        self._optimizer_steps = scopes.LeadingOptimizer()
        self._counts = [0] * len(STEP_SOURCES)  # each source's steps so far
        self._source = -1  # the source the steps are counted by: the most telling seen so far
        self._done = False

    # -- steps ----------------------------------------------------------------------------
    def install(self, torch: Any) -> None:
        """Count steps from now on (``torch`` is imported); open at once when the window starts at 0."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        scopes.step_listeners.append(self._on_step_call)
        loop_steps.listeners.append(self._on_loop_mark)
        if self.first == 0:
            self._open(torch)

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Steps as the sampler counts them (scopes.LeadingOptimizer)."""
        for _ in self._optimizer_steps.steps(optimizer, None):
            self._count(STEP_SOURCES.index("step"))

    def _on_step_call(self) -> None:
        self._count(STEP_SOURCES.index("step"))

    def _on_loop_mark(self, name: str) -> None:
        self._count(STEP_SOURCES.index(name))

    def _count(self, source: int) -> None:
        """A step of ``source`` ended: counted when no more telling source has been seen; the first
        of a more telling one sets the count to its own."""
        self._counts[source] += 1
        if source < self._source:
            return
        if source > self._source:
            if 0 <= self._opened_by < source and (self._profiler is not None or self.stopped):
                self._discard()  # a window of a less telling source's steps (an evaluation first)
            self._source = source
            self.steps = self._counts[source] - 1
        self.on_step()

    def on_step(self) -> None:
        """A step ended: open, annotate or close the window."""
        try:
            self.steps += 1
            if self._profiler is not None:
                self._end_step()
                if self.steps < self.last:
                    self._begin_step()
                elif self._source == len(STEP_SOURCES) - 1:
                    self.close()  # no more telling source can come
                else:
                    self._stop()  # kept unless a more telling source comes (_discard)
            elif self.steps == self.first and not self._done:
                self._open(sys.modules["torch"])
        except Exception as exc:  # never let the window fail the program's step
            self._abandon(exc)

    # -- the profiler -----------------------------------------------------------------------
    def _open(self, torch: Any) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available() and hasattr(ProfilerActivity, "XPU"):
            activities.append(ProfilerActivity.XPU)
        try:
            self._profiler = profile(
                activities=activities, record_shapes=True, profile_memory=True, with_flops=True
            )
            self._profiler.start()
        except Exception as exc:
            self._profiler = None
            self._abandon(exc)
            return
        modules = torch.nn.modules.module
        self._opened_by = self._source
        self._layer_handles.append(modules.register_module_forward_pre_hook(self._enter_module))
        self._layer_handles.append(modules.register_module_forward_hook(self._exit_module, always_call=True))
        self._begin_step()

    def _begin_step(self) -> None:
        from torch.autograd.profiler import record_function

        self._step = record_function(f"{STEP_PREFIX}{self.steps}")
        self._step.__enter__()

    def _end_step(self) -> None:
        step, self._step = self._step, None
        if step is not None:
            step.__exit__(None, None, None)

    def close(self) -> None:
        """Stop the profiler and count no more steps (idempotent; also called when the profile is
        taken)."""
        self._stop()
        self._remove_hooks()

    def _stop(self) -> None:
        """Stop the profiler, keeping its trace; steps are still counted."""
        self._done = True
        self._remove_layer_hooks()
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        try:
            self._end_step()
            profiler.stop()
            self.stopped.append(profiler)
        except Exception as exc:
            _warn(f"could not stop torch.profiler ({type(exc).__name__}: {exc})")

    def _discard(self) -> None:
        """Drop the window opened by a less telling source's steps, so that it opens anew."""
        self._remove_layer_hooks()
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            try:
                self._end_step()
                profiler.stop()
            except Exception:
                pass
        self.stopped = []
        self._done = False

    def _abandon(self, exc: BaseException) -> None:
        _warn(f"torch.profiler failed ({type(exc).__name__}: {exc})")
        self._done = True
        self._remove_layer_hooks()
        self._remove_hooks()
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            try:
                profiler.stop()
            except Exception:
                pass

    def _remove_layer_hooks(self) -> None:
        _remove_handles(self._layer_handles)

    def _remove_hooks(self) -> None:
        _remove_handles(self._handles)
        if self._on_step_call in scopes.step_listeners:
            scopes.step_listeners.remove(self._on_step_call)
        if self._on_loop_mark in loop_steps.listeners:
            loop_steps.listeners.remove(self._on_loop_mark)

    # -- layer annotations ------------------------------------------------------------------
    def _enter_module(self, module: Any, args: Any) -> None:
        try:
            name = self._layer_name(module)
            if name is None:
                return
            from torch.autograd.profiler import record_function

            handle = record_function(LAYER_PREFIX + name)
            handle.__enter__()
            stack = getattr(self._layers, "open", None)
            if stack is None:
                stack = self._layers.open = []
            stack.append((module, handle))
        except Exception:
            pass

    def _exit_module(self, module: Any, args: Any, output: Any) -> None:
        stack = getattr(self._layers, "open", None)
        if stack and stack[-1][0] is module:
            _, handle = stack.pop()
            try:
                handle.__exit__(None, None, None)
            except Exception:
                pass

    def _layer_name(self, module: Any) -> str | None:
        """The module's layer path, named from its ``_call_impl`` frame as the sampler names it."""
        frame: FrameType | None = sys._getframe(1)
        code = self.namer.call_code
        while frame is not None and not (frame.f_code is code and frame.f_locals.get("self") is module):
            frame = frame.f_back
        if frame is None:
            return None
        layer = self.namer.hook(frame)
        if layer is None:
            return None
        if layer.name not in self.params:
            count = size = 0
            for param in module.parameters():
                count += param.numel()
                size += param.numel() * param.element_size()
            self.params[layer.name] = (count, size)
        return layer.name


def _remove_handles(handles: list[Any]) -> None:
    while handles:
        try:
            handles.pop().remove()
        except Exception:
            pass


def read_window(window: TraceWindow, epoch: float) -> Any:
    """The window's traces as one attributed ``Trace`` on the profile's time base (None when nothing
    was traced). Each is exported through a file in a private temporary directory, removed once
    read. Imports numpy: call it when taking the profile."""
    from ...model.trace import concat
    from ..importers.kineto import decode_document, read_trace

    traces = []
    directory = tempfile.mkdtemp(prefix="flameprof-trace-") if window.stopped else ""
    for n, profiler in enumerate(window.stopped):
        path = os.path.join(directory, f"trace-{n}.json")
        try:
            profiler.export_chrome_trace(path)
            with open(path, "rb") as fh:
                data = fh.read()
            traces.append(read_trace(decode_document(data, path), path, epoch)[0])
        except Exception as exc:
            _warn(f"could not read the trace ({type(exc).__name__}: {exc})")
        finally:
            _remove(path)
    window.stopped = []
    if directory:
        _remove(directory)
    trace = concat(traces)
    if trace is not None:
        trace.params.update(window.params)
    return trace


TRACE_PREFIX, TRACE_SUFFIX, PARAMS_SUFFIX = "trace-", ".json", ".params.json"


def trace_path(directory: str, host: str, pid: int) -> str:
    """Where a process of a job leaves its window's trace for the parent to read (``read_exported``)."""
    return os.path.join(directory, f"{TRACE_PREFIX}{host}-{pid}{TRACE_SUFFIX}")


def export_window(window: TraceWindow, path: str) -> None:
    """Close the window and write its trace to ``path`` and its layers' parameters beside it, for a
    process that does not take its own profile (a job's child: its parent merges the parts)."""
    import json

    window.close()
    for profiler in window.stopped[:1]:
        try:
            profiler.export_chrome_trace(path)
            with open(path[: -len(TRACE_SUFFIX)] + PARAMS_SUFFIX, "w") as fh:
                json.dump(window.params, fh)
        except Exception as exc:
            _warn(f"could not export the trace ({type(exc).__name__}: {exc})")
    window.stopped = []


def read_exported(directory: str, epoch: float) -> Any:
    """The traces the processes of a job left in ``directory`` (``export_window``), as one Trace on the
    merged profile's time base, or None."""
    import json

    from ...model.trace import concat
    from ..importers.kineto import decode_document, read_trace

    traces = []
    names = sorted(
        n for n in os.listdir(directory) if n.startswith(TRACE_PREFIX) and n.endswith(TRACE_SUFFIX)
    )
    for name in names:
        if name.endswith(PARAMS_SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:  # written by the profiled process (attach: another user): links are not followed
            trace = read_trace(decode_document(_read_file(path), path), path, epoch)[0]
            params = json.loads(_read_file(path[: -len(TRACE_SUFFIX)] + PARAMS_SUFFIX))
            trace.params.update({str(k): (int(c), int(b)) for k, (c, b) in params.items()})
            traces.append(trace)
        except Exception as exc:
            _warn(f"could not read {name} ({type(exc).__name__}: {exc})")
    return concat(traces)


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass
