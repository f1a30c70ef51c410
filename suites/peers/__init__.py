"""The field's loss kernels as providers: one file per peer library, holding the version it is
pinned at and every adapter of it, so upgrading a peer touches one file.

Each adapter calls the peer as the peer's own trainer calls it (what it hands over, what it
masks, what it divides by), declares the peer's documented limits through `supports` (a
visible skip, never a pass), and names its distribution in `Provider.library`: `ligerbench
list` shows the installed and the pinned version, and every run's env.json records the
installed versions (ligerbench/env.py). Install them with `pip install -e ".[peers]"`; verl
with `pip install --no-deps verl==0.9.1` (docs/peers.md says why).

Registered after every built-in kernel (ligerbench/builtin.py): a library's adapters span
kernels. docs/peers.md has the findings.
"""

from __future__ import annotations

from ligerbench.registry import Registry
from ligerbench.suites.peers import liger, quack, torch_native, trl, unsloth, verl

LIBRARIES = (liger, trl, verl, unsloth, torch_native, quack)


def pins() -> dict[str, str]:
    """distribution -> the version this repository pins it at."""
    return {lib.DISTRIBUTION: lib.PINNED for lib in LIBRARIES}


def register(registry: Registry) -> None:
    for lib in LIBRARIES:
        registry.add(*lib.PROVIDERS)
