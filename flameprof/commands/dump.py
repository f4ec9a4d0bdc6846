"""``flameprof dump PID``: every thread's current stack, with its phase and the layers it is in, for
a job that hangs or crawls (read-only: py-spy reads the process; nothing runs in it)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump",
        help="print every thread's current stack, phase and layers (read-only, via py-spy)",
        description="Print the current stack of every thread of a running Python process, with the "
        "phase it is in (data, forward, backward, optimizer, sync, other) and the nn.Module classes "
        "it is inside; like py-spy dump, with the deep-learning context.",
        usage="flameprof dump [--subprocesses] [--json] PID",
    )
    p.add_argument("pid", type=int, metavar="PID", help="the process to read")
    p.add_argument(
        "--subprocesses",
        action="store_true",
        help="also its Python children (DataLoader workers, the ranks of a torchrun job)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document, for tools")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.phases import Classifier, default_rules
    from ..collect.attach.pyspy_dump import dump_stacks
    from ..collect.attach.target import inspect
    from ..model.frames import Labeler

    inspect(args.pid)  # a dead, foreign or non-Python pid: one clear line
    threads = dump_stacks(args.pid, args.subprocesses)
    classifier, labeler = Classifier(default_rules()), Labeler()
    rows: list[dict[str, Any]] = [
        {
            "pid": t.pid,
            "tid": t.tid,
            "thread": t.name,
            "active": t.active,
            "phase": classifier.classify(t.frames) if t.frames else "other",
            "layers": t.layers,
            "stack": [labeler.label(f) for f in t.frames],
        }
        for t in threads
    ]
    if args.json:
        sys.stdout.write(json.dumps({"pid": args.pid, "threads": rows}, indent=2) + "\n")
        return 0
    for row in rows:
        state = "running" if row["active"] else "idle"
        layers = f"; in {' > '.join(row['layers'])}" if row["layers"] else ""
        where = f"process {row['pid']} thread {row['thread'] or '?'} (tid {row['tid']}, {state})"
        print(f"{where}: {row['phase']}{layers}")
        for label in reversed(row["stack"]):  # the innermost frame first, as py-spy dump prints
            print(f"    {label}")
    return 0
