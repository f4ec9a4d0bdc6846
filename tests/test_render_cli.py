"""``flameprof render`` as a user runs it: profiles and folded files in, SVG or folded text out."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from conftest import assert_one_error_line, run_flameprof

from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame

SVG = "{http://www.w3.org/2000/svg}"
FOLDED = "main (app.py:1);work (app.py:10) 7\nmain (app.py:1);idle (app.py:20) 3\nmain (app.py:1) 2\n"


def frame_names(path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {r.get("n"): r.get("s") for r in root.find(f"{SVG}svg[@id='f']").iter(f"{SVG}rect")}


def test_render_a_folded_file_to_svg(tmp_path):
    src = tmp_path / "stacks.txt"
    src.write_text(FOLDED)
    out = tmp_path / "graph.svg"
    proc = run_flameprof("render", str(src), "-o", str(out), "--title", "Stacks", "--icicle")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) <= 1
    names = frame_names(out)
    assert names == {"all": "12", "main (app.py:1)": "12", "work (app.py:10)": "7", "idle (app.py:20)": "3"}
    assert ">Stacks</text>" in out.read_text()


def test_render_reads_stdin_and_writes_folded_by_extension(tmp_path):
    out = tmp_path / "again.folded"
    proc = run_flameprof("render", "-", "-o", str(out), input=FOLDED)
    assert proc.returncode == 0, proc.stderr
    assert sorted(out.read_text().splitlines()) == sorted(FOLDED.splitlines())


def test_render_a_flameprof_profile_in_each_mode(tmp_path):
    b = ProfileBuilder({"cwd": "/proj", "weight_unit": "seconds"})
    thread = b.thread_id(1, 1, "MainThread")
    busy = b.stack_id([b.frame(Frame("main", "/proj/app.py", 1)), b.frame(Frame("busy", "/proj/app.py", 5))])
    wait = b.stack_id([b.frame(Frame("main", "/proj/app.py", 1)), b.frame(Frame("wait", "/proj/app.py", 9))])
    for _ in range(4):
        b.add_sample(0.0, thread, busy, 0.01, 0.01)
    b.add_sample(0.0, thread, wait, 1.0, 0.0)
    src = tmp_path / "p.flameprof"
    storage.save(b.build(), src)
    for mode in ("wall", "cpu", "samples"):
        out = tmp_path / f"{mode}.svg"
        proc = run_flameprof("render", str(src), "-o", str(out), "--mode", mode, "--minwidth", "0")
        assert proc.returncode == 0, proc.stderr
        names = frame_names(out)
        assert names["busy (app.py:5)"] == "4"
        assert ("wait (app.py:9)" in names) == (mode != "cpu")  # no CPU time, no frame
    assert "1.04 s of wall time, 5 samples" in (tmp_path / "wall.svg").read_text()


def test_malformed_folded_line_is_one_error_with_its_line_number(tmp_path):
    src = tmp_path / "bad.folded"
    src.write_text("a;b 1\na;c 2\nnot a count here\n")
    out = tmp_path / "out.svg"
    proc = run_flameprof("render", str(src), "-o", str(out))
    assert_one_error_line(proc, "bad.folded:3", "malformed")
    assert sorted(os.listdir(tmp_path)) == ["bad.folded"]  # nothing half-written left behind


def test_bad_paths_are_one_error_line(tmp_path):
    src = tmp_path / "s.folded"
    src.write_text(FOLDED)
    assert_one_error_line(
        run_flameprof("render", str(tmp_path / "missing.folded"), "-o", str(tmp_path / "x.svg")),
        "missing.folded",
    )
    assert_one_error_line(
        run_flameprof("render", str(src), "-o", str(tmp_path / "no" / "dir.svg")), "cannot write"
    )
    assert_one_error_line(run_flameprof("render", str(src)), "-o")
    assert sorted(os.listdir(tmp_path)) == ["s.folded"]


def test_a_profile_the_file_cannot_hold_is_refused_before_anything_is_written(tmp_path):
    folded = tmp_path / "huge.folded"
    folded.write_text("main;work 9999999999999\nmain 5\n")
    proc = run_flameprof("render", str(folded), "-o", str(tmp_path / "huge.svg"), "--format", "flameprof")
    assert_one_error_line(proc, "cannot be stored in a .flameprof file")
    assert proc.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.folded"]


def test_commands_that_run_no_program_start_numpy_with_one_blas_thread(tmp_path):
    """numpy's BLAS threads only spin in ``render`` and the other commands that run no program; ``run``
    leaves the program its own (its numpy is the program's), and a caller's ``main(argv)`` leaves its
    environment alone."""
    (tmp_path / "a.folded").write_text("main;work 3\n")
    script = (
        "import os, sys\n"
        "from flameprof.cli import main\n"
        "by = sys.argv.pop(1)\n"  # the command line (sys.argv), or a caller's argument list
        "code = main(None if by == 'cli' else sys.argv[1:])\n"
        "import numpy\n"
        "print(code, os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)\n"
    )

    def threads_setting(*argv: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert threads_setting("cli", "render", "a.folded", "-o", "a.svg") == "0 1 True"
    assert threads_setting("caller", "render", "a.folded", "-o", "b.svg") == "0 None True"
    (tmp_path / "p.py").write_text("import os\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    assert threads_setting("cli", "run", "-q", "-o", "p.flameprof", "p.py") == "None\n0 None True"
