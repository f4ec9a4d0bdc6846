"""``flameprof snapshot OUTDIR``: the profile so far of a ``flameprof run -o OUTDIR`` that is still
running, written now to ``OUTDIR/profile.snapshot.flameprof``.

It reads the part files every process of the job flushes about once a second (the same ones
``--snapshot-every`` merges), from outside: no signal reaches the job, so the program's own
handlers (SIGUSR2 included) stay its own.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import FlameprofError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="write the profile so far of a run that is still going",
        description="Merge the parts that the processes of a running 'flameprof run -o OUTDIR' have "
        "flushed so far into OUTDIR/profile.snapshot.flameprof (atomically), without signalling the job.",
    )
    p.add_argument("outdir", metavar="OUTDIR", help="the -o directory of the running flameprof run")
    p.set_defaults(func=run)


def newest_parts_directory(outdir: str) -> str | None:
    """The parts directory in ``outdir`` written into last: a running job's processes flush their
    parts every second, and a run killed before its merge leaves its directory behind."""
    from ..collect.jobs.tree import PARTS_PREFIX

    try:
        paths = [os.path.join(outdir, n) for n in os.listdir(outdir) if n.startswith(PARTS_PREFIX)]
        return max(paths, key=os.path.getmtime, default=None)
    except OSError as exc:
        raise FlameprofError(f"snapshot: cannot read {outdir}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from ..collect.jobs.tree import ProcessTree
    from ..model import storage
    from .run_rescue import SNAPSHOT

    directory = newest_parts_directory(args.outdir)
    if directory is None:
        raise FlameprofError(f"snapshot: no run is writing into {args.outdir} (no parts directory there)")
    tree = ProcessTree.existing(directory)
    profile = tree.snapshot()
    if profile is None:
        raise FlameprofError(f"snapshot: nothing flushed yet in {args.outdir}; try again in a second")
    path = os.path.join(args.outdir, SNAPSHOT)
    try:
        storage.save(profile, path)
    except OSError as exc:
        raise FlameprofError(f"snapshot: cannot write {path}: {exc.strerror or exc}") from None
    sys.stderr.write(
        f"flameprof: wrote {path} ({len(profile.processes) or 1} process(es), "
        f"{profile.duration:.1f} s, {profile.num_samples} samples)\n"
    )
    return 0
