"""The convergence PNG: both loss curves, and their difference on its own axis (the curves
overlap to the pixel when the patch is right, so the difference is the informative panel)."""

from __future__ import annotations

import math
from pathlib import Path


def loss_curves_png(path: Path, ref: list[float], ours: list[float], *, title: str, vocab: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines or GPU boxes
    import matplotlib.pyplot as plt

    steps = list(range(len(ref)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top.plot(steps, ref, label="transformers (reference)", lw=2)
    top.plot(steps, ours, label="patched (our kernels)", lw=1, ls="--")
    top.axhline(math.log(vocab), color="grey", lw=0.8, ls=":", label="log(vocab)")
    top.set_ylabel("training loss")
    top.set_title(title)
    top.legend()
    bottom.plot(steps, [b - a for a, b in zip(ref, ours, strict=True)], color="tab:red")
    bottom.axhline(0.0, color="grey", lw=0.8)
    bottom.set_ylabel("patched - reference")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
