"""The layout shows the architecture, and imports run one way:

    kernels <- machinery (ligerbench/...) <- suites <- builtin registration <- commands <- cli

No cycles among our modules, counting imports placed inside functions (an import moved into a
function to dodge a cycle is still a dependency), and none among folders either: a folder
(ligerbench/verify/, suites/, kernels/) or a top-level module (ligerbench/runs.py) is one room,
and no two rooms import each other, however indirectly. The checkers are tested on graphs with a
planted cycle, a planted folder cycle and a planted upward import, so they can fail."""

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
    if name.startswith("ligerbench.commands") or name == "ligerbench.testing":
        return 4
    if name == "ligerbench.cli":
        return 5
    return 1


def room(name: str) -> str:
    """The room a module lives in: its folder (ligerbench/verify/, suites/ce/), a top-level module
    of ligerbench/ on its own (ligerbench/runs.py), the loose modules of kernels/ and suites/
    together (kernels/, suites/)."""
    for folder, dotted in reversed(PACKAGES.items()):  # the served names before ligerbench itself
        if name != dotted and not name.startswith(dotted + "."):
            continue
        rest = name[len(dotted) + 1 :].split(".") if name != dotted else []
        if rest and (len(rest) > 1 or (ROOT / folder / rest[0]).is_dir()):
            return f"{folder}/{rest[0]}/"
        return f"{folder}/{rest[0]}.py" if rest and folder == "ligerbench" else folder + "/"
    return name


def rooms(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph seen folder by folder: an arrow between two rooms for every import across them."""
    out: dict[str, set[str]] = {}
    for a, deps in g.items():
        out.setdefault(room(a), set()).update(room(b) for b in deps if room(b) != room(a))
    return out


def upward(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in g.items() for b in deps if layer(b) > layer(a))


def test_no_import_cycles_among_our_modules():
    g = graph()
    assert len(g) > 50 and "ligerbench.kernels.cross_entropy" in g and "ligerbench.suites.ce" in g
    assert cycles(g) == []


def test_no_cycles_among_folders():
    r = rooms(graph())
    assert {"ligerbench/commands/", "ligerbench/runs.py", "ligerbench/verify/", "suites/", "kernels/"} <= set(r)
    assert cycles(r) == []


def test_imports_run_one_way():
    assert upward(graph()) == []


def external_imports(path: Path) -> set[str]:
    """The top-level names of every package `path` imports (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.partition(".")[0])
    return out


def test_only_the_commands_and_the_cli_know_typer():
    """Machinery raises domain errors (ligerbench/exits.py); the CLI alone turns them into exits."""
    mods = modules()
    users = sorted(name for name, path in mods.items() if "typer" in external_imports(path))
    assert "ligerbench.cli" in users and "ligerbench.commands.verify" in users  # the check sees them
    assert [u for u in users if layer(u) < 4] == []


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


def test_the_folder_checker_finds_a_planted_folder_cycle():
    # no module cycle: runs imports nothing of verify/, but the verify folder's summary (which
    # imports runs) and a planted runs -> verify.engine put the two rooms in one knot
    g = graph()
    g["ligerbench.runs"] = g["ligerbench.runs"] | {"ligerbench.verify.engine"}
    assert "ligerbench.runs" in g["ligerbench.verify.summary"] and cycles(g) == []  # modules: no cycle
    assert any({"ligerbench/runs.py", "ligerbench/verify/"} <= set(c) for c in cycles(rooms(g)))
    assert room("ligerbench.commands.verify") == "ligerbench/commands/"
    assert (
        room("ligerbench.suites.ce.spec") == "suites/ce/"
        and room("ligerbench.suites.common.covering") == "suites/common/"
    )
    assert room("ligerbench.kernels.cross_entropy") == "kernels/"
    assert room("ligerbench.builtin") == "ligerbench/builtin.py"


def test_an_import_inside_a_function_counts(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ligerbench import registry\n    return registry\n")
    assert "ligerbench.registry" in imports("ligerbench.x", module, {"ligerbench.registry", "ligerbench"})
