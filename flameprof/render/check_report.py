"""The CI gate's result as a Markdown summary (for ``$GITHUB_STEP_SUMMARY``) and as terminal text."""

from __future__ import annotations

from ..analyze.budgets import CheckResult
from . import markdown

_BASIS_TEXT = {"wall": "the loop thread's whole run (wall time)", "step": "steady-state step time"}


def check_markdown(result: CheckResult, source: str) -> str:
    status = "passed" if result.ok else "FAILED"
    lines = [
        f"## flameprof check: {status}",
        "",
        f"Profile {markdown.code(source)}; shares are of {_BASIS_TEXT[result.basis]}.",
        "",
    ]
    if result.budgets:
        lines += ["| budget | limit | actual | |", "| --- | ---: | ---: | --- |"]
        for b in result.budgets:
            lines.append(
                f"| {markdown.code(b['name'])} | {b['limit_pct']:g}% | {b['actual_pct']:.1f}% | "
                f"{'ok' if b['ok'] else '**over budget**'} |"
            )
        lines.append("")
    if result.max_regression is not None:
        unit = "percentage points of share" if result.basis == "wall" else "% of the baseline's step time"
        lines.append(f"Allowed growth against the baseline: {result.max_regression:g} {unit}.")
        lines.append("")
        if result.changes:
            lines += [
                "| kind | name | baseline | new | growth | |",
                "| --- | --- | ---: | ---: | ---: | --- |",
            ]
            failing = {(r["kind"], r["name"]) for r in result.regressions}
            shown = result.changes + [r for r in result.regressions if r not in result.changes]
            for r in shown:
                flag = "**regression**" if (r["kind"], r["name"]) in failing else "ok"
                lines.append(
                    f"| {r['kind']} | {markdown.code(r['name'][:120])} | {r['base_pct']:.1f}% | "
                    f"{r['new_pct']:.1f}% "
                    f"| {r['growth_pct']:+.1f} | {flag} |"
                )
            lines.append("")
    return "\n".join(lines) + "\n"


def check_text(result: CheckResult) -> str:
    lines = [f"flameprof check: {'passed' if result.ok else 'FAILED'} (basis: {_BASIS_TEXT[result.basis]})"]
    for b in result.budgets:
        mark = "ok  " if b["ok"] else "FAIL"
        lines.append(f"  {mark} {b['name']}: {b['actual_pct']:.1f}% (limit {b['limit_pct']:g}%)")
    if result.max_regression is not None:
        if result.regressions:
            for r in result.regressions:
                lines.append(
                    f"  FAIL {r['kind']} {r['name'][:100]}: {r['base_pct']:.1f}% -> {r['new_pct']:.1f}% "
                    f"({r['growth_pct']:+.1f}, allowed +{result.max_regression:g})"
                )
        else:
            lines.append(f"  ok   nothing grew by more than {result.max_regression:g} against the baseline")
    return "\n".join(lines) + "\n"
