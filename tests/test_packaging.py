"""A wheel built from the sources holds the files flameprof reads at run time but never imports:
the inlined assets, the children's sitecustomize, the program gdb runs in an attached process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from conftest import REPO

READ_AT_RUN_TIME = (
    "flameprof/render/assets/flamegraph.js",
    "flameprof/render/assets/flamegraph.css",
    "flameprof/render/assets/report.css",
    "flameprof/collect/jobs/startup/sitecustomize.py",
    "flameprof/collect/attach/gdb_program.py",
)


def test_wheel_ships_the_files_read_at_run_time(tmp_path):
    source = tmp_path / "src"
    for name in ("flameprof", "native"):
        shutil.copytree(f"{REPO}/{name}", source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(f"{REPO}/{name}", source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = (tmp_path / "dist").glob("flameprof_dl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in READ_AT_RUN_TIME if name not in names]
    assert not missing, missing
