"""torch.compile as a verify provider (suites/compiled.py): a call past dynamo's recompile limit,
which dynamo would run eagerly, raises NotRun, and verify records such a case as skip with the
reason, never as the provider's pass (ligerbench/verify/engine.py)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from ligerbench.registry import NotRun
from ligerbench.suites.compiled import compiled
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
