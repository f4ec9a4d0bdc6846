"""A wheel built from the sources holds the files flameprof reads at run time but never imports:
the inlined assets and the children's sitecustomize; and the type stubs of the C extensions, which
name what the built extensions define."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

READ_AT_RUN_TIME = (
    "flameprof/render/assets/flamegraph.js",
    "flameprof/render/assets/flamegraph.css",
    "flameprof/render/assets/report.css",
    "flameprof/collect/jobs/startup/sitecustomize.py",
    "flameprof/_native.pyi",
    "flameprof/_folded.pyi",
    "flameprof/_inject.pyi",
    "flameprof/_perf.pyi",
    "flameprof/_trees.pyi",
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


@pytest.mark.parametrize("module", ["_native", "_folded", "_inject", "_perf", "_trees"])
def test_stubs_name_what_the_extension_defines(module):
    """Every public name of the built extension (and of each class) is in its .pyi, and no other."""
    built = importlib.import_module(f"flameprof.{module}")
    tree = ast.parse(open(f"{REPO}/flameprof/{module}.pyi").read())
    stub = {node.name: node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    public = {name for name in dir(built) if not name.startswith("_")}
    assert set(stub) == public
    for name, node in stub.items():
        if isinstance(node, ast.ClassDef):
            members = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")
            }
            assert members == {m for m in vars(getattr(built, name)) if not m.startswith("_")}, name
