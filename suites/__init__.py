"""Suites: what ligerbench checks and measures. One module per kernel (`ce.py`, `flce.py`)
registers that kernel's spec, grid, suites, providers and bench; `converge.py` holds the
convergence checks; `presets.py` the named run sizes."""
