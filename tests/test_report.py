"""`ligerbench report` on a doctored run (tests/run_fixtures.py): one page in markdown and in
self-contained HTML, with what the run holds."""

from __future__ import annotations

import base64
import re

from run_fixtures import CASE, CHECK, H100, write_run
from typer.testing import CliRunner

from ligerbench.cli import app

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def test_report_of_a_run(tmp_path):
    run = write_run(tmp_path / "run", check="fail")
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 1, result.output  # written, and the run it reports failed
    md = (run / "report.md").read_text()
    for section in ("## Environment", "## Verdicts per suite and provider", "## Failures and errors (1;",
                    "## Checks against float64", "## Measurements"):  # fmt: skip
        assert section in md, section
    assert H100 in md and "FAILED: 1 failing" in md
    assert CHECK.id in md and CASE.id in md  # the failing check and the measured case, by name
    # markdown links its plots, and each is a PNG beside it
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert set(images) == {"report_checks.png", "report_time_ms.png", "report_extra_mib.png"}
    for name in images:
        assert (run / name).read_bytes().startswith(PNG)
    # the HTML embeds the same plots and needs nothing else
    page = (run / "report.html").read_text()
    embedded = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(embedded) == len(images)
    assert all(base64.b64decode(e).startswith(PNG) for e in embedded)
    assert not re.search(r"(src|href)=['\"](?!data:)", page), "a self-contained page links nothing"
    assert "<h2>Measurements</h2>" in page and H100 in page


def test_report_of_a_passing_run_says_so(tmp_path):
    run = write_run(tmp_path / "run")
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    md = (run / "report.md").read_text()
    assert "PASSED" in md and "## Failures" not in md


def test_report_of_a_folder_that_is_not_a_run_exits_2(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a ligerbench run folder" in result.stderr
