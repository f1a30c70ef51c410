"""The selftest engine: run every planted bug (mutant) through the checks that exist to catch it.

    from ligerbench.selftest.engine import collect, run
    mutants = collect(registry, device_type="cpu")
    run(registry, mutants, Context(preset="quick", device=torch.device("cpu"), seed=0, run_id=..., writer=...))

Mutants come from the registered campaigns (ligerbench.registry.Campaign), one per engine that
can run them:
  kernels   every provider registered with `mutant=True`, run by the verify engine on the cases
            its `targets` select, beside its kernel's control (ligerbench/selftest/kernels.py);
  converge  converge's planted patch bugs through the convergence suite
            (ligerbench/selftest/converge.py).
Another engine joins by registering its Campaign: `mutants(registry, device_type)` names them,
with their control and the suites they are meant for, and `run(...)` writes Records whose
provider is the mutant's name (and the control's rows beside them). The kill matrix
(ligerbench/selftest/killmatrix.py) reads only records.
"""

from __future__ import annotations

from ligerbench.registry import Registry
from ligerbench.selftest.model import Context, Mutant


def collect(registry: Registry, device_type: str) -> list[Mutant]:
    return [m for c in registry.campaigns.values() for m in c.mutants(registry, device_type)]


def run(registry: Registry, mutants: list[Mutant], ctx: Context) -> None:
    for c in registry.campaigns.values():
        mine = [m for m in mutants if m.campaign == c.name]
        if mine:
            c.run(registry, mine, ctx)
