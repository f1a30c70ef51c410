"""What a provider's failures have in common, for its author: the axis values that every failing
case of the provider has and no passing case of it has (issue 24, finding 6: a correct 2-D-only
kernel met 23 crashing cases with nothing saying they were the 3-D and padded layouts).

    all 23 failing cases of mine have layout in {3d, padded_vocab} (its passing cases never do):
    fix those, or declare them unsupported (`supports`, docs/providers.md)
"""

from __future__ import annotations

import pandas as pd

BAD = ("fail", "error")


def shared_values(df: pd.DataFrame, axes: list[str]) -> list[str]:
    """One line per provider whose failing cases share axis values its passing cases lack (the
    axes with the fewest such values first, at most two per provider)."""
    lines = []
    columns = [a for a in axes if a in df.columns]
    for provider, rows in df.groupby("provider", sort=True):
        bad = set(rows.loc[rows["verdict"].isin(BAD), "case"])
        good = set(rows.loc[rows["verdict"] == "pass", "case"]) - bad
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
