"""Machinery of `ligerbench converge`: mini models, synthetic data, training, tolerances, plot.
The checks themselves are in suites/converge/__init__.py."""
