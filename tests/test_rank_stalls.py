"""A --nproc run never hangs: a rank that stalls, raises, dies or never starts ends the whole run
within a minute, and the error names the rank and the unit it was on (verify case, bench step,
converge dtype), with the rows already finished kept. The markers each rank keeps
(ligerbench/distributed/progress.py) are checked here directly; one run on 4 real gloo ranks
plants a stall after its first case."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from typer.testing import CliRunner

from ligerbench.bench.engine import Plan, run_plan
from ligerbench.bench.ranks import Group
from ligerbench.bench.timing import SMOKE_BUDGET
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.commands import ranks
from ligerbench.distributed import launch, progress
from ligerbench.records import Record, RecordWriter, load_records

runner = CliRunner()
LABELS = {"cases": ("vp_ce/a", "vp_ce/b", "vp_ce/c"), "steps": ("8 ours", "16 ours"), "dtypes": ("fp32", "bf16")}
NAMED = {
    "cases": "case vp_ce/b (its 2nd of 3)",
    "steps": "step 16 ours (its 2nd of 2)",
    "dtypes": "dtype bf16 (its 2nd of 2)",
}
TIMED_OUT = "[gloo] Timed out waiting 40000ms for recv operation to complete"


def _ranks_at(run_path, unit: str, world: int = 4, at: int = 1) -> list[progress.RankProgress]:
    """`world` ranks' markers, each started on unit `at`."""
    markers = []
    for rank in range(world):
        p = progress.RankProgress(run_path, rank, unit=unit, labels=LABELS[unit])
        p.joined()
        p.start(at)
        markers.append(p)
    return markers


# ----------------------------------------------------------------------------- naming the rank


# every kind of unit a --nproc run counts: the error names it in the run's own terms
@pytest.mark.parametrize("unit", ["cases", "steps", "dtypes"])
def test_a_rank_still_at_work_when_the_others_gave_up_on_it_stalled(tmp_path, unit):
    markers = _ranks_at(tmp_path, unit)
    for rank in (0, 2, 3):
        markers[rank].failed(RuntimeError(TIMED_OUT))
    lines = progress.diagnose(tmp_path, 4, exit_codes={"1": "-15"}, ended=time.time() + 45)
    assert lines[0].startswith(f"rank 1 stalled in {NAMED[unit]}: no progress for 45 s"), lines
    assert lines[1] == f"rank(s) 0, 2, 3 gave up waiting for it in a collective: RuntimeError: {TIMED_OUT}"
    assert len(lines) == 2


def test_on_nccl_the_ranks_the_watchdog_ended_waited_for_the_stalled_one(tmp_path):
    # NCCL's watchdog aborts a rank past the collective timeout (exit -6, no Python exception):
    # its line in launch.log, not its marker, says it was waiting
    _ranks_at(tmp_path, "steps")
    watchdog = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 40001 ms"
    log = tmp_path / "launch.log"
    log.write_text("".join(f"[rank{r}]:[E1127 ProcessGroupNCCL.cpp:632] [Rank {r}] {watchdog}\n" for r in (0, 2, 3)))
    launched = launch.Launched(returncode=1, timed_out=False, seconds=50.0, log=log)
    assert set(launched.watchdog_timeouts()) == {"0", "2", "3"}
    codes = {"0": "-6", "1": "-15", "2": "-6", "3": "-6"}
    lines = progress.diagnose(tmp_path, 4, exit_codes=codes, ended=time.time(), timed_out=launched.watchdog_timeouts())
    assert lines[0].startswith(f"rank 1 stalled in {NAMED['steps']}"), lines
    assert lines[1] == f"rank(s) 0, 2, 3 gave up waiting for it in a collective: {watchdog}"


def test_a_rank_that_raised_is_named_with_its_error_and_not_the_ones_stopped_after_it(tmp_path):
    markers = _ranks_at(tmp_path, "cases")
    markers[2].failed(ValueError("target holds 600, outside [0, 501)"))
    lines = progress.diagnose(tmp_path, 4, exit_codes={"2": "1", "0": "-15"}, ended=time.time())
    assert lines[0] == f"rank 2 raised in {NAMED['cases']}: ValueError: target holds 600, outside [0, 501)"
    assert [line.split(" was in ")[0] for line in lines[1:]] == ["rank 0", "rank 1", "rank 3"]


