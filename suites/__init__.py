"""Suites: what ligerbench checks and measures, one file per concern."""

from suites import contracts, correctness, gradients
from suites.presets import PRESETS

SUITES = (correctness.SUITE, gradients.SUITE, contracts.SUITE)

__all__ = ["PRESETS", "SUITES"]
