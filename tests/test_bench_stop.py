"""A bench told to stop, stops (docs/usage.md, "Exit codes and run manifests"): SIGTERM to a real
`ligerbench bench` process ends it within 10 s with every row it wrote, a summary and a manifest
that says interrupted, by which signal, and how many steps (one provider at one sweep point)
completed. A provider that keeps the signal's exception and never returns (seen on an H100: a bench
still running 10 s after `timeout`'s SIGTERM) is ended by the watchdog with the same manifest
(ligerbench/signals.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

STOP_WITHIN_S = 10.0  # README.md's promise: `timeout -k 10`, CI runners
# a provider that takes the signal's exception and carries on forever: a library's `except
# BaseException`, a __del__; it tells the test when it started through a file beside it
KEEPS_THE_SIGNAL = """
import time
from pathlib import Path

def ce(logits, target, **opts):
    Path(__file__).with_suffix(".started").touch()
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
"""


def _bench(out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ligerbench.cli", "bench", "--smoke", "--out", str(out), *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})  # fmt: skip


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        if ready():
            return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{what} never happened: {proc.communicate()[1][-2000:]}")


def _rows(out: Path) -> pd.DataFrame:
    found = list(out.glob("*/records.csv"))
    return pd.read_csv(found[0], keep_default_na=False) if found else pd.DataFrame()


def _terminate(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> tuple[float, str]:
    """The signal as `timeout` sends it (the process, then again a moment later); the seconds it took to end."""
    sent = time.monotonic()
    proc.send_signal(signum)
    time.sleep(0.02)
    if proc.poll() is None:
        proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still running 60 s after SIGTERM") from None
    return time.monotonic() - sent, err


def _steps(rows: pd.DataFrame) -> set[tuple[str, str]]:
    """The steps a run's rows show: (case, provider) of the engine's own rows (derived figures and
    ceilings are rows of their own)."""
    if "suite" not in rows.columns:  # no records.csv yet
        return set()
    measured = rows[(rows["suite"] == "bench") & (rows["quantity"].isin(["full", "clone"]))]
    return set(zip(measured["case"], measured["provider"], strict=True))


@pytest.mark.interpreter
def test_sigterm_stops_a_bench_at_the_next_step_and_keeps_what_it_measured(tmp_path):
    proc = _bench(tmp_path, "--kernel", "flce", "--sweep", "heads")
    _wait_for(proc, lambda: len(_steps(_rows(tmp_path))) >= 3, "three bench steps")
    before = _rows(tmp_path)
    took, err = _terminate(proc)
    assert proc.returncode == 143, err[-2000:]  # 128 + SIGTERM (docs/usage.md, exit codes)
    assert took < STOP_WITHIN_S, f"took {took:.1f} s to stop"
    (run,) = {p.parent for p in tmp_path.glob("*/records.csv")}
    env, after = json.loads((run / "env.json").read_text()), _rows(tmp_path)
    m = env["run"]
    # every row written before the signal is still there, and the manifest counts what is there
    assert before.astype(str).merge(after.astype(str)).shape[0] == len(before)
    assert m["rows"] == len(after) and m["interrupted"] and m["finished"] and env["stopped_by"] == "SIGTERM"
    # completed counts steps, a provider at a point: those whose rows are all written
    assert m["unit"] == "steps" and len(_steps(before)) <= m["completed"] < m["planned"]
    assert m["completed"] == len(_steps(after)), (m, sorted(_steps(after)))
    summary = (run / "summary.md").read_text()
    assert f"**Interrupted** (SIGTERM) after {m['completed']} of {m['planned']} steps" in summary
    assert "terminated (SIGTERM)" in err and "forced_stop" not in env


@pytest.mark.interpreter
def test_a_provider_that_keeps_the_signal_is_ended_by_the_watchdog(tmp_path):
    """Ctrl-C here (SIGTERM above): the same stop, exit 130."""
    provider = tmp_path / "keeps_the_signal.py"
    provider.write_text(textwrap.dedent(KEEPS_THE_SIGNAL))
    out = tmp_path / "runs"
    proc = _bench(out, "--kernel", "ce", "--sweep", "vocab", "--provider", "ours", "--provider", f"{provider}:ce",
                  env={"LIGERBENCH_STOP_GRACE_S": "2"})  # fmt: skip
    _wait_for(proc, provider.with_suffix(".started").exists, "the stuck provider's first call")
    took, err = _terminate(proc, signal.SIGINT)
    assert proc.returncode == 130, err[-2000:]
    assert took < STOP_WITHIN_S, f"took {took:.1f} s to stop"
    (run,) = {p.parent for p in out.glob("*/records.csv")}
    env, rows = json.loads((run / "env.json").read_text()), _rows(out)
    m = env["run"]
    assert m["interrupted"] and m["finished"] and env["stopped_by"] == "SIGINT"
    assert "did not stop within 2 s of SIGINT" in env["forced_stop"] and "interrupted after 1 of" in err
    assert m["rows"] == len(rows) and m["completed"] == len(_steps(rows)) == 1  # ours at the first point
