"""PyTorch's own fused linear cross entropy as a provider of `flce`, called as a user calls it.

    ligerbench verify --kernel flce --provider torch_native --preset quick --device cpu

- `flce` (`torch_native`): `torch.nn.functional.linear_cross_entropy(hidden, weight, target,
  linear_bias=bias, weight=class_weight, reduction=..., ignore_index=..., label_smoothing=...)`
  with `options=None`, its default. Its promise, from its docstring: "The statement::
  loss = linear_cross_entropy(input, linear_weight, target, **kwargs) is equivalent to the
  following reference implementation of linear_cross_entropy:: logits = linear(input,
  linear_weight); loss = cross_entropy(logits, target, **kwargs)". So in bf16 both its logits and
  its cross entropy are bf16 PyTorch: the log-softmax rounded to bf16 inside the loss, which the
  model code's form (suites/flce/spec.py `model_code`: `.float()` before the loss) does not do.
  Its promise is that composition, and the default verdict holds it to that too (PROMISE,
  Provider.promise): on confident bf16 rows PyTorch's own bf16 cross entropy is 10-50% off the
  truth (docs/bugs.md, bug 6), which is no defect of this function, whose promise it is;
  `--strict` (float32 logits never rounded) gives the precision figure.

Its limits (declared in `supports`, each a skip with the reason): no softcap, no z-loss and no
per-token weights (it has no parameter for them), and input [N, H] or [H] only (it raises
"expected input with dimensionality 1 or 2" on [B, T, H], so the 3-D and kept-slice layouts
are skips).

The library is torch itself, pinned at the first release installed here that ships the function;
an older torch makes the provider unavailable with the reason, never a failure.
"""

from __future__ import annotations

import torch

from ligerbench.cases import OPTIONS, Case
from ligerbench.registry import Provider

DISTRIBUTION = "torch"
PINNED = "2.13.0"
PEER = {"library": DISTRIBUTION, "pinned": PINNED}


def _flce(**chunked):
    import torch.nn.functional as F

    if not hasattr(F, "linear_cross_entropy"):
        missing = "has no torch.nn.functional.linear_cross_entropy"
        raise ImportError(f"torch {torch.__version__} {missing} (torch>={PINNED})")

    def call(hidden, weight, target, *, bias, class_weight, ignore_index, reduction, label_smoothing, **_):
        # cross_entropy refuses class weights of another dtype than its logits': a user casts them
        class_weight = None if class_weight is None else class_weight.to(hidden.dtype)
        return F.linear_cross_entropy(hidden, weight, target, linear_bias=bias, weight=class_weight,
                                      reduction=reduction, ignore_index=ignore_index,
                                      label_smoothing=label_smoothing, **chunked)  # fmt: skip

    return call


PROMISE = (
    "The statement:: loss = linear_cross_entropy(input, linear_weight, target, **kwargs) is equivalent to "
    "the following reference implementation of linear_cross_entropy:: logits = linear(input, linear_weight); "
    "loss = cross_entropy(logits, target, **kwargs)"
)


def _composition(hidden, weight, target, *, bias, class_weight, ignore_index, reduction, label_smoothing, **_):
    """The reference its docstring names, on the case's own inputs: F.linear, then F.cross_entropy,
    both in the inputs' dtype."""
    import torch.nn.functional as F

    class_weight = None if class_weight is None else class_weight.to(hidden.dtype)
    return F.cross_entropy(F.linear(hidden, weight, bias), target, weight=class_weight, reduction=reduction,
                           ignore_index=ignore_index, label_smoothing=label_smoothing)  # fmt: skip


def flce_promise(problem):
    """PROMISE's reference on the case (Provider.promise), its outputs held as float32."""
    import dataclasses

    from ligerbench.suites.flce.spec import run_flce

    out = run_flce(_composition, problem)
    return dataclasses.replace(out, values={k: None if v is None else v.float() for k, v in out.values.items()})


# option -> what it is, for the options linear_cross_entropy has no parameter for
_LACKS = {"softcap": "a softcap", "z_loss_scale": "a z-loss", "token_weight": "per-token weights"}


def flce_supports(case: Case) -> str | None:
    opts = OPTIONS[case.option]
    missing = [what for key, what in _LACKS.items() if opts.get(key)]
    if missing:
        return f"torch.nn.functional.linear_cross_entropy has no parameter for: {', '.join(missing)}"
    if case.layout in ("3d", "kept_slice"):
        return (
            "torch.nn.functional.linear_cross_entropy takes input [N, H] or [H] only (it raises on "
            "[B, T, H]); its callers flatten the batch first"
        )
    return None


def _chunked():
    return _flce(options=torch.nn.LinearCrossEntropyOptions())


def chunked_supports(case: Case) -> str | None:
    refused = flce_supports(case)
    if refused:
        return refused
    if OPTIONS[case.option].get("label_smoothing"):
        return "linear_cross_entropy's chunked path has no label smoothing (it falls back to options=None, warning)"
    return None


def _loss_parallel():
    from torch.distributed.tensor.parallel import loss_parallel  # noqa: F401 -- absent: unavailable, said

    from ligerbench.suites.vp_ce.bench import loss_parallel_shard

    return loss_parallel_shard


def loss_parallel_supports(case: Case) -> str | None:
    """What loss_parallel() (torch.distributed.tensor.parallel) refuses or has no parameter for: its
    docstring's label smoothing "currently not supported"; softcap, z-loss, per-token weights; class
    weights (it takes them replicated, the contract hands a shard); shards that torch.chunk would
    not make (V divisible by the ranks); the whole logits handed to every rank."""
    opts = OPTIONS[case.option]
    missing = [what for key, what in _LP_LACKS.items() if opts.get(key)]
    if missing:
        return f"loss_parallel has no parameter for: {', '.join(missing)}"
    from ligerbench.suites.vp_ce.bench import even_shards

    uneven = even_shards(case)
    if uneven:
        return f"loss_parallel {uneven}"
    if case.get("handed", "shards") != "shards":
        return "loss_parallel takes each rank's shard as a DTensor: a rank handed the whole logits is another call"
    if case.get("mesh", "flat") != "flat":
        return "loss_parallel is called here on the tensor-parallel group's own one-dimensional mesh only"
    return None


_LP_LACKS = {"label_smoothing": "label smoothing", "class_weight": "class weights (a shard)",
             **_LACKS}  # fmt: skip

PROMISED = {"promise": flce_promise, "promise_quote": PROMISE}
PROVIDERS = (
    Provider(name="torch_native", kernel="flce", **PEER, **PROMISED, load=_flce, supports=flce_supports,
             description="torch.nn.functional.linear_cross_entropy (options=None: linear, then cross_entropy, "
             "in the inputs' dtype)"),
    Provider(name="torch_native_chunked", kernel="flce", **PEER, **PROMISED, load=_chunked, supports=chunked_supports,
             description="torch.nn.functional.linear_cross_entropy with options=LinearCrossEntropyOptions() "
             "(its chunked path)"),
    Provider(name="loss_parallel", kernel="vp_ce", **PEER, load=_loss_parallel, supports=loss_parallel_supports,
             real_ranks=True, description="PyTorch loss_parallel(): F.cross_entropy on the shard as a DTensor "
             "Shard(-1) over the group's one-dimensional mesh, forward and backward inside the context"),
)  # fmt: skip
