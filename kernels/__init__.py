"""Triton loss kernels: cross entropy over logits, fused linear + cross entropy, and the
transformers patch that puts them in a model. They import nothing from the ligerbench harness.

Installed as `ligerbench.kernels` (pyproject maps this folder there), so the name cannot collide
with another distribution's top-level `kernels` package. The Triton mode (compiled on a GPU,
interpreted on CPU) is decided in `triton_mode.py`.
"""
