# Types of flameprof._perf, the C collapser of perf script text (native/perf_collapse.c).
from typing import final

@final  # a C type: not subclassable
class Collapser:
    """perf script samples -> out[stack] += period (summed in C until flush())."""

    def __init__(
        self,
        out: dict[bytes, int],
        other_events: set[bytes],
        pid: bool,
        tid: bool,
        kernel: bool,
        jit: bool,
        addrs: bool,
    ) -> None: ...
    def feed(self, data: bytes, start: int, event_filter: bytes, /) -> tuple[int, int, bool]: ...
    def flush(self) -> None: ...
