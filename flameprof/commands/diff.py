"""``flameprof diff``: a differential flame graph of NEW against BASE, and the largest changes as a table."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import FlameprofError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="differential flame graph and table of changes between two profiles",
        description="Compare two profiles (.flameprof or collapsed stacks): writes NEW's flame graph "
        "coloured by change (red grew, blue shrank) and prints the largest regressions "
        "and improvements by function, layer and phase.",
    )
    p.add_argument("base", metavar="BASE", help="the baseline profile")
    p.add_argument("new", metavar="NEW", help="the profile to compare with it")
    p.add_argument(
        "-o", "--output", default="diff.svg", metavar="SVG", help="the differential graph (default: diff.svg)"
    )
    p.add_argument(
        "--normalize",
        action="store_true",
        help="compare shares of each profile's total instead of absolute time",
    )
    p.add_argument(
        "--mode", choices=("wall", "cpu", "samples"), default="wall", help="weight compared (default: wall)"
    )
    p.add_argument(
        "--view", default="code", help="stacks compared in the graph: code (default), layers or phases"
    )
    p.add_argument(
        "--table", choices=("text", "markdown"), default="text", help="format of the table on stdout"
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default: 10)")
    p.add_argument("--title", help="graph title")
    p.add_argument(
        "--minwidth", type=float, default=0.1, metavar="PX", help="omit frames narrower than PX pixels"
    )
    p.add_argument("--icicle", action="store_true", help="draw the graph top-down")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.diff import changes
    from ..analyze.tree import tree_unit
    from ..analyze.views import VIEWS
    from ..atomic import write_text
    from ..collect.importers.load import load_input
    from ..render.diff_svg import render_diff_svg
    from ..render.diff_table import diff_table

    if args.view not in VIEWS:
        raise FlameprofError(f"unknown view {args.view!r} (expected one of {', '.join(VIEWS)})")
    if args.top < 1:
        raise FlameprofError("--top must be at least 1")
    base, new = load_input(args.base), load_input(args.new)
    units = {tree_unit(base, args.mode), tree_unit(new, args.mode)}
    if len(units) > 1 and not args.normalize:
        raise FlameprofError(
            "one profile has times and the other sample counts; compare them with --normalize "
            "(or --mode samples)"
        )
    svg = render_diff_svg(
        base,
        new,
        mode=args.mode,
        view=args.view,
        normalize=args.normalize,
        title=args.title,
        minwidth=args.minwidth,
        icicle=args.icicle,
    )
    try:
        write_text(args.output, svg)
    except OSError as exc:
        raise FlameprofError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    unit = "share" if args.normalize else units.pop()
    sys.stdout.write(diff_table(changes(base, new, args.mode, args.normalize), unit, args.table, args.top))
    print(f"flameprof: wrote {args.output} ({os.path.getsize(args.output) / 1e3:.0f} kB)", file=sys.stderr)
    return 0
