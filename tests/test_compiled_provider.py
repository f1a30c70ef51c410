"""torch.compile as a verify provider (suites/common/compiled.py): a call past dynamo's recompile limit,
which dynamo would run eagerly, raises NotRun, and verify records such a case as skip with the
reason, never as the provider's pass (ligerbench/verify/engine.py)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from ligerbench.registry import NotRun
from ligerbench.suites.common.compiled import compiled
from ligerbench.testing import run_provider


def _double(x):
    return x * 2


def test_a_call_past_the_recompile_limit_is_not_run_eagerly():
    torch._dynamo.reset()
    graph = compiled(_double, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=1):
        assert torch.equal(graph(torch.ones(3)), torch.full((3,), 2.0))
        assert torch.equal(graph(torch.ones(3)), torch.full((3,), 2.0))  # the same graph again
        with pytest.raises(NotRun, match="recompile limit \\(1 compiles of _double\\)"):
            graph(torch.ones(4))  # a new static shape: a second compile, past the limit
    torch._dynamo.reset()


def test_verify_records_a_case_not_run_as_skip_with_the_reason():
    from ligerbench.suites.ce.providers import ce_upcast

    def half_compiled(logits, target, **options):
        if logits.shape[-1] > 100:
            raise NotRun("torch.compile reached its recompile limit (test)")
        return ce_upcast(logits, target, **options)

    result = run_provider("ce", half_compiled, name="half_compiled")
    records = result.records
    skipped = records[records["message"].str.contains("recompile limit \\(test\\)", na=False)]
    assert len(skipped) > 0 and set(skipped["verdict"]) == {"skip"}
    assert result.failures.empty and result.compared > 0
    assert records[records["v"] <= 100]["verdict"].isin(["pass"]).any()


def test_a_float_argument_is_compiled_in_not_passed_as_a_cpu_tensor():
    """Under dynamic=True a symbolic float reaches the graph as a 0-d float64 CPU tensor, whose
    conversion inductor compiles as a C++ kernel (and so runs its CPU toolchain checks); compiled
    specializes it: the graph's inputs hold no such tensor, and a new value recompiles."""
    inputs = []

    def backend(gm, example_inputs):
        inputs.append(example_inputs)
        return gm.forward

    def scaled(x, temperature):
        return x / temperature

    torch._dynamo.reset()
    graph = compiled(scaled, backend=backend, dynamic=True)
    x = torch.ones(3)
    assert torch.equal(graph(x, 0.5), torch.full((3,), 2.0))
    assert torch.equal(graph(x, 0.25), torch.full((3,), 4.0))
    assert len(inputs) == 2  # one graph per value
    for example in inputs:
        assert not any(isinstance(t, torch.Tensor) and t.dim() == 0 and t.dtype == torch.float64 for t in example)
    torch._dynamo.reset()
