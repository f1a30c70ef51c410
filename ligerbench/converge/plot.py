"""The convergence PNG: the loss curves, and their differences on its own axis (the curves
overlap to the pixel when the patch is right, so the difference is the informative panel);
with the float64 run given, both dtype runs' differences from it."""

from __future__ import annotations

import math
from pathlib import Path


def loss_curves_png(
    path: Path, ref: list[float], ours: list[float], *, title: str, vocab: int, truth: list[float] | None = None
) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines or GPU boxes
    import matplotlib.pyplot as plt

    steps = list(range(len(ref)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top.plot(steps, ref, label="transformers (reference)", lw=2)
    top.plot(steps, ours, label="patched (our kernels)", lw=1, ls="--")
    if truth is not None:
        top.plot(steps, truth, label="transformers, float64 (truth)", lw=1, ls=":", color="black")
    top.axhline(math.log(vocab), color="grey", lw=0.8, ls=":", label="log(vocab)")
    top.set_ylabel("training loss")
    top.set_title(title)
    top.legend()
    if truth is None:
        bottom.plot(steps, [b - a for a, b in zip(ref, ours, strict=True)], color="tab:red")
        bottom.set_ylabel("patched - reference")
    else:  # both against the truth: the reference's curve is the yardstick of the patched one
        bottom.plot(steps, [b - t for b, t in zip(ours, truth, strict=True)], color="tab:red", label="patched")
        bottom.plot(steps, [a - t for a, t in zip(ref, truth, strict=True)], color="tab:blue", label="reference")
        bottom.set_ylabel("minus float64")
        bottom.legend()
    bottom.axhline(0.0, color="grey", lw=0.8)
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
