"""The notebook magic, in a real Jupyter kernel driven by nbclient: the cell runs as usual, and the
verdict, the phases and the interactive flame graph appear below it."""

from __future__ import annotations

import html
import os
import subprocess
import sys

import torch  # noqa: F401  (the cells train a torch model: without torch, test_pythons.sh leaves this out)
from conftest import REPO

TRAIN = """\
%%flameprof --rate 500 -o {out}
import time, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.perf_counter() + 1.0
steps = 0
while time.perf_counter() < end:
    loss = model(torch.randn(32, 64)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    steps += 1
print("trained", steps > 10)
"""
FAILS = """\
%%flameprof
def broken():
    sum(range(10**6))
    raise ValueError("the cell's own error")
broken()
"""


def test_cell_magic_runs_the_cell_and_shows_the_report_below_it(tmp_path, monkeypatch):
    import nbformat  # installed by the test setup, beside torch
    from nbclient import NotebookClient

    prefix = tmp_path / "kernel"  # a kernelspec for this interpreter, not the machine's
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", "fp"],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "out"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext flameprof"),
        nbformat.v4.new_code_cell(TRAIN.format(out=out)),
        nbformat.v4.new_code_cell(FAILS),
        nbformat.v4.new_code_cell("%flameprof sum(range(10**6))"),
    ]
    NotebookClient(nb, timeout=180, kernel_name="fp", allow_errors=True).execute()
    train, fails, line = nb.cells[1].outputs, nb.cells[2].outputs, nb.cells[3].outputs
    assert any(o.get("name") == "stdout" and "trained True" in o["text"] for o in train)
    [page] = [o["data"]["text/html"] for o in train if "text/html" in o.get("data", {})]
    assert "<b>flameprof</b>:" in page and "phases: data" in page
    report = html.unescape(page.split('srcdoc="', 1)[1])
    assert "<svg" in report and "Sequential" in report  # the flame graph, with the layers
    assert (out / "profile.flameprof").exists()
    assert any(o["output_type"] == "error" and o["ename"] == "ValueError" for o in fails)
    assert any("text/html" in o.get("data", {}) for o in fails)  # the profile is shown all the same
    assert any("text/html" in o.get("data", {}) for o in line)
