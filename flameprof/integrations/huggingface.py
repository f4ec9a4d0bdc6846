"""flameprof as a Hugging Face ``TrainerCallback``: ``Trainer(..., callbacks=[FlameprofCallback()])``.

It samples the Trainer's training loop, the whole of it or the steps of ``steps=(first, last)``,
marks the Trainer's own steps, writes the usual files into ``<output_dir>/flameprof`` (on the
main process only) and puts the verdict and the phase shares into the Trainer's log history
(``trainer.state.log_history``). Imported only when used: ``import flameprof`` does not import
transformers.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback

from ..collect.engine.scopes import step
from ..profiler import Profiler
from ..render.formats import Rendering
from ..render.options import OutputOptions
from ..render.outputs import write_outputs


class FlameprofCallback(TrainerCallback):
    """Profile steps ``first`` to ``last`` of training (``steps=None``: the whole training loop)."""

    def __init__(self, steps: tuple[int, int] | None = None, rate: float = 100.0, mode: str = "wall") -> None:
        self.steps = steps
        self.rate = rate
        self.mode = mode
        self.paths: list[str] = []
        self._profiler: Profiler | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.steps is None:
            self._start()

    def on_step_begin(self, args, state, control, **kwargs):
        if self.steps is not None and state.global_step == self.steps[0] and self._profiler is None:
            self._start()

    def on_step_end(self, args, state, control, **kwargs):
        if self._profiler is None:
            return
        step()
        if self.steps is not None and state.global_step >= self.steps[1]:
            self._finish(args, state)

    def on_train_end(self, args, state, control, **kwargs):
        self._finish(args, state)

    def _start(self) -> None:
        self._profiler = Profiler(rate=self.rate, mode=self.mode).start()

    def _finish(self, args, state) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        profile = profiler.stop()
        if not state.is_world_process_zero:
            return
        outdir = os.path.join(args.output_dir, "flameprof")
        os.makedirs(outdir, exist_ok=True)
        rendering = Rendering(profile, OutputOptions(mode=self.mode))
        self.paths = write_outputs(rendering, outdir)
        report = rendering.report
        entry = {"step": state.global_step, "flameprof/verdict": report.verdict.text}
        entry |= {
            f"flameprof/{name}_percent": round(cell.percent, 6)
            for name, cell in report.basis_phases().items()
        }
        entry["flameprof/profile"] = self.paths[0]
        state.log_history.append(entry)
