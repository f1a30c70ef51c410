"""kernels/compile_boundary.py: the fused ops stay outside a torch.compile graph (they run as
they are, bit for bit the eager numbers) even when the first call of an op ever made is under
torch.compile, and starting ligerbench does not import torch._dynamo (~1 s of every CLI start
and every rank of a distributed run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# a fresh interpreter: in this one another test may have imported torch._dynamo (then the ops
# are marked at import, the other path of opaque())
FIRST_CALL_UNDER_COMPILE = textwrap.dedent("""
    import sys
    import torch
    from ligerbench.kernels.log_probs import log_probs
    assert "torch._dynamo" not in sys.modules, "imported by the kernel's import"
    g = torch.Generator().manual_seed(0)
    x, t, a = torch.randn(6, 300, generator=g), torch.randint(0, 300, (6,), generator=g), torch.randn(6, generator=g)

    def loss(logits):
        logp, entropy = log_probs(logits, t, temperature=0.7)
        return -(logp * a).sum() - 0.01 * entropy.mean()

    results = []
    for fn in (torch.compile(loss, backend="aot_eager"), loss):  # the compiled call comes first
        leaf = x.clone().requires_grad_(True)
        value = fn(leaf)
        value.backward()
        results.append((value.detach(), leaf.grad))
    for compiled, eager in zip(*results):
        assert torch.equal(compiled, eager), (compiled, eager)
    print("same bits")
""")


@pytest.mark.interpreter
def test_an_op_first_called_under_torch_compile_runs_outside_the_graph():
    done = subprocess.run([sys.executable, "-c", FIRST_CALL_UNDER_COMPILE], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0 and "same bits" in done.stdout, done.stderr[-3000:]


def test_starting_ligerbench_does_not_import_dynamo():
    code = ("import sys, ligerbench.cli\nfrom ligerbench.builtin import default_registry\ndefault_registry()\n"
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo'))[:3])")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout
