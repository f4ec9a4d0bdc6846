"""``flameprof import``: format detection, every format to a profile, stdin, strict and lenient
malformed input, no traceback on garbage, and imported profiles rendering as flame graphs."""

from __future__ import annotations

import os
import random

import pytest
from conftest import run_flameprof
from test_import_perf import PERF_TEXT

from flameprof import cli
from flameprof.collect.importers.detect import detect_format
from flameprof.collect.importers.load import load_input
from flameprof.model import storage

DATA = os.path.join(os.path.dirname(__file__), "data", "import")
FOLDED = "main (app.py:1);step (app.py:4) 2.5\nmain (app.py:1);load (data.py:7) 1\n"
PYSPY_THREADS = 'process 5:"python app.py";thread (5): MainThread;main (app.py:1) 3\n'


def sample_inputs(tmp_path) -> dict[str, str]:
    paths = {
        "perf": os.path.join(DATA, "perf_py312.txt"),
        "speedscope": os.path.join(DATA, "pyspy_speedscope.json"),
        "pyspy": os.path.join(DATA, "pyspy_subprocesses.txt"),
    }
    folded = tmp_path / "stacks.folded"
    folded.write_text(FOLDED)
    paths["folded"] = str(folded)
    return paths


def test_detect_format():
    assert detect_format(PERF_TEXT.encode()) == "perf"
    assert detect_format(b'  \n{"shared": {}}') == "speedscope"
    assert detect_format(PYSPY_THREADS.encode()) == "pyspy"
    assert detect_format(FOLDED.encode()) == "folded"
    assert detect_format(b"PK\x03\x04rest") == "flameprof"


def flameprof(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in this process (faster than a subprocess); returns exit code and stderr."""
    code = cli.main(list(args))
    return code, capsys.readouterr().err


def test_import_every_format_detected(tmp_path, capsys):
    for fmt, path in sample_inputs(tmp_path).items():
        out = tmp_path / f"{fmt}.flameprof"
        code, err = flameprof(capsys, "import", path, "-o", str(out))
        assert code == 0, err
        profile = storage.load(out)
        assert profile.num_samples > 0
        expected = {"perf": "perf", "speedscope": "py-spy", "pyspy": "py-spy", "folded": "folded"}[fmt]
        assert profile.meta["collector"] == expected
        assert f"imported {profile.num_samples} samples" in err


def test_import_from_stdin_with_explicit_format_and_rate(tmp_path):
    out = tmp_path / "p.flameprof"
    proc = run_flameprof("import", "-", "--from", "pyspy", "--rate", "100", "-o", str(out), input=FOLDED)
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(out)
    assert profile.meta["collector"] == "py-spy" and profile.meta["weight_unit"] == "seconds"
    assert sorted(profile.sample_wall.tolist()) == pytest.approx([0.01, 0.025])


def assert_error(code: int, err: str, needle: str) -> None:
    """One error line, non-zero exit (the in-process twin of conftest's assert_one_error_line)."""
    assert code != 0 and err.count("\n") == 1 and err.startswith("flameprof: error:") and needle in err, err


def test_forced_format_mismatch_is_one_error(tmp_path, capsys):
    path = tmp_path / "stacks.folded"
    path.write_text(FOLDED)
    assert_error(
        *flameprof(capsys, "import", str(path), "--from", "speedscope", "-o", str(tmp_path / "x.flameprof")),
        "not valid speedscope JSON",
    )


def test_malformed_lines_warn_once_or_stop_strict(tmp_path, capsys):
    path = tmp_path / "bad.folded"
    path.write_text(FOLDED + "no count here\nmain (app.py:1) -3\n" + FOLDED)
    out = tmp_path / "ok.flameprof"
    code, err = flameprof(capsys, "import", str(path), "-o", str(out))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [f"flameprof: warning: {path}: skipped 2 malformed line(s), first at line 3"]
    assert storage.load(out).meta["skipped_lines"] == 2
    assert_error(
        *flameprof(capsys, "import", str(path), "--strict", "-o", str(tmp_path / "strict.flameprof")),
        f"{path}:3: malformed folded line",
    )
    assert not (tmp_path / "strict.flameprof").exists()


def test_perf_strict_names_the_line(tmp_path, capsys):
    path = tmp_path / "perf.txt"
    lines = PERF_TEXT.splitlines(keepends=True)
    lines[6] = "?? not a stack line\n"
    path.write_text("".join(lines))
    assert_error(
        *flameprof(capsys, "import", str(path), "--strict", "-o", str(tmp_path / "x.flameprof")),
        f"{path}:7: unrecognized perf script line",
    )


def test_load_input_reads_every_importable_format(tmp_path):
    for fmt, path in sample_inputs(tmp_path).items():
        assert load_input(path).num_samples > 0, fmt


def test_imported_profiles_render_as_svg(tmp_path, capsys):
    perf_txt = tmp_path / "perf.txt"
    perf_txt.write_text(PERF_TEXT + "\n")
    profile_path = tmp_path / "perf.flameprof"
    assert flameprof(capsys, "import", str(perf_txt), "-o", str(profile_path))[0] == 0
    for source in (profile_path, perf_txt):
        svg = tmp_path / f"{source.name}.svg"
        code, err = flameprof(capsys, "render", str(source), "-o", str(svg))
        assert code == 0, err
        text = svg.read_text()
        assert text.startswith("<?xml") or text.startswith("<svg")
        assert "add_out" in text and "forward (/srv/app/model.py)" in text


def mutations(data: bytes, rng: random.Random, count: int):
    yield b""
    yield data[: len(data) // 2]
    for _ in range(count):
        kind = rng.randrange(4)
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        elif kind == 1:
            yield data[: rng.randrange(len(data))]
        elif kind == 2:
            buf = bytearray(data)
            for _ in range(rng.randrange(1, 20)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            yield bytes(buf)
        else:
            start = rng.randrange(len(data))
            yield data[:start] + data[start + rng.randrange(1, 200) :]


def test_import_never_tracebacks_on_damaged_input(tmp_path, capsys):
    rng = random.Random(6)
    inputs = {fmt: open(path, "rb").read() for fmt, path in sample_inputs(tmp_path).items()}
    inputs["perf-text"] = PERF_TEXT.encode()
    path = tmp_path / "damaged"
    out = tmp_path / "out.flameprof"
    for fmt, data in inputs.items():
        for i, damaged in enumerate(mutations(data, rng, 20)):
            path.write_bytes(damaged)
            strict = ["--strict"] if i % 2 else []
            code, err = flameprof(capsys, "import", str(path), "-o", str(out), *strict)  # raises on any bug
            lines = err.splitlines()
            assert code == 0 or lines[-1].startswith("flameprof: error:"), (fmt, i, err)
            assert len(lines) <= 3 and all(line.startswith("flameprof: ") for line in lines), (fmt, i, err)
