"""Views of a gate result: JUnit XML for CI systems, markdown for a pull-request comment.

JUnit: one <testsuite> per records suite (a <testcase> per checked row: provider, quantity,
case) and one "performance" suite (a <testcase> per compared point), so a CI's test browser
shows each failure and regression by name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ligerbench import runs, verdict
from ligerbench.exits import ExitCode
from ligerbench.gate.rules import PERF_SUITE, Comparison, GateResult
from ligerbench.verify.summary import markdown_table


def _comparison_line(c: Comparison) -> str:
    again = "" if c.recheck_ratio != c.recheck_ratio else f", re-measured {c.recheck_ratio:.4g}"
    return (
        f"{c.metric} of {c.provider} / {c.peer} at {c.case} ({c.quantity}): {c.baseline_ratio:.4g} -> "
        f"{c.run_ratio:.4g} ({c.change:+.1%}, threshold {c.threshold:.0%}{again})"
    )


def tally(result: GateResult) -> verdict.Tally:
    """The gate's verdict line: the run's cases; checks: the baseline's checks compared and the
    performance points; failed: failing checks, regressions and the baseline's checks missing from
    the run; errors: the checks that raised."""
    records = result.run.records
    cases = int(records.loc[records["suite"] != PERF_SUITE, "case"].nunique()) if len(records) else 0
    errors = int((result.failures["verdict"] == "error").sum()) if len(result.failures) else 0
    failed = len(result.failures) - errors + len(result.regressions) + len(result.missing)
    return verdict.Tally(cases, "cases", result.compared + len(result.comparisons), failed, errors)


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
    # the evidence itself: the run finished, compared every expected check, kept every kill
    ev = ET.SubElement(root, "testsuite", name="evidence")
    problems = (
        [("run complete", p) for p in result.incomplete]
        + [("kill matrix", p) for p in result.kill_problems]
        + [
            ("missing from the run", f"{r.suite} {r.provider} {r.quantity} {r.case}".strip())
            for r in result.missing.itertuples(index=False)
        ]
    )
    tc = ET.SubElement(ev, "testcase", classname="ligerbench.evidence", name="run complete")
    for name, text in problems:
        tc = ET.SubElement(ev, "testcase", classname="ligerbench.evidence", name=f"{name}: {text}"[:200])
        ET.SubElement(tc, "failure", message=name).text = text
    ev.set("tests", str(1 + len(problems)))
    ev.set("failures", str(len(problems)))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _subset_hint(result: GateResult) -> str:
    """How to declare a deliberate subset, with the run's own filters (its manifest) when it has any."""
    filters = (result.run.env.get("run") or {}).get("filters") or {}
    named = [
        f"--subset {k}={v}"
        for k, values in filters.items()
        if k == "k" or (k in result.run.records.columns and k != "case")  # a records column: --subset names it
        for v in (values if isinstance(values, list) else [values])
    ]
    if named:
        return f"The run was filtered: if that was deliberate, say so with `{' '.join(named)}`.\n"
    return "A deliberate subset? Say so: `--subset FIELD=VALUE` (e.g. reduction=none) or `--subset k=EXPR`.\n"


def markdown(result: GateResult) -> str:
    status = "PASSED" if result.exit_code == ExitCode.OK else "FAILED"
    cleared = [c for c in result.comparisons if c.status == "cleared"]
    run_env, base_env = result.run.env, result.baseline.env
    parts = [
        f"## ligerbench gate: {status}\n",
        f"Run `{result.run.path.name}` ({run_env.get('device_name')}, commit {run_env.get('git_commit')}) "
        f"against baseline `{result.baseline.path}` ({base_env.get('device_name')}, commit "
        f"{base_env.get('git_commit')}). {len(result.failures)} failures, {len(result.regressions)} regressions, "
        f"{len(result.comparisons)} performance points compared; {result.compared} of {result.expected} checks "
        f"of the baseline compared ({len(result.missing)} missing"
        + (", a declared subset" if result.subset else "")
        + ").\n",
        "Performance is compared as ratios to a peer timed in the same run; a regression is a ratio "
        "worse than the baseline's by more than the threshold ("
        + ", ".join(f"{m} {t:.0%}" for m, t in result.thresholds.items())
        + ") that a re-measurement confirms.\n",
    ]
    if result.incomplete:
        parts += ["### The run is incomplete\n", *[f"- {p}" for p in result.incomplete], ""]
    if result.kill_problems:
        parts += ["### Kill matrix\n", *[f"- {p}" for p in result.kill_problems], ""]
    if len(result.missing):
        parts += [
            f"### Checks of the baseline missing from the run ({len(result.missing)}; first 50)\n",
            markdown_table(result.missing.head(50), list(result.missing.columns)),
            _subset_hint(result),
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


def as_json(result: GateResult) -> dict:
    code = result.exit_code
    counts = {
        "failures": len(result.failures),
        "regressions": len(result.regressions),
        "performance_points": len(result.comparisons),
        "compared": result.compared,
        "expected": result.expected,
        "missing": len(result.missing),
        "kill_problems": len(result.kill_problems),
    }
    env = result.run.env
    return runs.json_report(
        env,
        exit_code=int(code),
        status=runs.status_word(code),
        counts=counts,
        path=result.run.path,
        kind=result.kind,
        baseline=str(result.baseline.path),
        subset=result.subset,
        incomplete=result.incomplete,
        kill_problems=result.kill_problems,
        failures=result.failures[["suite", "provider", "case", "quantity", "verdict", "message"]].to_dict("records"),
        regressions=[_comparison_line(c) for c in result.regressions],
        notes=result.notes,
    )


def unusable_json(reason: str) -> dict:
    counts = dict.fromkeys(
        ("failures", "regressions", "performance_points", "compared", "expected", "missing", "kill_problems"), 0
    )
    code = ExitCode.USAGE
    return runs.json_report({}, exit_code=int(code), status=code.status, counts=counts, reason=reason)
