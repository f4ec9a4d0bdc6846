"""``flameprof report PROFILE``: phases, steps, layers, top functions and the input-bound verdict."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="phase breakdown, steps, top layers and the input-bound verdict",
        description="Report where a profiled training or inference loop spent its time.",
    )
    p.add_argument(
        "profile", metavar="PROFILE", help="a .flameprof file or collapsed stacks ('-' reads stdin)"
    )
    p.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="output format (default: text); json has stable keys for scripts and CI",
    )
    p.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="NAME=PATTERN",
        help="add a phase rule, e.g. data=mytrain.py:load_batch (repeatable; beats built-in rules)",
    )
    p.add_argument(
        "--mode",
        choices=("wall", "cpu"),
        default="wall",
        help="weight of the top-functions table (phases and steps are always wall time)",
    )
    p.add_argument(
        "--idle",
        action="store_true",
        help="count the idle waits of threads other than the loop's in the top functions "
        "(left out by default: helper threads that sleep all run long)",
    )
    p.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="also show step N (1 is the first) beside the steady-state average: its phases, layers "
        "and, when the traced window covers it, ops",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.phases import parse_rule
    from ..analyze.report import report_of
    from ..collect.importers.load import load_input
    from ..errors import FlameprofError
    from ..render.report import render_report

    rules = [parse_rule(text) for text in args.phase]  # malformed rules fail before the profile is read
    profile = load_input(args.profile)
    try:
        report = report_of(profile, rules, args.mode, args.idle, args.profile, args.step)
    except ValueError as exc:  # no such step
        raise FlameprofError(f"{args.profile}: {exc}") from None
    text = render_report(report, args.format)
    if args.output:
        from ..atomic import write_text

        try:
            write_text(args.output, text)
        except OSError as exc:
            raise FlameprofError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0
