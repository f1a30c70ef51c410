"""Installing and importing ligerbench beside other packages.

- Our ops ship as `ligerbench.kernels`, never as a top-level `kernels`: that name belongs to
  another distribution on the index (Hugging Face's kernel hub library), and installing ours used
  to overwrite its `kernels/__init__.py` (uninstalling ours deleted it). Proved here with a
  stand-in distribution that owns a top-level `kernels` package, in a fresh virtual environment,
  for `pip install .` and `pip install -e .` (no network: no build isolation, no dependencies;
  torch, triton and setuptools come from the environment running the tests).
- Triton's mode works whatever was imported first: `import transformers` (which imports Triton)
  before our kernels used to make the first CPU forward fail inside Triton's interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU = {"CUDA_VISIBLE_DEVICES": ""}

RUN_OUR_KERNEL = """
import torch
from ligerbench.kernels.cross_entropy import cross_entropy
x = torch.randn(5, 37, requires_grad=True)
t = torch.randint(0, 37, (5,))
loss = cross_entropy(x, t)
loss.backward()
ref = torch.nn.functional.cross_entropy(x.detach().double(), t)
assert abs(loss.item() - ref.item()) < 1e-5 * abs(ref.item()), (loss.item(), ref.item())
print("ours ok")
"""


def _python(code: str, *, python=sys.executable, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.interpreter
def test_kernels_run_on_cpu_when_transformers_was_imported_first(tmp_path):
    code = "import transformers\nfrom transformers import LlamaForCausalLM\n" + RUN_OUR_KERNEL
    done = _python(code, cwd=tmp_path, env=CPU)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ours ok" in done.stdout


def _stand_in_hub(root: Path) -> Path:
    """A distribution that owns the top-level package `kernels`, as the index's one does."""
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text('OWNER = "the other distribution"\n')
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "kernels"\nversion = "0.0.1"\n[tool.setuptools]\npackages = ["kernels"]\n'
    )
    return root


def _our_source(root: Path) -> Path:
    """A copy of what our build reads, so building leaves no build/ or egg-info in the checkout."""
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    for folder in ("ligerbench", "kernels", "suites"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


BOTH_IMPORT = """
import kernels
assert kernels.OWNER == "the other distribution", kernels.__file__
import ligerbench.kernels
assert "site-packages/kernels" not in ligerbench.kernels.__file__, ligerbench.kernels.__file__
print("kernels from", kernels.__file__)
print("ligerbench.kernels from", ligerbench.kernels.__file__)
"""


def _venv_seeing_this_environment(venv: Path) -> Path:
    """A new venv that sees the packages of the interpreter running the tests (torch, triton,
    setuptools), whatever kind of environment that is. `--system-site-packages` would not do: run
    from a venv, it exposes the base interpreter's site-packages, which may hold none of them. The
    paths go in as plain lines of a .pth file, so that environment's own .pth hooks (an editable
    ligerbench among them) do not run: what the venv imports of ours is what was installed in it."""
    # no pip of its own (ensurepip takes seconds): pip runs from this environment, `--python` the venv's
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    done = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (Path(done.stdout.strip()) / "outer_environment.pth").write_text("\n".join(sorted(ours)) + "\n")
    return py


@pytest.mark.slow(seconds=15)
@pytest.mark.interpreter
def test_install_beside_a_distribution_that_owns_kernels(tmp_path):
    py = _venv_seeing_this_environment(tmp_path / "venv")
    in_venv = [sys.executable, "-m", "pip", "--python", str(py)]
    pip = [*in_venv, "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]

    def run(*args):
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    # the venv has no setuptools of its own: it builds with this environment's, which the dev extra
    # pins (setuptools>=70.1 builds wheels by itself)
    run(*pip, str(_stand_in_hub(tmp_path / "hub")))
    ours = _our_source(tmp_path / "ours")
    site = tmp_path / "elsewhere"  # not the checkout: imports must come from the environment
    site.mkdir()

    for editable in (False, True):
        run(*pip, *(["-e"] if editable else []), str(ours))
        done = _python(BOTH_IMPORT + RUN_OUR_KERNEL, python=py, cwd=site, env=CPU)
        assert done.returncode == 0, (editable, done.stderr[-3000:])
        assert "ours ok" in done.stdout
        run(*in_venv, "uninstall", "-y", "-q", "ligerbench")
        # uninstalling ours leaves theirs whole
        done = _python("import kernels; assert kernels.OWNER == 'the other distribution'", python=py, cwd=site)
        assert done.returncode == 0, (editable, done.stderr[-2000:])
