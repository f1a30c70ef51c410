"""Shared test helpers: float64 truth, eager yardstick and the one tolerance rule."""

from __future__ import annotations

import torch

from ligerbench import tolerance
from ligerbench.suites.ce.spec import ce_torch

# a decoder small enough for Triton's interpreter (one layer, vocabulary 64): the tests that patch
# a transformers model build theirs from it
TINY_DECODER = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=64,
    head_dim=16,
    use_cache=False,
)


def run(fn, logits, target, upstream=None, **opts):
    """loss and gradient of `fn` on a fresh leaf copy of `logits`."""
    x = logits.detach().clone().requires_grad_(True)
    out = fn(x, target, **opts)
    loss = out[0] if isinstance(out, tuple) else out
    up = torch.ones_like(loss) if upstream is None else upstream.to(loss.dtype)
    loss.backward(up)
    return loss.detach(), x.grad


def check_against_truth(fn, logits, target, upstream=None, **opts) -> None:
    """Assert `fn` is within the tolerance rule of the float64 truth, loss and gradient."""
    w64 = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in opts.items()}
    up64 = None if upstream is None else upstream.double()
    ref_loss, ref_grad = run(ce_torch, logits.double(), target, up64, **w64)
    eager_loss, eager_grad = run(ce_torch, logits, target, upstream, **opts)
    loss, grad = run(fn, logits, target, upstream, **opts)
    for name, got, eager, ref in (("loss", loss, eager_loss, ref_loss), ("grad", grad, eager_grad, ref_grad)):
        err = tolerance.rel_error(got, ref)
        limit = tolerance.limit_for(tolerance.rel_error(eager, ref), logits.dtype)
        assert err <= limit, f"{name}: error {err:.3g} > limit {limit:.3g}"


def register_plugin(monkeypatch, register, name: str = "test_plugin") -> None:
    """Add `register(registry)` as a `ligerbench.plugins` entry point, as a third party's package
    would, for the rest of the test (the real entry points stay)."""
    import importlib.metadata

    real = importlib.metadata.entry_points
    ep = importlib.metadata.EntryPoint(name=name, value=f"{__name__}:_unused", group="ligerbench.plugins")

    class Loaded(type(ep)):
        def load(self):
            return register

    fake = Loaded(name=ep.name, value=ep.value, group=ep.group)

    def entry_points(**kw):
        if kw.get("group") != "ligerbench.plugins":
            return real(**kw)  # as it was: a caller without group= (Triton's) uses .select on it
        return [*real(**kw), fake]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def verify_json(runner, app, args: list[str], env=None):
    """`ligerbench verify ARGS --json` through the CLI: (the result, the JSON summary it printed or None)."""
    import json

    result = runner.invoke(app, ["verify", *args, "--json"], env=env)
    text = result.stdout
    return result, json.loads(text[text.index("{") :]) if "{" in text else None


def two_gloo_ranks_records(run, kernel: str):
    """The records of a `verify --kernel KERNEL --nproc 2` run folder on CPU, once its env says it ran
    on 2 gloo ranks that all returned, and that it planned and completed every world-2 case of the
    quick grid (the cases of 2 processes) and wrote records for those alone."""
    import json

    import pandas as pd

    from ligerbench.builtin import default_registry

    records = pd.read_csv(run / "records.csv")
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 2 and env["backend"] == "gloo" and env["launch_returncode"] == 0
    grid = default_registry().kernels[kernel].grid("quick", "cpu")
    planned = {c.id for c in grid if c.world == 2 and c.mesh == "flat"}
    assert env["run"]["planned"] == env["run"]["completed"] == len(planned)
    assert set(records["case"]) == planned  # every case split over 2 ranks, and only those
    return records, planned


def once_per_run(tmp_path_factory, name: str, invoke):
    """`invoke(folder)` (a CliRunner call writing into `folder`) run once per pytest run and
    shared by every xdist worker: the first worker to ask runs it, any other waits for it and
    reads the same folder and result (exit_code, output, stdout). A module fixture alone is
    computed once per worker that runs one of its tests: twice when they land on both.
    Returns (the result, the folder)."""
    from types import SimpleNamespace

    def fields(folder):
        result = invoke(folder)
        return {"exit_code": result.exit_code, "output": result.output, "stdout": result.stdout}

    saved, folder = computed_once_per_run(tmp_path_factory, name, fields)
    return SimpleNamespace(**saved), folder


def computed_once_per_run(tmp_path_factory, name: str, compute):
    """`compute(folder)` (what it returns: JSON) run once per pytest run and shared by every
    xdist worker, as once_per_run. Returns (what it returned, the folder)."""
    import json
    import os

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's base is a folder of this run's own (pytest-N/popen-gwK)
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, saved = root / f"once-{name}", root / f"once-{name}.json"
    with FileLock(str(root / f"once-{name}.lock")):
        if not saved.exists():
            folder.mkdir()
            saved.write_text(json.dumps(compute(folder)))
    return json.loads(saved.read_text()), folder
