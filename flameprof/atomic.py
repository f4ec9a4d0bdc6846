"""Writing output files: a regular file appears at its path only once complete (temporary file,
then rename), and nothing but a regular file is ever replaced.

A path that names a FIFO or a device (``-o /dev/null``, ``-o /dev/stdout``, a named pipe), or a
symbolic link to one, is written to directly; a symbolic link to a regular file keeps the link
and has its target replaced; anything else that is not a regular file (a directory, a socket) is
refused with an OSError. Text is UTF-8, with what UTF-8 cannot encode (a lone surrogate in a
function name) written as a backslash escape rather than failing the write.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

TEXT = {"encoding": "utf-8", "errors": "backslashreplace"}


def _encoding(mode: str) -> str | None:
    return None if "b" in mode else TEXT["encoding"]


def _errors(mode: str) -> str | None:
    return None if "b" in mode else TEXT["errors"]


def _umask() -> int:
    """The process umask, read without os.umask's set-and-restore (which would race other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def encode_text(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates as backslash escapes."""
    return text.encode("utf-8", "backslashreplace")


def write_text(path: str, text: str, private: bool = False) -> None:
    """Write ``text`` to ``path`` (see the module's docstring)."""
    write_bytes(path, encode_text(text), private)


def write_bytes(path: str, data: bytes, private: bool = False) -> None:
    """Write ``data`` to ``path`` (see the module's docstring); ``private`` files are mode 0600."""
    with atomic_file(path, "wb", private) as fh:
        fh.write(data)


@contextmanager
def atomic_file(path: str, mode: str = "w", private: bool = False) -> Iterator[IO[Any]]:
    """A file to stream into at ``path`` (see the module's docstring)."""
    target = os.path.realpath(path)  # a symbolic link stays; what it points to is written
    try:
        kind = os.stat(target).st_mode
    except FileNotFoundError:
        kind = stat.S_IFREG
    if stat.S_ISFIFO(kind) or stat.S_ISCHR(kind) or stat.S_ISBLK(kind):
        with open(target, mode, encoding=_encoding(mode), errors=_errors(mode)) as fh:
            yield fh
        return
    if not stat.S_ISREG(kind):
        raise OSError(errno.EISDIR if stat.S_ISDIR(kind) else errno.EINVAL, "not a regular file", path)
    fd, tmp = tempfile.mkstemp(prefix=".flameprof-", suffix=".tmp", dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, mode, encoding=_encoding(mode), errors=_errors(mode)) as fh:
            yield fh
        if not private:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
