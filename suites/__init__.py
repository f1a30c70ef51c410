"""Suites: what ligerbench checks and measures, one file per concern."""

from suites import contracts, correctness, flce, gradients
from suites.presets import PRESETS

SUITES = (correctness.SUITE, gradients.SUITE, contracts.SUITE, *flce.SUITES)

__all__ = ["PRESETS", "SUITES"]
