"""pprof: a gzipped ``profile.proto`` message, encoded by hand (no protobuf dependency).

Sample types ``samples/count``, ``wall/nanoseconds`` and ``cpu/nanoseconds`` (only
``samples/count`` for imported stacks, whose weights are counts); one pprof sample per distinct
(stack, thread, phase), labelled with ``phase``, ``layer`` (the innermost layer scope),
``process`` and ``thread``. One location and function per frame. Readable by ``go tool pprof``,
Pyroscope and Parca.
"""

from __future__ import annotations

import gzip

import numpy as np

from ..analyze.phases import layer_of_stacks
from ..analyze.threads import process_label
from ..atomic import encode_text
from ..model.frames import Labeler
from ..model.profile import Profile

# profile.proto field numbers
_PROFILE_SAMPLE_TYPE, _PROFILE_SAMPLE, _PROFILE_MAPPING, _PROFILE_LOCATION = 1, 2, 3, 4
_PROFILE_FUNCTION, _PROFILE_STRINGS, _PROFILE_TIME, _PROFILE_DURATION = 5, 6, 9, 10
_PROFILE_PERIOD_TYPE, _PROFILE_PERIOD, _PROFILE_DEFAULT_TYPE = 11, 12, 14
_MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    """Base-128 varint; negative numbers as their 64-bit two's complement, as int64 fields need."""
    value &= _MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_int(number: int, value: int) -> bytes:
    """A varint field; zero is the default and is left out."""
    return varint(number << 3) + varint(value) if value else b""


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, sub-message or packed repeated scalars)."""
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def packed(number: int, values) -> bytes:
    return field_bytes(number, b"".join(varint(v) for v in values)) if len(values) else b""


class _Strings:
    """The string table: index 0 is the empty string."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.table)
            self.table.append(text)
        return i


def render_pprof(
    profile: Profile,
    mode: str = "wall",
    sample_phase: np.ndarray | None = None,
    phase_names: list[str] | tuple[str, ...] = (),
) -> bytes:
    """The gzipped pprof profile. ``sample_phase[i]`` indexes ``phase_names`` for sample ``i`` (-1: none)."""
    strings = _Strings()
    labeler = Labeler(profile.meta)
    timed = profile.meta.get("weight_unit", "seconds") == "seconds"
    types = [("samples", "count")] + ([("wall", "nanoseconds"), ("cpu", "nanoseconds")] if timed else [])
    out = [
        field_bytes(_PROFILE_SAMPLE_TYPE, field_int(1, strings(t)) + field_int(2, strings(u)))
        for t, u in types
    ]

    phase = (
        np.full(profile.num_samples, -1, dtype=np.int64)
        if sample_phase is None
        else np.asarray(sample_phase, dtype=np.int64)
    )
    # One integer key per (stack, thread, phase): a 1-D unique is far faster than unique rows.
    nthreads, nphases = len(profile.threads) + 1, len(phase_names) + 1
    keys = (
        ((profile.sample_stack.astype(np.int64) + 1) * nthreads + profile.sample_thread) * nphases + phase + 1
    )
    unique, inverse = np.unique(keys, return_inverse=True)
    stack_thread, ph = np.divmod(unique, nphases)
    stack, thread = np.divmod(stack_thread, nthreads)
    count = np.bincount(inverse, minlength=len(unique))
    if timed:
        wall = np.rint(np.bincount(inverse, profile.sample_wall, len(unique)) * 1e9).astype(np.int64)
        cpu = np.rint(np.bincount(inverse, profile.sample_cpu, len(unique)) * 1e9).astype(np.int64)
    else:
        # counts past 64 bits (perf events can be any number) saturate as pprof's int64 values must
        count = np.rint(np.minimum(np.bincount(inverse, profile.sample_wall, len(unique)), 2.0**63 - 1024))
        count = count.astype(np.int64)

    layer = layer_of_stacks(profile).tolist()
    k_phase, k_layer, k_process, k_thread = (strings(k) for k in ("phase", "layer", "process", "thread"))
    thread_labels = [
        field_bytes(3, field_int(1, k_process) + field_int(2, strings(process_label(profile, t.pid))))
        + field_bytes(
            3, field_int(1, k_thread) + field_int(2, strings(f"{t.name or 'thread'} (tid {t.tid})"))
        )
        for t in profile.threads
    ]
    phase_labels = [field_bytes(3, field_int(1, k_phase) + field_int(2, strings(p))) for p in phase_names]
    layer_labels: dict[int, bytes] = {}
    leaf_first: dict[int, bytes] = {}
    parents, frames = profile.stack_parent.tolist(), profile.stack_frame.tolist()
    for sid, tid, phase_index, c, *values in zip(
        (stack - 1).tolist(),
        thread.tolist(),
        (ph - 1).tolist(),
        count.tolist(),
        *((wall.tolist(), cpu.tolist()) if timed else ()),
    ):
        locations = leaf_first.get(sid)
        if locations is None:
            ids = []
            s = sid
            while s >= 0:
                ids.append(frames[s] + 1)
                s = parents[s]
            locations = leaf_first[sid] = packed(1, ids)
        body = locations + packed(2, [c, *values]) + thread_labels[tid]
        if phase_index >= 0:
            body += phase_labels[phase_index]
        lid = layer[sid] if sid >= 0 else -1
        if lid >= 0:
            label = layer_labels.get(lid)
            if label is None:
                label = layer_labels[lid] = field_bytes(
                    3, field_int(1, k_layer) + field_int(2, strings(labeler.label(profile.frames[lid])))
                )
            body += label
        out.append(field_bytes(_PROFILE_SAMPLE, body))

    out.append(
        field_bytes(
            _PROFILE_MAPPING,
            field_int(1, 1)
            + field_int(5, strings("python"))
            + field_int(7, 1)
            + field_int(8, 1)
            + field_int(9, 1),
        )
    )
    for i, frame in enumerate(profile.frames):
        line = field_bytes(4, field_int(1, i + 1) + field_int(2, frame.line))
        out.append(field_bytes(_PROFILE_LOCATION, field_int(1, i + 1) + field_int(2, 1) + line))
    for i, frame in enumerate(profile.frames):
        name = strings(labeler.label(frame))
        out.append(
            field_bytes(
                _PROFILE_FUNCTION,
                field_int(1, i + 1)
                + field_int(2, name)
                + field_int(3, strings(frame.name))
                + field_int(4, strings(frame.file))
                + field_int(5, frame.line),
            )
        )
    rate = float(profile.meta.get("rate") or 0)
    tail = [
        field_int(_PROFILE_TIME, int(float(profile.meta.get("start_time", 0)) * 1e9)),
        field_int(_PROFILE_DURATION, int(profile.duration * 1e9)),
        field_bytes(
            _PROFILE_PERIOD_TYPE,
            field_int(1, strings("wall" if timed else "samples"))
            + field_int(2, strings("nanoseconds" if timed else "count")),
        ),
        field_int(_PROFILE_PERIOD, int(1e9 / rate) if rate and timed else 1),
        field_int(_PROFILE_DEFAULT_TYPE, strings(mode if timed and mode in ("wall", "cpu") else "samples")),
    ]
    # the string table goes last because building the other messages fills it
    strings_msg = b"".join(field_bytes(_PROFILE_STRINGS, encode_text(s)) for s in strings.table)
    return gzip.compress(b"".join(out) + b"".join(tail) + strings_msg, compresslevel=6, mtime=0)
