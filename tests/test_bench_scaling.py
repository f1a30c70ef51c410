"""`bench --nproc 1,2,4`: one global problem at every rank count, a launch per count, and the
scaling table and plot (ligerbench/bench/scaling.py). The launches are stood in for by a fake
`launch.run_job` that writes each count's rows as rank 0 would (a real one: 1-3 minutes of gloo
ranks on CPU); the draws that make the problem the same at every count are checked directly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ligerbench.bench import ceilings
from ligerbench.bench.spec import on_ranks
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.distributed import launch
from ligerbench.records import Record, RecordWriter, load_records
from ligerbench.suites.vp_ce import bench as vp_ce_bench
from ligerbench.suites.vp_ce.axes import case as vp_ce_case
from ligerbench.suites.vp_ce.spec import shard_bounds

runner = CliRunner()
SPEC = default_registry(plugins=False).kernels["vp_ce"].bench
COUNTS = (1, 2, 4)


def _ms(provider: str, world: int, n: int) -> float:
    """A figure that tells provider, count and point apart: ours halves at each doubling."""
    return n * (1.0 if provider == "ours" else 3.0) / (world if provider == "ours" else 1)


def _fake_run_job(launched: list):
    cases = {c.id: c for n in COUNTS for c in (p.case for p in on_ranks(SPEC.sweeps["tokens"]("bf16", None, True), n))}

    def run_job(job, *, nproc, planned, unit, timeout_s, echo=None):
        launched.append((nproc, Path(job.run_path).name, job.cases))
        writer = RecordWriter(Path(job.run_path) / "records.csv")
        for case_id in job.cases:
            case = cases[case_id]
            for provider in job.providers:
                # the loss: the same at every count for ours (one global problem), not for the peer
                loss = 4.5 if provider == "ours" else 4.5 + nproc
                figures = (("time_ms", _ms(provider, nproc, case.n)), ("extra_mib", 10.0 / nproc), ("loss", loss))
                for metric, value in figures:
                    writer.write(Record.for_case(case, run_id=job.run_id, suite="bench", provider=provider,
                                                 quantity="full", metric=metric, value=value, unit="", limit=math.nan,
                                                 verdict="not_a_measurement"))  # fmt: skip
        writer.close()
        return {"nproc": nproc, "backend": "gloo", "completed_steps": planned, "done": {}}

    return run_job


def test_every_count_is_a_launch_and_the_report_puts_them_side_by_side(tmp_path, monkeypatch):
    launched: list = []
    monkeypatch.setattr(launch, "run_job", _fake_run_job(launched))
    monkeypatch.setattr(ceilings, "measure", lambda device: {"copy_gbps": 1.0})  # seconds of CPU copies saved
    args = ["bench", "--kernel", "vp_ce", "--smoke", "--nproc", "4,1,2", "--provider", "ours", "--provider",
            "loss_parallel", "--out", str(tmp_path), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # one launch per count, ascending, each in a folder of its own with that count's points only
    assert [(n, folder) for n, folder, _ in launched] == [(1, "ranks1"), (2, "ranks2"), (4, "ranks4")]
    assert all(case.endswith(f"/w{n}") or f"/w{n}/" in case for n, _, cases in launched for case in cases)
    run = next(tmp_path.iterdir())
    records = load_records(run / "records.csv")
    timed = records[(records["metric"] == "time_ms") & (records["provider"] == "ours")]
    assert len(timed) == 2 * len(COUNTS)  # every launch's rows gathered into the run's records
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == list(COUNTS) and set(env["launches"]) == {"1", "2", "4"}
    assert env["run"]["completed"] == env["run"]["planned"] == 2 * 2 * len(COUNTS)
    summary = (run / "summary.md").read_text()
    assert "- 1, 2, 4 ranks (gloo)" in summary
    # a row per provider, a column per count: ours 8 / 4 / 2 ms at N=8 (halving), memory 10 / 5 / 2.5
    assert "| provider | 1 rank | 2 ranks | 4 ranks | loss |" in summary
    assert "| ours | 8 / 10 | 4 / 5 | 2 / 2.5 | 4.5 |" in summary
    assert "| loss_parallel | 24 / 10 | 24 / 5 | 24 / 2.5 | 5.5 / 6.5 / 8.5 |" in summary
    assert "## tokens = 8 (N=8, V=96), 4 ranks" in summary and "## tokens = 8 (N=8, V=96), 1 rank\n" in summary
    assert (run / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "nproc, message",
    [
        ("0,2", "--nproc must be 0, or rank counts"),  # 0 is "in this process", not a count
        ("2,x", "--nproc must be 0, or rank counts"),
    ],
)
def test_rank_counts_usage_errors(tmp_path, nproc, message):
    result = runner.invoke(app, ["bench", "--kernel", "vp_ce", "--smoke", "--nproc", nproc, "--out", str(tmp_path)])
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split())


def test_a_shard_holds_the_same_values_whatever_the_split():
    """The global logits put together from the shards at 2, 3 and 4 ranks are the one draw at 1
    rank (V over several blocks, uneven shards)."""
    v = 2 * vp_ce_bench.BLOCK + 5
    point = vp_ce_case(n=3, v=v, dtype="fp32", world=1)

    def whole(world: int) -> torch.Tensor:
        case = point.replace(world=world)
        parts = [vp_ce_bench.vocab_slice(case, 0, lo, hi, 3, dim=1, device="cpu", dtype=torch.float32)
                 for lo, hi in shard_bounds(v, world)]  # fmt: skip
        return torch.cat(parts, dim=1)

    one = whole(1)
    assert one.shape == (3, v) and one.std() > 0.5
    for world in (2, 3, 4):
        assert torch.equal(whole(world), one), world


def test_the_tensor_parallel_peers_are_raced_beside_ours():
    """Each vocab-parallel bench names the peers' tensor-parallel losses (bench only where they
    are not verified against the kernel's contract), and vp_flp's heads are ones verl's head takes
    (H % 128 == 0)."""
    reg = default_registry(plugins=False)

    def benched(kernel: str) -> set[str]:
        return {p.name for p in reg.providers_for(kernel, bench_only=True)} - set(reg.kernels[kernel].bench.excluded)

    assert {"ours", "loss_parallel", "liger_vp"} <= benched("vp_ce")
    assert {"ours", "single_gpu", "loss_parallel", "liger_tp"} <= benched("vp_flce")
    assert {"ours", "single_gpu", "verl_fused_tp", "liger_tp"} <= benched("vp_flp")
    assert {"liger_tp", "verl_fused_tp"} <= {p.name for p in reg.providers_for("vp_flp")}  # verified too
    spec = reg.kernels["vp_flp"].bench
    assert spec.distributed and all(p.case.h % 128 == 0 for p in spec.sweeps["heads"]("bf16", None, False))
