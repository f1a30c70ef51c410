"""`ligerbench audit LIBRARY`: one verify run per kernel for that library's providers alone, and the
markdown of what came out (ligerbench/commands/audit.py). On the test kernel of tests/kl_plugin.py
(KL over [1, 5] logits, 12 cases with --where n=1) with providers of two made-up libraries, so it
runs in seconds on CPU and whatever peers are installed."""

from __future__ import annotations

import re

import kl_plugin
import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.commands import audit
from ligerbench.exits import UsageError
from ligerbench.registry import Provider, Registry
from ligerbench.suites.common.presets import PRESETS

runner = CliRunner()
SMALL = ["--device", "cpu", "--where", "n=1"]  # 12 cases: 2 dtypes x 3 reductions x 2 kinds of logits
BF16_REASON = "no 16-bit logits (declared)"


def _registry() -> Registry:
    reg = Registry()
    reg.add(*PRESETS)
    kl_plugin.register(reg)  # torch_kl and eager: no library
    reg.add(
        Provider("fake_good", "kl", "correct", load=lambda: kl_plugin._kl_div, library="fakelib", pinned="1.0"),
        Provider("fake_mean_bug", "kl", "mean over N*V", load=lambda: kl_plugin._elementwise_mean, library="fakelib"),
        Provider(
            "fake_fp32_only",
            "kl",
            "correct, fp32 only",
            load=lambda: kl_plugin._kl_div,
            library="fakelib",
            supports=lambda c: BF16_REASON if c.dtype == "bf16" else None,
        ),  # fmt: skip
        Provider("other_peer", "kl", "another library's", load=lambda: kl_plugin._kl_div, library="liger-kernel"),
    )
    return reg


PEERS_MD = """# The peers

| library | providers |
|---|---|
| fakelib | `fake_mean_bug` (its grad_logits and loss: the inventory, never a classification) |

## Every failing check, classified

| peer | what fails | class |
|---|---|---|
| fakelib `fake_mean_bug` | reduction "mean": the loss divided by N*V | (a) |
"""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setattr(audit, "default_registry", _registry)
    doc = tmp_path / "peers.md"
    doc.write_text(PEERS_MD)
    monkeypatch.setattr(audit, "PEERS_DOC", doc)
    return tmp_path / "out"


def _audit(out, *args):
    return runner.invoke(app, ["audit", *args, "--out", str(out)])


