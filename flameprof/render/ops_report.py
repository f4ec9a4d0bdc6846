"""The report's traced-window sections (``ops``, ``memory``, ``device``) as text and Markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import markdown

if TYPE_CHECKING:
    from ..analyze.device_breakdown import KernelStats
    from ..analyze.ops import DeviceSection, LayerCost
    from ..analyze.report import Report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _flops(n: float) -> str:
    return f"{n / 1e9:.3f} GFLOP" if n >= 1e7 else f"{n / 1e6:.3f} MFLOP"


_LAYER_WIDTHS = (24, 12, 12, 9, 10)  # the text table's columns: forward, backward, FLOPs, GFLOP/s, params


def _layer_cells(row: LayerCost) -> tuple[str, ...]:
    """A layer's cells in both tables: forward, backward, FLOPs, GFLOP/s, params."""
    return (
        _ms(row.forward),
        _ms(row.backward),
        _flops(row.flops),
        f"{row.gflops_per_s:.2f}",
        str(row.params),
    )


def peak_place(r: Report) -> str:
    """Where the traced window's memory peaked: ``layer / op``, or ``-``."""
    m = r.memory
    if m is None:
        return "-"
    return " / ".join(x for x in (m.peak_layer, m.peak_op) if x) or "-"


def format_ops_text(r: Report, top: int) -> list[str]:
    ops, memory, device = r.ops, r.memory, r.device
    if not ops:
        return []
    out = [
        "",
        f"traced window: {ops.steps} step(s), {_ms(ops.window_seconds)}, op time {_ms(ops.op_seconds)}",
        "top ops by self time:",
    ]
    for row in ops.top[:top]:
        shapes = f"  {row.shapes[0]}" if row.shapes else ""
        out.append(
            f"  {_ms(row.self):>12} self {_ms(row.total):>12} total {row.calls:>6}x  {row.name}{shapes}"
        )
    if ops.layers:
        out += ["", "layers in the window:        forward     backward        FLOPs   GFLOP/s     params"]
        for layer in ops.layers[:top]:
            cells = " ".join(f"{cell:>{width}}" for cell, width in zip(_layer_cells(layer), _LAYER_WIDTHS))
            out.append(f"  {cells}  {layer.name}")
    if memory:
        out += ["", f"memory ({memory.device}): peak {_bytes(memory.peak)} at {peak_place(r)}"]
        for m in memory.layers[:top]:
            out.append(f"  allocated {_bytes(m.allocated):>10}  held {_bytes(m.held):>10}  {m.name}")
    if device:
        out += ["", f"device: busy {device.busy_percent:.1f}% of the traced steps"]
        out += [f"  {line}" for line in device_sentences(device)]
        if device.kernels:
            out.append(
                "  kernels by time:       total   count        mean         min         max      stddev"
            )
            for k in device.kernels[:top]:
                cells = " ".join(f"{cell:>11}" for cell in kernel_cells(k))
                out.append(f"  {cells}  {k.name[:100]}")
        for name, seconds in list(device.kernel_by_layer.items())[:top]:
            out.append(f"  kernels {_ms(seconds):>12}  {name}")
        for kind, copy in device.copies.items():
            out.append(f"  {kind}: {copy.count}x {_bytes(copy.bytes)} in {_ms(copy.seconds)}")
        sync = device.sync
        if sync.count:
            out.append(f"  host blocked in syncs {_ms(sync.seconds)} ({sync.count}x):")
            out += [f"    {_ms(s.seconds):>12} {s.count:>5}x  {s.site}" for s in sync.sites[:top]]
    return out


def format_ops_markdown(r: Report, top: int) -> list[str]:
    ops, memory, device = r.ops, r.memory, r.device
    if not ops:
        return []
    out = [
        "",
        "## Traced window",
        "",
        f"{ops.steps} step(s), {_ms(ops.window_seconds)}, op time {_ms(ops.op_seconds)}.",
        "",
        "| op | self | total | calls | shapes |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for row in ops.top[:top]:
        shapes = markdown.code(row.shapes[0]) if row.shapes else ""
        out.append(
            f"| {markdown.code(row.name)} | {_ms(row.self)} | {_ms(row.total)} | {row.calls} | {shapes} |"
        )
    if ops.layers:
        out += [
            "",
            "| layer | forward | backward | FLOPs | GFLOP/s | params |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for layer in ops.layers[:top]:
            out.append(f"| {markdown.code(layer.name)} | {' | '.join(_layer_cells(layer))} |")
    if memory:
        out += [
            "",
            f"Memory ({memory.device}): peak {_bytes(memory.peak)} at {markdown.code(peak_place(r))}.",
        ]
    if device:
        out += ["", f"Device busy {device.busy_percent:.1f}% of the traced steps.", ""]
        out += [f"- {line}" for line in device_sentences(device)]
        if device.kernels:
            out += [
                "",
                "| kernel | type | total | count | mean | min | max | stddev |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            for k in device.kernels[:top]:
                cells = " | ".join(kernel_cells(k))
                out.append(f"| {markdown.code(k.name[:100])} | {k.type} | {cells} |")
    return out


def kernel_cells(k: KernelStats) -> tuple[str, ...]:
    """A kernel's cells in both tables: total, count, mean, min, max, standard deviation."""
    return (_ms(k.seconds), str(k.count), _ms(k.mean), _ms(k.min), _ms(k.max), _ms(k.std))


def device_sentences(device: DeviceSection) -> list[str]:
    """The device section in sentences (text, Markdown and HTML): the idle time's causes, then per
    device its temporal and kernel-type breakdowns, communication's overlap, and each stream's idle."""
    out = []
    idle = device.idle
    if idle:
        out.append(
            f"idle {idle.percent:.1f}% of the step time: while communication runs "
            f"{idle.comm_percent:.1f}%, the host waits for data {idle.data_percent:.1f}%, blocks in "
            f"syncs {idle.sync_percent:.1f}%, is busy {idle.host_percent:.1f}%: {idle.verdict}"
        )
    out.append(f"{device.device_events} device events, {_ms(device.device_seconds)} in all")
    for what, seconds in (
        ("device idle in the steps, by what the host was in", device.idle_by_layer),
        ("device idle in the steps, by the Python call site", device.idle_by_site),
        ("communication kernels by the layer that launched them", device.communication_by_layer),
    ):
        if seconds:
            out.append(f"{what}: " + ", ".join(f"{name} {_ms(s)}" for name, s in list(seconds.items())[:5]))
    for d in device.devices:
        span = d.span or 1.0
        types = sum(d.by_type.values()) or 1.0
        out.append(
            f"device {d.device} (pid {d.pid}), {_ms(d.span)} from its first event to its last: "
            f"idle {100 * d.idle / span:.1f}%, computation {100 * d.computation / span:.1f}%, "
            f"other work {100 * d.non_computation / span:.1f}%; by kernel type "
            + ", ".join(f"{name} {100 * seconds / types:.1f}%" for name, seconds in d.by_type.items())
        )
        if d.overlap_percent is not None:
            out.append(
                f"communication {_ms(d.communication)} (most of it {d.collective}), "
                f"{d.overlap_percent:.1f}% of it overlapping computation"
            )
        for st in d.streams:
            line = f"stream {st.stream}: busy {_ms(st.busy)} in {st.events} events"
            if st.idle > 0:
                causes = {"host wait": st.host_wait, "kernel wait": st.kernel_wait, "other": st.other}
                line += f", idle {_ms(st.idle)} between them: " + ", ".join(
                    f"{cause} {100 * seconds / st.idle:.1f}%" for cause, seconds in causes.items()
                )
            out.append(line)
    return out