def test_a_rank_that_died_or_never_started_is_named(tmp_path):
    _ranks_at(tmp_path, "steps", world=3)  # rank 3 of 4 wrote no marker
    lines = progress.diagnose(tmp_path, 4, exit_codes={"1": "3"}, ended=time.time())
    assert f"rank 1 died (exit code 3) in {NAMED['steps']}" in lines
    assert "rank 3 never started (it wrote no marker)" in lines


def test_killed_at_the_wall_clock_the_rank_behind_the_others_stalled(tmp_path):
    markers = _ranks_at(tmp_path, "cases")
    markers[3].start(2)  # ranks 0-2 are still in case b, rank 3 went on to c and waits there
    lines = progress.diagnose(tmp_path, 4, exit_codes={}, ended=time.time())
    assert [line.split(" in ")[0] for line in lines] == [
        "rank 0 stalled",
        "rank 1 stalled",
        "rank 2 stalled",
        "rank 3 was",
    ]
    markers[3].finished()
    for m in markers[:3]:
        m.finished()
    assert progress.diagnose(tmp_path, 4, exit_codes={}, ended=time.time()) == []
    progress.clear(tmp_path)  # a later launch into the same folder does not read these markers
    assert len(progress.diagnose(tmp_path, 4, exit_codes={}, ended=time.time())) == 4


def test_a_planted_fault_fires_on_its_rank_at_its_unit_only(monkeypatch):
    monkeypatch.setenv(launch.FAULT_ENV, "raise:1@3")
    for rank, unit in ((1, 0), (1, None), (1, 2), (0, 3), (1, 4)):
        ranks._fault(rank, unit)  # not this rank's fault, or not yet
    with pytest.raises(RuntimeError, match="rank 1 raises"):
        ranks._fault(1, 3)
    monkeypatch.setenv(launch.FAULT_ENV, "raise:1")  # without @K: right after joining
    ranks._fault(1, 0)
    with pytest.raises(RuntimeError):
        ranks._fault(1)
    monkeypatch.setenv(launch.FAULT_ENV, "raise:1@0")  # before joining
    ranks._fault(1)
    with pytest.raises(RuntimeError):
        ranks._fault(1, 0)


def test_the_ranks_other_than_0_write_their_rows_nowhere(tmp_path, monkeypatch):
    # a writer onto os.devnull replaced /dev/null itself (its atomic rewrite), and its ranks
    # raced on /dev/null.tmp
    replaced = []
    monkeypatch.setattr(os, "replace", lambda src, dst: replaced.append(str(dst)))
    row = Record(run_id="r", suite="s", kernel="k", provider="p", case="c", quantity="q", metric="m", value=1.0,
                 unit="", limit=2.0, verdict="pass", message="")  # fmt: skip
    for rank in (1, 3):
        writer = progress.rank_writer(tmp_path, rank)
        writer.write(row)
        writer.close()
    assert replaced == [] and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    writer = progress.rank_writer(tmp_path, 0)
    writer.write(row)
    writer.close()
    assert list(load_records(tmp_path / "records.csv")["case"]) == ["c"]


class _RankOneOfTwo(Group):
    """Rank 1 of 2 without a process group: max() takes the larger of its values and rank 0's."""

    def __init__(self, rank0: list[float]):
        self.device, self.rank, self.world, self.rank0 = torch.device("cpu"), 1, 2, rank0

    def max(self, values: list[float]) -> list[float]:
        return [max(v, o) for v, o in zip(values, self.rank0, strict=True)]


