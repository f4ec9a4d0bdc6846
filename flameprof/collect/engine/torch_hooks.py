"""PyTorch awareness while profiling: layer frames, step and batch marks, optional backward layers.

Nothing here imports torch. ``install`` runs when a session starts: if the program has imported
torch the parts are installed at once, else right after the program's ``import torch`` finishes,
in the importing thread (import_watch.py); ``uninstall`` removes them when the session ends.
Installing from the program's own thread, never from the sampler's, means torch's hook tables are
not changed while the program iterates them. The parts:

* layer frames: ``Module._call_impl``'s code is registered as a sampler frame hook
  (see layers.py); no module hook is installed, so the forward path is untouched;
* layers inside ``torch.compile``d code: each Inductor-generated module is mapped line by line
  to its source modules when it loads (compiled_layers.py), so a sample in generated code
  carries the layer that line computes;
* ``step`` marks when an optimizer's outermost ``step()`` returns (torch's global optimizer post
  hook; only the leading optimizer counts, see ``scopes.LeadingOptimizer``, and none once the
  program calls ``flameprof.step()``); with the C sampler the hook is ``_native.StepRecorder``
  (native/steps.c), whose buffer is drained into the builder's marks when they are read;
* the closure passed to an optimizer's ``step`` is marked (a global step pre-hook, see
  optimizer_steps.py), so the analysis tells the optimizer's own update from the closure's work;
* ``step`` marks of loops without an optimizer: outermost module calls and ``Tensor.backward``
  (loop_steps.py);
* ``device`` marks: the device's time at each phase boundary of the loop, stamped without
  synchronising (device_phases.py);
* regions where autograd is off (``no_grad``, ``inference_mode``) are marked on the stack
  (grad_regions.py), so the analysis can tell evaluation from training;
* ``batch`` marks when a DataLoader iterator hands out a batch (``_BaseDataLoaderIter.__next__``
  is wrapped), value = index of the dataset in order of first batch;
* with ``backward_layers``: global full backward (pre-)hooks put a ``layer`` scope named
  ``<layer path> (backward)`` on the thread running backward while that layer's gradients are
  computed. Global backward hooks make every module call take torch's slow hook path and wrap
  module inputs and outputs, hence off by default.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

from ...model.records import Mark
from . import compiled_layers, device_phases, grad_regions, loop_steps, optimizer_steps, scopes
from .import_watch import ImportWatch
from .interning import thread_identity
from .layers import NAMER

_HOOKS_FILE = os.path.join("torch", "utils", "hooks.py")
_NO_INPUT_GRAD_WARNING = (
    "Full backward hook is firing when gradients are computed with respect to module outputs"
)


def _ready(name: str) -> Any:
    """The module ``name`` if the program imported it and its import has finished, else None."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


# Each part of the instrumentation, and the torch module it needs.
_PARTS = (
    # first: its optimizer pre-hook runs before the others, so the optimizer's stamp opens its step
    ("device", "torch"),
    ("layers", "torch.nn.modules.module"),
    ("optimizer", "torch.optim.optimizer"),
    ("dataloader", "torch.utils.data.dataloader"),
    ("backward", "torch.nn.modules.module"),
    ("window", "torch.optim.optimizer"),
    ("compiled", "torch._inductor.codecache"),
    ("loop", "torch"),
    ("no_grad", "torch"),
)


