"""ligerbench: verify and benchmark Triton loss kernels against a float64 truth and their peers.

ligerbench verify --kernel ce --reduction none
ligerbench list

The ops (`kernels/`) and the suites (`suites/`) are top-level folders of the repository, served
as `ligerbench.kernels` and `ligerbench.suites`: an install maps them in (pyproject's
package-dir). Run from a source tree with no install (`PYTHONPATH=.` on a GPU box), they are
found beside this folder, which is what the two lines below add.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_source_root = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).parent / "kernels").exists() and (_source_root / "kernels" / "triton_mode.py").is_file():
    __path__.append(str(_source_root))  # noqa: F821 (a package's __path__)
