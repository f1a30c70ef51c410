"""The HF patch under FSDP2 and tensor parallelism, on real gloo ranks (run by tests/vp_checks.py's
run_gloo; a top-level module so that the spawned ranks can import it).

Every rank trains on the SAME batch, so that the sharded model's loss and (gathered) gradients
must equal those of the unsharded transformers model with its own loss, within converge's
single-step tolerance (ligerbench/converge/tolerance.py, rule 2)."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import torch
import torch.distributed as dist

from ligerbench.converge import tolerance as tol
from ligerbench.converge.models import PRESETS, build_model
from ligerbench.kernels.hf import CausalLMPatch, patch_causal_lm

TINY = PRESETS["tiny"]
# V odd: torch's Shard(0) puts 128 rows on rank 0 and 127 on rank 1 (rank * width is wrong there)
UNEVEN = dataclasses.replace(TINY, vocab=TINY.vocab - 1)

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


def _reference(model_name: str, preset=TINY):
    model = build_model(model_name, preset, seed=0, dtype=torch.float32)
    ids, labels = _batch(preset.vocab)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _grads(model) -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient (gathered when sharded); a parameter without one is left
    out, so that _compare names it."""
    return {n: _full(p.grad) for n, p in model.named_parameters() if p.grad is not None}


def _compare(where: str, loss, grads, ref_loss, ref_grads) -> None:
    limit = tol.SINGLE_STEP["fp32"]
    assert set(grads) == set(ref_grads), (where, set(grads) ^ set(ref_grads))
    err = tol.rel_error(loss, ref_loss)
    assert err <= limit, f"{where}: loss {float(loss)} vs {float(ref_loss)} (rel {err:.3g} > {limit})"
    for name in sorted(ref_grads):
        err = tol.rel_error(grads[name], ref_grads[name])
        assert err <= limit, f"{where}: gradient of {name}: rel error {err:.3g} > {limit}"


@contextlib.contextmanager
def _counting_calls(module: torch.nn.Module):
    """[number of calls of `module`] while active (a forward hook, removed on exit)."""
    count = [0]
    handle = module.register_forward_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    try:
        yield count
    finally:
        handle.remove()


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
            with patch_causal_lm(model, kind) as patch, _counting_calls(model.lm_head) as head_calls:
                loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
            assert patch.calls[kind] == 1, patch.calls
            # every loss through lm_head's call, so that FSDP2's hooks gather its weight (the
            # same batch on every rank would hide the fused loss taken on the shards instead)
            assert head_calls == [1], (name, kind, head_calls)
            grads = _grads(model)
            if how["model"] == "gemma2-mini":  # tied: one parameter under two names in the reference
                ref = {n: g for n, g in ref_grads.items() if n in grads}
            else:
                ref = ref_grads
            _compare(f"{name}/{kind} rank {rank}", loss.detach(), grads, ref_loss, ref)


# Tensor parallelism: lm_head ColwiseParallel(use_local_output=False), the rest replicated, every
# rank the same batch. (patch kind, preset); each is there for one reason.
TP_CASES = {
    # the logits a DTensor sharded on the vocab: the vocab-parallel cross entropy on them
    "ce": ("ce", TINY),
    # the fused kernel on lm_head's weight shard, shards uneven (128 + 127 rows): vocab_start
    # must come from the DTensor's layout
    "flce_uneven": ("flce", UNEVEN),
    # `both` trains with the fused kernel; even shards
    "both": ("both", TINY),
}


class EvenWidthStart(CausalLMPatch):
    """Planted bug: vocab_start taken as rank * local width (right only when the shards are even)."""

    def vocab_shard(self, head):
        weight, bias, group, _ = super().vocab_shard(head)
        return weight, bias, group, dist.get_rank(group) * weight.shape[0]


class DetachedShard(CausalLMPatch):
    """Planted bug: the weight shard cut from the graph (no gradient reaches lm_head's weight)."""

    def vocab_shard(self, head):
        weight, bias, group, start = super().vocab_shard(head)
        return weight.detach(), bias, group, start


class ReversedShards(CausalLMPatch):
    """Planted bug: the shards taken in reverse rank order (they still tile [0, V), so the
    kernel's layout check passes: only the loss and gradients can tell)."""

    def vocab_shard(self, head):
        weight, bias, group, start = super().vocab_shard(head)
        return weight, bias, group, head.weight.shape[0] - start - weight.shape[0]


TP_MUTANTS = {
    "even_width_start": EvenWidthStart,
    "detached_weight_shard": DetachedShard,
    "reversed_shards": ReversedShards,
}


def _tp_model(preset, mesh, plan=None):
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    model = build_model("llama-mini", preset, seed=0, dtype=torch.float32)
    parallelize_module(model, mesh, {"lm_head": plan or ColwiseParallel(use_local_output=False)})
    return model