class TorchHooks:
    """The torch instrumentation of one profiling session."""

    def __init__(self, sampler: Any, backward_layers: bool = False) -> None:
        self.sampler = sampler
        self._undo: list[Callable[[], None]] = []
        self._pending = ["layers", "compiled", "optimizer", "dataloader", "loop", "no_grad", "device"]
        self._pending += ["backward"] if backward_layers else []
        self.window: Any = None  # a TraceWindow, installed once torch.optim is there
        self.device: device_phases.DevicePhases | None = None
        self._steps = scopes.LeadingOptimizer()
        self._datasets: dict[int, tuple[Callable[[], Any], str]] = {}
        self._backward = threading.local()

    def install_available(self, just_imported: str = "") -> None:
        """Install each part whose torch module has finished importing (``just_imported``: the
        module whose import watch calls this, executed though not yet marked as imported)."""
        for part, module_name in _PARTS:
            if part in self._pending:
                module = sys.modules.get(module_name) if module_name == just_imported else _ready(module_name)
                if module is not None:
                    self._pending.remove(part)
                    try:
                        getattr(self, "_install_" + part)(module)
                    except Exception:  # a torch without this API: profile without this part
                        pass

    def add_window(self, window: Any) -> None:
        """Count steps for a traced window (trace_window.py) once torch's optimizer module is there."""
        self.window = window
        self._pending.append("window")
        self.install_available()

    def _install_loop(self, module: Any) -> None:
        self._undo.append(loop_steps.install(module))

    def _install_no_grad(self, module: Any) -> None:
        self._undo.append(grad_regions.install(module))

    def _install_device(self, module: Any) -> None:
        self.device, undo = device_phases.install(module, self.sampler.t0)
        self._undo.append(undo)

    def _install_window(self, module: Any) -> None:
        self.window.install(sys.modules["torch"])

    def uninstall(self) -> None:
        self._pending = []
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass

    # -- layers ---------------------------------------------------------------------------
    def _install_layers(self, module: Any) -> None:
        code = module.Module._call_impl.__code__
        NAMER.call_code = code
        hooks = self.sampler.frame_hooks
        hooks[code] = NAMER.hook  # the sampler's table notices the change and forgets cached decisions

        def undo() -> None:
            if hooks.get(code) == NAMER.hook:
                del hooks[code]

        self._undo.append(undo)

    def _install_compiled(self, module: Any) -> None:
        self._undo.append(compiled_layers.install(module, self.sampler.frame_hooks))

    # -- steps ----------------------------------------------------------------------------
    def _install_optimizer(self, module: Any) -> None:
        hook: Callable[..., None] = self._on_optimizer_step
        if self.sampler.kind == "native":
            from ... import _native

            hook = recorder = _native.StepRecorder()
            self.sampler.builder.mark_sources.append(lambda: self._drain_steps(recorder))
        self._undo.append(module.register_optimizer_step_post_hook(hook).remove)
        self._undo.append(module.register_optimizer_step_pre_hook(optimizer_steps.mark_closure).remove)
        self.sampler.builder.meta["optimizer_closures"] = "marked"

    def _drain_steps(self, recorder: Any) -> None:
        """The C hook's steps as marks, as ``_on_optimizer_step`` would have made them."""
        rows = recorder.take()
        if not rows or scopes.user_steps:
            return
        sampler = self.sampler
        builder, t0 = sampler.builder, sampler.t0
        index: dict[int, int] = {}
        for t, ident, native_id in rows:
            thread = index.get(ident)
            if thread is None:
                thread = index[ident] = thread_identity(builder, sampler.pid, ident, native_id)[0]
            builder.marks.append(Mark(t - t0, thread, "step", "optimizer"))

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if optimizer_steps.is_nested_step(sys._getframe(1)):
                return
            for at in self._steps.steps(optimizer, time.perf_counter()):
                scopes.mark("step", "optimizer", at)
        except Exception:
            pass

    def _install_dataloader(self, module: Any) -> None:
        cls = module._BaseDataLoaderIter
        original = cls.__dict__["__next__"]
        on_batch = self._on_batch

        @functools.wraps(original)
        def __next__(it: Any) -> Any:
            batch = original(it)
            on_batch(it)
            return batch

        cls.__next__ = __next__

        def undo() -> None:
            if cls.__dict__.get("__next__") is __next__:
                cls.__next__ = original

        self._undo.append(undo)

    def _on_batch(self, it: Any) -> None:
        try:
            dataset = it.__dict__.get("_dataset")
            entry = self._datasets.get(id(dataset))
            if entry is None or entry[0]() is not dataset:
                ref: Callable[[], Any]
                try:
                    ref = weakref.ref(dataset)
                except TypeError:
                    ref = lambda: dataset  # noqa: E731 - datasets that refuse weak refs are kept alive
                entry = self._datasets[id(dataset)] = (ref, str(len(self._datasets)))
            scopes.mark("batch", entry[1])
        except Exception:
            pass

    # -- backward layers --------------------------------------------------------------------
    def _install_backward(self, module: Any) -> None:
        warnings.filterwarnings("ignore", message=_NO_INPUT_GRAD_WARNING)
        entry = warnings.filters[0]
        pre = module.register_module_full_backward_pre_hook(self._on_backward_pre)
        post = module.register_module_full_backward_hook(self._on_backward)

        def undo() -> None:
            pre.remove()
            post.remove()
            filters = cast(list[Any], warnings.filters)  # typeshed says Sequence: it is the module's list
            if entry in filters:
                filters.remove(entry)
                getattr(warnings, "_filters_mutated", lambda: None)()

        self._undo.append(undo)

    def _open(self) -> list:
        """This thread's open backward layers, innermost last: ``[path, frame entered in, scope name]``."""
        stack = getattr(self._backward, "stack", None)
        if stack is None:
            stack = self._backward.stack = []
        return stack

    def _on_backward_pre(self, module: Any, grad_output: Any) -> None:
        try:
            stack = self._open()
            path = NAMER.path_of(module)
            # a layer whose inputs need no gradient ends when a layer outside it starts
            while stack and not path.startswith(stack[-1][0] + "."):
                top = stack.pop()
                scopes.pop(top[1], top[2], "layer")
            if not stack:
                _at_backward_end(stack)
            entered: FrameType | None = sys._getframe(1)
            while entered is not None and entered.f_code.co_filename.endswith(_HOOKS_FILE):
                entered = entered.f_back
            name = f"{path} (backward)"
            scopes.push(entered, name, kind="layer")
            stack.append([path, entered, name])
        except Exception:
            pass

    def _on_backward(self, module: Any, grad_input: Any, grad_output: Any) -> None:
        try:
            if not any(g is not None for g in grad_input):
                return  # fired before this layer's own gradients: it stays open (see _on_backward_pre)
            stack = self._open()
            path = NAMER.path_of(module)
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] == path:
                    for entry in stack[i:]:
                        scopes.pop(entry[1], entry[2], "layer")
                    del stack[i:]
                    return
        except Exception:
            pass