def test_a_provider_that_cannot_load_on_one_rank_is_skipped_on_every_rank(tmp_path):
    # rank 0 cannot load liger_vp (its flag 1.0); this rank can, and skips it all the same
    reasons = _RankOneOfTwo(rank0=[0.0, 1.0]).agree_unavailable({"ours": None, "liger_vp": None})
    assert reasons == {"ours": None, "liger_vp": "liger_vp cannot load on another rank (its reason is in launch.log)"}
    # the bench engine asks the ranks: nothing is timed, one skip row per point
    reg = default_registry()
    spec = reg.kernels["ce"].bench
    points = tuple(spec.sweeps["vocab"]("bf16", None, True))
    plan = Plan(spec=spec, providers=(reg.provider("ce", "ours"),), points=points, mode="full",
                device=torch.device("cpu"), seed=0, budget=SMOKE_BUDGET, smoke=True,
                ranks=_RankOneOfTwo([1.0]))  # fmt: skip
    writer = RecordWriter(tmp_path / "records.csv")
    run_plan(plan, run_id="r", writer=writer)
    writer.close()
    rows = writer.frame()
    assert len(rows) == len(points) and (rows["verdict"] == "skip").all()
    assert rows["message"].str.contains("cannot load on another rank").all()


def test_a_collective_waits_at_most_40_s_whatever_the_wall_clock():
    # the default wall clock (1800 s) once gave 300 s: a stalled rank held the run that long
    assert launch.collective_timeout(1800.0) == launch.STALL_BOUND_S == 40.0
    assert launch.collective_timeout(60.0) == 15.0 and launch.collective_timeout(6.0) == 10.0


# ----------------------------------------------------------------------------- 4 real ranks

# four ranks split the vocabulary (w4) or sit on a 2 x 2 mesh: 5 cases, fp32, one provider
FOUR_RANKS = ["--kernel", "vp_ce", "--nproc", "4", "--provider", "ours", "--where", "dtype=fp32",
              "--where", "option=plain", "--where", "reduction=mean"]  # fmt: skip


@pytest.mark.slow(seconds=35)
@pytest.mark.interpreter
def test_a_rank_stalled_after_a_case_ends_a_4_rank_run_naming_it_with_the_case_kept(tmp_path, monkeypatch):
    # a 10 s bound instead of 40 s: the same path, a shorter wait for CI
    monkeypatch.setattr(launch, "STALL_BOUND_S", 10.0)
    args = ["verify", *FOUR_RANKS, "--device", "cpu", "--out", str(tmp_path), "--json"]
    result = runner.invoke(app, args, env={launch.FAULT_ENV: "hang:1@2"})
    ended = time.time()
    assert result.exit_code == 1, result.output
    run = next(tmp_path.iterdir())
    stalled = json.loads((run / "ranks" / "rank1.json").read_text())
    assert stalled["state"] == "working" and stalled["index"] == 1
    assert ended - stalled["since"] < 60  # from the stall to the command's end
    records = load_records(run / "records.csv")
    launcher = records[records["provider"] == "launcher"]
    message = launcher["message"].iloc[0]
    assert f"rank 1 stalled in case {stalled['label']} (its 2nd of 5)" in message, message
    assert "rank(s) 0, 2, 3 gave up waiting for it in a collective" in message and "only 1 of 5 cases" in message
    assert "in _fault" in message  # the stalled rank's stack, written when it was stopped
    kept = records[records["provider"] == "ours"]  # the first case's rows, written before the stall
    assert kept["case"].nunique() == 1 and stalled["label"] not in set(kept["case"])
    assert len(kept) >= 3 and (kept["verdict"] == "pass").all()


def test_the_launcher_ends_the_ranks_soon_after_nccls_watchdog_fired(tmp_path, monkeypatch):
    """NCCL's watchdog reports a collective past its bound but (torch 2.11, four H100s) its rank
    lived on behind a host sync: the launcher ends the run WATCHDOG_GRACE_S after the line."""
    import subprocess
    import sys
    import threading

    script = f"print({launch.WATCHDOG_LINE!r}, flush=True); import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    fired = threading.Event()

    def pump():
        for line in proc.stdout:
            if launch.WATCHDOG_LINE in line:
                fired.set()

    threading.Thread(target=pump, daemon=True).start()
    t0 = time.monotonic()
    try:
        assert launch._wait(proc, timeout_s=50, watchdog_fired=fired) is False  # not the wall clock
        waited = time.monotonic() - t0
        assert proc.poll() is None and launch.WATCHDOG_GRACE_S <= waited < launch.WATCHDOG_GRACE_S + 5, waited
    finally:
        proc.kill()
        proc.wait()
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert launch._wait(quiet, timeout_s=2, watchdog_fired=threading.Event()) is True  # the wall clock
    finally:
        quiet.kill()
        quiet.wait()
