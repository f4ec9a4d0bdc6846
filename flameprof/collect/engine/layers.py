"""Names ``nn.Module`` calls for layer scopes, from the stack alone: no hooks on the forward path.

The sampler calls :meth:`LayerNamer.hook` for each frame of ``Module._call_impl``; the hook reads
the frame's ``self`` and returns a ``layer`` Frame named by the module's dotted path from its root
module plus its class, e.g. ``GPT.transformer.h.0.attn.c_attn (Linear)`` (a root is named by its
class alone: ``GPT``). Rules:

* The root is the outermost module on the stack when the module is first seen. Its whole tree is
  indexed once by walking the ``_modules`` dicts directly, so no user code (``__repr__``,
  ``__getattr__``, ``named_modules``) ever runs on the sampler thread.
* A module called from a method of a module that holds it, outside that module's own call
  (Lightning's ``training_step`` calling ``self.net``), is named under that module:
  ``LitModel.net (Sequential)``, as it would be if the holder were called.
* A module registered in several places (shared) is named by its first path in
  ``named_modules()`` order, wherever it is called from.
* A module called from a parent's forward without being registered under the root is named
  ``<caller's name>.<Class>``.
* Wrappers (``DistributedDataParallel``, ``DataParallel``, ``torch.compile``'s ``OptimizedModule``)
  keep their own frame, named by their class, and the wrapped model is named as a root, so paths
  carry no ``module.`` / ``_orig_mod.`` prefix.
* Two live roots of the same class are told apart as ``Net`` and ``Net#2``.

A name is computed once per module and cached (weak references guard against id reuse); the
C sampler additionally caches the hook's result per ``self``, which these rules allow.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from ...model.records import Frame

# Wrapper class name -> the attribute holding the wrapped model.
WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module", "OptimizedModule": "_orig_mod"}
_PURGE_AT = 4096  # purge dead entries from a cache when it grows past this
_REINDEX_INTERVAL = 1.0  # seconds: a root's tree is re-read at most this often (modules made per call)
_HOLDER_FRAMES = 16  # calling frames searched for a module that holds a module called at the top


def _dead() -> None:
    return None


def _ref(obj: Any) -> Callable[[], Any]:
    """A weak reference, or one that is always dead for objects that refuse weak references."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return _dead


def class_name(module: Any) -> str:
    return type(module).__name__


def _children(module: Any) -> list[tuple[str, Any]]:
    """The registered submodules, read from ``_modules`` without calling any method of the module."""
    try:
        modules = object.__getattribute__(module, "__dict__").get("_modules")
        if isinstance(modules, dict):
            return [(str(k), v) for k, v in list(modules.items()) if v is not None]
    except Exception:
        pass
    return []


def index_tree(root: Any, root_name: str) -> dict[int, tuple[Callable[[], Any], str]]:
    """``{id(module): (weakref, name)}`` for every module under ``root``, first path winning."""
    out: dict[int, tuple[Callable[[], Any], str]] = {}
    todo = [(root, root_name)]
    while todo:
        module, name = todo.pop()
        if id(module) in out:
            continue
        out[id(module)] = (_ref(module), name)
        wrapped = WRAPPERS.get(class_name(module))
        kids = []
        for key, child in _children(module):
            kids.append((child, class_name(child) if key == wrapped else f"{name}.{key}"))
        todo.extend(reversed(kids))  # pre-order, children in registration order, like named_modules()
    return out


