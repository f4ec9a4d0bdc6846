"""Read one ``.npy`` column of a ``.flameprof`` file without trusting its header: ``np.load`` believes
the shape it is told (a few bytes can ask for terabytes) and evaluates the header as Python literals.
Here the header must be the one-dimensional integer column flameprof writes, and its shape must
match the bytes that follow before anything is allocated."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

_MAGIC = b"\x93NUMPY"
_MAX_HEADER = 10_000  # numpy's own limit for headers it reads
_HEADER = re.compile(
    r"\{\s*'descr':\s*'(?P<descr>[<>|=]?[iuf][1248])',\s*'fortran_order':\s*(?:False|True),"
    r"\s*'shape':\s*\((?P<shape>[0-9, ]{0,80})\),?\s*\}\s*"
)


def read_column(data: bytes, name: str, dtype: type[np.integer[Any]] | type[np.float64]) -> np.ndarray:
    """The values of ``name`` (a ``.npy`` member) as ``dtype`` (an integer type, or float64 for the
    traced window's times: finite values only); ValueError says what is wrong."""
    if data[:6] != _MAGIC or len(data) < 10:
        raise ValueError(f"{name} is not a .npy array")
    major = data[6]
    size_bytes = 2 if major == 1 else 4 if major in (2, 3) else 0
    if not size_bytes:
        raise ValueError(f"{name}: unsupported .npy version {major}")
    start = 8 + size_bytes
    header_len = int.from_bytes(data[8:start], "little")
    if header_len > _MAX_HEADER or start + header_len > len(data):
        raise ValueError(f"{name}: truncated or oversized .npy header")
    m = _HEADER.fullmatch(data[start : start + header_len].decode("latin1"))
    if m is None:
        raise ValueError(f"{name}: not a column of integers (.npy header {data[start : start + 60]!r})")
    dims = [d.strip() for d in m.group("shape").split(",") if d.strip()]
    if len(dims) != 1 or not dims[0].isdigit():
        raise ValueError(f"{name}: has {len(dims)} dimensions, expected 1")
    source = np.dtype(m.group("descr"))
    if (source.kind == "f") != (np.dtype(dtype).kind == "f") or (source.kind == "f" and source.itemsize < 4):
        raise ValueError(f"{name}: holds {source.name}, expected {np.dtype(dtype).name}")
    if source.kind == "u" and source.itemsize == 8:
        raise ValueError(f"{name}: unsigned 64-bit values are not supported")
    count, body = int(dims[0]), len(data) - start - header_len
    if count * source.itemsize != body:
        raise ValueError(f"{name}: shape ({count},) does not match its {body} bytes of data")
    values = np.frombuffer(data, dtype=source, count=count, offset=start + header_len)
    if not issubclass(dtype, np.integer):  # float64, and so is the source (the kinds match: see above)
        if not np.isfinite(values).all():
            raise ValueError(f"{name}: values must be finite")
        return _as(values, dtype)
    info = np.iinfo(dtype)
    if count and (values.min() < info.min or values.max() > info.max):
        raise ValueError(f"{name}: values out of range for {np.dtype(dtype).name}")
    return _as(values, dtype)


def _as(values: np.ndarray, dtype: type[np.integer[Any]] | type[np.float64]) -> np.ndarray:
    """``values`` as ``dtype``: a read-only view of the member's bytes where it is one already (a copy
    of a column of millions is mostly the page faults of fresh memory)."""
    return values if values.dtype == np.dtype(dtype) else values.astype(dtype)
