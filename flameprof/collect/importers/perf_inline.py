"""Un-inlining for ``flameprof collapse perf --inline``, as ``stackcollapse-perf.pl --inline`` does it:
binutils' addr2line turns an (address, module) into the chain of functions inlined at that
address, outermost first; when it knows nothing, ``nm`` locates ``symbol+0xoffset`` instead."""

from __future__ import annotations

import re
import subprocess

# Modules the Perl script never asks addr2line about (JIT maps, the kernel, [vdso] and such).
_NOT_A_FILE = re.compile(rb"(perf-\d+.map|kernel\.|\[[^\]]+\])")
_DISCRIMINATOR = re.compile(rb" \(discriminator \S+\)")
_SYMBOL_OFFSET = re.compile(rb"(.+)\+0x([0-9a-f]+)\Z", re.S)
_UNKNOWN = (b"", b"??", b"??:??:0")


def _output(cmd: list[bytes]) -> bytes:
    """Standard output of ``cmd``, empty when it cannot run (as the Perl backticks would give)."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout
    except OSError:
        return b""


class Inliner:
    """Cached addr2line lookups; ``context`` appends ``:file:line`` to each function."""

    def __init__(self, context: bool = False) -> None:
        self.context = context
        self._chains: dict[tuple[bytes, bytes], bytes] = {}
        self._nm: dict[bytes, bytes] = {}

    def chain(self, pc: bytes, rawfunc: bytes, mod: bytes) -> bytes | None:
        """``outer;...;inner`` for the line's address, or None when the line is collapsed as usual."""
        if _NOT_A_FILE.search(mod):
            return None
        key = (pc, mod)
        found = self._chains.get(key)
        if found is None:
            found = self._chains[key] = self._lookup(pc, rawfunc, mod)
        return None if found in _UNKNOWN else found

    def _lookup(self, pc: bytes, rawfunc: bytes, mod: bytes) -> bytes:
        out = _output([b"addr2line", b"-a", pc, b"-e", mod, b"-i", b"-f", b"-s", b"-C"])
        first = out.find(b"\n")
        if first >= 0:
            out = out[first + 1 :]  # the address line
        if b"??\n??:0" in out:
            m = _SYMBOL_OFFSET.match(rawfunc)
            if m:
                listing = self._nm.get(mod)
                if listing is None:
                    listing = self._nm[mod] = _output([b"nm", mod])
                base = re.search(rb"^([0-9a-f]+) . " + re.escape(m.group(1)) + rb"$", listing, re.M)
                if base:
                    return self._lookup(b"0x%x" % (int(base.group(1), 16) + int(m.group(2), 16)), b"", mod)
        lines = out.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        chain: list[bytes] = []
        function = b""
        for line in lines:  # function, file:line pairs, innermost first
            line = _DISCRIMINATOR.sub(b"", line, count=1)
            if function == b"":
                function = line
            else:
                chain.append(function + b":" + line if self.context else function)
                function = b""
        return b";".join(reversed(chain))
