"""The stacks flame graphs show by default: the loop on the first screen, not the import machinery.

Three changes to a profile's stacks, none to its samples or weights:

* the import system is one frame per imported module (``import torch._dynamo``), nested as the
  imports nest: the importlib chain and the module's own top-level code fold into it (time still
  finding and reading a module is ``import (find and load)`` under the importer);
* the interpreter's bootstrap frames at a stack's root (runpy, ``threading``'s thread start,
  ``multiprocessing``'s spawned child) are left out;
* samples before the loop's first step sit under a ``startup`` root, beside the loop.

``--raw-stacks`` shows the stacks as recorded.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..model.builder import ProfileBuilder
from ..model.profile import Frame, Profile

STARTUP = Frame("startup", kind="marker")
IMPORT_FILE = "<import>"  # the file of the import frames made here (``phases.IMPORT_PATTERNS`` knows it)
LOADING = Frame("import (find and load)", IMPORT_FILE, kind="marker")

_IMPORTLIB = re.compile(
    r"^<frozen importlib\._bootstrap(?:_external)?>$"
    r"|(?:^|/)importlib/(?:__init__|_bootstrap(?:_external)?)\.py$"
)
_BOOTSTRAP_FILES = re.compile(
    r"(?:^<frozen runpy>$|(?:^|/)(?:runpy|threading)\.py$|multiprocessing/spawn\.py$)"
)
_BOOTSTRAP_NAMES = {
    "_run_module_as_main", "_run_code", "_run_module_code", "run_module", "run_path",  # runpy
    "_bootstrap", "_bootstrap_inner", "run", "Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run",
    "spawn_main", "_main",  # multiprocessing.spawn
}  # fmt: skip
_HINT = re.compile(r"importlib|runpy|threading|spawn")
_SITE = re.compile(r".*[/\\](?:site|dist)-packages[/\\]|.*[/\\]lib[/\\]python3\.\d+[/\\]")

PLAIN, BOOTSTRAP, IMPORTLIB, MODULE, ROOT = range(5)
LEAD, NORMAL, CHAIN, BODY = range(4)  # where a stack is: before its first code frame, ..., in a module's body


def module_name(path: str) -> str:
    """The dotted name of the module a file holds, as far as its path tells."""
    if path.startswith("<frozen ") and path.endswith(">"):
        return path[len("<frozen ") : -1]
    path = path.replace("\\", "/")
    m = _SITE.match(path)
    rest = path[m.end() :] if m else path.rsplit("/", 1)[-1]
    rest = re.sub(r"(?:/__init__)?\.py[cw]?$", "", rest)
    return rest.replace("/", ".") or path


def _kind(frame: Frame) -> int:
    if frame.kind in ("process", "thread"):
        return ROOT
    if frame.kind != "python":
        return PLAIN
    if _IMPORTLIB.search(frame.file):
        return IMPORTLIB
    if frame.name == "<module>":
        return MODULE
    if frame.name in _BOOTSTRAP_NAMES and _BOOTSTRAP_FILES.search(frame.file.replace("\\", "/")):
        return BOOTSTRAP
    return PLAIN


def tidy_stacks(profile: Profile, startup_end: float | None = None) -> Profile:
    """``profile`` with the stacks a flame graph shows first (see the module's docstring); the same
    profile when nothing changes. ``startup_end``: the loop's first step, in ``sample_time``'s clock."""
    early = (
        profile.sample_time < startup_end if startup_end is not None else np.zeros(profile.num_samples, bool)
    )
    # one substring search a frame first: a folded file of a million lines has as many frames
    hinted = [i for i, f in enumerate(profile.frames) if f.kind == "python" and _HINT.search(f.file)]
    if not any(_kind(profile.frames[i]) in (BOOTSTRAP, IMPORTLIB) for i in hinted) and not early.any():
        return profile
    kinds = [_kind(f) for f in profile.frames]
    shown = ProfileBuilder()  # interns the new frames and stacks

    def child(node: int, frame: Frame) -> int:
        return shown.stack_id((shown.frame(frame),), node)

    def mapping(startup: bool) -> np.ndarray:
        """Old stack -> new stack of a sample whose leaf it is."""
        n = len(profile.stack_parent)
        node = [-1] * n
        where = [LEAD] * n
        leaf = np.empty(n, dtype=np.int32)
        for i, (p, f) in enumerate(zip(profile.stack_parent.tolist(), profile.stack_frame.tolist())):
            up, state = (node[p], where[p]) if p >= 0 else (-1, LEAD)
            kind, frame = kinds[f], profile.frames[f]
            if startup and state == LEAD and kind not in (ROOT, BOOTSTRAP):
                up = child(up, STARTUP)  # the first code frame (or import) of a startup sample
            if kind == ROOT and state == LEAD:
                here, state = child(up, frame), LEAD
            elif kind == BOOTSTRAP and state == LEAD:
                here = up
            elif kind == IMPORTLIB or (state == CHAIN and kind != MODULE):
                here, state = up, CHAIN
            elif state == CHAIN:  # the imported module's own code
                here, state = (
                    child(up, Frame(f"import {module_name(frame.file)}", IMPORT_FILE, kind="marker")),
                    BODY,
                )
            elif state == BODY:
                here = up
            else:
                here, state = child(up, frame), NORMAL
            node[i], where[i] = here, state
            if state == CHAIN:
                leaf[i] = child(here, LOADING)
            elif kind == BOOTSTRAP and state == LEAD:  # nothing but bootstrap frames: keep the leaf
                leaf[i] = child(child(up, STARTUP) if startup else up, frame)
            else:
                leaf[i] = here
        return leaf

    stacks = profile.sample_stack
    new_stack = mapping(False)[stacks]
    if early.any():
        new_stack = np.where(early, mapping(True)[stacks], new_stack)
    return dataclasses.replace(
        profile,
        frames=shown.frames,
        stack_parent=np.asarray(shown.stack_parent, dtype=np.int32),
        stack_frame=np.asarray(shown.stack_frame, dtype=np.int32),
        sample_stack=new_stack,
    )
