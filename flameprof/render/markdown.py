"""Markdown that names cannot break out of: code spans and table cells for function, layer and
file names, which may hold backticks, pipes or HTML (a PR comment must show them, not run them)."""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_\[\]|#<>!])")


def code(text: str) -> str:
    """``text`` as a code span for a table cell: a fence longer than any run of backticks in it,
    spaces inside when it starts or ends with one, pipes escaped (tables split on them first)."""
    text = " ".join(text.splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def text(value: str) -> str:
    """``value`` as plain Markdown text: emphasis, links, HTML and table pipes escaped."""
    return _SPECIAL.sub(r"\\\1", " ".join(value.splitlines()))
