"""Which of a kernel's providers its bench races, where every kernel decides it the same way.

Verification's yardsticks (`eager`, `torch_compile`: the careful form, or float32 operands) are
slower than what anyone trains with on purpose, so a bench races the plain PyTorch a trainer
writes instead (`eager_plain`, `eager_bf16_product`) and torch.compile of it, and leaves the
yardsticks out with the reason (BenchSpec.excluded). Verification settings of our own kernel
(tiny chunks that make partial and empty pieces) are left out too, unless named with --provider.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ligerbench.registry import Provider


def plain_peers(
    kernel: str, eager: Callable, description: str, *, compiled_description: str = ""
) -> tuple[Provider, Provider]:
    """`eager` (a function named eager_<form>) as a bench-only provider of that name, and
    torch.compile of it (dynamic=False, CUDA only) as compile_<form>."""
    form = eager.__name__.removeprefix("eager_")
    return (
        Provider(name=eager.__name__, kernel=kernel, bench_only=True, load=lambda: eager, description=description),
        Provider(
            name=f"compile_{form}",
            kernel=kernel,
            bench_only=True,
            devices=("cuda",),
            load=lambda: torch.compile(eager, dynamic=False),
            description=compiled_description or f"torch.compile of {eager.__name__}",
        ),
    )


def yardsticks_left_out(peers: tuple[Provider, Provider], eager_why: str, compiled_why: str = "") -> dict[str, str]:
    """The excluded entries of the verification yardsticks `peers` (plain_peers) stand in for:
    `eager`, and `torch_compile` where the kernel registers one (`compiled_why` given)."""
    eager, compiled = peers
    out = {"eager": f"the verification yardstick ({eager_why}): {eager.name} is the peer"}
    if compiled_why:
        out["torch_compile"] = f"torch.compile of the yardstick ({compiled_why}): {compiled.name} is the peer"
    return out


def verification_setting(what: str) -> str:
    """The excluded entry of a setting of ours that exists for verification (`what` it is)."""
    return f"a verification setting ({what}); name it with --provider to time it"
