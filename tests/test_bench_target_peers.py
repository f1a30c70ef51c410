"""A bench target is judged against its peers only: a provider the bench excludes as "not the
peer" (its yardstick compiled with float32 operands, a verification setting) never sets a
target's limit. flp's "no slower than torch.compile" once passed on an H100 at
52.35 ms against 519.6, torch.compile of the float32 yardstick, named with --provider, standing
in for compile_bf16_product, which did not run (results/runs/bench-flp-heads-h100-5d1aa35/)."""

from __future__ import annotations

import pytest

from ligerbench.builtin import default_registry

SPECS = {name: k.bench for name, k in default_registry().kernels.items() if k.bench is not None}


def test_there_are_bench_targets_to_check():
    assert sum(len(s.targets) for s in SPECS.values()) > 10


@pytest.mark.parametrize("kernel", sorted(SPECS))
def test_no_target_takes_an_excluded_provider_as_its_peer(kernel):
    spec = SPECS[kernel]
    wrong = [(t.source, sorted(set(t.peers or ()) & set(spec.excluded))) for t in spec.targets
             if set(t.peers or ()) & set(spec.excluded)]  # fmt: skip
    assert not wrong, wrong
