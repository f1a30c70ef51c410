"""Views of a gate result: JUnit XML for CI systems, markdown for a pull-request comment.

JUnit: one <testsuite> per records suite (a <testcase> per checked row: provider, quantity,
case) and one "performance" suite (a <testcase> per compared point), so a CI's test browser
shows each failure and regression by name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ligerbench.gate.rules import PERF_SUITE, Comparison, GateResult
from ligerbench.verify.summary import markdown_table


def _comparison_line(c: Comparison) -> str:
    again = "" if c.recheck_ratio != c.recheck_ratio else f", re-measured {c.recheck_ratio:.4g}"
    return (
        f"{c.metric} of {c.provider} / {c.peer} at {c.case} ({c.quantity}): {c.baseline_ratio:.4g} -> "
        f"{c.run_ratio:.4g} ({c.change:+.1%}, threshold {c.threshold:.0%}{again})"
    )


def junit(result: GateResult, path: Path) -> None:
    root = ET.Element("testsuites", name="ligerbench gate")
    df = result.run.records
    checked = df[df["suite"] != PERF_SUITE]
    for suite, rows in checked.groupby("suite", sort=False):
        ts = ET.SubElement(root, "testsuite", name=str(suite), tests=str(len(rows)))
        bad = 0
        for r in rows.itertuples(index=False):
            tc = ET.SubElement(
                ts, "testcase", classname=f"ligerbench.{suite}.{r.provider}", name=f"{r.quantity} {r.case}"
            )
            detail = f"{r.metric} {r.value:.4g} vs limit {r.limit:.4g}. {r.message}".strip()
            if r.verdict == "fail":
                ET.SubElement(tc, "failure", message=detail).text = detail
                bad += 1
            elif r.verdict == "error":
                ET.SubElement(tc, "error", message=r.message).text = r.message
                bad += 1
            elif r.verdict == "skip":
                ET.SubElement(tc, "skipped", message=r.message)
        ts.set("failures", str(bad))
    # bench rows that failed (a design target, docs/performance.md) or crashed: hard failures, with no testcase above
    crashed = result.failures[result.failures["suite"] == PERF_SUITE]
    perf = ET.SubElement(root, "testsuite", name="performance", tests=str(len(result.comparisons) + len(crashed)))
    for c in result.comparisons:
        tc = ET.SubElement(
            perf, "testcase", classname=f"ligerbench.performance.{c.metric}", name=f"{c.provider} {c.case}"
        )
        if c.counts:
            ET.SubElement(tc, "failure", message=f"regression ({c.status})").text = _comparison_line(c)
        else:
            ET.SubElement(tc, "system-out").text = f"{c.status}: {_comparison_line(c)}"
    for r in crashed.itertuples(index=False):
        tc = ET.SubElement(perf, "testcase", classname=f"ligerbench.bench.{r.provider}", name=f"{r.quantity} {r.case}")
        ET.SubElement(tc, "failure" if r.verdict == "fail" else "error", message=r.message).text = r.message
    perf.set("failures", str(len(result.regressions) + len(crashed)))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def markdown(result: GateResult) -> str:
    status = "PASSED" if result.exit_code == 0 else "FAILED"
    cleared = [c for c in result.comparisons if c.status == "cleared"]
    run_env, base_env = result.run.env, result.baseline.env
    parts = [
        f"## ligerbench gate: {status}\n",
        f"Run `{result.run.path.name}` ({run_env.get('device_name')}, commit {run_env.get('git_commit')}) "
        f"against baseline `{result.baseline.path}` ({base_env.get('device_name')}, commit "
        f"{base_env.get('git_commit')}). {len(result.failures)} failures, {len(result.regressions)} regressions, "
        f"{len(result.comparisons)} performance points compared.\n",
        "Performance is compared as ratios to a peer timed in the same run; a regression is a ratio "
        "worse than the baseline's by more than the threshold ("
        + ", ".join(f"{m} {t:.0%}" for m, t in result.thresholds.items())
        + ") that a re-measurement confirms.\n",
    ]
    if len(result.failures):
        parts += [
            "### Failures\n",
            markdown_table(
                result.failures.head(100),
                ["suite", "provider", "case", "quantity", "value", "limit", "verdict", "message"],
            ),
        ]
        if len(result.failures) > 100:
            parts.append(f"... and {len(result.failures) - 100} more in {result.run.path / 'records.csv'}\n")
    if result.regressions:
        parts += ["### Regressions\n", *[f"- {_comparison_line(c)} [{c.status}]" for c in result.regressions], ""]
    if cleared:
        parts += ["### Cleared on re-measurement\n", *[f"- {_comparison_line(c)}" for c in cleared], ""]
    if result.notes:
        parts += ["### Notes\n", *[f"- {n}" for n in result.notes], ""]
    return "\n".join(parts)
