"""All-pairs covering designs: a small set of cases in which every pair of values of any two
axes appears together in some case (a full cross product of the grids' axes would be tens of
thousands of cases).

    rows = all_pairs({"dtype": ("fp32", "bf16"), "layout": ("2d", "3d")}, allowed=..., covered=...)

Greedy and deterministic (the same axes give the same rows, in the same order): while a pair is
uncovered, start a row from the first uncovered pair (in axis and value order), then give each
other axis the value that covers the most still-uncovered pairs with the values chosen so far
(the first such value on a tie), among those `allowed` accepts. Pairs `allowed` refuses (a
combination no case may have) are not required; rows already in the grid (`covered`) count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import combinations
from typing import Any

from ligerbench.axes import Axis

Row = dict[str, Any]


def pairs_of(row: Row, axes: dict[str, tuple]) -> set[tuple]:
    """The (axis, value index, axis, value index) pairs a row covers (axes in their order)."""
    names = list(axes)
    idx = [(i, axes[n].index(row[n])) for i, n in enumerate(names) if n in row and row[n] in axes[n]]
    return {(a, va, b, vb) for (a, va), (b, vb) in combinations(idx, 2)}


def required_pairs(axes: dict[str, tuple], allowed: Callable[[Row], bool]) -> set[tuple]:
    names = list(axes)
    return {
        (i, vi, j, vj)
        for i, j in combinations(range(len(names)), 2)
        for vi, x in enumerate(axes[names[i]])
        for vj, y in enumerate(axes[names[j]])
        if allowed({names[i]: x, names[j]: y})
    }


def all_pairs(
    axes: dict[str, tuple],
    *,
    allowed: Callable[[Row], bool] = lambda row: True,
    covered: Iterable[Row] = (),
) -> list[Row]:
    """Rows (axis -> value) that, with `covered`, hold every allowed pair of axis values."""
    names = list(axes)
    uncovered = required_pairs(axes, allowed)
    for row in covered:
        uncovered -= pairs_of(row, axes)
    rows: list[Row] = []
    while uncovered:
        i, vi, j, vj = min(uncovered)
        row = {names[i]: axes[names[i]][vi], names[j]: axes[names[j]][vj]}
        for k, name in enumerate(names):
            if name in row:
                continue
            best, best_gain = None, -1
            for vk, val in enumerate(axes[name]):
                if not allowed({**row, name: val}):
                    continue
                gain = 0
                for other, oval in row.items():
                    o = names.index(other)
                    ov = axes[other].index(oval)
                    gain += ((o, ov, k, vk) if o < k else (k, vk, o, ov)) in uncovered
                if gain > best_gain:
                    best, best_gain = val, gain
            if best_gain < 0:
                raise ValueError(f"no allowed value of {name!r} goes with {row}")
            row[name] = best
        new = pairs_of(row, axes) & uncovered
        if not new:  # cannot happen: the starting pair is uncovered and allowed
            raise AssertionError(f"row {row} covers nothing new")
        uncovered -= new
        rows.append(row)
    return rows


def values_at(axes: Iterable[Axis], names: Iterable[str], preset: str, leave_out: tuple = ()) -> dict[str, tuple]:
    """{name: the axis's values at `preset`, but those in `leave_out`} of the axes `names`, in
    that order: what a grid hands all_pairs (or shape_star) of its axes `axes`."""
    by_name = {a.name: a for a in axes}
    return {n: tuple(v for v in by_name[n].values_for(preset) if v not in leave_out) for n in names}


def shape_star(axes: Iterable[Axis], preset: str, names: tuple[str, ...]) -> tuple[tuple, list[tuple]]:
    """(the base shape, the shapes around it) of a grid's shape axes `names` (of its axes `axes`)
    at a preset: the base is each axis's first value; around it, each axis's values in turn
    with the others at the base (the base among them, once per axis): every size tried alone."""
    values = list(values_at(axes, names, preset).values())
    base = tuple(vals[0] for vals in values)
    return base, [base[:i] + (x,) + base[i + 1 :] for i, vals in enumerate(values) for x in vals]
