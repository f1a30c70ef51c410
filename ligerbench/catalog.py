"""`ligerbench list`: everything a command can name: kernels, providers (bench-only ones and
planted bugs too), suites, presets, selftest campaigns and their mutants (converge's included),
converge's models and presets.

    ligerbench list
    ligerbench list --json
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from ligerbench import axes, runs, tables
from ligerbench.builtin import default_registry
from ligerbench.converge.models import MODELS, PRESETS
from ligerbench.registry import Registry
from ligerbench.selftest import engine


def catalog(registry: Registry, device_type: str) -> dict[str, list[dict]]:
    """Every nameable thing, by section; each entry a dict of plain values (the --json output)."""
    providers = []
    for p in registry.providers.values():
        if p.mutant:
            status = "planted bug"
        else:
            status = p.unavailable(device_type) or ("available, bench only" if p.bench_only else "available")
        providers.append(
            {"kernel": p.kernel, "name": p.name, "status": status, "mutates_input": bool(p.mutates_input),
             "description": p.description}
        )  # fmt: skip
    aliases = {"tiny": "quick", "gpu": "full"}
    return {
        "kernels": [
            {
                "name": k.name,
                "peer": k.peer,
                "bench_sweeps": list(k.bench.sweeps) if k.bench else [],
                "description": k.description,
                "signature": k.signature,  # how a provider is called (docs/providers.md)
                "axes": axes.describe(k.axes),  # its case axes: --where AXIS=VALUE names them
            }
            for k in registry.kernels.values()
        ],  # fmt: skip
        "providers": providers,
        "suites": [
            {"kernel": s.kernel, "name": s.name, "checks": list(s.quantities), "description": s.description}
            for s in registry.suites.values()
        ],
        "presets": [{"name": p.name, "description": p.description} for p in registry.presets.values()],
        "campaigns": [{"name": c.name, "description": c.description} for c in registry.campaigns.values()],
        "mutants": [
            {
                "name": m.name,
                "campaign": m.campaign,
                "kernel": m.kernel,
                "suites": list(m.suites),
                "description": m.description,
            }
            for m in engine.collect(registry, device_type)
        ],  # fmt: skip
        "converge_models": [{"name": m} for m in MODELS],
        "converge_presets": [
            {"name": aliases.get(p.name, p.name), "alias": p.name, "device": p.device, "description": p.description}
            for p in PRESETS.values()
        ],
    }


# the columns shown in the terminal per section (descriptions are long: they go last, and a
# narrow terminal gets each row as a block instead of a grid)
COLUMNS = {
    "kernels": ("name", "peer", "bench_sweeps", "description"),
    "providers": ("kernel", "name", "status", "description"),
    "suites": ("kernel", "name", "checks", "description"),
    "presets": ("name", "description"),
    "campaigns": ("name", "description"),
    "mutants": ("name", "campaign", "kernel", "suites", "description"),
    "converge_models": ("name",),
    "converge_presets": ("name", "alias", "device", "description"),
}


def _cell(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, list) else str(v)


def list_registry(
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as JSON on stdout.")] = False,
):
    """Show every name a command accepts: kernels, providers (availability here, bench-only ones
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
            runs.json_report(env, exit_code=0, status="passed", counts=counts, catalog=data,
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
                out.print(f"{k['name']} axes (--where): {axes.summary(spec.axes)}", markup=False, soft_wrap=True)
