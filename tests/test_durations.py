"""Every duration option takes units as people write them; a plain number stays seconds."""

from __future__ import annotations

import argparse

import pytest
from conftest import assert_one_error_line, run_flameprof

from flameprof.commands.options import positive_seconds


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 30.0),
        ("2.5", 2.5),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("5min", 300.0),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("10S", 10.0),
    ],
)
def test_durations_with_units(text, seconds):
    assert positive_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "5x", "5m3", "m5", "1h-30m", "-5s", "0", "0s", "nan", "1e9"])
def test_bad_durations_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_seconds(text)


def test_a_bad_duration_is_one_error_line(tmp_path):
    proc = run_flameprof("run", "--snapshot-every", "5 minutes", "-o", str(tmp_path), "x.py")
    assert_one_error_line(proc, "invalid duration", "30s")


def test_a_run_snapshots_at_a_duration_with_units(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(
        "import time\nend = time.time() + 1.6\nwhile time.time() < end:\n    sum(range(1000))\n"
    )
    proc = run_flameprof("run", "--snapshot-every", "500ms", "-q", "-o", str(tmp_path / "out"), str(script))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "profile.snapshot.flameprof").exists()
