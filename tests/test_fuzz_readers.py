"""Every reader answers any bytes with a result or one error line (exit 2), never a traceback or a
hang: a short property-based run per reader (FLAMEPROF_FUZZ_EXAMPLES cases, default 300; the long
run is scripts/fuzz_readers.py), and the inputs that once broke the promise, as regression tests."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest
from conftest import assert_one_error_line, run_flameprof
from fuzzing import READERS, _npy_header, _repack, check_case, mutations, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FLAMEPROF_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("name", sorted(READERS))
def test_any_mutation_of_a_valid_file_keeps_the_promise(name, tmp_path):
    reader = READERS[name]

    @FUZZ
    @given(data=mutations(reader), command=st.sampled_from(reader.commands))
    def case(data, command):
        check_case(reader, data, command, str(tmp_path))

    case()


@pytest.mark.parametrize("name", sorted(READERS))
def test_the_valid_seeds_read(name, tmp_path):
    reader = READERS[name]
    for command in reader.commands:
        assert check_case(reader, reader.seed(), command, str(tmp_path)).code in (0, 1), command


# -- regression tests: the inputs of issue 16, written again here --------------------------------
def error_line(tmp_path, data: bytes, suffix: str, *args: str) -> str:
    """Run ``flameprof ARGS`` ({in}: a file of ``data``) and return its one error line."""
    path = tmp_path / ("input" + suffix)
    path.write_bytes(data)
    outcome = run_cli([a.format(**{"in": str(path), "out": str(tmp_path / "out")}) for a in args])
    lines = outcome.stderr.splitlines()
    assert outcome.code == 2 and len(lines) == 1, outcome
    assert lines[0].startswith(f"flameprof: error: {path}: "), lines[0]
    return lines[0]


def profile_with(member: str, content: bytes) -> bytes:
    seed = READERS["flameprof"].seed()
    with zipfile.ZipFile(io.BytesIO(seed)) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members[member] = content
    return _repack(members, compress=True)


def seed_member(name: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(READERS["flameprof"].seed())) as zf:
        return zf.read(name)


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


REPORT = ("report", "{in}")


def test_a_corrupt_deflate_stream_is_one_error(tmp_path):
    data = bytearray(READERS["flameprof"].seed())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("frames.json")
    start = info.header_offset + 30 + len(info.filename)
    data[start : start + 8] = b"\xff" * 8  # an invalid deflate block: zlib.error
    assert "corrupt zip" in error_line(tmp_path, bytes(data), ".flameprof", *REPORT)


def test_an_unknown_zip_version_is_one_error(tmp_path):
    data = bytearray(READERS["flameprof"].seed())
    central = data.rfind(b"PK\x01\x02")
    data[central + 6] = 99  # "version needed to extract" 9.9: NotImplementedError in zipfile
    assert "zip" in error_line(tmp_path, bytes(data), ".flameprof", *REPORT)


def test_a_member_claiming_more_than_deflate_could_hold_is_refused(tmp_path):
    data = bytearray(READERS["flameprof"].seed())
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (2**31).to_bytes(4, "little")  # declared size: 2 GB
    assert "more than the file could hold" in error_line(tmp_path, bytes(data), ".flameprof", *REPORT)


@pytest.mark.parametrize(
    "header, needle",
    [
        (b"{'descr': '<i4', 'fortran_order': False, 'shape': (1000000000000,), }", "does not match"),
        (b"{'descr': \"\"\"'", "not a column of integers"),  # tokenize.TokenError in numpy
        (b"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "not a column of integers"),
        (b"{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", "2 dimensions"),
    ],
)
def test_a_lying_npy_header_is_refused_before_allocating(tmp_path, header, needle):
    data = profile_with("sample_stack.npy", _npy_header(seed_member("sample_stack.npy"), header))
    assert needle in error_line(tmp_path, data, ".flameprof", *REPORT)


def test_a_two_dimensional_stack_frame_is_refused(tmp_path):
    frames = np.load(io.BytesIO(seed_member("stack_frame.npy")))
    data = profile_with("stack_frame.npy", npy(np.repeat(frames, 2).reshape(-1, 2)))
    assert "2 dimensions" in error_line(tmp_path, data, ".flameprof", *REPORT)


@pytest.mark.parametrize(
    "meta, needle",
    [
        (b'{"format": "flameprof", "version": 1e400}', "version is not an integer"),
        (b'{"format": "flameprof", "version": 1, "duration": "ten"}', "duration"),
        (b'{"format": "flameprof", "version": 1, "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "deep"),
        (b'{"format": "flameprof", "version": 1, "start_time": 1e300}', "start_time"),
        (b'{"format": "flameprof", "version": 1, "argv": [1]}', "argv"),
    ],
)
def test_bad_metadata_is_refused(tmp_path, meta, needle):
    assert needle in error_line(tmp_path, profile_with("meta.json", meta), ".flameprof", *REPORT)


@pytest.mark.parametrize(
    "column, value, needle",
    [
        ("stack_frame", 10**6, "stack frame out of range"),
        ("sample_stack", 10**6, "sample stack out of range"),
        ("sample_thread", -1, "sample thread out of range"),
        ("sample_wall", -5, "non-negative"),
        ("stack_parent", 2**40, "out of range for int32"),
    ],
)
def test_out_of_range_columns_are_refused(tmp_path, column, value, needle):
    array = np.load(io.BytesIO(seed_member(column + ".npy"))).astype(np.int64)
    array[-1] = value
    assert needle in error_line(tmp_path, profile_with(column + ".npy", npy(array)), ".flameprof", *REPORT)


def test_a_frame_row_of_the_wrong_types_is_refused(tmp_path):
    data = profile_with("frames.json", json.dumps([["f", "a.py", 1e400, "python"]]).encode())
    assert "frames.json: row 0" in error_line(tmp_path, data, ".flameprof", *REPORT)


def test_folded_counts_all_zero_render(tmp_path):
    for counts in (b"0", b"1e-320"):  # nothing, and a total too small to divide the graph's width by
        path = tmp_path / "zero.folded"
        path.write_bytes(b"main;a " + counts + b"\nmain;b " + counts + b"\n")
        outcome = run_cli(["render", str(path), "-o", str(tmp_path / "zero.svg")])
        assert outcome.code == 0, outcome
        assert (tmp_path / "zero.svg").read_text().startswith("<?xml")


def test_folded_counts_summing_past_a_double_are_one_error(tmp_path):
    data = b"main;a 1e308\nmain;b 1e308\n"
    assert "total at most" in error_line(tmp_path, data, ".folded", "render", "{in}", "-o", "{out}.svg")


def test_folded_counts_too_large_to_store_are_one_error_on_import(tmp_path):
    data = b"main;a 1e30\n"  # fine to draw, but a .flameprof stores weights as int64 millionths
    line = error_line(tmp_path, data, ".folded", "import", "{in}", "-o", "{out}.flameprof")
    assert "cannot be stored" in line


def test_a_perf_header_with_a_30_digit_period_is_read_at_once(tmp_path):
    path = tmp_path / "perf.txt"
    path.write_bytes(b"python3 4242/4242 [001] 100.000100: " + b"1" * 30 + b" cpu-clock:ppp x\n\t1 f (m)\n\n")
    outcome = run_cli(["collapse", "perf", str(path)], limit=2.0)
    assert outcome.code == 0 and outcome.seconds < 1.0


def test_a_pyspy_record_of_300000_continuation_lines_is_linear(tmp_path):
    data = b'process 1:"python x";thread (1);f (a.py:1) 1\n' + b"cont\n" * 300_000
    path = tmp_path / "raw.txt"
    path.write_bytes(data)
    outcome = run_cli(["import", str(path), "-o", str(tmp_path / "o.flameprof")], limit=3.0)
    assert outcome.code == 2 and outcome.seconds < 1.0, outcome  # one record, with no count at its end


@pytest.mark.parametrize("where", ["startValue", "weights", "bigint"])
def test_speedscope_numbers_past_a_double_are_one_error(tmp_path, where):
    doc = json.loads(READERS["speedscope"].seed())
    prof = doc["profiles"][0]
    if where == "startValue":
        prof["startValue"] = 1e308
    elif where == "weights":
        prof["weights"] = [1e308] * len(prof["weights"])
    else:
        prof["weights"][0] = 10**400
    data = json.dumps(doc).encode()
    assert error_line(tmp_path, data, ".json", "import", "{in}", "--strict", "-o", "{out}.flameprof")


def test_speedscope_event_times_past_a_double_are_one_error(tmp_path):
    events = [{"type": t, "frame": 0, "at": at} for t, at in (("O", 0), ("C", 1e308))]
    events.insert(1, {"type": "O", "frame": 0, "at": 1e307})
    events.insert(2, {"type": "C", "frame": 0, "at": 1.5e308})
    doc = {"shared": {"frames": [{"name": "f"}]}, "profiles": [{"type": "evented", "events": events}]}
    assert error_line(tmp_path, json.dumps(doc).encode(), ".json", "import", "{in}", "-o", "{out}.flameprof")


def test_speedscope_negative_frame_indexes_are_refused(tmp_path):
    doc = json.loads(READERS["speedscope"].seed())
    doc["profiles"][0]["samples"][0][-1] = -1
    line = error_line(
        tmp_path, json.dumps(doc).encode(), ".json", "import", "{in}", "--strict", "-o", "{out}.flameprof"
    )
    assert "frame index -1 out of range" in line


def test_nested_speedscope_json_is_one_error(tmp_path):
    data = b'{"shared": {"frames": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}"
    assert "not valid speedscope JSON" in error_line(tmp_path, data, ".json", "import", "{in}")


def test_an_import_that_skips_every_line_says_so_in_its_one_error_line(tmp_path):
    line = error_line(
        tmp_path, b"garbage\nmore garbage\n", ".folded", "import", "{in}", "-o", "{out}.flameprof"
    )
    assert "no stacks found; skipped 2 malformed line(s)" in line


# -- the same promise from a real process: exit status and stderr as a user sees them ------------
@pytest.mark.parametrize("name", sorted(READERS))
def test_a_truncated_file_is_one_error_line_in_a_subprocess(name, tmp_path):
    reader = READERS[name]
    path = tmp_path / ("cut" + reader.suffix)
    path.write_bytes(reader.seed()[:37])
    proc = run_flameprof("render", str(path), "-o", str(tmp_path / "out.svg"))
    if proc.returncode:
        assert proc.returncode == 2
        assert_one_error_line(proc, str(path))
    else:
        assert "Traceback" not in proc.stderr
