"""``flameprof check``: the CI gate. Exit 0 when every budget holds, 1 when one breaks, 2 on bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import FlameprofError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="fail when a phase, layer or function exceeds its budget or regresses",
        description="Check a profile against budgets (share of wall or step time) and, "
        "optionally, against a baseline profile. Exit 0: all hold, 1: a budget "
        "breaks, 2: bad input.",
    )
    p.add_argument("profile", metavar="PROFILE", help="a .flameprof file or collapsed stacks")
    p.add_argument(
        "--max",
        dest="budgets",
        action="append",
        default=[],
        metavar="NAME=PCT",
        help="budget: a phase (data=25%%), layer:REGEX=PCT or fn:REGEX=PCT; repeatable",
    )
    p.add_argument(
        "--of",
        dest="basis",
        choices=("auto", "wall", "step"),
        default="auto",
        help="what shares are of: the loop thread's wall time, or steady-state step time "
        "(default auto: step when steps were found)",
    )
    p.add_argument("--baseline", metavar="BASE", help="baseline profile to compare with")
    p.add_argument(
        "--max-regression",
        type=float,
        metavar="PCT",
        help="allowed growth of any phase, layer or function against the baseline",
    )
    p.add_argument(
        "--summary",
        metavar="FILE",
        help="write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set)",
    )
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the result as JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.budgets import check, parse_budget
    from ..atomic import write_text
    from ..collect.importers.load import load_input
    from ..render.check_report import check_markdown, check_text

    budgets = [parse_budget(text) for text in args.budgets]
    if args.max_regression is not None and not args.baseline:
        raise FlameprofError("check: --max-regression needs --baseline")
    if args.baseline and args.max_regression is None:
        raise FlameprofError("check: --baseline needs --max-regression PCT")
    if args.max_regression is not None and args.max_regression < 0:
        raise FlameprofError("check: --max-regression must not be negative")
    if not budgets and not args.baseline:
        raise FlameprofError(
            "check: nothing to check (give --max NAME=PCT and/or --baseline with --max-regression)"
        )
    profile = load_input(args.profile)
    baseline = load_input(args.baseline) if args.baseline else None
    result = check(
        profile, budgets, args.basis, baseline, args.max_regression, names=(args.profile, str(args.baseline))
    )
    markdown = check_markdown(result, args.profile)
    try:
        if args.summary:
            write_text(args.summary, markdown)
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
                fh.write(markdown)
        if args.json_path:
            write_text(args.json_path, json.dumps(result.to_json(), indent=2) + "\n")
    except OSError as exc:
        raise FlameprofError(
            f"check: cannot write {exc.filename or 'the summary'}: {exc.strerror or exc}"
        ) from None
    sys.stdout.write(check_text(result))
    return 0 if result.ok else 1