def check_tp(rank: int, group, world: int, names: list[str], mutant: str | None = None, refusals=False) -> None:
    """For each TP case: one forward/backward with lm_head column-parallel and our patch (or a
    planted bug of TP_MUTANTS), against the unsharded model with transformers' loss: the loss,
    and every parameter's gradient (lm_head's gathered from its shards; the embedding's and the
    layers' carry the hidden states' gradient, summed over the ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    patcher = TP_MUTANTS[mutant] if mutant else CausalLMPatch
    for name in names:
        kind, preset = TP_CASES[name]
        ref_loss, ref_grads = _reference("llama-mini", preset)
        model = _tp_model(preset, mesh)
        ids, labels = _batch(preset.vocab)
        with patcher(model, kind) as patch, _counting_calls(model.lm_head) as head_calls:
            out = model(input_ids=ids, labels=labels)
            out.loss.backward()
        kernel = "ce" if kind == "ce" else "flce"
        assert patch.calls[kernel] == 1, (name, patch.calls)
        # the fused kernel on the shards, not through lm_head's call (ColwiseParallel's hooks)
        assert head_calls == [1 if kernel == "ce" else 0], (name, head_calls)
        assert (out.logits is None) == (kernel == "flce"), name  # the fused kernel stores no logits
        _compare(f"tp/{name} rank {rank}", out.loss.detach(), _grads(model), ref_loss, ref_grads)
        # eval with labels: the logits are needed, vocab-sharded, so the vocab-parallel cross
        # entropy takes the loss (transformers' cannot take a DTensor); the weights are unchanged
        # (no step) and nothing is random in the model, so it is the training loss again
        model.eval()
        with patcher(model, kind) as patch, torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss
        assert patch.calls == {"ce": 1, "flce": 0}, (name, patch.calls)
        err = tol.rel_error(loss, ref_loss)
        assert err <= tol.SINGLE_STEP["fp32"], f"tp/{name} rank {rank}: eval loss {float(loss)} vs {float(ref_loss)}"
    if refusals:  # in the same ranks: their start-up is the larger cost
        check_tp_refusals(rank, group, world)


def check_tp_mutants(rank: int, group, world: int, expected: dict[str, str]) -> None:
    """Each planted bug of TP_MUTANTS, on the uneven shards, must make check_tp fail with the
    message `expected[mutant]` (a regex). The ranks fail at the same point (the same data), so
    the next bug runs on ranks in step."""
    for mutant, says in expected.items():
        try:
            check_tp(rank, group, world, ["flce_uneven"], mutant)
        except (AssertionError, ValueError) as exc:
            assert re.search(says, str(exc)), f"{mutant} failed, but not with {says!r}: {exc}"
        else:
            raise AssertionError(f"the planted bug {mutant} passed the TP check")


def check_tp_refusals(rank: int, group, world: int) -> None:
    """What the fused patch cannot do under TP is refused with a clear error, before any collective."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import RowwiseParallel

    mesh = init_device_mesh("cpu", (world,))
    ids, labels = _batch(TINY.vocab)
    refusals = [
        # class weights are not sharded by the patch: they would weigh the wrong classes
        (_tp_model(TINY, mesh), dict(class_weight=torch.ones(TINY.vocab)), "class_weight"),
        # row-parallel lm_head: the weight sharded on the hidden dim (Shard(1)), not the vocab
        (_tp_model(TINY, mesh, RowwiseParallel()), {}, "Shard(0)"),
    ]
    for model, options, says in refusals:
        with patch_causal_lm(model, "flce", **options):
            try:
                model(input_ids=ids, labels=labels)
            except ValueError as exc:
                assert says in str(exc), exc
            else:
                raise AssertionError(f"flce under TP with {options or 'a row-parallel lm_head'} was not refused")


# completion_log_probs (kernels/hf_log_probs.py) on real ranks: the RL step's log-probs
LOG_PROBS_KEEP = 5  # the completion's length


def _log_probs_step(model, ids, shard=None):
    """(logp, entropy, every parameter's whole gradient) of one RL-style backward through
    completion_log_probs, with fixed upstreams on both outputs; `shard` None for the reference:
    transformers' own logits path (TRL's), float32."""
    from ligerbench.kernels.hf_log_probs import completion_log_probs

    g = torch.Generator().manual_seed(7)
    u_logp, u_ent = (
        torch.randn(ids.shape[0], LOG_PROBS_KEEP, generator=g),
        torch.randn(ids.shape[0], LOG_PROBS_KEEP, generator=g),
    )
    if shard is None:
        logits = model(input_ids=ids, logits_to_keep=LOG_PROBS_KEEP + 1).logits[:, :-1].float()
        logp_all = torch.log_softmax(logits / 0.7, -1)
        logp = logp_all.gather(-1, ids[:, -LOG_PROBS_KEEP:, None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    else:
        logp, entropy = completion_log_probs(model, ids, logits_to_keep=LOG_PROBS_KEEP, temperature=0.7)
    ((logp * u_logp).sum() + (entropy * u_ent).sum()).backward()
    return logp.detach(), entropy.detach(), _grads(model)


def check_log_probs(rank: int, group, world: int) -> None:
    """completion_log_probs under tensor parallelism (uneven shards: the vocab-parallel op) and
    under FSDP2 (lm_head its own unit: the op through lm_head's call), against the unsharded
    model's logits path: log-probs, entropy and every parameter's gradient."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    for where, preset in (("tp", UNEVEN), ("fsdp2", TINY)):
        ids, _ = _batch(preset.vocab)
        ref = _log_probs_step(build_model("llama-mini", preset, seed=0, dtype=torch.float32), ids)
        if where == "tp":
            model = _tp_model(preset, mesh)
        else:
            model = build_model("llama-mini", preset, seed=0, dtype=torch.float32)
            _wrap(model, WRAPPINGS["lm_head_unit"], mesh)
        with _counting_calls(model.lm_head) as head_calls:
            got = _log_probs_step(model, ids, shard=where)
        assert head_calls == [0 if where == "tp" else 1], (where, head_calls)
        limit = tol.SINGLE_STEP["fp32"]
        for name, a, b in (("logp", got[0], ref[0]), ("entropy", got[1], ref[1])):
            err = tol.rel_error(a, b)
            assert err <= limit, f"{where} rank {rank}: {name} rel error {err:.3g} > {limit}"
        _compare(f"{where}/log_probs rank {rank}", got[0].sum(), got[2], got[0].sum(), ref[2])
