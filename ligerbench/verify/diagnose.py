"""What a provider's failures have in common, for its author: the axis values that every failing
case of the provider has and no passing case of it has (a correct 2-D-only kernel met 23
crashing cases with nothing saying they were the 3-D and padded layouts:
tests/test_failure_messages.py).

    all 23 failing cases of mine have layout in {3d, padded_vocab} (its passing cases never do):
    fix those, or declare them unsupported (`supports`, docs/providers.md)
"""

from __future__ import annotations

import pandas as pd

BAD = ("fail", "error")
# Cases with nothing to compute (every target ignored: the loss is a constant, every gradient 0)
# are no evidence that a provider handles an axis value: passing them tells no failing case
# apart. (axis, value) pairs; a case with any of them is left out of the passing side.
NOTHING_TO_COMPUTE = (("ignore_pattern", "all"),)


def shared_values(df: pd.DataFrame, axes: list[str]) -> list[str]:
    """One line per provider whose failing cases share axis values its passing cases lack (the
    axes with the fewest such values first, at most two per provider)."""
    lines = []
    columns = [a for a in axes if a in df.columns]
    for provider, rows in df.groupby("provider", sort=True):
        bad = set(rows.loc[rows["verdict"].isin(BAD), "case"])
        computed = rows
        for axis, value in NOTHING_TO_COMPUTE:
            if axis in rows.columns:
                computed = computed[computed[axis].astype(str) != value]
        good = set(computed.loc[computed["verdict"] == "pass", "case"]) - bad
        if not bad or not good:
            continue  # nothing failed, or nothing passed to tell the failing cases apart from
        per_case = rows.drop_duplicates("case").set_index("case")
        found = []
        for axis in columns:
            bad_values = set(per_case.loc[sorted(bad), axis].astype(str))
            good_values = set(per_case.loc[sorted(good), axis].astype(str))
            if not bad_values & good_values:
                found.append((len(bad_values), axis, sorted(bad_values)))
        for _, axis, values in sorted(found)[:2]:
            lines.append(
                f"all {len(bad)} failing cases of {provider} have {axis} in {{{', '.join(values)}}} (its passing "
                "cases never do): fix those, or declare them unsupported (`supports`, docs/providers.md)"
            )
    return lines


def interpreter_hints(df: pd.DataFrame, triton_mode: str, defects: dict[str, str]) -> list[str]:
    """A line per provider whose failures ran where Triton's interpreter has known defects
    (kernels/interpreter_defects.py found them in this process): all in 16-bit cases, or
    errors the interpreter raised. The failures stay failures; the line says where to look."""
    if triton_mode != "interpreter" or not defects:
        return []
    lines = []
    for provider, rows in df.groupby("provider", sort=True):
        bad = rows[rows["verdict"].isin(BAD)]
        if bad.empty:
            continue
        low = "dtype" in bad.columns and bad["dtype"].astype(str).isin(["bf16", "fp16"]).all()
        raised = bad["message"].astype(str).str.contains("InterpreterError|cannot convert None", regex=True).any()
        if low or raised:
            where = "all in 16-bit cases" if low else "errors raised inside Triton's interpreter"
            lines.append(
                f"{provider}: its {bad['case'].nunique()} failing cases ({where}) ran through Triton's "
                f"interpreter, which here has known defects: {'; '.join(defects.values())}. A kernel that is "
                "right on a GPU can fail on CPU: check these on a GPU (docs/providers.md, \"Triton's interpreter "
                'on CPU")'
            )
    return lines


def repeated_errors(df: pd.DataFrame, signature: str) -> list[str]:
    """One line per provider that raised the same error in every case it errored in (a
    signature or output mismatch usually does), with the kernel's calling contract, instead of
    the same message once per case and quantity."""
    lines = []
    for provider, rows in df.groupby("provider", sort=True):
        errors = rows[rows["verdict"] == "error"]
        if errors.empty:
            continue
        messages = errors["message"].astype(str).unique()
        if len(messages) == 1:
            lines.append(
                f"{provider} raised the same error in all {errors['case'].nunique()} cases it failed: "
                f"{messages[0]}; the contract is {signature} (docs/providers.md)"
            )
    return lines


# Two independent kernels that miss one check by the same amount point at the check, not at both
# kernels: errors within this fraction of each other make the check suspect (docs/bugs.md, bug 10:
# two fused log-prob kernels, one error 6.721e-03 each, against a yardstick that was wrong).
CONSENSUS = 0.10


def suspects(df: pd.DataFrame, families: dict[str, str]) -> pd.DataFrame:
    """The failing rel_l2 checks (suite, case, quantity) that providers of two or more families
    (Provider.lineage: ours and its settings are one) fail with errors within CONSENSUS of each
    other; one row per check, naming the providers and their errors."""
    bad = df[(df["verdict"] == "fail") & (df["metric"] == "rel_l2")]
    columns = ["suite", "case", "quantity", "providers", "errors"]
    rows = []
    for (suite, case, quantity), group in bad.groupby(["suite", "case", "quantity"], sort=True):
        finite = group[group["value"].map(lambda v: v == v and v != float("inf"))]
        lineages = {families.get(p, p) for p in finite["provider"]}
        if len(lineages) < 2:
            continue
        lo, hi = float(finite["value"].min()), float(finite["value"].max())
        if hi > (1 + CONSENSUS) * lo:
            continue
        rows.append({"suite": suite, "case": case, "quantity": quantity,
                     "providers": ", ".join(finite["provider"]),
                     "errors": ", ".join(f"{v:.4g}" for v in finite["value"])})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def suspect_lines(df: pd.DataFrame, families: dict[str, str]) -> list[str]:
    """suspects() as lines for the terminal: the check, not each provider, is in question."""
    return [
        f"SUSPECT CHECK {r.suite} {r.quantity} {r.case}: independent providers ({r.providers}) fail it with "
        f"errors within {CONSENSUS:.0%} of each other ({r.errors}): the float64 reference or the limit is more "
        "likely wrong than all of them; reproduce it standalone before blaming a kernel"
        for r in suspects(df, families).itertuples()
    ]
