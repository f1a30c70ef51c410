"""The peer libraries as providers (suites/peers/, docs/peers.md): pinned and recorded, loaded as
their trainers call them, our adapter's own mistakes fixed, the classified findings pinned, and
the gate's rule for a peer's known findings (a check the baseline records failing too is a note;
one the baseline passed fails: a new release that changes a peer's numbers shows there)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from run_fixtures import CHECK, write_env
from typer.testing import CliRunner

from ligerbench import env
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.records import Record, RecordWriter
from ligerbench.suites import peers
from ligerbench.testing import run_provider

ROOT = Path(__file__).resolve().parent.parent


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_every_peer_provider_names_a_pinned_recorded_library():
    registry = default_registry(plugins=False)
    libraries = {p.library for p in registry.providers.values() if p.library}
    assert {"trl", "verl", "liger-kernel"} <= libraries
    assert libraries <= set(env.PEER_DISTRIBUTIONS), "env.json would not record a peer's version"
    pins = peers.pins()
    for p in registry.providers.values():
        if p.library:
            assert p.pinned == pins[p.library], f"{p.kernel}/{p.name} pins another version than its library file"


def test_the_peers_extra_pins_what_the_peer_files_pin():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["peers"]
    pins = peers.pins()
    assert f"trl=={pins['trl']}" in extra and f"liger-kernel=={pins['liger-kernel']}" in extra
    assert f"verl=={pins['verl']}" in (ROOT / "README.md").read_text(), "the README installs verl at its pin"


def test_list_shows_each_peer_with_its_versions():
    out = CliRunner().invoke(app, ["list", "--json"])
    assert out.exit_code == 0, out.output
    import json

    rows = {(p["kernel"], p["name"]): p for p in json.loads(out.stdout)["catalog"]["providers"]}
    assert "pinned 1.16.0" in rows[("lp", "trl_triton")]["library"]
    assert rows[("lp", "ours")]["library"] == ""


@pytest.mark.skipif(not _installed("verl"), reason="verl is not installed (pip install --no-deps verl==0.9.1)")
def test_verl_loads_without_running_its_package_init():
    code = (
        "import sys\n"
        "from ligerbench.suites.peers import verl\n"
        "fn = verl.load('verl.utils.torch_functional').logprobs_from_logits\n"
        "assert getattr(sys.modules['verl'], '__file__', None) is None, 'verl/__init__.py ran'\n"
        "assert 'ray' not in sys.modules, 'Ray was imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _grpo_case(**params):
    from ligerbench.suites.grpo.axes import case

    return case(b=4, t=6, h=16, v=64, **params)


@pytest.mark.interpreter
@pytest.mark.skipif(not _installed("liger-kernel"), reason="liger-kernel is not installed (pip install -e .[peers])")
def test_liger_cispo_gets_the_raw_bound_our_adapter_once_forgot(monkeypatch):
    # (c) in docs/peers.md: Liger (as TRL) takes CISPO's epsilon_high as the raw bound on the ratio
    from ligerbench.suites.peers import liger

    registry = default_registry(plugins=False)
    provider = registry.providers[("grpo", "liger_triton")]
    cases = [_grpo_case(loss_type="cispo")]
    assert run_provider("grpo", provider, cases=cases, registry=registry).passed
    monkeypatch.setattr(liger, "_raw_bound", lambda loss_type, eps_high: eps_high)
    registry = default_registry(plugins=False)
    assert not run_provider("grpo", registry.providers[("grpo", "liger_triton")], cases=cases).passed


@pytest.mark.skipif(not _installed("trl"), reason="trl is not installed (pip install -e .[peers])")
def test_trl_chunked_logprob_16bit_tiles_finding():
    # (p) in docs/peers.md: the logits tile is formed in bf16, as model code forms its logits
    # (TRL promises no more): the default verdict passes it; far from 0 its log-probs are
    # percent-off the float32 logits' and --strict says so
    from ligerbench.suites.flp.axes import case

    registry = default_registry(plugins=False)
    provider = registry.providers[("flp", "trl_chunked")]
    shifted = dict(n=24, v=500, h=32, bias=True, logits="shifted", upstream="both", ignore_pattern="random")
    bf16 = run_provider("flp", provider, cases=[case(dtype="bf16", **shifted)], registry=registry)
    fp32 = run_provider("flp", provider, cases=[case(dtype="fp32", **shifted)], registry=registry)
    assert fp32.passed, fp32.explain()
    assert bf16.passed, bf16.explain()
    strict = run_provider("flp", provider, cases=[case(dtype="bf16", **shifted)], registry=registry, strict=True)
    bad = strict.records[(strict.records.verdict == "fail") & (strict.records.quantity == "logp")]
    assert len(bad) == 1 and bad.value.iloc[0] > 0.01  # ~4% in docs/peers.md


# ---- the gate: a peer's known finding


def _verify_run(folder: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A verify run of `ce` whose rows are (provider, verdict, rule)."""
    folder.mkdir(parents=True)
    w = RecordWriter(folder / "records.csv")
    for provider, verdict, rule in rows:
        w.write(Record.for_case(CHECK, run_id=folder.name, suite="gradients", provider=provider,
                                quantity="grad_logits", metric="rel_l2", value=1e-3 if verdict == "fail" else 1e-7,
                                unit="relative", limit=3e-7, verdict=verdict, rule=rule))  # fmt: skip
    w.close()
    write_env(folder, kind="verify", kernel="ce", planned=1, completed=1)
    return folder


def _gate(run: Path, base: Path):
    return CliRunner().invoke(app, ["gate", str(run), "--baseline", str(base)])


def test_a_peer_failing_as_in_the_baseline_is_a_known_finding(tmp_path):
    base = _verify_run(tmp_path / "base", [("ours", "pass", "strict"), ("peer", "fail", "default")])
    run = _verify_run(tmp_path / "run", [("ours", "pass", "strict"), ("peer", "fail", "default")])
    result = _gate(run, base)
    assert result.exit_code == 0, result.output
    assert "known findings" in result.stdout and "peer 1" in result.stdout


def test_a_peer_check_the_baseline_passed_fails_the_gate(tmp_path):
    # a new release of the peer that changes its numbers
    base = _verify_run(tmp_path / "base", [("ours", "pass", "strict"), ("peer", "pass", "default")])
    run = _verify_run(tmp_path / "run", [("ours", "pass", "strict"), ("peer", "fail", "default")])
    result = _gate(run, base)
    assert result.exit_code == 1, result.output
    assert "1 failures" in result.stdout


def test_ours_failing_fails_the_gate_even_as_in_the_baseline(tmp_path):
    base = _verify_run(tmp_path / "base", [("ours", "fail", "strict"), ("peer", "pass", "default")])
    run = _verify_run(tmp_path / "run", [("ours", "fail", "strict"), ("peer", "pass", "default")])
    result = _gate(run, base)
    assert result.exit_code == 1, result.output
