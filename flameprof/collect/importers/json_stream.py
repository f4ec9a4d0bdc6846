"""Read a large JSON document one array element at a time: the top-level object's members are decoded
as they come, and the elements of one array member are yielded one by one, so a trace of 100 MB is
never held as a tree of Python objects (which takes about eight times its size)."""

from __future__ import annotations

import json
from collections.abc import Iterator

_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


class JsonDefect(ValueError):
    """The text is not the JSON expected; the message says where (line and column)."""


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column}"


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != char:
        found = "the end" if pos >= len(text) else repr(text[pos])
        raise JsonDefect(f"expected {char!r} at {_where(text, pos)}, found {found}")
    return pos + 1


def _value(text: str, pos: int) -> tuple[object, int]:
    try:
        return _DECODER.raw_decode(text, _skip(text, pos))
    except json.JSONDecodeError as exc:
        raise JsonDefect(f"{exc.msg} at {_where(text, exc.pos)}") from None
    except RecursionError:
        raise JsonDefect(f"nested too deeply at {_where(text, pos)}") from None


def _elements(text: str, pos: int, end: list[int]) -> Iterator[object]:
    """The elements of the array opening at ``pos``; ``end[0]`` is then the position after it."""
    pos = _skip(text, _expect(text, pos, "["))
    if pos < len(text) and text[pos] == "]":
        end[0] = pos + 1
        return
    while True:
        value, pos = _value(text, pos)
        yield value
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == "]":
            end[0] = pos + 1
            return
        pos = _expect(text, pos, ",")


def stream_member(text: str, member: str, header: dict) -> Iterator[object]:
    """Yield the elements of array ``member`` of the top-level object in ``text`` (or of ``text``
    itself when it is an array), filling ``header`` with the object's other members as they are
    read. Raises JsonDefect (with line and column) on anything else, also after the last element."""
    pos = _skip(text, 0)
    end = [0]
    if pos < len(text) and text[pos] == "[":
        yield from _elements(text, pos, end)
        _end(text, end[0])
        return
    pos = _expect(text, pos, "{")
    found = False
    if _skip(text, pos) < len(text) and text[_skip(text, pos)] == "}":
        pos = _skip(text, pos) + 1
    else:
        while True:
            key, pos = _value(text, pos)
            if not isinstance(key, str):
                raise JsonDefect(f"expected a member name before {_where(text, pos)}")
            pos = _expect(text, pos, ":")
            if key == member and not found:
                found = True
                yield from _elements(text, pos, end)
                pos = end[0]
            else:
                header[key], pos = _value(text, pos)
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == "}":
                pos += 1
                break
            pos = _expect(text, pos, ",")
    _end(text, pos)
    if not found:
        raise JsonDefect(f"no {member} array")


def _end(text: str, pos: int) -> None:
    pos = _skip(text, pos)
    if pos != len(text):
        raise JsonDefect(f"extra data at {_where(text, pos)}")
