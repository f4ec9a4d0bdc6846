"""Read ``perf script`` text: collapse it with the semantics of FlameGraph's ``stackcollapse-perf.pl``
(perf_profile.py makes a Profile of it with this parser). It imports nothing of the model, so
``collapse perf`` starts as fast as the Perl script it stands in for.

The reader works on bytes, as the Perl script does, so odd encodings and sort order match it.
Speed comes from caching, since perf repeats itself: each distinct stack line is parsed once (and
lines that differ only in address share the work per symbol), and everything below a sample's
leaf line, which repeats far more often than whole samples do, is turned into its value once.
Blocks that are not a plain "header, then indented frame lines" (comments inside, a missing blank
line, ...) go through a line-by-line state machine that mirrors the Perl loop, so the output stays
identical on unusual input too.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Generic, NamedTuple, TypeVar, cast

from ...errors import FlameprofError
from . import perf_lines
from .skipped import note_skipped

if TYPE_CHECKING:
    from ..._perf import Collapser

# The patterns stackcollapse-perf.pl applies to header and frame lines are in perf_lines, matched in
# linear time; these others are the Perl script's own, in Python's (here equivalent) regex dialect.
# The usual stack line, "<ws>addr symbol+0xoff (module)" with no other parentheses: for it the
# pattern above captures exactly these groups, with the offset already stripped from the symbol.
_USUAL_FRAME = re.compile(rb"\s*(\w+)\s+([^\s(+][^(]*?)(?:\+0x[\da-f]+)? \(([^()]*)\)")
_OFFSET = re.compile(rb"\+0x[\da-f]+$")
_ARGS = re.compile(rb"\((?!anonymous namespace\)).*")
_JIT_MAP = re.compile(rb"/tmp/perf-\d+\.map")
_NOT_HEADER_START = frozenset(b" \t\r\n\f\v#")
# Read this much at a time: 8 MB chunks were each a fresh mapping from the allocator, page-faulted
# in and unmapped again (collapsing 200 MB: 21k page faults and 273 ms, against 12k and 254 ms).
CHUNK = 1 << 20
_MISSING, _BAD, _SKIP, _IMPURE = object(), object(), object(), object()  # line cache markers


class CollapseOptions(NamedTuple):
    """The options of stackcollapse-perf.pl that flameprof supports (``--all`` sets kernel and jit)."""

    pid: bool = False  # "comm-PID" roots
    tid: bool = False  # "comm-PID/TID" roots
    kernel: bool = False  # "_[k]" on kernel frames
    jit: bool = False  # "_[j]" on frames from /tmp/perf-PID.map
    addrs: bool = False  # "[module <addr>]" for unknown symbols
    event_filter: bytes = b""  # keep this event only; default: the first event seen
    inline: bool = False  # un-inline with addr2line
    context: bool = False  # with inline: ":file:line" after each function
    srcline: bool = False  # each frame line is followed by its source line (perf script -F+srcline)


DEFAULTS = CollapseOptions()  # stackcollapse-perf.pl with no option


# One parsed frame line: its frames as (func, module, raw symbol), in the order of an inline chain.
LineFrames = tuple[tuple[bytes, bytes, bytes], ...]


# The C reader of regular blocks: (data, start) -> (end, lines read, whether it stopped at a block)
FastBlocks = Callable[[bytes, int], tuple[int, int, bool]]


class _Rest(NamedTuple):
    value: object  # the caller's value of these lines, or _IMPURE
    bad: tuple[int, ...]  # indices of unrecognised lines
    nlines: int


def perf_number(digits: bytes) -> int:
    """A decimal field; absurdly long ones saturate instead of making huge integers."""
    return int(digits) if len(digits) <= 19 else 10**19


P = TypeVar("P")  # a stack line's piece
V = TypeVar("V")  # a sample's value


class PerfScriptParser(Generic[P, V]):
    """Turns ``perf script`` output into samples ``(header, pname, period, value)``.

    The caller says what a sample's value is: ``part`` turns one stack line's frames into a piece,
    ``extend(value, piece)`` adds a piece leafward of a value, starting from ``empty`` at the root
    (collapsed text and ``text + ";f"``, or stack ids and ``stack_id(frames, parent)``). Pieces are
    cached per distinct line and the values of everything below the leaf line per distinct text.
    Unrecognised lines are counted (``skipped``, ``first_bad``), or raise at the first one when
    ``strict``.
    """

    def __init__(
        self,
        part: Callable[[LineFrames], P],
        extend: Callable[[V, P], V],
        empty: V,
        options: CollapseOptions = DEFAULTS,
        strict: bool = False,
        source: str = "<stdin>",
        flush_at_end: bool = False,
    ) -> None:
        self.part = part
        self.extend = extend
        self.empty = empty
        self.options = options
        self.strict = strict
        self.source = source
        self.flush_at_end = flush_at_end
        self.event_filter = options.event_filter
        self.event_defaulted = False
        self.other_events: set[bytes] = set()
        self.skipped = 0
        self.first_bad: int | None = None
        self._line_cache: tuple[dict, dict] = ({}, {})  # per java flag: line -> piece or a marker
        self._rest_cache: tuple[dict, dict] = ({}, {})  # per java flag: lines below the leaf -> _Rest
        self._symbol_cache: tuple[dict, dict] = ({}, {})  # per java flag: (symbol, module) -> piece
        self._inliner = None
        if options.inline:  # addr2line runs as a subprocess: imported only for it
            from .perf_inline import Inliner

            self._inliner = Inliner(options.context)
        # state of the line-by-line machine (only used inside a slow block)
        self._pname: bytes | None = None
        self._period = 1
        self._header: bytes = b""
        self._parts: list[LineFrames] = []
        self._awaiting: tuple[list, list[int]] | None = None  # srcline: frames, [lines read, lines due]
        self._lines_done = 0  # lines in input consumed before the current chunk

    # -- public ----------------------------------------------------------------------------
    def samples(
        self, chunks: Iterable[bytes], fast: FastBlocks | None = None
    ) -> Iterator[tuple[bytes, bytes, int, V]]:
        """Yield ``(header line, pname, period, value)`` per kept sample, in input order. ``fast`` reads
        the regular blocks itself (they are not yielded) and hands each other one back to this reader."""
        leftover = b""
        for chunk in chunks:
            if not chunk:
                continue
            if fast is not None:
                leftover = yield from self._mixed(leftover, chunk, fast)
                continue
            data = leftover + chunk if leftover else chunk
            blocks = data.split(b"\n\n")
            leftover = blocks.pop()
            yield from self._blocks(blocks)
            self._lines_done += data.count(b"\n") - leftover.count(b"\n")
        if leftover:
            # No blank line after it: the Perl script drops this last sample; an import keeps it.
            lines = leftover.split(b"\n")
            if lines[-1] == b"":
                lines.pop()
            yield from self._slow(lines, 0, flush=False)
        self._end_srcline()
        if self.flush_at_end:
            yield from self._slow([], 0, flush=True)

    def report(self) -> None:
        """Print the one warning line about skipped event types, if any."""
        if self.other_events and self.event_defaulted:
            others = ", ".join(sorted(e.decode("utf-8", "replace") for e in self.other_events))
            print(
                f"flameprof: warning: {self.source}: several event types; kept only "
                f"{self.event_filter.decode('utf-8', 'replace')} (skipped {others})",
                file=sys.stderr,
            )

    # -- block processing --------------------------------------------------------------------
    def _mixed(
        self, leftover: bytes, chunk: bytes, fast: FastBlocks
    ) -> Generator[tuple[bytes, bytes, int, V], None, bytes]:
        """The complete blocks of ``leftover + chunk`` read by ``fast`` up to each block it leaves to
        ``_blocks``; returns what follows the last blank line. The chunk is not copied: only the block
        that ``leftover`` begins is joined to its end in ``chunk``."""
        data, pos = chunk, 0
        if leftover:
            if leftover[-1:] == b"\n" and chunk[:1] == b"\n":
                cut = 1
            else:
                cut = chunk.find(b"\n\n") + 2
                if cut < 2:
                    return leftover + chunk
            rest = yield from self._mixed(b"", leftover + chunk[:cut], fast)
            assert not rest
            pos = cut
        while True:
            pos, lines, declined = fast(data, pos)
            self._lines_done += lines
            if not declined:
                return data[pos:]
            end = data.index(b"\n\n", pos)
            yield from self._blocks([data[pos:end]])
            self._lines_done += data.count(b"\n", pos, end) + 2
            pos = end + 2

    def _blocks(self, blocks: list[bytes]) -> Iterator[tuple[bytes, bytes, int, V]]:
        """Each block is followed by a blank line. Fast path: a header line, a leaf line (its piece
        cached) and the lines below it (their value cached); anything else takes the slow path, and
        with ``srcline`` every block does: a frame line's source lines are read blindly (blank lines
        and headers included), as the Perl script reads them."""
        header_match = None if self.options.srcline else perf_lines.header
        line_caches = self._line_cache
        rest_caches = self._rest_cache
        extend = self.extend
        offset = 0  # lines before this block, within the current chunk
        for block in blocks:
            nl = block.find(b"\n")
            header = block if nl < 0 else block[:nl]
            m = (
                header_match(header)
                if header_match and header and header[0] not in _NOT_HEADER_START
                else None
            )
            if m is not None:
                java = header[:4] == b"java"
                if nl < 0:
                    leaf, rest = None, None
                else:
                    nl2 = block.find(b"\n", nl + 1)
                    leaf = block[nl + 1 :] if nl2 < 0 else block[nl + 1 : nl2]
                    rest = None if nl2 < 0 else block[nl2 + 1 :]
                below = rest_caches[java].get(rest)
                if below is None:
                    below = self._rest(rest, java)
                if leaf is None:
                    piece = _SKIP
                else:
                    piece = line_caches[java].get(leaf, _MISSING)
                    if piece is _MISSING:
                        piece = self._line_piece(leaf, java)
                if below.value is not _IMPURE and piece is not _IMPURE:
                    if piece is _BAD:
                        self._bad(offset + 2, 1)
                    if below.bad:
                        self._bad(offset + 3 + below.bad[0], len(below.bad))
                    kept = self._header_line(header, m)
                    if kept is not None:
                        self._pname = None
                        # the markers (_IMPURE, _BAD, _SKIP) are ruled out: a value and a piece remain
                        value = cast(
                            V,
                            below.value
                            if piece is None or piece is _BAD or piece is _SKIP
                            else extend(cast(V, below.value), cast(P, piece)),
                        )
                        yield header, kept, self._period, value
                    offset += below.nlines + (2 if leaf is None else 3)
                    continue
            lines = block.split(b"\n")
            yield from self._slow(lines, offset, flush=True)
            offset += len(lines) + 1

    def _line_piece(self, line: bytes, java: bool) -> object:
        """The cached piece of one line: a piece, None (no frame), _BAD, _SKIP (comment) or _IMPURE.
        Lines of the usual shape share pieces per symbol and module (they differ in address only)."""
        if line[:1] == b"#":
            piece = _SKIP
        elif not line or line[0] not in _NOT_HEADER_START:
            piece = _IMPURE  # blank or possibly a header: needs the state machine
        else:
            m = None if self._inliner else _USUAL_FRAME.fullmatch(line)
            if m is None:
                parsed, _reads = self._frame_line(line, java)
                piece = _BAD if parsed == () else None if parsed is None else self.part(parsed)
            else:
                pc, sym, mod = m.groups()
                key = (sym, mod, pc) if self.options.addrs and b"[unknown]" in sym else (sym, mod)
                symbols = self._symbol_cache[java]
                piece = symbols.get(key, _MISSING)
                if piece is _MISSING:
                    parsed = self._frames(pc, sym, mod, java)
                    piece = symbols[key] = None if parsed is None else self.part(parsed)
        self._line_cache[java][line] = piece
        return piece

    def _rest(self, rest: bytes | None, java: bool) -> _Rest:
        """Value of the lines below the leaf (root-first), computed once per distinct text."""
        lines = [] if rest is None else rest.split(b"\n")
        cache = self._line_cache[java]
        value = self.empty
        bad: list[int] = []
        extend = self.extend
        for i in range(len(lines) - 1, -1, -1):
            line = lines[i]
            piece = cache.get(line, _MISSING)
            if piece is _MISSING:
                piece = self._line_piece(line, java)
            if piece is _IMPURE:
                value = _IMPURE
                break
            if piece is _BAD:
                bad.append(i)
            elif piece is not None and piece is not _SKIP:
                value = extend(value, cast(P, piece))  # not a marker: _IMPURE and _BAD are out
        entry = _Rest(value, tuple(sorted(bad)), len(lines))
        self._rest_cache[java][rest] = entry
        return entry

    def _slow(self, lines: list[bytes], offset: int, flush: bool) -> Iterator[tuple[bytes, bytes, int, V]]:
        """The Perl main loop, line by line; ``flush`` adds the blank line that ended the block."""
        if flush:
            lines = lines + [b""]
        for i, line in enumerate(lines):
            if self._awaiting is not None:
                self._srcline(line)
                continue
            if line[:1] == b"#":
                continue
            if not line:
                if self._pname is not None:
                    value = self.empty
                    for frames in reversed(self._parts):
                        value = self.extend(value, self.part(frames))
                    yield self._header, self._pname, self._period, value
                    self._parts = []
                    self._pname = None
                continue
            m = perf_lines.header(line)
            if m is not None:
                self._header_line(line, m)
                continue
            if perf_lines.frame(line) is None:
                self._bad(offset + i + 1, 1)
                continue
            if self._pname is None:
                continue
            parsed, reads = self._frame_line(line, self._pname[:4] == b"java")
            if parsed and self.options.srcline and reads:
                self._awaiting = (list(parsed), [0, reads])
            elif parsed:
                self._parts.append(parsed)

    def _srcline(self, line: bytes) -> None:
        """The next source line of the awaiting frame line: ``func:file:line`` (bracketed parts such as
        ``[kernel.kallsyms][addr]`` removed, nothing added when that leaves nothing)."""
        assert self._awaiting is not None
        frames, progress = self._awaiting
        src = perf_lines.without_brackets(line).strip()
        if src:
            func, mod, raw = frames[progress[0]]
            frames[progress[0]] = (func + b":" + src, mod, raw)
        progress[0] += 1
        if progress[0] == progress[1]:
            self._end_srcline()

    def _end_srcline(self) -> None:
        """The awaiting frame line joins the stack (at the end of input, without the missing lines)."""
        if self._awaiting is not None:
            self._parts.append(tuple(self._awaiting[0]))
            self._awaiting = None

    def _bad(self, line_in_chunk: int, count: int) -> None:
        number = self._lines_done + line_in_chunk
        if self.strict:
            raise FlameprofError(f"{self.source}:{number}: unrecognized perf script line")
        self.skipped += count
        if self.first_bad is None or number < self.first_bad:
            self.first_bad = number

    # -- the two kinds of line -----------------------------------------------------------------
    def _header_line(self, line: bytes, m: perf_lines.Header) -> bytes | None:
        """An event record start: sets pname and period unless the event is filtered out."""
        comm, pid, tid = m.comm, m.pid, m.tid
        if tid is None or tid == b"0":
            tid, pid = pid, b"?"
        period = b""
        ev = perf_lines.EVENT.search(line)
        if ev is not None:
            period, event = ev.groups()
            if not self.event_filter:
                self.event_filter = event
                self.event_defaulted = True
            elif event != self.event_filter:
                self.other_events.add(event)
                return None
        self._period = perf_number(period) if period and period != b"0" else 1
        opts = self.options
        if opts.tid:
            pname = comm + b"-" + pid + b"/" + tid
        elif opts.pid:
            pname = comm + b"-" + pid
        else:
            pname = comm
        self._pname = pname.replace(b" ", b"_")
        self._header = line
        return self._pname

    def _frame_line(self, line: bytes, java: bool) -> tuple[LineFrames | None, int]:
        """One stack line -> its frames (an inline chain ``a->b`` gives several; None: no frame,
        (): not a stack line) and how many source lines follow it with ``srcline``: one per frame
        up to the first fully unknown one (``[unknown]`` in ``[unknown]``), none for an addr2line chain."""
        parts = perf_lines.frame(line)
        if parts is None:
            return (), 0
        pc, rawfunc, mod = parts
        if self._inliner:
            chain = self._inliner.chain(pc, rawfunc, mod)
            if chain is not None:
                return ((chain, mod, rawfunc),), 0
        if b"+0x" in rawfunc:
            rawfunc = _OFFSET.sub(b"", rawfunc, count=1)
        if rawfunc[:1] == b"(":
            return None, 0
        frames = self._frames(pc, rawfunc, mod, java)
        if frames is None:
            return None, 0
        if mod == b"[unknown]":
            return frames, next((i for i, f in enumerate(frames) if f[2] == b"[unknown]"), len(frames))
        return frames, len(frames)

    def _frames(self, pc: bytes, rawfunc: bytes, mod: bytes, java: bool) -> LineFrames | None:
        """The frames of a symbol whose offset is already stripped."""
        if b"->" not in rawfunc:
            return ((self._func(rawfunc, pc, mod, java, False), mod, rawfunc),) if rawfunc else None
        pieces = rawfunc.split(b"->")
        while pieces and not pieces[-1]:
            pieces.pop()
        out = tuple((self._func(raw, pc, mod, java, i > 0), mod, raw) for i, raw in enumerate(pieces))
        return out or None

    def _func(self, func: bytes, pc: bytes, mod: bytes, java: bool, inlined: bool) -> bytes:
        """The tidied, annotated name of one frame, as stackcollapse-perf.pl writes it."""
        opts = self.options
        if func == b"[unknown]":
            func = mod.rpartition(b"/")[2] if mod != b"[unknown]" else b"unknown"
            func = b"[" + func + b" <" + pc + b">]" if opts.addrs else b"[" + func + b"]"
        if b";" in func:
            func = func.replace(b";", b":")
        if b"(" in func and not perf_lines.is_go_method(func):
            func = _ARGS.sub(b"", func, count=1)
        if b"'" in func or b'"' in func:
            func = func.translate(None, b"\"'")
        if java and b"/" in func and func[:1] == b"L":
            func = func[1:]
        if inlined:
            if b"_[i]" not in func:
                func += b"_[i]"
        elif opts.kernel and (mod[:1] == b"[" or mod.endswith(b"vmlinux")) and b"unknown" not in mod:
            func += b"_[k]"
        elif opts.jit and _JIT_MAP.search(mod) and b"_[j]" not in func:
            func += b"_[j]"
        return func


def _collapsed_piece(parsed: LineFrames) -> bytes:
    return b"".join(b";" + f[0] for f in parsed)


def _append(text: bytes, piece: bytes) -> bytes:
    return text + piece


def read_chunks(stream: IO[bytes], size: int = CHUNK) -> Iterator[bytes]:
    while True:
        chunk = stream.read(size)
        if not chunk:
            return
        yield chunk


def collapse_perf(
    chunks: Iterable[bytes],
    options: CollapseOptions = DEFAULTS,
    strict: bool = False,
    source: str = "<stdin>",
    native: bool = True,
) -> dict[bytes, int]:
    """Collapsed stacks (``stack -> summed period``) exactly as stackcollapse-perf.pl computes them;
    ``native=False`` keeps to the Python reader (the C one reads the regular samples otherwise)."""
    parser = PerfScriptParser(_collapsed_piece, _append, b"", options, strict, source)
    out: dict[bytes, int] = {}
    get = out.get
    collapser = _native_collapser(parser, out) if native else None
    fast: FastBlocks | None = None
    if collapser is not None:
        fast = lambda data, start: collapser.feed(data, start, parser.event_filter)  # noqa: E731
    for _header, pname, period, body in parser.samples(chunks, fast):
        key = pname + body
        out[key] = get(key, 0) + period
    if collapser is not None:
        collapser.flush()  # the C reader's sums, into the same dict
    note_skipped(None, source, parser.skipped, f"line {parser.first_bad}", "unrecognized perf script line")
    parser.report()
    return out


def _native_collapser(parser: PerfScriptParser[bytes, bytes], out: dict[bytes, int]) -> Collapser | None:
    """The C reader of regular samples (``flameprof._perf.Collapser``), which sums their periods and
    adds them to ``out`` when flushed; None when it is not built or the options need what only the
    Python reader does (addr2line, source lines)."""
    options = parser.options
    if options.inline or options.srcline:
        return None
    try:
        from ..._perf import Collapser
    except ImportError:
        return None
    o = options
    return Collapser(out, parser.other_events, o.pid, o.tid, o.kernel, o.jit, o.addrs)


def format_collapsed(collapsed: dict[bytes, int]) -> Iterator[bytes]:
    """Output lines sorted bytewise, as Perl's ``sort { $a cmp $b }`` does."""
    for key in sorted(collapsed):
        yield key + b" " + str(collapsed[key]).encode() + b"\n"
