"""``flameprof collapse perf``: ``perf script`` text in, collapsed stacks out, for pipelines.

Output is byte-for-byte what FlameGraph's ``stackcollapse-perf.pl`` prints for the same options.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..collect.importers.perf_script import CollapseOptions, collapse_perf, format_collapsed, read_chunks
from ..errors import FlameprofError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collapse",
        help="collapse perf script output into folded stacks (stackcollapse-perf.pl)",
        description="Collapse profiler text output into one 'frame;frame;... count' line per distinct stack.",
    )
    formats = p.add_subparsers(dest="format", metavar="FORMAT", parser_class=type(p))
    formats.required = True
    perf = formats.add_parser(
        "perf",
        help="perf script output, as stackcollapse-perf.pl collapses it",
        description="Read perf script output and print what stackcollapse-perf.pl prints "
        "for it: counts are sample periods when perf prints them.",
    )
    perf.add_argument(
        "input", nargs="?", default="-", metavar="INPUT", help="perf script output (default: stdin)"
    )
    perf.add_argument("--pid", action="store_true", help="add the PID to process names (comm-PID)")
    perf.add_argument("--tid", action="store_true", help="add PID and TID to process names (comm-PID/TID)")
    perf.add_argument("--kernel", action="store_true", help="mark kernel frames with _[k]")
    perf.add_argument("--jit", action="store_true", help="mark JIT frames (/tmp/perf-PID.map) with _[j]")
    perf.add_argument("--all", action="store_true", help="all annotations (--kernel --jit)")
    perf.add_argument("--addrs", action="store_true", help="show raw addresses where a symbol is unknown")
    perf.add_argument(
        "--inline", action="store_true", help="un-inline with addr2line (slow: one call per address)"
    )
    perf.add_argument("--context", action="store_true", help="with --inline: add file:line to each function")
    perf.add_argument(
        "--srcline",
        action="store_true",
        help="input has a source line after each frame line (perf script -F+srcline): "
        "frames become func:file:line",
    )
    perf.add_argument(
        "--event-filter",
        default="",
        metavar="EVENT",
        help="keep only this event, as perf prints it (e.g. cpu-clock:ppp); default: the first seen",
    )
    perf.add_argument("--strict", action="store_true", help="stop at the first unrecognized line")
    perf.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = CollapseOptions(
        pid=args.pid,
        tid=args.tid,
        kernel=args.kernel or args.all,
        jit=args.jit or args.all,
        addrs=args.addrs,
        event_filter=os.fsencode(args.event_filter),
        inline=args.inline,
        context=args.context,
        srcline=args.srcline,
    )
    source = "<stdin>" if args.input == "-" else args.input
    try:
        stream = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    except OSError as exc:
        raise FlameprofError(f"cannot read {args.input}: {exc.strerror or exc}") from None
    with stream:
        collapsed = collapse_perf(read_chunks(stream), options, args.strict, source)
    out = sys.stdout.buffer
    out.writelines(format_collapsed(collapsed))
    out.flush()
    return 0
