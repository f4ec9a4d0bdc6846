"""flameprof as a Lightning profiler: ``Trainer(profiler=FlameprofProfiler(dirpath="prof"))``.

Each stage the Trainer runs (``fit``, ``validate``, ``test``, ``predict``) is one profile, written
with the usual files into ``<dirpath>/flameprof-<stage>``, with the stage's own steps marked (the
``training_step`` of ``fit``, the ``validation_step`` of ``validate``, ...); the verdict and the
phase shares are the profiler's summary, which Lightning logs at the end of the stage. Under DDP
(or any strategy with a process group) every rank writes its own profile into
``flameprof-<stage>-rank<N>``, and rank 0 gathers them through the process group and writes the job,
merged from the ranks, into ``flameprof-<stage>``: its report names the slowest rank. Imported only
when used: ``import flameprof`` does not import Lightning.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
from pathlib import Path

from lightning.pytorch.profilers import Profiler as LightningProfiler

from ..collect.engine.scopes import step
from ..model import storage
from ..model.merge import merge_profiles
from ..model.profile import ProcessInfo, Profile
from ..profiler import Profiler
from ..render.formats import Rendering
from ..render.options import OutputOptions
from ..render.outputs import write_outputs
from ..render.report import phase_lines

STEP_HOOKS = {
    "fit": "training_step",
    "validate": "validation_step",
    "test": "test_step",
    "predict": "predict_step",
}


class FlameprofProfiler(LightningProfiler):
    """Samples every stage of the Trainer; ``rate`` in Hz, ``mode`` the weight of the outputs."""

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        rate: float = 100.0,
        mode: str = "wall",
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.rate = rate
        self.mode = mode
        self._profiler: Profiler | None = None
        self._step_action = ""
        self._summary = ""
        self.paths: list[str] = []  # the files of the last stage

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        stage = str(getattr(stage, "value", stage))  # Lightning passes its TrainerFn enum
        super().setup(stage, local_rank, log_dir)
        self._step_action = f".{STEP_HOOKS.get(stage, '')}"
        self._summary = ""
        self._profiler = Profiler(rate=self.rate, mode=self.mode).start()
        # a stage Lightning never tears down is written while the interpreter can still build it
        atexit.register(self._finish, gather=False)

    def start(self, action_name: str) -> None:
        pass  # sampling covers every action; only the ends of steps are marked

    def stop(self, action_name: str) -> None:
        if self._profiler is not None and action_name.startswith("[Strategy]"):
            if action_name.endswith(self._step_action):
                step()

    def summary(self) -> str:
        self._finish()
        return self._summary

    def teardown(self, stage: str | None) -> None:
        self._finish()
        super().teardown(stage)

    def __del__(self) -> None:
        self._finish(gather=False)  # no collective from a finalizer: the other ranks may be gone
        super().__del__()

    def _finish(self, gather: bool = True) -> None:
        """Stop sampling, write the stage's profile and make its summary (once per stage); with
        ``gather``, rank 0 also writes the job merged from every rank."""
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        atexit.unregister(self._finish)
        profile = profiler.stop()
        base = os.path.join(str(self.dirpath or "."), f"flameprof-{self._stage or 'run'}")
        group = _process_group() if gather else None
        if group is None:
            rank = int(os.environ.get("RANK", self._local_rank or 0) or 0)
            rendering = self._rendering(profile)
            self.paths = self._write(rendering, base + (f"-rank{rank}" if rank else ""))
        else:
            rank, size = group
            profile.processes = [
                ProcessInfo(os.getpid(), f"rank {rank}", socket.gethostname(), "", os.getppid())
            ]
            rendering = self._rendering(profile)
            own = self._write(rendering, f"{base}-rank{rank}")
            merged = _gather(profile, rank, size)
            if merged is None:
                self.paths = own
            else:
                rendering = self._rendering(merged)
                self.paths = self._write(rendering, base)
        report = rendering.report  # of the profile written last: the job's on rank 0
        lines = phase_lines(report.basis_phases())
        shares = ", ".join(f"{name} {pct}" for name, _, pct, _ in lines if not name.startswith(" "))
        ranks = "".join(f"  {line}\n" for line in (report.processes.lines if report.processes else []))
        self._summary = (
            f"flameprof ({self._stage}): {report.verdict.text}\n"
            f"  phases: {shares}\n{ranks}  profile: {self.paths[0]}\n"
        )

    def _rendering(self, profile: Profile) -> Rendering:
        return Rendering(profile, OutputOptions(mode=self.mode))

    def _write(self, rendering: Rendering, outdir: str) -> list[str]:
        os.makedirs(outdir, exist_ok=True)
        return write_outputs(rendering, outdir)


def _process_group() -> tuple[int, int] | None:
    """(rank, world size) when the Trainer runs several ranks in a process group, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def _gather(profile: Profile, rank: int, size: int) -> Profile | None:
    """On rank 0, every rank's profile of the stage merged into one (None on the other ranks)."""
    import torch.distributed as dist

    gathered: list | None = [None] * size if rank == 0 else None
    dist.gather_object(storage.dumps(profile), gathered, dst=0)
    if gathered is None:
        return None
    profiles = [storage.loads(data, f"rank {i}") for i, data in enumerate(gathered)]
    return merge_profiles(profiles, main_pid=profile.processes[0].pid)
