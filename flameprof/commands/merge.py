"""``flameprof merge A.flameprof B.flameprof ... -o all.flameprof``: one profile of several processes or
machines (e.g. each node of a multi-node job), each rooted at its process, host names kept."""

from __future__ import annotations

import argparse
import sys

from ..errors import FlameprofError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "merge",
        help="merge profiles of several processes or machines into one",
        description="Merge .flameprof profiles taken separately into one whose stacks are rooted "
        "at each process (role and host), on a common time base.",
    )
    p.add_argument("profiles", nargs="+", metavar="PROFILE", help=".flameprof files to merge")
    p.add_argument("-o", "--output", required=True, metavar="FILE.flameprof", help="the merged profile")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..model import storage
    from ..model.merge import merge_profiles

    if not args.output.endswith(".flameprof"):
        raise FlameprofError(f"merge: the output must be a .flameprof file, not {args.output}")
    profiles = [storage.load(path) for path in args.profiles]
    merged = merge_profiles(profiles)
    try:
        storage.save(merged, args.output)
    except OSError as exc:
        raise FlameprofError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    hosts = merged.meta.get("hosts") or []
    sys.stderr.write(
        f"flameprof: merged {len(profiles)} profiles ({len(merged.processes)} processes on "
        f"{len(hosts)} host(s), {merged.num_samples} samples) into {args.output}\n"
    )
    return 0
