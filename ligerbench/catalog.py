"""`ligerbench list`: everything the registry holds that a command can name.

ligerbench list
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ligerbench import runs
from ligerbench.builtin import default_registry


def list_registry():
    """Show the registered kernels, providers (with availability, bench-only ones and planted
    bugs too), suites, presets and selftest campaigns.

    Examples:

      ligerbench list
    """
    dev, _ = runs.resolve_device("auto")
    registry = default_registry()
    runs.report_plugin_errors(registry)
    out = Console()
    t = Table(title="kernels")
    for c in ("name", "description", "peer", "bench sweeps"):
        t.add_column(c, overflow="fold")
    for k in registry.kernels.values():
        sweeps = ", ".join(k.bench.sweeps) if k.bench else "-"
        t.add_row(k.name, k.description, k.peer, sweeps)
    out.print(t)
    for k in registry.kernels.values():  # how a provider is called (docs/providers.md)
        if k.signature:
            out.print(f"{k.name} providers: {k.signature}", markup=False, soft_wrap=True)
    t = Table(title=f"providers (availability on {dev.type})")
    for c in ("kernel", "name", "mutates input", "status", "description"):
        t.add_column(c, overflow="fold")
    for p in registry.providers.values():
        if p.mutant:
            status = "planted bug"
        else:
            status = p.unavailable(dev.type) or ("available, bench only" if p.bench_only else "available")
        t.add_row(p.kernel, p.name, "yes" if p.mutates_input else "no", status, p.description)
    out.print(t)
    t = Table(title="suites")
    for c in ("kernel", "name", "checks", "description"):
        t.add_column(c, overflow="fold")
    for s in registry.suites.values():
        t.add_row(s.kernel, s.name, ", ".join(s.quantities), s.description)
    out.print(t)
    t = Table(title="presets")
    for c in ("name", "description"):
        t.add_column(c)
    for p in registry.presets.values():
        t.add_row(p.name, p.description)
    out.print(t)
    t = Table(title="selftest campaigns")
    for c in ("name", "description"):
        t.add_column(c)
    for c in registry.campaigns.values():
        t.add_row(c.name, c.description)
    out.print(t)
