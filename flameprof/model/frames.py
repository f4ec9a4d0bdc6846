"""How a frame is shown: its label ``function (path/file.py:line)`` and its category of code.

The model keeps full paths; shortening and classification happen here so that
every renderer names and colours frames the same way.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .profile import Frame

CATEGORIES = ("user", "library", "torch", "stdlib", "native", "scope", "layer", "process", "marker")

_PACKAGE_DIRS = re.compile(r".*[/\\](?:site|dist)-packages[/\\]")
_STDLIB = re.compile(r".*[/\\]lib[/\\]python3\.\d+[/\\]")
_UNSAFE = re.compile(r"[;\r\n]")


class Labeler:
    """Makes display labels; ``cwd`` (from the profile's meta) lets user paths be shown relative."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        meta = meta or {}
        cwd = meta.get("cwd") or ""
        self.cwd = cwd.rstrip("/\\") + os.sep if cwd else ""
        self._cache: dict[Frame, str] = {}

    def short_path(self, path: str) -> str:
        if not path:
            return ""
        m = _PACKAGE_DIRS.match(path)
        if m:
            return path[m.end() :]
        if self.cwd and path.startswith(self.cwd):
            return path[len(self.cwd) :]
        m = _STDLIB.match(path)
        if m:
            return path[m.end() :]
        return path

    def label(self, frame: Frame) -> str:
        """``name (file:line)`` for code, the bare name for scopes and synthetic frames; never contains
        ``;``."""
        cached = self._cache.get(frame)
        if cached is not None:
            return cached
        if frame.file and frame.kind in ("python", "native"):
            where = self.short_path(frame.file)
            text = f"{frame.name} ({where}:{frame.line})" if frame.line else f"{frame.name} ({where})"
        else:
            text = frame.name
        text = _UNSAFE.sub("_", text) or "?"
        self._cache[frame] = text
        return text


def category(frame: Frame) -> str:
    """The kind of code a frame belongs to, for colouring: user, library, torch, stdlib, native, ..."""
    if frame.kind not in ("python", "native"):
        return frame.kind if frame.kind in CATEGORIES else "marker"
    path = frame.file.replace("\\", "/")
    if frame.kind == "native" or path.endswith((".so", ".dll", ".dylib")) or path.startswith("["):
        return "native"
    if "/torch/" in path or path.startswith("torch/") or frame.name.startswith(("torch::", "at::", "c10::")):
        return "torch"
    if "-packages/" in path:
        return "library"
    if _STDLIB.match(path) or path.startswith("<frozen") or path in ("<string>",) and not frame.line:
        return "stdlib"
    if not path and frame.name.startswith(("<built-in", "built-in")):
        return "native"
    return "user"
