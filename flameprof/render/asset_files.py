"""The script and style sheets inlined into the SVG and HTML outputs, kept as files in ``assets/``
so they read, diff and lint as what they are. Every output stays one self-contained file."""

from __future__ import annotations

import functools
import os

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


@functools.cache
def asset(name: str) -> str:
    """The text of ``assets/<name>``."""
    with open(os.path.join(ASSETS, name), encoding="utf-8") as fh:
        return fh.read()
