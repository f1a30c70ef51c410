"""Single-step checks of the convergence suite: logits_to_keep and packing (tolerance rule 2).

Both compare one forward/backward of the same weights done two ways; suites/converge/__init__.py runs
them.
"""

from __future__ import annotations

import math

import torch

from ligerbench.converge import tolerance as tol
from ligerbench.converge.checker import INFO_METRIC, Checker, build
from ligerbench.converge.data import FIRST_ACTIVE, IGNORE, make_batches, make_uneven_batch, pack
from ligerbench.converge.train import flat, grads_of
from ligerbench.kernels.packing import shift_labels_packed


def _forward_backward(model, **inputs):
    """(loss, logits or None, parameter gradients) of one forward/backward."""
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    out.loss.backward()
    grads = grads_of(model)
    model.zero_grad(set_to_none=True)
    logits = None if out.logits is None else out.logits.detach()
    return out.loss.detach().float(), logits, grads


def keep_values(seq_len: int) -> tuple[int, ...]:
    # 0: all positions (the default); 1: generation's last position; K: a middle case where a
    # patch that ignores the slice sees K of seq_len targets and fails on the shape or the value.
    return (0, 1, max(2, seq_len // 4))


def check_logits_to_keep(c: Checker) -> None:
    """Patched vs transformers for logits_to_keep 0, 1, K in train and in eval mode (docs/bugs.md, bug 5).

    Targets come as `shift_labels` with one target per kept position (transformers' loss takes
    them as given), so a loss exists for every k, and every kept position has a valid target."""
    case, p = c.case, c.case.preset
    limit = tol.SINGLE_STEP[case.dtype]
    batch = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=1, seed=case.seed + 2)[0]
    model = build_for(c)
    gen = torch.Generator().manual_seed(case.seed + 3)
    for mode in ("train", "eval"):
        model.train(mode == "train")
        for k in keep_values(p.seq_len):
            name = f"logits_to_keep[{mode},k={k}]"
            kept = p.seq_len if k == 0 else k
            targets = torch.randint(FIRST_ACTIVE, p.vocab, (p.batch, kept), generator=gen).to(case.device)
            b = batch.to(case.device)
            inputs = dict(
                input_ids=b.input_ids,
                attention_mask=b.attention_mask,
                labels=targets,
                shift_labels=targets,
                logits_to_keep=k,
            )
            try:
                ref_loss, ref_logits, ref_grads = _forward_backward(model, **inputs)
                patch = c.patch(model)
                with patch:
                    loss, logits, grads = _forward_backward(model, **inputs)
                c.tally(patch)
            except Exception as exc:
                c.error(name, exc)
                continue
            c.record(f"{name}.loss", tol.rel_error(loss, ref_loss), limit)
            c.record(f"{name}.grads", tol.rel_error(flat(grads), flat(ref_grads)), limit)
            if logits is not None:  # None only where the fused kernel skipped them, in training
                same = tuple(logits.shape) == tuple(ref_logits.shape)
                c.record(
                    f"{name}.logits",
                    tol.rel_error(logits, ref_logits) if same else math.inf,
                    limit,
                    message="" if same else f"shape {tuple(logits.shape)} != {tuple(ref_logits.shape)}",
                )
    model.train()


def build_for(c: Checker):
    return build(c.case)


def per_sequence_mean_ref(model, batch, ignore_index=IGNORE):
    """transformers' forward on a padded batch, then in torch (float32, as transformers upcasts):
    each row's mean token loss, averaged over rows that have a target."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    target = torch.nn.functional.pad(batch.labels, (0, 1), value=ignore_index)[..., 1:]
    per_token = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), target, ignore_index=ignore_index, reduction="none"
    )
    counted = (target != ignore_index).sum(1)
    per_row = per_token.sum(1) / counted.clamp(min=1)
    loss = per_row[counted > 0].mean()
    loss.backward()
    grads = grads_of(model)
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def check_packed(c: Checker) -> None:
    """Packed row with per-sequence weights == padded batch with a per-sequence mean (docs/bugs.md, bug 4);
    the plain per-token mean on the same packed row is reported, not judged."""
    case, p = c.case, c.case.preset
    limit = tol.SINGLE_STEP[case.dtype]
    # uneven on purpose: equal lengths would make the two means agree and hide the bug
    lengths = (p.seq_len // 4 + 2, p.seq_len, p.seq_len // 2)
    batch = make_uneven_batch(vocab=p.vocab, lengths=lengths, seed=case.seed).to(case.device)
    row = pack(batch)
    model = build_for(c)
    ref_loss, ref_grads = per_sequence_mean_ref(model, batch)

    packed_inputs = dict(input_ids=row.input_ids, position_ids=row.position_ids, labels=row.labels)
    patch = c.patch(model, per_sequence_mean=True)
    with patch:
        loss, _, grads = _forward_backward(model, **packed_inputs)
    c.tally(patch)
    c.record(
        "packed.per_sequence.loss",
        tol.rel_error(loss, ref_loss),
        limit,
        message=f"lengths {lengths}; ref {float(ref_loss):.6g}, packed {float(loss):.6g}",
    )
    c.record("packed.per_sequence.grads", tol.rel_error(flat(grads), flat(ref_grads)), limit)

    # Same targets (no target across a boundary), only the normalisation differs.
    targets = shift_labels_packed(row.labels, row.position_ids)
    patch = c.patch(model)
    with patch:
        tok_loss, _, tok_grads = _forward_backward(model, **packed_inputs, shift_labels=targets)
    c.tally(patch)
    c.record(
        "packed.per_token_mean.loss_vs_per_sequence",
        tol.rel_error(tok_loss, ref_loss),
        math.inf,
        metric=INFO_METRIC,
        message="report only: how far a plain per-token mean is (docs/bugs.md, bug 4)",
    )
    c.record(
        "packed.per_token_mean.grads_vs_per_sequence",
        tol.rel_error(flat(tok_grads), flat(ref_grads)),
        math.inf,
        metric=INFO_METRIC,
        message="report only",
    )
