"""What an install ships: every package under ligerbench/ is listed in pyproject.toml's
`packages` (a folder left out installs without it, and `pip install .` then gives a ligerbench
whose commands and `ligerbench.testing` fail to import; an editable install hides that), and so
is every kernel's folder under suites/ (served as ligerbench.suites.<kernel>)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listed_packages() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    body = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M)
    assert body, "pyproject.toml has no [tool.setuptools] packages list"
    return set(re.findall(r'"([\w.]+)"', body.group(1)))


def test_every_package_folder_is_shipped():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "ligerbench").rglob("__init__.py")}
    # served from kernels/ and suites/ (package-dir)
    found |= {"ligerbench.kernels", "ligerbench.suites"}
    found |= {"ligerbench.suites." + p.parent.name for p in (ROOT / "suites").glob("*/__init__.py")}
    assert found - listed_packages() == set()
    assert listed_packages() - found == set()
