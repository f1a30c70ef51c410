"""Kernel specs: each kernel's inputs, float64 reference, PyTorch-eager yardstick and calling
convention, as the harness sees them (`common.py` holds what they share)."""
