"""Decide whether a profile is consistent, so analyses and renderers never meet one that is not: every
table row of the right JSON types, every column one-dimensional with indexes in range and finite,
non-negative weights, and the metadata its readers use of the type they expect. A loaded file is
checked whole here; any failure is a ValueError that says what is wrong."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .profile import Profile
from .records import FRAME_KINDS, GIL_WAITING, SAMPLE_COLUMNS

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # a thread id is an unsigned 64-bit pthread handle
_MAX_DEPTH = 16  # nesting of a metadata value
# Times, durations and weights in seconds (and rates): 126 years, so that nanoseconds of a start time
# or of a total still fit in 64 bits where an export needs them. Weights in other units (perf event
# counts, samples) only need a total that stays finite, with room for arithmetic on it.
MAX_SECONDS = 4e9
MAX_COUNT = 1e300


def is_int(value: object) -> bool:
    """A JSON integer within 64 bits (not a bool)."""
    return type(value) is int and _INT_MIN <= value <= _INT_MAX


def is_number(value: object) -> bool:
    """A finite JSON number within 64 bits (not a bool)."""
    return is_int(value) or (type(value) is float and math.isfinite(value))


_FIELDS = {"s": lambda v: type(v) is str, "i": is_int, "n": is_number}
_FIELD_NAMES = {"s": "string", "i": "integer", "n": "number"}


def rows(table: object, name: str, fields: str) -> list[list[Any]]:
    """``table`` when it is a list of rows whose fields are the JSON types ``fields`` (one letter a field:
    ``s`` string, ``i`` integer, ``n`` finite number)."""
    if not isinstance(table, list):
        raise ValueError(f"{name} is not a list")
    checks = [_FIELDS[f] for f in fields]
    for k, row in enumerate(table):
        if not (
            isinstance(row, list)
            and len(row) == len(checks)
            and all(check(v) for check, v in zip(checks, row))
        ):
            expected = ", ".join(_FIELD_NAMES[f] for f in fields)
            raise ValueError(f"{name}: row {k} is not [{expected}]")
    return table


def counters(table: object) -> dict[str, tuple[list[float], list[float]]]:
    """``counters.json``: each name maps to a list of times and a list of values of the same length."""
    if not isinstance(table, dict):
        raise ValueError("counters.json is not an object")
    for name, series in table.items():
        if not (
            isinstance(series, list)
            and len(series) == 2
            and all(isinstance(s, list) and all(is_number(v) for v in s) for s in series)
            and len(series[0]) == len(series[1])
        ):
            raise ValueError(f"counters.json: {name!r} is not [[time, ...], [value, ...]] of numbers")
    return table


# The metadata a reader uses, by type; other keys pass (they are kept and written back as they are).
_META_NUMBERS = (
    "start_time",
    "window_start",
    "time_origin",
    "profiler_seconds",
    "profiled_seconds",
    "sampler_busy",
    "achieved_rate",
)
_META_NON_NEGATIVE = ("duration", "rate", "ticks", "skipped_lines")
_META_INTS = ("pid", "ticks", "skipped_lines", "version")
_META_STRINGS = ("format", "weight_unit", "collector", "source", "event", "sampler", "title", "cwd", "host")
_META_STRING_LISTS = ("argv", "hosts", "phase_rules")


def meta(value: object) -> dict[str, Any]:
    """``meta.json``: an object whose known keys have the types their readers expect."""
    if not isinstance(value, dict):
        raise ValueError("meta.json is not an object")
    for key in _META_NUMBERS + _META_NON_NEGATIVE:
        low = -MAX_SECONDS if key in _META_NUMBERS else 0
        if key in value and not (is_number(value[key]) and low <= value[key] <= MAX_SECONDS):
            raise ValueError(f"meta.json: {key} is not a number from {low:g} to {MAX_SECONDS:g}")
    for key in _META_INTS:
        if key in value and not is_int(value[key]):
            raise ValueError(f"meta.json: {key} is not an integer")
    for key in _META_STRINGS:
        if key in value and type(value[key]) is not str:
            raise ValueError(f"meta.json: {key} is not a string")
    for key in _META_STRING_LISTS:
        if key in value and not (isinstance(value[key], list) and all(type(v) is str for v in value[key])):
            raise ValueError(f"meta.json: {key} is not a list of strings")
    phases = value.get("scope_phases", {})
    if not (isinstance(phases, dict) and all(type(v) is str for v in phases.values())):
        raise ValueError("meta.json: scope_phases is not an object of strings")
    if not _shallow(value, _MAX_DEPTH):
        raise ValueError(f"meta.json: nested deeper than {_MAX_DEPTH} levels")
    return value


def _shallow(value: object, depth: int) -> bool:
    """True when ``value`` nests at most ``depth`` levels (the walk stops there: no deep recursion)."""
    if isinstance(value, (list, dict)):
        if depth == 0:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(_shallow(v, depth - 1) for v in items)
    return True


def check_profile(profile: Profile) -> None:
    """Raise ValueError when ``profile``'s tables do not reference each other consistently."""
    arrays = {name: getattr(profile, name) for name in (*SAMPLE_COLUMNS, "stack_parent", "stack_frame")}
    for name, array in arrays.items():
        if array.ndim != 1:
            raise ValueError(f"column {name} has {array.ndim} dimensions, expected 1")
    n = profile.num_samples
    for name in SAMPLE_COLUMNS:
        if len(arrays[name]) != n:
            raise ValueError(f"column {name} has {len(arrays[name])} rows, expected {n}")
    parent, frame = profile.stack_parent, profile.stack_frame
    if len(parent) != len(frame):
        raise ValueError("stack tables differ in length")
    ns = len(parent)
    if ns and (parent.max() >= ns or parent.min() < -1):
        raise ValueError("stack parent out of range")
    if ns and np.any(parent >= np.arange(ns)):
        raise ValueError("stack parent must precede its child")
    if ns and (frame.min() < 0 or frame.max() >= len(profile.frames)):
        raise ValueError("stack frame out of range")
    if n and (profile.sample_stack.min() < -1 or profile.sample_stack.max() >= ns):
        raise ValueError("sample stack out of range")
    if n and (profile.sample_thread.min() < 0 or profile.sample_thread.max() >= len(profile.threads)):
        raise ValueError("sample thread out of range")
    times = profile.sample_time  # its least and greatest (no copy of it): NaN fails both
    if n and not (-MAX_SECONDS <= times.min() and times.max() <= MAX_SECONDS):
        raise ValueError(f"sample times must be finite, within {MAX_SECONDS:g} s")
    unit = profile.meta.get("weight_unit", "seconds")
    most = MAX_SECONDS if unit == "seconds" else MAX_COUNT
    if n and profile.sample_gil.max() > GIL_WAITING:
        raise ValueError(f"sample_gil: states must be 0 to {GIL_WAITING}")
    for name in ("sample_wall", "sample_cpu"):
        weights = arrays[name]
        with np.errstate(over="ignore"):  # a total past a double is reported here, not warned about
            total = weights.sum()
        if n and not (weights.min() >= 0 and total <= most):
            raise ValueError(f"{name}: weights must be non-negative and total at most {most:g} {unit}")
    if any(f.kind not in FRAME_KINDS for f in profile.frames):
        raise ValueError(f"a frame's kind is not one of {', '.join(FRAME_KINDS)}")
    if any(not 0 <= m.thread < len(profile.threads) or not abs(m.time) <= MAX_SECONDS for m in profile.marks):
        raise ValueError("a mark's thread is out of range or its time is not finite")
    if profile.trace is not None:
        profile.trace.validate()
