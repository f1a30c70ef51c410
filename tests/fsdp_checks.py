"""The HF patch under FSDP2 and tensor parallelism, on real gloo ranks (run by tests/vp_checks.py's
run_gloo; a top-level module so that the spawned ranks can import it).

Every rank trains on the SAME batch, so that the sharded model's loss and (gathered) gradients
must equal those of the unsharded transformers model with its own loss, within converge's
single-step tolerance (ligerbench/converge/tolerance.py, rule 2)."""

from __future__ import annotations

import torch

from ligerbench.converge import tolerance as tol
from ligerbench.converge.models import PRESETS, build_model
from ligerbench.kernels.hf import patch_causal_lm

TINY = PRESETS["tiny"]

# How the model is wrapped; each is there for one reason.
WRAPPINGS = {
    # lm_head its own unit, as large-model recipes wrap it: the fused loss must go through
    # lm_head's call to find its weight gathered (read from outside it is a sharded DTensor)
    "lm_head_unit": dict(model="llama-mini", lm_head_unit=True, reshard=True),
    # the same, but the weight stays gathered from forward to backward
    "lm_head_unit_no_reshard": dict(model="llama-mini", lm_head_unit=True, reshard=False),
    # tied embeddings (gemma2-mini ties them; softcap too): the weight belongs to the root unit
    "tied_root": dict(model="gemma2-mini", lm_head_unit=False, reshard=True),
    # tied embeddings grouped with lm_head in one unit (fully_shard([embed, lm_head])): the
    # embedding's forward reshards the weight, lm_head's call must gather it again
    "tied_group": dict(model="gemma2-mini", group_tied=True, reshard=True),
}


def _batch(vocab: int):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, vocab, (TINY.batch, TINY.seq_len), generator=g)
    labels = ids.clone()
    labels[:, :3] = -100  # a masked prompt
    return ids, labels


def _reference(model_name: str):
    model = build_model(model_name, TINY, seed=0, dtype=torch.float32)
    ids, labels = _batch(TINY.vocab)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _compare(where: str, loss, grads, ref_loss, ref_grads) -> None:
    limit = tol.SINGLE_STEP["fp32"]
    assert set(grads) == set(ref_grads), (where, set(grads) ^ set(ref_grads))
    err = tol.rel_error(loss, ref_loss)
    assert err <= limit, f"{where}: loss {float(loss)} vs {float(ref_loss)} (rel {err:.3g} > {limit})"
    for name in sorted(ref_grads):
        err = tol.rel_error(grads[name], ref_grads[name])
        assert err <= limit, f"{where}: gradient of {name}: rel error {err:.3g} > {limit}"


def _wrap(model, how: dict, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    kw = dict(mesh=mesh, reshard_after_forward=how["reshard"])
    for layer in model.model.layers:
        fully_shard(layer, **kw)
    if how.get("lm_head_unit"):
        fully_shard(model.lm_head, **kw)
    if how.get("group_tied"):
        fully_shard([model.model.embed_tokens, model.lm_head], **kw)
    fully_shard(model, **kw)


def check_fsdp2(rank: int, group, world: int, names: list[str], kinds: list[str]) -> None:
    """For each wrapping and patch kind: one forward/backward of the FSDP2-sharded model with our
    kernel patched in, against the unsharded model with transformers' loss."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    for name in names:
        how = WRAPPINGS[name]
        ref_loss, ref_grads = _reference(how["model"])
        for kind in kinds:
            model = build_model(how["model"], TINY, seed=0, dtype=torch.float32)
            _wrap(model, how, mesh)
            ids, labels = _batch(TINY.vocab)
            with patch_causal_lm(model, kind) as patch:
                loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
            assert patch.calls[kind] == 1, patch.calls
            grads = {n: _full(p.grad) for n, p in model.named_parameters()}
            if how["model"] == "gemma2-mini":  # tied: one parameter under two names in the reference
                ref = {n: g for n, g in ref_grads.items() if n in grads}
            else:
                ref = ref_grads
            _compare(f"{name}/{kind} rank {rank}", loss.detach(), grads, ref_loss, ref)


def check_tp(rank: int, group, world: int) -> None:
    """lm_head column-parallel with DTensor output: `ce` goes to the vocab-parallel loss and equals
    the unsharded model; `flce` is refused with a clear error (it needs the whole weight)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    ref_loss, ref_grads = _reference("llama-mini")
    model = build_model("llama-mini", TINY, seed=0, dtype=torch.float32)
    parallelize_module(model, mesh, {"lm_head": ColwiseParallel(use_local_output=False)})
    ids, labels = _batch(TINY.vocab)
    with patch_causal_lm(model, "ce") as patch:
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
    assert patch.calls["ce"] == 1, patch.calls
    grads = {n: _full(p.grad) for n, p in model.named_parameters()}
    _compare(f"tp/ce rank {rank}", loss.detach(), grads, ref_loss, ref_grads)
    with patch_causal_lm(model, "flce"):
        try:
            model(input_ids=ids, labels=labels)
        except TypeError as exc:
            assert "patch with 'ce'" in str(exc), exc
        else:
            raise AssertionError("flce with a column-parallel lm_head was not refused")