def _said(output: str) -> str:
    """The output as one line, without the error panel's borders."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", output).split())


def _row(text: str, provider: str) -> list[str]:
    """The provider's row of the markdown's per-provider table, as cells."""
    line = next(x for x in text.splitlines() if x.startswith(f"| {provider} | kl |"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.mark.interpreter
def test_audit_runs_only_the_librarys_providers_and_counts_them(fake):
    result = _audit(fake, "fakelib", *SMALL)
    assert result.exit_code == 0, result.output  # failing checks are findings, not a failed audit
    folders = [p for p in fake.iterdir() if p.is_dir()]
    assert len(folders) == 1 and "-verify-kl-" in folders[0].name  # one verify run folder, as verify writes it
    records = pd.read_csv(folders[0] / "records.csv")
    assert set(records["provider"]) == {"fake_good", "fake_mean_bug", "fake_fp32_only"}
    assert (records["n"] == 1).all() and records["case"].nunique() == 12

    text = (fake / "audit-fakelib.md").read_text()
    assert str(fake / "audit-fakelib.md") in _said(result.output)
    # provider | kernel | cases | passed | failed | errored | skipped | compared on | deterministic | rows
    # (the test kernel declares no same-row suites: nothing measured, "-")
    assert _row(text, "fake_good") == ["fake_good", "kl", "12", "12", "0", "0", "0", "fp32 6/6, bf16 6/6", "-", "-"]
    # the planted mean: 2 dtypes x 2 kinds of logits under reduction mean
    assert _row(text, "fake_mean_bug")[:7] == ["fake_mean_bug", "kl", "12", "8", "4", "0", "0"]
    assert "other_peer" not in text and "torch_kl" not in text

    # every failing check listed: the loss under the page's classification (its line), the gradient not
    section = text.split("### fake_mean_bug (kl)")[1].split("### ")[0]
    listed, unclassified = section.split("Listed in docs/peers.md:")[1].split("Unclassified:")
    doc_line = 1 + PEERS_MD.splitlines().index(
        '| fakelib `fake_mean_bug` | reduction "mean": the loss divided by N*V | (a) |'
    )
    loss_rows = [x for x in listed.splitlines() if x.startswith("| `")]
    assert len(loss_rows) == 4 and all("| loss |" in x and f"line {doc_line}" in x for x in loss_rows)
    grad_rows = [x for x in unclassified.splitlines() if x.startswith("| `")]
    assert len(grad_rows) == 4 and all("| grad_logits |" in x and "/mean/" in x for x in grad_rows)
    for row in loss_rows + grad_rows:
        error, limit = (float(c) for c in row.strip("|").split("|")[2:4])
        assert error > limit
    assert "- failing checks: 8 (4 listed in docs/peers.md, 4 unclassified)" in section


@pytest.mark.interpreter
def test_never_ran_on_a_dtype_whose_every_case_it_skipped(fake):
    result = _audit(fake, "FakeLib", *SMALL)  # any case
    assert result.exit_code == 0, result.output
    text = (fake / "audit-fakelib.md").read_text()
    assert _row(text, "fake_fp32_only")[:8] == ["fake_fp32_only", "kl", "12", "6", "0", "0", "6", "fp32 6/6, bf16 0/6"]
    section = text.split("### fake_fp32_only (kl)")[1].split("### ")[0]
    assert "- ran on: fp32 (6 of 6 cases)" in section
    assert "- never ran on bf16 (0 of its 6 cases compared)" in section
    # the reason grouped: 6 cases, 3 checks each (loss, grad_logits, input_unchanged)
    assert re.search(rf"- skip reasons \(cases, checks\):\n  - 6 cases, 18 checks: {re.escape(BF16_REASON)}", section)
    assert "never ran on" not in text.split("### fake_good (kl)")[1].split("### ")[0]
    assert "never ran on" not in text.split("### fake_fp32_only")[0]  # only its own section says it


def test_unknown_library_names_the_known_ones(fake):
    result = _audit(fake, "nope", *SMALL)
    assert result.exit_code == 2
    said = _said(result.output)
    assert "unknown library 'nope'; choose from fakelib, liger-kernel" in said
    assert not fake.exists()  # refused before any run folder


def test_library_names_as_users_type_them():
    reg = _registry()
    assert audit.resolve_library(reg, "liger") == "liger-kernel"
    assert audit.resolve_library(reg, "Liger_Kernel") == "liger-kernel"
    assert audit.resolve_library(reg, "FAKELIB") == "fakelib"
    with pytest.raises(UsageError):
        audit.resolve_library(reg, "torch")  # no provider of it in this registry


def test_a_where_no_kernel_of_the_library_has_is_a_usage_error(fake):
    result = _audit(fake, "fakelib", "--device", "cpu", "--where", "colour=red")
    assert result.exit_code == 2
    assert "no axis 'colour' of kernel kl" in _said(result.output)


def test_a_peer_named_by_what_it_calls_is_listed():
    """docs/peers.md often names the peer's function, not our provider: its library beside a code name
    from the provider's description counts; the same name under another library, or outside a passage
    that classifies, does not."""
    page = (
        "# Peers\n\n| TRL | `trl_chunked` gradients (inventory) |\n\n## Classified\n\n"
        "| verl `ChunkedLogProbFunction` | gradients 2x the limit | (a) |\n"
        "| TRL `ChunkedLogProbFunction` | 16-bit: gradients 1.3x the limit | (a) |\n\n"
        "TRL's ChunkedLogProbFunction: its entropy, measured once.\n"
    )
    passages = audit.peer_passages(page)
    provider = Provider("trl_chunked", "kl", "TRL's ChunkedLogProbFunction as its trainer calls it", load=lambda: None,
                        library="trl")  # fmt: skip
    names = audit.doc_names(provider)
    assert names == ("trl", ("ChunkedLogProbFunction",))
    assert audit.listed_in(passages, "trl_chunked", "grad_hidden", *names) == 8
    assert audit.listed_in(passages, "trl_chunked", "entropy", *names) is None  # that paragraph classifies nothing
    assert audit.listed_in(passages, "trl_chunked", "grad_hidden") is None  # by its name alone: only the inventory


def test_every_failing_check_of_the_committed_audits_is_in_docs_peers():
    """The committed GPU audits (results/runs/audit-*) and docs/peers.md stay in step: each peer's
    failing or erroring check there is named by a passage of the page (the audit's own text match),
    so a finding cannot sit in the evidence unclassified."""
    from pathlib import Path

    from ligerbench.builtin import default_registry

    root = Path(__file__).resolve().parent.parent
    passages = audit.peer_passages((root / "docs" / "peers.md").read_text())
    providers = {(p.kernel, p.name): p for p in default_registry().providers.values()}
    runs = sorted((root / "results" / "runs").glob("audit-*/*-verify-*/records.csv.gz"))
    assert len(runs) >= 6  # liger's six kernels at least: the check below reads them
    missing, seen = [], 0
    for run in runs:
        df = pd.read_csv(run)
        failing = df[df.verdict.isin(["fail", "error"])][["provider", "quantity"]].drop_duplicates()
        kernel = run.parent.name.split("-verify-")[1].rsplit("-", 1)[0]
        for provider, quantity in failing.itertuples(index=False):
            seen += 1
            library, names = audit.doc_names(providers[(kernel, provider)])
            if audit.listed_in(passages, provider, quantity, library, names) is None:
                missing.append(f"{kernel} {provider} {quantity} ({run.parent.parent.name})")
    assert seen > 0 and not missing, missing


def test_the_same_row_columns_report_the_largest_distance_and_leave_out_summed_quantities():
    rows = [  # suite, provider, quantity, value
        ("determinism", "p", "loss", 0.0), ("determinism", "p", "grad_hidden", 0.0),
        ("batch_invariance", "p", "alone:loss", 0.0), ("batch_invariance", "p", "smaller:grad_hidden", 3.0),
        ("batch_invariance", "p", "position:grad_weight", 24000.0),  # summed over rows: left out
        ("determinism", "q", "loss", 12.0), ("batch_invariance", "q", "alone:loss", float("inf")),
        ("determinism", "r", "loss", float("nan")),  # a skip or an error: no distance
    ]  # fmt: skip
    frame = pd.DataFrame([dict(suite=a, provider=b, quantity=c, value=d, metric="ulp_max") for a, b, c, d in rows])
    run = audit.KernelRun("k", ["p", "q", "r"], {}, [], frame, path=None, shared=("grad_weight",))
    assert audit.same_row(run, "p") == ("yes", "no: up to 3 ulp")
    assert audit.same_row(run, "q") == ("no: up to 12 ulp", "no: a NaN on one side")
    assert audit.same_row(run, "r") == ("-", "-")
