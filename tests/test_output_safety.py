"""Files land only where asked and never replace what is not a regular file; every write failure
is one error line; any name (lone surrogates, Markdown and HTML syntax) comes out escaped."""

from __future__ import annotations

import json
import os
import re
import stat
import threading

import pytest
from conftest import assert_one_error_line, run_flameprof

from flameprof.analyze.report import report_of
from flameprof.collect.jobs.parts import PartWriter
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.records import Frame, ProcessInfo
from flameprof.render.formats import FORMATS, Rendering, write_formats
from flameprof.render.options import OutputOptions
from flameprof.render.report import render_report

HOSTILE = "f`<img src=x onerror=alert(1)>`&\"'|*_[x](y)"
SURROGATE = "g\ud800h"


def hostile_profile():
    b = ProfileBuilder({"start_time": 0.0})
    t = b.thread_id(1, 1, "MainThread")
    root = b.frame(Frame("<module>", "/work/train.py", 1))
    for i, name in enumerate((HOSTILE, SURROGATE, "plain")):
        leaf = b.frame(Frame(name, f"/work/{name}.py", 3))
        for k in range(5):
            b.add_sample(0.01 * (5 * i + k + 1), t, b.stack_id([root, leaf]), 0.01)
    return b.build()


@pytest.fixture
def profile_file(tmp_path):
    path = tmp_path / "p.flameprof"
    storage.save(hostile_profile(), path)
    return path


def test_a_fifo_and_a_link_to_one_are_written_to_not_replaced(tmp_path, profile_file):
    fifo = tmp_path / "graph.svg"
    os.mkfifo(fifo)
    link = tmp_path / "link.svg"
    link.symlink_to(fifo)
    for target in (fifo, link):
        got = []
        reader = threading.Thread(target=lambda got=got: got.append(open(fifo, "rb").read()))
        reader.start()
        proc = run_flameprof("render", str(profile_file), "-o", str(target))
        reader.join(30)
        assert proc.returncode == 0, proc.stderr
        assert got and got[0].startswith(b"<?xml") and b"</svg>" in got[0]
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root (CI runs as root)")
def test_a_device_is_written_to_not_replaced(tmp_path, profile_file):
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    assert run_flameprof("render", str(profile_file), "-o", str(null)).returncode == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_link_to_a_regular_file_keeps_the_link(tmp_path, profile_file):
    real = tmp_path / "real.folded"
    real.write_text("old\n")
    link = tmp_path / "link.folded"
    link.symlink_to(real)
    assert run_flameprof("render", str(profile_file), "-o", str(link)).returncode == 0
    assert os.path.islink(link) and "plain" in real.read_text()


def test_a_directory_and_a_full_disk_are_one_error_line(tmp_path, profile_file):
    (tmp_path / "dir.svg").mkdir()
    assert_one_error_line(
        run_flameprof("render", str(profile_file), "-o", str(tmp_path / "dir.svg")), "dir.svg"
    )
    proc = run_flameprof("render", str(profile_file), "-o", "/dev/full")  # every write fails: ENOSPC
    assert_one_error_line(proc, "No space left on device")
    proc = run_flameprof("report", str(profile_file), "-o", "/dev/full")
    assert_one_error_line(proc, "No space left on device")


def test_part_files_are_private(tmp_path):
    b = ProfileBuilder()
    b.add_sample(0.01, b.thread_id(1, 1, "MainThread"), b.stack_id([b.frame(Frame("f", "/x.py", 1))]), 0.01)
    writer = PartWriter(str(tmp_path), b, "host", 1)
    writer.write(ProcessInfo(1, "", "host", "python x.py", 0), {}, {}, final=True)
    assert stat.S_IMODE(os.stat(writer.path).st_mode) == 0o600


def test_every_format_survives_lone_surrogates_and_escapes_markup(tmp_path, profile_file):
    profile = storage.load(profile_file)
    names = {f.name for f in profile.frames}
    assert {HOSTILE, SURROGATE} <= names  # the file keeps every name exactly
    rendering = Rendering(profile, OutputOptions())
    paths = write_formats(rendering, str(tmp_path / "out"), tuple(FORMATS))
    assert len(paths) == len(FORMATS)
    for path in paths:
        data = open(path, "rb").read()
        if path.endswith((".svg", ".html")):
            assert b"<img" not in data, path  # names are text, never markup
    markdown = render_report(report_of(profile), "markdown")
    for line in markdown.splitlines():
        if "onerror" in line:  # a table row: the name sits whole inside one cell's code span
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            [cell] = [c for c in cells if "onerror" in c]
            assert cell.startswith("``") and cell.endswith("``") and "```" not in cell, line
    json.loads(render_report(report_of(profile), "json"))
    for fmt in ("text", "markdown", "json"):
        proc = run_flameprof("report", str(profile_file), "--format", fmt)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    proc = run_flameprof("render", str(profile_file), "-o", "-", "--count", "samples")
    assert proc.returncode == 0 and "plain" in proc.stdout
