"""ligerbench: verify and benchmark Triton loss kernels against a float64 truth and their peers.

ligerbench verify --kernel ce --reduction none
ligerbench list
"""

__version__ = "0.1.0"
