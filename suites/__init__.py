"""Suites: what ligerbench checks and measures, one file per concern."""

from ligerbench.suites import contracts, correctness, flce, gradients
from ligerbench.suites.presets import PRESETS

SUITES = (correctness.SUITE, gradients.SUITE, contracts.SUITE, *flce.SUITES)

__all__ = ["PRESETS", "SUITES"]