def _at_backward_end(stack: list) -> None:
    """Close the backward layers left open on this thread when the running backward pass ends."""
    ident = threading.get_ident()

    def close() -> None:
        for entry in stack:
            scopes.pop(entry[1], entry[2], "layer", ident)
        stack.clear()

    sys.modules["torch.autograd"].Variable._execution_engine.queue_callback(close)


_ACTIVE: TorchHooks | None = None


_WATCHES: list[ImportWatch] = []

# Modules whose import installs more parts: torch itself, and Inductor's code cache, which
# torch.compile imports when it first compiles.
_WATCHED = ("torch", "torch._inductor.codecache")


def install(sampler: Any, backward_layers: bool = False) -> TorchHooks:
    """Instrument torch for a session (call from the program's thread): each part now if its
    torch module is imported, else when the program imports it."""
    global _ACTIVE
    uninstall()
    hooks = _ACTIVE = TorchHooks(sampler, backward_layers)
    if "torch" in sys.modules:
        hooks.install_available()
    for name in _WATCHED:
        if name not in sys.modules:
            _WATCHES.append(ImportWatch(name, functools.partial(hooks.install_available, name)))
    return hooks


def uninstall() -> None:
    """Remove every torch hook and patch of the current session."""
    global _ACTIVE
    hooks, _ACTIVE = _ACTIVE, None
    while _WATCHES:
        _WATCHES.pop().remove()
    if hooks is not None:
        hooks.uninstall()
