"""Imports go one way, collect → model → analyze → render → commands: every import of every module
(lazy ones inside functions included) is checked against the stage it belongs to, and the import
graph has no cycle."""

from __future__ import annotations

import ast
import os
import re

from conftest import REPO

PACKAGE = os.path.join(REPO, "flameprof")

# What each stage may import besides itself. ``base`` (errors, atomic files, the version, the C
# extensions) is below everything; the top (the public API, the CLI and its commands, the output
# files of a run, the shipped examples) may import anything.
ALLOWED = {
    "base": {"base"},
    "model": {"base", "model"},
    "collect": {"base", "model", "collect"},
    "analyze": {"base", "model", "analyze"},
    "render": {"base", "model", "analyze", "render"},
    "top": {"base", "model", "collect", "analyze", "render", "top"},
}
BASE = {
    "flameprof",
    "flameprof.errors",
    "flameprof.atomic",
    "flameprof._native",
    "flameprof._folded",
    "flameprof._inject",
}


def stage(module: str) -> str:
    if module in BASE:
        return "base"
    part = module.split(".")[1]
    return part if part in ("model", "collect", "analyze", "render") else "top"


def modules() -> dict[str, str]:
    """Dotted name -> path of every module of the package."""
    out = {}
    for directory, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                out[dotted] = path
    return out


def imports(module: str, path: str, known: dict[str, str]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its source."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if not name.startswith("flameprof"):
                continue
            if name in known or name in BASE:
                found.add(name)
            elif name.rpartition(".")[0] in known:  # "from module import function"
                found.add(name.rpartition(".")[0])
    found.discard(module)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_import_goes_down_the_flow():
    wrong = sorted(
        f"{module} ({stage(module)}) imports {target} ({stage(target)})"
        for module, targets in graph().items()
        for target in targets
        if stage(target) not in ALLOWED[stage(module)]
    )
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    # every module imports the package ``flameprof`` first: that is Python's order, not a cycle
    edges = {module: {t for t in targets if t != "flameprof"} for module, targets in graph().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                stack = path + [node]
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, path + [node])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "\n".join(cycles)


def test_the_walk_sees_lazy_and_relative_imports():
    found = graph()
    # lazy, inside a function, three levels up
    assert "flameprof.model.storage" in found["flameprof.collect.jobs.tree"]
    assert "flameprof.collect.engine.session" in found["flameprof.profiler"]
    assert stage("flameprof.collect.engine.session") == "collect" and stage("flameprof.cli") == "top"


def test_the_layout_page_names_every_module():
    """docs/layout.md is how a newcomer finds a file: every module of a stage has its line there
    (the top level and the demo's examples are named in a sentence of their own)."""
    with open(os.path.join(REPO, "docs", "layout.md")) as fh:
        page = fh.read()
    missing = []
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "examples")]
        if root == PACKAGE:
            continue
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                if not re.search(r"`(?:[\w/]+/)?" + re.escape(name) + "`", page):
                    missing.append(os.path.relpath(os.path.join(root, name), PACKAGE))
    assert not missing, f"add these to docs/layout.md: {sorted(missing)}"
