"""Where a process's exported functions are, read from its ELF files and /proc/PID/maps: nothing
in the process is touched.

The injector calls a handful of functions in the target (libc's ``mmap`` and ``__errno_location``,
CPython's ``Py_IsInitialized``, ``Py_AddPendingCall`` and ``PyRun_SimpleString``); their
addresses are the load address of the object that defines them plus the symbol's value in the
object's dynamic symbol table.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

from ...errors import InjectUnavailable

PYTHON_FUNCTIONS = ("Py_IsInitialized", "Py_AddPendingCall", "PyRun_SimpleString")
LIBC_FUNCTIONS = ("mmap", "__errno_location")
_ELF_MAGIC = b"\x7fELF"
_SHT_DYNSYM = 11
_PT_LOAD = 1
_STT_FUNC = 2
_STT_GNU_IFUNC = 10


@dataclass(frozen=True)
class Mapping:
    """One file mapped into the process: its lowest address and the file offset mapped there."""

    path: str
    start: int
    offset: int
    inode: int


def mapped_files(pid: int) -> dict[str, Mapping]:
    """Each file mapped into ``pid`` by path, with its mapping at the lowest address."""
    found: dict[str, Mapping] = {}
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InjectUnavailable(f"cannot read the process's memory map ({exc.strerror})") from None
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        start = int(fields[0].split("-")[0], 16)
        path = fields[5]
        known = found.get(path)
        if known is None or start < known.start:
            found[path] = Mapping(path, start, int(fields[2], 16), int(fields[4]))
    return found


def _functions(data: mmap.mmap, names: tuple[str, ...]) -> tuple[dict[str, int], int, bool]:
    """The values of ``names`` among the defined functions of an ELF64 little-endian object's
    dynamic symbol table, its first loaded segment's page address, and whether it is position-
    independent (ET_DYN)."""
    if data[:4] != _ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    e_type = struct.unpack_from("<H", data, 16)[0]
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 54)
    first_load = None
    for i in range(e_phnum):
        p_type, _, _, p_vaddr = struct.unpack_from("<IIQQ", data, e_phoff + i * e_phentsize)
        if p_type == _PT_LOAD:
            first_load = p_vaddr & ~0xFFF
            break
    if first_load is None:
        raise ValueError("no loadable segment")
    wanted = {name.encode(): name for name in names}
    found: dict[str, int] = {}
    for i in range(e_shnum):
        base = e_shoff + i * e_shentsize
        sh_type = struct.unpack_from("<I", data, base + 4)[0]
        if sh_type != _SHT_DYNSYM:
            continue
        sh_offset, sh_size, sh_link, _, _, sh_entsize = struct.unpack_from("<QQIIQQ", data, base + 24)
        str_offset = struct.unpack_from("<Q", data, e_shoff + sh_link * e_shentsize + 24)[0]
        for pos in range(sh_offset, sh_offset + sh_size, sh_entsize or 24):
            st_name, st_info, _, st_shndx, st_value = struct.unpack_from("<IBBHQ", data, pos)
            if st_shndx == 0 or st_info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC):
                continue
            start = str_offset + st_name
            name = data[start : data.find(b"\0", start)]
            if name in wanted and st_info & 0xF == _STT_FUNC:
                found[wanted[name]] = st_value
    return found, first_load, e_type == 3


def resolve(pid: int) -> dict[str, int]:
    """The addresses in ``pid`` of the functions the injector calls; InjectUnavailable (one line)
    when one cannot be found."""
    addresses: dict[str, int] = {}
    mappings = mapped_files(pid)
    groups = (
        (PYTHON_FUNCTIONS, lambda base: "python" in base),
        (LIBC_FUNCTIONS, lambda base: base.startswith(("libc.so", "libc-", "ld-musl"))),
    )
    for names, candidate in groups:
        for mapping in mappings.values():
            if not candidate(os.path.basename(mapping.path)):
                continue
            found = functions_in(pid, mapping, names)
            if len(found) == len(names):
                addresses.update(found)
                break
        else:
            missing = ", ".join(n for n in names if n not in addresses)
            raise InjectUnavailable(f"the process exports no {missing} (a stripped or unusual build)")
    return addresses


def functions_in(pid: int, mapping: Mapping, names: tuple[str, ...]) -> dict[str, int]:
    """``names`` in one mapped file, at their addresses in ``pid``; empty when unreadable."""
    try:  # through the process's root: a container sees its own files
        with open(f"/proc/{pid}/root{mapping.path}", "rb") as fh:
            if os.fstat(fh.fileno()).st_ino != mapping.inode:
                return {}  # replaced since it was mapped
            with mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as data:  # read only what is parsed
                values, first_load, relocatable = _functions(data, names)
    except (OSError, ValueError, struct.error):
        return {}
    load_base = mapping.start - mapping.offset - first_load if relocatable else 0
    return {name: load_base + value for name, value in values.items()}
