"""What the peer adapters share to declare a peer's limits (`Provider.supports`): the log-prob
options a peer may lack, what a chunked distillation peer lacks, and the one wording of a refusal."""

from __future__ import annotations

from collections.abc import Iterable

from ligerbench.cases import Case

# option -> (what it is, whether the case leaves it off)
_OPTIONS = {
    "softcap": ("a softcap", lambda case: not case.get("softcap")),
    "logit_scale": ("a logit scale", lambda case: case.get("logit_scale", 1.0) == 1.0),
    "bias": ("a bias", lambda case: not case.get("bias")),
    "targets": ("K targets per row", lambda case: case.get("targets", 1) == 1),
}


def lacking(case: Case, *options: str) -> list[str]:
    """Of the `options` a peer has no parameter for, those the case sets."""
    return [_OPTIONS[o][0] for o in options if not _OPTIONS[o][1](case)]


def chunked_distill_lacking(case: Case) -> list[str]:
    """What a chunked distillation peer (the KLs and JSD, its loss divided by the counted rows)
    lacks of an flkd case: tvd, and any reduction but mean."""
    missing = ["tvd"] if case.divergence == "tvd" else []
    if case.reduction != "mean":
        missing.append(f"reduction {case.reduction} (it divides by the counted rows: mean)")
    return missing


def refusal(what: str, missing: Iterable[str]) -> str | None:
    """The skip reason naming what `what` has no parameter for, or None when nothing is missing."""
    missing = list(missing)
    return f"{what} has no parameter for: {', '.join(missing)}" if missing else None
