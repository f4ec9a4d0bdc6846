"""Shared test helpers: run the flameprof CLI as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flameprof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "flameprof", *args]


def run_flameprof(
    *args: str,
    cwd: str | os.PathLike | None = None,
    timeout: float = 120,
    env: dict | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = REPO + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.run(
        flameprof_cmd(*args),
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """A user error: non-zero exit, exactly one line on stderr, no traceback."""
    assert proc.returncode != 0, proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("flameprof: error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def write_script(tmp_path):
    """Write a Python script into tmp_path and return its path."""

    def write(name: str, source: str) -> str:
        path = tmp_path / name
        path.write_text(source)
        return str(path)

    return write


@pytest.fixture(params=["native", "python"])
def sampler_kind(request, monkeypatch):
    """Both samplers: the C one (``flameprof._native``) and its Python twin."""
    monkeypatch.setenv("FLAMEPROF_NATIVE", "1" if request.param == "native" else "0")
    return request.param


@pytest.fixture
def one_thread():
    """PyTorch's ops on one thread, so a loop's own timers and its samples see the same work."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
