"""The parent's side of profiling a whole job: a private parts directory, the environment that makes
children profile themselves into it, and, at the end, one profile merged from all the parts.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

from ...errors import FlameprofError
from ...model.records import short_command
from ..engine.trace_window import read_exported
from . import child
from .parts import part_files, wait_for_parts

if TYPE_CHECKING:
    from ...model.profile import Profile

PARTS_PREFIX = ".flameprof-parts-"  # a run's parts directory, in its output directory
EXIT_GRACE = 3.0  # seconds to wait for children still running to write their final part


def warn(message: str) -> None:
    sys.stderr.write(f"flameprof: warning: {message}\n")


class ProcessTree:
    """The parts directory of one run (mode 0700, inside the output directory until the merge)."""

    def __init__(
        self,
        outdir: str,
        rate: float,
        whole_tree: bool = True,
        trace_steps: tuple[int, int] | None = None,
        max_memory: int | None = None,
    ) -> None:
        self.directory = tempfile.mkdtemp(prefix=PARTS_PREFIX, dir=outdir)
        self.rate = rate
        self.max_memory = max_memory  # each process's budget (None: the default)
        self.whole_tree = whole_tree
        self.trace_steps = trace_steps  # the steps each process traces (command mode)

    @classmethod
    def existing(cls, directory: str) -> ProcessTree:
        """The tree of a parts directory that another process made (to collect what it left)."""
        tree = cls.__new__(cls)
        tree.directory = directory
        tree.rate = 0.0
        tree.max_memory = None
        tree.trace_steps = None
        tree.whole_tree = True
        return tree

    def environment(self, base: dict | os._Environ) -> dict:
        """``base`` plus what makes a Python process started with it profile itself into this tree."""
        env = dict(base)
        child.forget_environment(env)
        env[child.ENV_DIR] = self.directory
        env[child.ENV_RATE] = repr(self.rate)
        env[child.ENV_TREE] = "1" if self.whole_tree else "0"
        if self.max_memory is not None:
            env[child.ENV_MAX_MEMORY] = str(self.max_memory)
        if self.trace_steps is not None:
            env[child.ENV_TRACE] = "{}:{}".format(*self.trace_steps)
        env.pop(child.ENV_RANK_PID, None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (child.BOOTSTRAP_DIR, env.get("PYTHONPATH")) if p)
        return env

    def profile_children_of_this_process(self) -> None:
        """Forked children restart the sampler; spawned ones and subprocesses inherit the environment."""
        env = self.environment(os.environ)
        for name in (child.ENV_DIR, child.ENV_RATE, child.ENV_TREE, child.ENV_MAX_MEMORY, "PYTHONPATH"):
            if name in env:
                os.environ[name] = env[name]
        child.enable_tree(self.directory, self.rate)

    def collect(self, main: Profile | None = None, main_pid: int | None = None) -> Profile | None:
        """Merge ``main`` (this process's own profile, if any) with every part; None when there is nothing.

        A corrupt part is skipped and a part left unfinished (its process was killed or hangs) is
        kept as it is, each with a one-line warning. The parts are removed once the merge succeeded.
        """
        # numpy-backed: imported once the program has ended, so the program never sees it imported
        from ...model import storage
        from ...model.merge import merge_profiles
        from ...model.trace import concat

        partial = set(wait_for_parts(self.directory, EXIT_GRACE))
        profiles = [main] if main is not None else []
        for path in part_files(self.directory):
            try:
                part = storage.load(path)
            except FlameprofError as exc:
                warn(f"skipped a part that cannot be read: {exc}")
                continue
            if path in partial and part.processes and not part.meta.get("daemon"):
                info = part.processes[0]  # (a daemonic child is ended by its parent at exit: no news)
                warn(
                    f"process {info.pid} ({short_command(info.cmdline)}) did not end cleanly "
                    f"(killed, or still running); kept the {part.num_samples} samples it had written"
                )
            if part.num_samples:
                profiles.append(part)
        if not profiles:
            self.remove()
            return None
        try:
            merged = merge_profiles(profiles, main_pid=main_pid)
        except Exception as exc:  # never lose the main profile to a bad part
            warn(
                f"could not merge the other processes' profiles ({exc}); their parts are kept in "
                f"{self.directory}"
            )
            return main
        traced = read_exported(self.directory, float(merged.meta.get("start_time", 0.0)))
        if traced is not None:
            merged.trace = concat([merged.trace, traced])
        self.remove()
        return merged

    def snapshot(self, main_pid: int | None = None) -> Profile | None:
        """The job so far, merged from the parts as they are now (nothing waited for or removed):
        None when there is nothing yet, or a part cannot be read at this moment. Without
        ``main_pid``, the one process whose parent wrote no part is ``main``."""
        from ...model import storage
        from ...model.merge import merge_profiles

        try:
            parts = [storage.load(path) for path in part_files(self.directory)]
            parts = [p for p in parts if p.num_samples]
            if main_pid is None:
                pids = {info.pid for p in parts for info in p.processes}
                roots = [info.pid for p in parts for info in p.processes if info.ppid not in pids]
                main_pid = roots[0] if len(roots) == 1 else None
            return merge_profiles(parts, main_pid=main_pid) if parts else None
        except (FlameprofError, OSError, ValueError):
            return None

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
