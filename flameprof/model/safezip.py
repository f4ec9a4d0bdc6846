"""Read the members of a zip that may be corrupt or hostile, within bounds: ``zipfile`` raises a
zoo of exception types on bad input and trusts the sizes a header declares, so a few hundred bytes
could ask for gigabytes."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

# Deflate cannot expand a byte past about 1032 bytes: a member declaring more lies about its size.
_DEFLATE_RATIO = 1032
_SLACK = 1024
_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,  # an unknown zip version or compression
    RuntimeError,  # an encrypted member
    ValueError,
    KeyError,
    EOFError,
    OSError,
    OverflowError,
    struct.error,
)


class ZipDefect(ValueError):
    """The zip cannot be read: its message says why, for one error line."""


def read_members(data: bytes, names: tuple[str, ...], optional: bool = False) -> dict[str, bytes]:
    """The content of each member in ``names`` (each must be present, once), or ZipDefect. Only stored
    and deflated members are read, and only when their declared sizes fit in ``data``. ``optional``:
    the members are a group the file may lack as a whole (then ``{}``), not in part."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = {}
            for info in zf.infolist():
                if info.filename in infos:
                    raise ZipDefect(f"member {info.filename} appears twice")
                infos[info.filename] = info
            missing = [name for name in names if name not in infos]
            if optional and len(missing) == len(names):
                return {}
            if missing:
                raise ZipDefect(f"member {missing[0]} is missing")
            out = {}
            for name in names:
                info = infos[name]
                _check_sizes(info, len(data))
                out[name] = zf.read(info)
            return out
    except ZipDefect:
        raise
    except _ERRORS as exc:
        raise ZipDefect(f"corrupt zip ({exc})") from None


def _check_sizes(info: zipfile.ZipInfo, available: int) -> None:
    if info.flag_bits & 0x1:
        raise ZipDefect(f"member {info.filename} is encrypted")
    if info.compress_type == zipfile.ZIP_STORED:
        limit = info.compress_size
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        limit = info.compress_size * _DEFLATE_RATIO + _SLACK
    else:
        raise ZipDefect(f"member {info.filename} uses an unsupported compression ({info.compress_type})")
    if info.compress_size > available or info.file_size > limit:
        raise ZipDefect(
            f"member {info.filename} declares {info.file_size} bytes, more than the file could hold"
        )
