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
        choices=("text", "markdown", "json", "csv"),
        default="text",
        help="output format (default: text); json has stable keys for scripts and CI; csv with --ops",
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
    ops = p.add_argument_group("the op table of the traced window (--ops)")
    ops.add_argument(
        "--ops",
        action="store_true",
        help="instead of the report, the traced window's ops: calls, self and total time (the device's "
        "when it saw one), FLOPs, FLOP/s, bytes moved, bandwidth, shapes and layer, per traced step",
    )
    ops.add_argument("--top", type=int, metavar="N", help="the first N rows only")
    ops.add_argument(
        "--aggregate-by", choices=("name", "type", "layer"), default="name", help="(default: name)"
    )
    ops.add_argument(
        "--order-by", choices=("time", "flops", "memory", "bandwidth"), default="time", help="(default: time)"
    )
    ops.add_argument(
        "--min-time", type=float, default=0.0, metavar="MS", help="rows of at least MS self time a step"
    )
    ops.add_argument("--match", metavar="REGEX", help="rows whose op, type or layer matches REGEX")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.phases import parse_rule
    from ..analyze.report import report_of
    from ..collect.importers.load import load_input
    from ..errors import FlameprofError
    from ..render.report import render_report

    rules = [parse_rule(text) for text in args.phase]  # malformed rules fail before the profile is read
    if args.format == "csv" and not args.ops:
        raise FlameprofError("--format csv is the op table's: add --ops")
    profile = load_input(args.profile)
    if args.ops:
        return _write(args, _op_table(args, profile))
    try:
        report = report_of(profile, rules, args.mode, args.idle, args.profile, args.step)
    except ValueError as exc:  # no such step
        raise FlameprofError(f"{args.profile}: {exc}") from None
    return _write(args, render_report(report, args.format))


def _op_table(args: argparse.Namespace, profile: object) -> str:
    import re

    from ..analyze.op_table import op_table
    from ..errors import FlameprofError
    from ..render.op_table_report import format_op_table

    trace = getattr(profile, "trace", None)
    if trace is None or not trace.num_events:
        raise FlameprofError(
            f"{args.profile} has no traced window: record one with 'run --trace-steps', or import a "
            "torch.profiler trace"
        )
    if args.match:
        try:
            re.compile(args.match)
        except re.error as exc:
            raise FlameprofError(f"--match {args.match!r}: {exc}") from None
    table = op_table(trace, args.aggregate_by, args.order_by, args.top, args.min_time / 1e3, args.match)
    return format_op_table(table, args.format)


def _write(args: argparse.Namespace, text: str) -> int:
    if args.output:
        from ..atomic import write_text
        from ..errors import FlameprofError

        try:
            write_text(args.output, text)
        except OSError as exc:
            raise FlameprofError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0
