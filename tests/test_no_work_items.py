"""The project speaks in its own terms: no tracked file cites our own work items or the sittings
in which work was done ("issue 34", "session 19", "run31.sh", "(issue)"). A user has none of
those; a comment, docstring, printed string or doc says why in words (the physical limit, the
peer, the bug class) and points to docs/, and where history matters it names a commit or a date.
Public references to other projects' issues and pull requests ("Liger #1432", "PyTorch #190746")
are the evidence a reader can follow, and stay. Reads files only.

    python -m pytest tests/test_no_work_items.py
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class WorkItem:
    what: str  # what the pattern stands for, as the failure names it
    pattern: re.Pattern[str]  # whitespace is \s: a reference broken over two lines is caught
    catches: tuple[str, ...]  # examples it must catch (test_each_pattern_catches_its_examples)


WORK_ITEMS = (
    WorkItem(
        "a numbered issue of ours (a public one is written '<project> #N' and is not matched)",
        re.compile(r"\b[Ii]ssues?[\s_-]*\d"),
        (
            "issue 35: no slower than the best peer",
            "issues 22, 34",
            "Issue 24's finding 1",
            "results/examples/issue34-gpu/run19.sh",
            "issue-34",
            "(issue\n  32, finding 3)",
        ),
    ),
    WorkItem(
        "an unnamed issue of ours",
        re.compile(r"\(issue[):]|\bthe issue's\b"),
        ("design target (issue): vocab-parallel CE", "(issue: layouts, upstreams)", "the issue's figures"),
    ),
    WorkItem(
        "a numbered session (a sitting of the work)",
        re.compile(r"\b[Ss]essions?[\s_-]*\d"),
        (
            "session 19",
            "sessions 11 and 12",
            "Session 12 (H100)",
            "h100-session18",
            "the session-8 profile",
            "as ce's since session\n  18",
        ),
    ),
    WorkItem(
        "a session named as a time of the work",
        re.compile(
            r"\b(?:[Tt]his|[Tt]hat|[Nn]ext|[Ss]ame|[Pp]revious|[Ee]arlier|[Ll]ater|[Ll]ast)[\s-]+sessions?\b"
            r"|\bsession's device\b"
        ),
        ("Not tried in this session", "Later that session", "Same-session bench", "the session's device time"),
    ),
    WorkItem("a sitting", re.compile(r"\b[Ss]ittings?\b"), ("measured in the last sitting", "two sittings")),
    WorkItem(
        "a numbered run or call of a GPU sitting (a committed run is named by its folder or commit)",
        re.compile(r"\brun\d|\b[Cc]alls?\s+\d+\b"),
        ("cProfile (run15)", "run27-31", "run31.sh", "call 5"),
    ),
    WorkItem(
        "a numbered finding or item of an issue",
        re.compile(r"\b(?:[Ff]inding|[Ii]tem)s?\s+\d"),
        ("finding 3", "findings 1 and 2", "item 6"),
    ),
    WorkItem("a sitting's suffix", re.compile(r"\bS\d{1,2}\b|-s\d{1,2}\b"), ("S12", "bench-ce-h100-s12")),
)

# What must never be flagged: public references, and the words' other senses in this project.
NOT_WORK_ITEMS = (
    "Liger #1082",
    "Liger-Kernel #1432",
    "Megatron-LM #7452",
    "TRL #6024",
    "verl #7439",
    "PyTorch #190746",
    "QuACK #209",
    "ms-swift #9947",
    "unsloth #10616",
    "the host's issue time",  # issuing a call to the GPU
    "issues the next block's load",
    "a session of its own",  # a process session (the ranks' launcher)
    "@nox.session",
    "--recheck RUN2",  # a metavariable
    "flp/n24/v500/h32/fp32/t0.6/cap0.0/s1.0/k1",  # a case id's logit scale
)


def _exempt(path: str) -> bool:
    """Recorded outputs (a run's files under results/runs/<run>/ and results/baselines/<run>/) are
    evidence as it was written; a changelog may name history as it likes; this file holds the
    examples above."""
    parts = path.split("/")
    recorded = len(parts) > 3 and parts[0] == "results" and parts[1] in ("runs", "baselines")
    changelog = Path(path).name.lower().startswith("changelog")
    return recorded or changelog or path == "tests/test_no_work_items.py"


def _tracked_texts() -> list[tuple[str, str]]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    texts = []
    for path in sorted(p for p in out.decode().split("\0") if p and not _exempt(p)):
        try:
            data = (ROOT / path).read_bytes()
        except OSError:  # deleted in the work tree, not yet in the index
            continue
        if b"\0" in data:  # binary (a plot)
            continue
        try:
            texts.append((path, data.decode("utf-8")))
        except UnicodeDecodeError:  # compressed records (.gz)
            continue
    return texts


def work_item_references(path: str, text: str) -> list[str]:
    """'path:line: <what>: <token>' for every work-item reference in text."""
    found = []
    for item in WORK_ITEMS:
        for match in item.pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            token = match.group(0) + re.match(r"[\w.,-]*", text[match.end() :]).group(0)
            found.append(f"{path}:{line}: {item.what}: {token!r}")
    return found


@pytest.mark.parametrize("item", WORK_ITEMS, ids=[item.what for item in WORK_ITEMS])
def test_each_pattern_catches_its_examples(item):
    for example in item.catches:
        assert item.pattern.search(example), f"{item.what}: {example!r} not caught"


@pytest.mark.parametrize("text", NOT_WORK_ITEMS)
def test_public_references_and_other_senses_are_not_flagged(text):
    assert work_item_references("x", text) == []


def test_no_tracked_file_cites_a_work_item():
    texts = _tracked_texts()
    assert any(path == "README.md" for path, _ in texts), "the walk missed README.md"
    found = [ref for path, text in texts for ref in work_item_references(path, text)]
    assert not found, (
        f"{len(found)} work-item references (say why in the project's own terms and point to docs/; "
        "for history name a commit or a date):\n" + "\n".join(found)
    )
