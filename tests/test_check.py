"""flameprof check: budgets on phases, layers and functions, baselines, exit codes and summaries."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_error_line, run_flameprof
from synthetic import training_profile

from flameprof.analyze.budgets import check, parse_budget
from flameprof.errors import FlameprofError
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder

# Per step: data 20 %, forward 40 % (encoder 30 %, head 10 %), tokenize 10 %, backward 20 %, optimizer 10 %.
TICKS = {"data": 2, "encoder": 3, "head": 1, "tokenize": 1, "backward": 2, "optimizer": 1}


@pytest.fixture
def profiles(tmp_path):
    def save(name, ticks=TICKS, **kw):
        path = tmp_path / name
        storage.save(training_profile(ticks, **kw), path)
        return str(path)

    return save


def _actual(result, name):
    return next(b["actual_pct"] for b in result.budgets if b["name"] == name)


def test_budget_shares_of_steady_state_steps_and_of_wall_time():
    profile = training_profile(TICKS, warmup_ticks=50)
    budgets = [parse_budget(t) for t in ("data=25%", "layer:encoder=20", "fn:^tokenize=5%", "forward=40")]
    result = check(profile, budgets)
    assert result.basis == "step"
    assert [_actual(result, b.name) for b in budgets] == pytest.approx([20, 30, 10, 40])
    assert [b["ok"] for b in result.budgets] == [True, False, False, True]
    # On wall time the 50-sample warm-up (tokenize) counts: 150 samples, 20 of them data.
    wall = check(profile, budgets, basis="wall")
    assert _actual(wall, "data") == pytest.approx(100 * 20 / 150, abs=1e-3)
    assert _actual(wall, "fn:^tokenize") == pytest.approx(100 * 60 / 150, abs=1e-3)


def test_cli_exit_codes_summary_and_json(profiles, tmp_path):
    path = profiles("p.flameprof")
    ok = run_flameprof("check", path, "--max", "data=25%", "--max", "layer:encoder=35%")
    assert ok.returncode == 0, ok.stderr
    assert "passed" in ok.stdout
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    bad = run_flameprof(
        "check",
        path,
        "--max",
        "data=15%",
        "--max",
        "layer:encoder=35%",
        "--summary",
        str(tmp_path / "s.md"),
        "--json",
        str(tmp_path / "r.json"),
        env={"GITHUB_STEP_SUMMARY": str(step_summary)},
    )
    assert bad.returncode == 1, bad.stderr
    assert "FAIL data: 20.0% (limit 15%)" in bad.stdout
    summary = (tmp_path / "s.md").read_text()
    assert "| `data` | 15% | 20.0% | **over budget** |" in summary
    assert "| `layer:encoder` | 35% | 30.0% | ok |" in summary
    assert step_summary.read_text() == "earlier step\n" + summary
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ok"] is False and result["basis"] == "step"
    assert [(b["name"], b["ok"]) for b in result["budgets"]] == [("data", False), ("layer:encoder", True)]


def test_baseline_regression_by_step_time(profiles, tmp_path):
    base = profiles("base.flameprof")
    slower = profiles("new.flameprof", dict(TICKS, encoder=5))  # the encoder takes 2 more ticks per step
    same = run_flameprof("check", base, "--baseline", base, "--max-regression", "1")
    assert same.returncode == 0, same.stdout + same.stderr
    proc = run_flameprof(
        "check", slower, "--baseline", base, "--max-regression", "10", "--json", str(tmp_path / "r.json")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    grown = {(r["kind"], r["name"]): r["growth_pct"] for r in result["regressions"]}
    # 2 ticks more on a 10-tick step: +20 % of the baseline's step time, for the layer and its phase.
    assert grown[("layer", "Net.encoder (Encoder)")] == pytest.approx(20)
    assert grown[("phase", "forward")] == pytest.approx(20)
    assert ("layer", "Net.head (Linear)") not in grown
    assert ("phase", "data") not in grown
    loose = run_flameprof("check", slower, "--baseline", base, "--max-regression", "25")
    assert loose.returncode == 0, loose.stdout


def test_baseline_by_share_of_wall_time(profiles):
    base = training_profile(TICKS)
    new = training_profile(dict(TICKS, encoder=5))
    result = check(new, [], basis="wall", baseline=base, max_regression=5)
    grown = {(r["kind"], r["name"]): r for r in result.regressions}
    # encoder: 3/10 of the baseline, 5/12 now: +11.7 share points; data shrank to 2/12 and is not listed
    assert grown[("layer", "Net.encoder (Encoder)")]["growth_pct"] == pytest.approx(
        100 * (5 / 12 - 3 / 10), abs=1e-2
    )
    assert ("phase", "data") not in grown


@pytest.mark.parametrize(
    "text, needle",
    [
        ("data", "expected NAME=PCT"),
        ("data=120%", "between 0 and 100"),
        ("dataloading=5", "not a phase"),
        ("layer:=5", "empty layer pattern"),
        ("fn:(=5", "invalid regular expression"),
    ],
)
def test_bad_budgets(text, needle):
    with pytest.raises(FlameprofError, match=needle):
        parse_budget(text)


def test_a_profile_without_samples_is_bad_input_not_a_pass():
    with pytest.raises(FlameprofError, match="no samples"):
        check(ProfileBuilder().build(), [parse_budget("data=5")])


def test_bad_input_exits_2_with_one_line(profiles, tmp_path):
    path = profiles("p.flameprof")
    proc = run_flameprof("check", str(tmp_path / "missing.flameprof"), "--max", "data=5")
    assert proc.returncode == 2
    assert_one_error_line(proc, "missing.flameprof")
    proc = run_flameprof("check", path, "--max", "data=lots")
    assert proc.returncode == 2
    assert_one_error_line(proc, "bad budget")
    folded = tmp_path / "x.folded"
    folded.write_text("main;work 10\n")
    proc = run_flameprof("check", str(folded), "--of", "step", "--max", "data=5")
    assert proc.returncode == 2
    assert_one_error_line(proc, "no steady-state")
    proc = run_flameprof("check", path, "--max-regression", "5")
    assert proc.returncode == 2
    assert_one_error_line(proc, "--baseline")
