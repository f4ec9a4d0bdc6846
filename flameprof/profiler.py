"""The Python API: ``Profiler`` (start/stop/save, context manager, decorator) and ``profile()``.

Every Profiler draws on the process's one sampling session (``collect/engine/session.py``), so
nested or overlapping profilers are safe and each gets the samples taken during its own window.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .collect.engine.memory_limit import DEFAULT_MEMORY_LIMIT
from .collect.engine.session import SESSION, run_metadata

if TYPE_CHECKING:
    from .model.profile import Profile


class Profiler:
    """Samples every thread of this process between ``start()`` and ``stop()``.

    ``with Profiler(output="out/"):`` saves on exit; ``@Profiler(output=...)`` profiles each call.
    """

    def __init__(
        self,
        output: str | os.PathLike | None = None,
        rate: float = 100.0,
        mode: str = "wall",
        backward_layers: bool = False,
        trace_steps: tuple[int, int] | None = None,
        max_memory: int = DEFAULT_MEMORY_LIMIT,
        **render_options: Any,
    ) -> None:
        if not 0 < rate <= 10_000:
            raise ValueError("rate must be in (0, 10000] Hz")
        if trace_steps is not None and not 0 <= trace_steps[0] < trace_steps[1]:
            raise ValueError("trace_steps must be (first, last) with 0 <= first < last")
        self.trace_steps = trace_steps  # steps first..last-1 also traced by torch.profiler
        if max_memory < 2**20:
            raise ValueError("max_memory must be at least 1 MiB")
        self.max_memory = max_memory  # bytes the profile may hold; older samples fold past it
        self.output = output
        self.rate = rate
        self.mode = mode
        self.render_options = render_options
        self.backward_layers = backward_layers  # see collect/engine/torch_hooks.py
        self.profile: Profile | None = None
        self._first: int | None = None
        self._t_start = 0.0
        self._epoch = 0  # of the session's folded samples (see ProfileBuilder.build)

    @property
    def running(self) -> bool:
        return self._first is not None

    def start(self) -> Profiler:
        if self.running:
            raise RuntimeError("this Profiler is already running")
        SESSION.acquire(self.rate, self.backward_layers, self.trace_steps, self.max_memory)
        assert SESSION.builder is not None
        with SESSION.builder.lock:
            self._first = SESSION.builder.num_samples
            self._epoch = SESSION.builder.windowed.cut(self._first) if self._first else 0
        self._t_start = SESSION.now()
        return self

    def stop(self) -> Profile:
        """Stop sampling (the shared sampler stops with its last user) and return this window's profile."""
        if self._first is None:
            raise RuntimeError("this Profiler is not running")
        first, self._first = self._first, None
        duration = SESSION.now() - self._t_start
        with SESSION.lock:
            SESSION.release()  # first: sampling stops even if what follows fails
            assert SESSION.builder is not None
            last = SESSION.builder.num_samples
            meta = dict(run_metadata(), duration=duration, window_start=self._t_start, mode=self.mode)
            self.profile = SESSION.snapshot(first, last, meta, self._epoch)
        return self.profile

    def save(self, output: str | os.PathLike | None = None) -> list[str]:
        """Write profile.flameprof, profile.folded and profile.svg (and the ``formats`` asked for) into
        ``output``; returns the paths."""
        from .render.formats import Rendering
        from .render.options import OutputOptions
        from .render.outputs import write_outputs

        if self.profile is None:
            raise RuntimeError("nothing to save: call stop() first")
        target = output if output is not None else self.output
        if target is None:
            raise ValueError("no output directory given")
        options = OutputOptions(mode=self.mode, **self.render_options)
        return write_outputs(Rendering(self.profile, options), os.fspath(target))

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.output is not None:
            self.save()

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            inner = Profiler(
                self.output,
                self.rate,
                self.mode,
                self.backward_layers,
                self.trace_steps,
                **self.render_options,
            )
            try:
                with inner:
                    return func(*args, **kwargs)
            finally:
                self.profile = inner.profile

        return wrapper


def profile(
    output: str | os.PathLike | None = "flameprof-out",
    rate: float = 100.0,
    mode: str = "wall",
    backward_layers: bool = False,
    **render_options: Any,
) -> Profiler:
    """``with flameprof.profile(output="out/"):`` profiles the block and writes the outputs."""
    return Profiler(output, rate, mode, backward_layers, **render_options)
