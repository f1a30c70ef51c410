"""The layout shows the architecture, and imports run one way:

    kernels <- machinery (ligerbench/...) <- suites <- builtin registration <- commands <- cli

No cycles among our modules, counting imports placed inside functions (an import moved into a
function to dodge a cycle is still a dependency). The checker is tested on graphs with a planted
cycle and a planted upward import, so it can fail."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder -> the dotted package it is served as (pyproject's package-dir)
PACKAGES = {"ligerbench": "ligerbench", "kernels": "ligerbench.kernels", "suites": "ligerbench.suites"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, dotted in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([dotted, *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that `name` imports anywhere in its body (functions included)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(g):
        if v not in index:
            visit(v)
    return out


def layer(name: str) -> int:
    """0 kernels, 1 machinery, 2 suites, 3 builtin registration, 4 commands (and the pytest entry,
    ligerbench.testing), 5 cli."""
    if name.startswith("ligerbench.kernels"):
        return 0
    if name.startswith("ligerbench.suites"):
        return 2
    if name == "ligerbench.builtin":
        return 3
    if name.endswith(".command") or name in ("ligerbench.catalog", "ligerbench.testing"):
        return 4
    if name == "ligerbench.cli":
        return 5
    return 1


def upward(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in g.items() for b in deps if layer(b) > layer(a))


def test_no_import_cycles_among_our_modules():
    g = graph()
    assert len(g) > 50 and "ligerbench.kernels.cross_entropy" in g and "ligerbench.suites.ce" in g
    assert cycles(g) == []


def test_imports_run_one_way():
    assert upward(graph()) == []


def test_kernels_import_nothing_from_the_harness():
    g = graph()
    for name, deps in g.items():
        if layer(name) == 0:
            assert all(layer(d) == 0 for d in deps), (name, deps)


def test_the_checker_finds_a_planted_cycle_and_an_upward_import():
    g = graph()
    g["ligerbench.registry"] = g["ligerbench.registry"] | {"ligerbench.verify.engine"}  # engine imports registry
    assert any("ligerbench.registry" in c for c in cycles(g))
    g = graph()
    g["ligerbench.verify.engine"] = g["ligerbench.verify.engine"] | {"ligerbench.suites.ce"}
    assert upward(g) == ["ligerbench.verify.engine -> ligerbench.suites.ce"]


def test_an_import_inside_a_function_counts(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ligerbench import registry\n    return registry\n")
    assert "ligerbench.registry" in imports("ligerbench.x", module, {"ligerbench.registry", "ligerbench"})
