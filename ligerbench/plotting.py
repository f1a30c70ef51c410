"""matplotlib, imported when a figure is drawn, never at import time: on a fresh machine its first
import builds the font cache (12 s on the H100 box), which every command paid through the CLI's
imports, `verify` included, that draws nothing.

    plt = pyplot()
    fig, ax = plt.subplots()
"""

from __future__ import annotations


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # headless: CI machines and GPU boxes have no display
    import matplotlib.pyplot as plt

    return plt
