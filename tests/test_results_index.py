"""results/ stays readable: every committed run is in results/README.md's index with the command
that made it at the top of its summary, every results/ path the docs quote exists, and no script
lives among the results (probes stay in git history, named in the index). Reads files only.

    python -m pytest tests/test_results_index.py
"""

from __future__ import annotations

import glob
import gzip
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
INDEX = RESULTS / "README.md"
RUNS = sorted(p for p in (RESULTS / "runs").iterdir() if p.is_dir())
# the pages that quote figures with a path into results/ (docs/*.md globbed: a new page is covered)
DOCS = sorted([ROOT / "README.md", ROOT / "kernels" / "NOTES.md", *(ROOT / "docs").glob("*.md")])

# a path as the docs write it: braces ({a,b}) and globs (*) allowed, an #anchor allowed after it
RESULTS_PATH = re.compile(r"results/[\w.{},*/#-]*")
INDEX_LINK = re.compile(r"\]\((runs/[^)]+)\)")


def _expand_braces(pattern: str) -> list[str]:
    """`a{b,c}d` -> [`abd`, `acd`]; braces do not nest in the docs."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [out for alt in match.group(1).split(",") for out in _expand_braces(head + alt + tail)]


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub forms it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def _quoted_paths(page: Path) -> list[str]:
    text = page.read_text()
    paths = []
    for match in RESULTS_PATH.finditer(text):
        if text[match.end() : match.end() + 1] == "<":
            continue  # a placeholder such as results/<run-id>/ or bench-<kernel>-<sweep>
        paths.append(match.group().rstrip(".,:;"))
    return paths


def _summary(run: Path) -> str:
    """The run's summary: summary.md (gzipped when large), the kill matrix a selftest writes, or the
    report an audit writes (audit-<library>.md, beside the verify run of each kernel)."""
    for name in ("summary.md", "kill_matrix.md", *sorted(p.name for p in run.glob("audit-*.md"))):
        if (run / name).exists():
            return (run / name).read_text()
    if (run / "summary.md.gz").exists():
        return gzip.open(run / "summary.md.gz", "rt").read()
    raise AssertionError(f"{run.relative_to(ROOT)} has no summary.md, summary.md.gz, kill_matrix.md or audit-*.md")


def test_every_run_is_in_the_index():
    linked = {link.rstrip("/") for link in INDEX_LINK.findall(INDEX.read_text())}
    missing = [run.name for run in RUNS if f"runs/{run.name}" not in linked]
    assert not missing, f"runs not in results/README.md's index: {missing}"


def test_every_index_link_exists():
    dead = [link for link in INDEX_LINK.findall(INDEX.read_text()) if not (RESULTS / link).exists()]
    assert not dead, f"results/README.md links to runs that are not there: {dead}"


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_run_summary_starts_with_its_command(run):
    first = _summary(run).splitlines()[0]
    assert first.startswith("Command: `ligerbench "), f"{run.name}: first line {first!r}"


@pytest.mark.parametrize("page", DOCS, ids=[str(page.relative_to(ROOT)) for page in DOCS])
def test_quoted_results_paths_exist(page):
    dead = []
    for quoted in _quoted_paths(page):
        path, _, anchor = quoted.partition("#")
        for expanded in _expand_braces(path):
            if not glob.glob(str(ROOT / expanded)):
                dead.append(expanded)
            elif anchor and anchor not in _anchors(ROOT / expanded):
                dead.append(quoted)
    assert not dead, f"{page.relative_to(ROOT)} quotes results/ paths that do not exist: {dead}"


def test_no_scripts_under_results():
    scripts = sorted(str(p.relative_to(ROOT)) for ext in ("*.sh", "*.py") for p in RESULTS.rglob(ext))
    assert not scripts, f"scripts under results/ (probes belong in git history, named in results/README.md): {scripts}"