class LayerNamer:
    """Maps modules to layer frames; safe to call from the sampler thread, never raises from ``hook``."""

    def __init__(self) -> None:
        self._frames: dict[int, tuple[Callable[[], Any], Frame, str]] = {}  # id -> (ref, frame, path)
        self._roots: dict[int, tuple] = {}  # id -> (ref, name, tree index, monotonic time indexed)
        self._root_names: dict[str, Callable[[], Any]] = {}
        self._holders: dict[
            int, tuple[Callable[[], Any], Callable[[], Any]]
        ] = {}  # id -> refs: module, holder
        self.call_code: Any = None  # Module._call_impl.__code__, set by torch_hooks

    # -- the sampler's hook ----------------------------------------------------------------
    def hook(self, frame: Any) -> Frame | None:
        """The layer frame for a ``_call_impl`` frame; ``None`` when it has no module."""
        try:
            module = frame.f_locals.get("self")
            if module is None:
                return None
            entry = self._frames.get(id(module))
            if entry is not None and entry[0]() is module:
                return entry[1]
            return self._name_from_stack(module, frame)[0]
        except Exception:
            return None

    def _name_from_stack(self, module: Any, frame: Any) -> tuple[Frame, str]:
        callers = self.enclosing_modules(frame.f_back)  # innermost first
        if not callers:
            root = self._holder_calling(module, frame.f_back)
            if root is None:
                return self._remember(module, self._root(module)[0], root=True)
            if len(self._holders) > _PURGE_AT:
                self._holders = {k: v for k, v in self._holders.items() if v[0]() is not None}
            self._holders[id(module)] = (_ref(module), _ref(root))
        else:
            root = callers[-1]
            known = self._frames.get(id(root))
            if known is None or known[0]() is not root:  # the sampler walks leaf first: name it now
                self._name_from_stack(root, self._frame_of(frame.f_back, root))
            held = self._holders.get(id(root))
            holder = held[1]() if held is not None and held[0]() is root else None
            if holder is not None:  # the outermost call is of a held module
                root = holder
        path = self._lookup(root, module)
        if path is None:  # not registered under its root: name it after its caller
            caller = callers[0]
            entry = self._frames.get(id(caller))
            if entry is None or entry[0]() is not caller:
                self._name_from_stack(caller, self._frame_of(frame.f_back, caller))
                entry = self._frames[id(caller)]
            path = f"{entry[2]}.{class_name(module)}"
        return self._remember(module, path, root=False)

    def enclosing_modules(self, frame: Any) -> list:
        """The modules whose calls enclose ``frame``, innermost first."""
        out = []
        code = self.call_code
        while frame is not None:
            if frame.f_code is code:
                module = frame.f_locals.get("self")
                if module is not None:
                    out.append(module)
            frame = frame.f_back
        return out

    def _holder_calling(self, module: Any, frame: Any) -> Any:
        """The innermost ``self`` of the calling frames that holds ``module`` in its tree, or None."""
        for _ in range(_HOLDER_FRAMES):
            if frame is None:
                return None
            obj = frame.f_locals.get("self")
            if obj is not None and obj is not module and _children(obj):
                known = self._roots.get(id(obj))
                index = known[2] if known is not None and known[0]() is obj else index_tree(obj, "")
                hit = index.get(id(module))
                if hit is not None and hit[0]() is module:
                    return obj
            frame = frame.f_back
        return None

    def _frame_of(self, frame: Any, module: Any) -> Any:
        code = self.call_code
        while frame is not None and not (frame.f_code is code and frame.f_locals.get("self") is module):
            frame = frame.f_back
        return frame

    def _lookup(self, root: Any, module: Any) -> str | None:
        """``module``'s name in ``root``'s tree, re-indexing if the tree may have grown since."""
        _, _, index = self._root(root)
        entry = index.get(id(module))
        if entry is None or entry[0]() is not module:
            _, _, index = self._root(root, reindex=True)
            entry = index.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def _root(self, root: Any, reindex: bool = False) -> tuple[str, Callable[[], Any], dict]:
        entry = self._roots.get(id(root))
        now = time.monotonic()
        if entry is not None and entry[0]() is root:
            if not reindex or now - entry[3] < _REINDEX_INTERVAL:
                return entry[1], entry[0], entry[2]
            name = entry[1]
        else:
            name = self._new_root_name(root)
        ref = _ref(root)
        index = index_tree(root, name)
        if len(self._roots) > _PURGE_AT:
            self._roots = {k: v for k, v in self._roots.items() if v[0]() is not None}
        self._roots[id(root)] = (ref, name, index, now)
        return name, ref, index

    def _new_root_name(self, root: Any) -> str:
        base = class_name(root)
        name, n = base, 1
        while True:
            holder = self._root_names.get(name)
            if holder is None or holder() is None or holder() is root:
                break
            n += 1
            name = f"{base}#{n}"
        self._root_names[name] = _ref(root)
        return name

    def _remember(self, module: Any, path: str, root: bool) -> tuple[Frame, str]:
        cls = class_name(module)
        bare = root or path == cls
        frame = Frame(path if bare else f"{path} ({cls})", kind="layer")
        if len(self._frames) > _PURGE_AT:
            self._frames = {k: v for k, v in self._frames.items() if v[0]() is not None}
        self._frames[id(module)] = (_ref(module), frame, path)
        return frame, path

    # -- names for code that knows a module only by its id (compiled_layers.py) ----------------
    def frame_of_module(self, module: Any) -> Frame:
        """The layer frame of ``module``, named as if it had been called."""
        self.path_of(module)
        return self._frames[id(module)][1]

    def frame_of_id(self, module_id: int, cls: type) -> Frame | None:
        """The layer frame of the module ``module_id`` of class ``cls``, if a root already named
        holds it in its tree; else None."""
        entry = self._frames.get(module_id)
        if entry is not None:
            module = entry[0]()
            if module is not None and type(module) is cls:
                return entry[1]
        for rid, (ref, _, index, _) in list(self._roots.items()):
            hit = index.get(module_id)
            module = hit[0]() if hit is not None else None
            if module is not None and type(module) is cls and ref() is not None:
                return self._remember(module, hit[1], root=rid == module_id)[0]
        return None

    def root_frame_of_id(self, module_id: int, cls: type) -> Frame | None:
        """The layer frame of the root whose tree holds the module ``module_id`` of class ``cls``."""
        for rid, (ref, name, index, _) in list(self._roots.items()):
            hit = index.get(module_id)
            module, root = (hit[0]() if hit is not None else None), ref()
            if module is not None and type(module) is cls and root is not None:
                known = self._frames.get(rid)
                return known[1] if known is not None and known[0]() is root else Frame(name, kind="layer")
        return None

    # -- names for hooks that only see the module (backward) ---------------------------------
    def path_of(self, module: Any, frame: Any = None) -> str:
        """The dotted path of ``module``: from the forward naming, else, given ``frame`` (one whose
        caller called the module), as the sampler names it from the stack, else from a known root,
        else as a root. The sampler and the step marks may name a module first: both must give the
        name the module's holder gives it (``Lit.net``, not a root ``Sequential``)."""
        entry = self._frames.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[2]
        if frame is not None:
            return self._name_from_stack(module, frame)[1]
        for rid, (ref, _, index, _) in list(self._roots.items()):
            hit = index.get(id(module))
            if hit is not None and hit[0]() is module and ref() is not None:
                return self._remember(module, hit[1], root=rid == id(module))[1]
        return self._remember(module, self._root(module)[0], root=True)[1]


NAMER = LayerNamer()
