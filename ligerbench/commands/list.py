"""`ligerbench list`: everything a command can name (ligerbench/catalog.py gathers it).

ligerbench list
ligerbench list --json
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from ligerbench import axes, runs, tables
from ligerbench.builtin import default_registry
from ligerbench.catalog import COLUMNS, catalog
from ligerbench.exits import ExitCode


def _cell(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, list) else str(v)


def list_registry(
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as JSON on stdout.")] = False,
):
    """Show every name a command accepts.

    Kernels, providers (availability here, bench-only ones
    and planted bugs too), suites, presets, selftest campaigns and mutants (converge's too),
    converge's models and presets.

    Exit status: 0 listed, 2 on a usage error.

    Examples:

      ligerbench list

      ligerbench list --json
    """
    dev, _ = runs.resolve_device("auto")
    registry = default_registry()
    runs.report_plugin_errors(registry)
    data = catalog(registry, dev.type)
    if as_json:
        env = {"command": "list", "device_name": dev.type, "device_type": dev.type}
        env["git_commit"] = runs.environment.git_commit()
        counts = {name: len(rows) for name, rows in data.items()}
        runs.print_json(
            runs.json_report(env, exit_code=ExitCode.OK, status=ExitCode.OK.status, counts=counts, catalog=data,
                             plugin_errors=[f"{n}: {e}" for n, e in registry.plugin_errors])
        )  # fmt: skip
        return
    out = Console()
    for section, rows in data.items():
        cols = COLUMNS[section]
        title = section.replace("_", " ") + (f" (availability on {dev.type})" if section == "providers" else "")
        tables.show(out, title, cols, [[_cell(r[c]) for c in cols] for r in rows])
        if section == "kernels":
            for k in rows:  # how a provider is called, one line each (docs/providers.md)
                if k["signature"]:
                    out.print(f"{k['name']} providers: {k['signature']}", markup=False, soft_wrap=True)
                spec = registry.kernels[k["name"]]
                out.print(
                    f"{k['name']} axes (--AXIS VALUE, --where AXIS=VALUE): {axes.summary(spec.axes)}",
                    markup=False,
                    soft_wrap=True,
                )
