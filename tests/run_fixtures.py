"""Doctored run folders for the gate and report tests: records.csv and env.json written row by row
with the Record fields, so every verdict and ratio is known by construction."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ligerbench.records import Record, RecordWriter
from ligerbench.suites.ce.axes import case as ce_case

H100 = "NVIDIA H100 80GB HBM3"
CASE = ce_case(n=8192, v=128256, dtype="bf16", reduction="mean")
CHECK = ce_case(n=16, v=1000, dtype="fp32", reduction="none", ignore_pattern="leading_run")
# times in ms per provider: 4.0 against 7.6 (Liger and bf16 eager in docs/performance.md), ratio 0.526
TIMES = {"ours": 4.0, "eager": 7.6, "torch_compile": 5.4}
MEMORY = {"ours": 2004.0, "eager": 8016.0, "torch_compile": 4008.0}


TARGET_MS = 3.0  # a design target on ours' time (bench_metrics.target_records writes such rows)


def manifest(kind="bench", kernel="ce", *, planned=1, completed=1, rows=0, **changes) -> dict:
    """The run block runs.Run.finish writes into env.json, for a finished, complete run."""
    run = {"kind": kind, "kernel": kernel, "filters": {}, "unit": "cases", "planned": planned}
    run |= {"completed": completed, "rows": rows, "interrupted": False, "stopped_early": False}
    return run | {"finished": True, "duration_s": 1.0} | changes


def write_env(folder: Path, *, device=H100, **run) -> None:
    """env.json with a manifest whose rows match records.csv (call after the records are written)."""
    rows = sum(1 for _ in open(folder / "records.csv")) - 1 if (folder / "records.csv").exists() else 0
    env = {"device_name": device, "git_commit": "abc", "command": run.get("kind", "bench")}
    (folder / "env.json").write_text(json.dumps(env | {"run": manifest(rows=rows) | run}))


def write_run(
    folder: Path,
    *,
    times=TIMES,
    memory=MEMORY,
    device=H100,
    check="pass",
    verdict="measured",
    target=False,
    run: dict | None = None,
) -> Path:
    folder.mkdir(parents=True)
    w = RecordWriter(folder / "records.csv")
    for quantity in ("loss", "grad_logits"):
        value = 1e-3 if check == "fail" and quantity == "grad_logits" else 1e-7
        w.write(
            Record.for_case(
                CHECK, run_id=folder.name, suite="gradients" if quantity != "loss" else "correctness",
                provider="ours", quantity=quantity, metric="rel_l2", value=value, unit="relative",
                limit=3e-7, verdict="fail" if value > 3e-7 else "pass",
            )
        )  # fmt: skip
    for metric, values, unit in (("time_ms", times, "ms"), ("extra_mib", memory, "MiB")):
        for provider, value in values.items():
            w.write(
                Record.for_case(
                    CASE, run_id=folder.name, suite="bench", provider=provider, quantity="full",
                    metric=metric, value=value, unit=unit, limit=math.nan, verdict=verdict,
                )
            )  # fmt: skip
    if target:  # ours' time against TARGET_MS: pass or fail as the time says
        w.write(
            Record.for_case(
                CASE, run_id=folder.name, suite="bench", provider="ours", quantity="full",
                metric="target_time_ms", value=times["ours"], unit="ms", limit=TARGET_MS,
                verdict="pass" if times["ours"] <= TARGET_MS else "fail", message="design target",
            )
        )  # fmt: skip
    w.close()
    write_env(folder, device=device, **(run or {}))
    return folder
