"""Tables for the terminal that stay readable at 80 columns.

    from ligerbench.tables import show
    show(console, "kill matrix", ["mutant", "correctness", "verdict"], rows, styles={"killed": "green"})

Cells are plain text (rich.text.Text), never parsed as markup: `[train,k=0]` shows as written.
A table is drawn as a grid when every cell fits on one line in the console's width; otherwise
each row is drawn as a block of `column: value` lines (a vertical layout), so no name is ever
broken mid-word or cut off with an ellipsis. A column's name may take two lines ("x\ncareful"):
the grid is as wide as its longer line, the vertical layout writes it on one.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

# a grid row costs 3 characters per column ("│ " + " ") and 1 for the last border
_BORDER_PER_COLUMN, _BORDER_END = 3, 1


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def grid_width(columns: Sequence[str], rows: Sequence[Sequence]) -> int:
    widths = [max(len(line) for line in str(c).splitlines() or [""]) for c in columns]
    for row in rows:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], max((len(line) for line in _text(v).splitlines()), default=0))
    return sum(widths) + _BORDER_PER_COLUMN * len(columns) + _BORDER_END


def show(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence],
    *,
    styles: dict[str, str] | None = None,
    right: Sequence[str] = (),
    row_styles: Sequence[str | None] | None = None,
) -> None:
    """Print rows under columns: a grid if it fits, else one block per row. `styles` colours a
    cell by its whole text (e.g. killed: green); `row_styles` colours whole rows."""
    styles = styles or {}
    cells = [[_text(v) for v in row] for row in rows]
    if grid_width(columns, cells) <= console.width:
        table = Table(title=Text(title))
        for c in columns:
            table.add_column(Text(str(c)), no_wrap=True, justify="right" if c in right else "left")
        for i, row in enumerate(cells):
            style = row_styles[i] if row_styles else None
            table.add_row(*[Text(v, style=styles.get(v, "")) for v in row], style=style)
        console.print(table)
        return
    console.print(Text(title, style="bold"))
    names = [" ".join(str(c).split()) for c in columns]
    label = max(len(c) for c in names)
    for i, row in enumerate(cells):
        style = (row_styles[i] if row_styles else None) or ""
        console.print(Text("-" * min(console.width, 40)))
        for c, v in zip(names, row, strict=True):
            line = Text(f"{c:<{label}}  ", style="dim")
            line.append(v, style=styles.get(v, style))
            console.print(line)
