"""A second backward through one forward: `loss.backward(up, retain_graph=True)`, then
`loss.backward(other_up)` on the same graph (a probe of the gradients, two objectives sharing a
forward, a trainer that re-runs backward after a skipped step).

A kernel that forms its gradients in forward and scales them in place in backward hands the
second call a buffer the first already scaled: both gradients come back wrong, silently (QuACK
#209). A kernel may instead refuse the second call, with an error that says so (ours do: their
gradients are formed in forward and handed out once). What it may not do is return anything else,
or change the gradients the first call returned.

So a `retained` case runs backward twice and checks two things:
  - the first call's gradients, read after the second call has run, against the truth (a buffer
    the second call scaled in place fails there);
  - the second call's gradients (`grad_*_again`) against the truth for its upstream, AGAIN times
    the first's (exact in binary), or a refusal: a RuntimeError that names what it refuses
    (CLEAR_REFUSAL), recorded with its message; any other error fails the case.
The first upstream must not be 1 (the cases use 65536, a GradScaler's, or random rows): scaled in
place by 1, a buffer is unchanged and the bug invisible.
"""

from __future__ import annotations

import dataclasses

import torch

from ligerbench.axes import Axis

AGAIN = 0.5  # the second call's upstream, times the first's: exact in binary
# A refusal says what it refuses: PyTorch's own ("Trying to backward through the graph a second
# time"), ours ("backward ran twice on one forward"); any other error is the case's error.
CLEAR_REFUSAL = ("backward", "retain", "twice", "second time")

AXIS = Axis(
    "backward",
    "how many times backward runs through one forward",
    ("once", "retained"),
    means={
        "once": "loss.backward(): one backward a forward",
        "retained": f"loss.backward(up, retain_graph=True), then loss.backward({AGAIN} * up): the second call's "
        "gradients or a clear refusal, and the first call's unchanged (QuACK #209)",
    },
    default="once",
    tag="bwd-",
    hidden=("once",),
)


def is_retained(case) -> bool:
    return case.get("backward", "once") == "retained"


def backward(loss: torch.Tensor, up: torch.Tensor, leaves: dict[str, torch.Tensor | None], retained: bool,
             values: dict, refusals: dict) -> None:  # fmt: skip
    """Run the case's backward and put each leaf's gradient in values as grad_<name> (None where
    no gradient reached it); retained: the second call too, as grad_<name>_again, or its refusal
    in refusals. The first call's gradients are read only after the second has run."""
    live = {name: x for name, x in leaves.items() if x is not None}
    loss.backward(up, retain_graph=retained)
    first = {name: x.grad for name, x in live.items()}  # held, not copied (module docstring)
    if retained:
        for x in live.values():
            x.grad = None
        try:
            loss.backward(up * AGAIN)
            for name, x in live.items():
                values[f"grad_{name}_again"] = None if x.grad is None else x.grad.detach().clone()
        except RuntimeError as exc:
            said = str(exc).splitlines()[0] if str(exc) else ""
            if not any(word in said.lower() for word in CLEAR_REFUSAL):
                raise  # not a refusal that says what it refuses: the case's error, as any other
            for name in live:
                refusals[f"grad_{name}_again"] = said
    for name, g in first.items():
        values[f"grad_{name}"] = None if g is None else g.detach().clone()


def whole(problem):
    """The problem with one backward: the truth and the yardsticks of a retained case are the
    one backward's, the second call's gradients AGAIN times the first's (aliased)."""
    return dataclasses.replace(problem, backward="once")


def aliased(out, backward: str):
    """The one backward's outcome with each gradient also as the second call's (AGAIN times it)."""
    if backward == "retained":
        out.values.update({f"{k}_again": None if g is None else g * AGAIN for k, g in list(out.values.items())
                           if k.startswith("grad_") and not k.endswith("_again")})  # fmt: skip
    return out
