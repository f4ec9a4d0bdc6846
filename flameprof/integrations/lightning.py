"""flameprof as a Lightning profiler: ``Trainer(profiler=FlameprofProfiler(dirpath="prof"))``.

Each stage the Trainer runs (``fit``, ``validate``, ``test``, ``predict``) is one profile, written
with the usual files into ``<dirpath>/flameprof-<stage>`` (``-rank<N>`` added on ranks other
than 0), with the stage's own steps marked (the ``training_step`` of ``fit``, the
``validation_step`` of ``validate``, ...); the verdict and the phase shares are the profiler's
summary, which Lightning logs at the end of the stage. Imported only when used: ``import
flameprof`` does not import Lightning.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.profilers import Profiler as LightningProfiler

from ..collect.engine.scopes import step
from ..profiler import Profiler
from ..render.formats import Rendering
from ..render.options import OutputOptions
from ..render.outputs import write_outputs
from ..render.report import phase_lines, report_data

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

    def _finish(self) -> None:
        """Stop sampling, write the stage's profile and make its summary (once per stage)."""
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        profile = profiler.stop()
        rank = int(os.environ.get("RANK", self._local_rank or 0) or 0)
        name = f"flameprof-{self._stage or 'run'}" + (f"-rank{rank}" if rank else "")
        outdir = os.path.join(str(self.dirpath or "."), name)
        os.makedirs(outdir, exist_ok=True)
        rendering = Rendering(profile, OutputOptions(mode=self.mode))
        self.paths = write_outputs(rendering, outdir)
        data = report_data(profile, mode=self.mode, analysis=rendering.analysis)
        basis = data["steps"]["steady"]["phases"] if data["steps"]["steady"]["count"] else data["phases"]
        lines = phase_lines(basis)
        shares = ", ".join(f"{name} {pct}" for name, _, pct, _ in lines if not name.startswith(" "))
        self._summary = (
            f"flameprof ({self._stage}): {data['verdict']['text']}\n"
            f"  phases: {shares}\n  profile: {self.paths[0]}\n"
        )
