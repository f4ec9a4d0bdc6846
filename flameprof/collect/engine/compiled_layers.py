"""Layers inside ``torch.compile``d code: each line of an Inductor-generated ``call`` named by the
source module whose ops it runs.

A compiled model's forward and backward run as one generated function per graph, so the stack has
no ``Module._call_impl`` frame below the compiled root. When Inductor loads a generated module (in
the program's thread, while the graph that produced it is still current), every line of the
module that names a buffer is mapped to the module that produced that buffer: the buffer's origin
FX nodes carry ``nn_module_stack`` (forward) or ``fwd_nn_module_stack`` (backward), keyed by the
id of the source module. A line naming several buffers is the kernel that writes the newest one
(Inductor numbers buffers in creation order, so outputs come after inputs). The sampler calls
``CallHook`` with the frame of ``call``; it returns the module's layer frame for the current
line, named as the layer namer names that module, or None (the line runs the compiled root's own
ops, or a module the namer has not indexed): the sample then stays under the compiled root.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from ...model.records import Frame
from .layers import NAMER, WRAPPERS

_BUFFER = re.compile(r"\bbuf(\d+)\b")
_LOCAL = re.compile(r"^L\['[^']+'\]")
_PATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def relative_path(source: str) -> str | None:
    """Dynamo's source of a module (``L['self'].layers[0]``, ``L['self']._modules['layers']``) as a
    dotted path below the compiled function's first local (``layers.0``); None for other forms."""
    match = _LOCAL.match(source)
    if match is None:
        return None
    rest = source[match.end() :]
    rest = re.sub(r"\._modules\['([^']+)'\]", r".\1", rest)
    rest = re.sub(r"\[(\d+)\]|\['([^']+)'\]", lambda m: "." + (m.group(1) or m.group(2)), rest)
    return rest[1:] if _PATH.match(re.sub(r"\.(\d+)", r".n\1", rest)) else None


class Source(NamedTuple):
    """The module a line computes: its id and class when compiled, its path below the root."""

    module_id: int
    cls: type
    path: str | None


def _module_of(buffer: Any) -> Source | None:
    """The innermost source module of a buffer's origin nodes, or None."""
    for node in getattr(buffer, "origins", None) or ():
        meta = getattr(node, "meta", None) or {}
        stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
        if stack:
            key, (source, cls) = list(stack.items())[-1]
            if str(key).isdigit() and isinstance(cls, type):
                return Source(int(key), cls, relative_path(str(source)))
    return None


def line_modules(source_lines: list[str], buffers: dict[str, Any]) -> dict[int, Source]:
    """Line number (1-based) -> the module whose buffer the line writes."""
    modules = {name: _module_of(buf) for name, buf in buffers.items()}
    out: dict[int, Source] = {}
    for lineno, line in enumerate(source_lines, 1):
        numbers = sorted({int(n) for n in _BUFFER.findall(line)}, reverse=True)
        for n in numbers:
            module = modules.get(f"buf{n}")
            if module is not None:
                out[lineno] = module
                break
    return out


def _child(module: Any, name: str) -> Any:
    """A submodule read from ``_modules`` directly: no user ``__getattr__`` on the sampler thread."""
    children = module.__dict__.get("_modules") or {}
    return children.get(name)


def _submodule(root: Any, path: str) -> Any:
    module = root
    for name in path.split(".") if path else ():
        module = _child(module, name) if module is not None else None
    return module


def _compiled_root(frame: Any) -> Any:
    """The innermost module called around ``frame``, unwrapped (``OptimizedModule._orig_mod``)."""
    for module in NAMER.enclosing_modules(frame):
        attr = WRAPPERS.get(type(module).__name__)
        if attr is None:
            return module
        inner = _child(module, attr)
        if inner is not None:
            return inner
    return None


class CallHook:
    """The sampler's frame hook for one generated ``call``: its result depends on the frame's line,
    so the C sampler calls it for every sample rather than caching it (``per_frame``)."""

    per_frame = True
    recent_root: Frame | None = None

    def __init__(self, lines: dict[int, Source]) -> None:
        self.lines = lines

    def __call__(self, frame: Any) -> Frame | None:
        """The layer of the current line: the module at its path below the compiled root around the
        frame (a graph serves every instance of a model), else the module it was compiled from."""
        try:
            source = self.lines.get(frame.f_lineno)
            if source is None:
                return self._root_outside_a_call(frame)
            root = _compiled_root(frame.f_back) if source.path is not None else None
            module = _submodule(root, source.path) if root is not None and source.path is not None else None
            if module is not None and type(module) is source.cls:
                NAMER.path_of(root)  # the root first: its tree names the module
                return NAMER.frame_of_module(module)
            return NAMER.frame_of_id(source.module_id, source.cls) or self._root_outside_a_call(frame)
        except Exception:
            return None

    def _root_outside_a_call(self, frame: Any) -> Frame | None:
        """Where no module call encloses the frame (a backward graph runs from autograd), the
        root of the graph's modules, else the compiled root whose generated code last ran inside
        its call (a graph from Inductor's cache has no modules recorded), so no sample in
        generated code is without a layer."""
        root = _compiled_root(frame.f_back)
        if root is not None:
            CallHook.recent_root = NAMER.frame_of_module(root)
            return None  # the enclosing calls' layers hold the sample
        for source in self.lines.values():
            layer = NAMER.root_frame_of_id(source.module_id, source.cls)
            if layer is not None:
                return layer
        return CallHook.recent_root


def _call_code(module: Any) -> Any:
    call = getattr(module, "call", None)
    return getattr(getattr(call, "__func__", call), "__code__", None)


def _graph_buffers() -> dict[str, Any]:
    graph = sys.modules["torch._inductor.virtualized"].V.graph  # raises when no graph is current
    return dict(getattr(graph, "name_to_buffer", {}))


def _lines(module: Any) -> dict[int, Source]:
    """The lines of a module Inductor has just generated, or none for one from its cache (no
    graph is lowered then)."""
    try:
        buffers = _graph_buffers()
    except Exception:
        return {}
    with open(module.__file__, encoding="utf-8") as fh:
        return line_modules(fh.read().splitlines(), buffers)


def install(codecache: Any, frame_hooks: dict) -> Callable[[], None]:
    """Map every module Inductor loads from now on; returns the undo."""
    cache = codecache.PyCodeCache
    original = cache.__dict__["load_by_key_path"]
    load = original.__func__
    codes: list = []

    def load_by_key_path(cls: Any, *args: Any, **kwargs: Any) -> Any:
        module = load(cls, *args, **kwargs)
        try:
            code = _call_code(module)
            if code is not None and code not in frame_hooks:
                frame_hooks[code] = CallHook(_lines(module))
                codes.append(code)
        except Exception:  # instrumentation never fails a compile
            pass
        return module

    cache.load_by_key_path = classmethod(load_by_key_path)

    def undo() -> None:
        if cache.__dict__.get("load_by_key_path") is not original:
            cache.load_by_key_path = original
        for code in codes:
            if isinstance(frame_hooks.get(code), CallHook):
                del frame_hooks[code]

    return undo
