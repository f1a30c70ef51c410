"""A converge run, as ligerbench/lifecycle.py drives it: each dtype's case trained in this
process (`run_case`, handed in by the command: the checks live in suites/converge/__init__.py, above this
machinery) or on N ranks under a parallel plan (--nproc N: rank 0 writes the records and sends
the loss curves back), then curves.csv, loss_<dtype>.png, summary.md and the table.

    job = ConvergeJob(run_case, "llama-mini", "ce", PRESETS["tiny"], ["fp32"], seed=0, device_type="cpu")
    code = lifecycle.execute(job, quiet=False, device=dev, triton_mode=mode, seed=0, out=out, filters={})
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console

from ligerbench import runs, skipped, tables
from ligerbench.converge.checker import ConvergeCase
from ligerbench.converge.models import Preset
from ligerbench.converge.plot import loss_curves_png
from ligerbench.distributed import jobs, launch
from ligerbench.exits import ExitCode
from ligerbench.lifecycle import Job, Life
from ligerbench.records import load_records
from ligerbench.verify import summary

CURVE_COLUMNS = ["dtype", "step", "loss_reference", "loss_patched", "loss_float64"]


@dataclass
class ConvergeJob(Job):
    run_case: Callable  # suites/converge/__init__.py's run_case(case, run_id=, sink=, on_step=)
    model: str
    patch: str
    preset: Preset  # the sizes, steps and batch as chosen
    dtypes: list[str]
    seed: int
    device_type: str
    packed: bool = False
    preset_name: str = ""  # the models' preset name the ranks look up (tiny, gpu)
    nproc: int = 0
    parallel: str | None = None  # --nproc: ddp, fsdp2 or tp
    accum: int = 1
    mutant: str | None = None
    rl: str = ""  # --rl KIND: the ranks train the policy loss (suites/converge/rl.py)
    distill: str = ""  # --distill DIVERGENCE (suites/converge/distill.py; in this process only)
    timeout_s: float = 1800.0
    curves: list = field(default_factory=list, init=False)  # (dtype, step, ref, ours, truth)
    verdict_line: str = field(default="", init=False)  # summary.md's last line, for the terminal too
    table: tuple = field(default_factory=lambda: ([], []), init=False)  # the terminal table's rows, styles
    command = "converge"
    unit = "dtypes"

    @property
    def label(self) -> str:
        return f"{self.model}-{self.patch}" + (f"-{self.parallel}x{self.nproc}" if self.nproc else "")

    @property
    def planned(self) -> int:
        return len(self.dtypes)

    def work(self, life: Life) -> None:
        if self.nproc:
            self._on_ranks(life)
            return
        run = life.run
        for dt in self.dtypes:
            case = ConvergeCase(self.model, self.preset, dt, self.patch, seed=self.seed, packed=self.packed,
                                device=self.device_type, distill=self.distill)  # fmt: skip
            # ref, ours and (first dtype only: it is shared) the float64 truth run
            total = (3 if dt == self.dtypes[0] else 2) * self.preset.steps
            with life.progress(f"converge {case.id}", total=total) as advance:
                result = self.run_case(
                    case,
                    run_id=run.id,
                    sink=run.writer.write,
                    on_step=lambda who, i, v, advance=advance: advance(f"{who} step {i}: {v:.4f}"),
                )
            life.done()
            if result.ref and result.ours and result.truth:
                self._curves(run.path, dt, case.id, result.ref.losses, result.ours.losses, result.truth.losses)

    def _on_ranks(self, life: Life) -> None:
        run = life.run
        run.writer.close()  # the ranks' rank 0 writes the records (ligerbench/distributed/launch.py)
        job = jobs.ConvergeRankJob(
            model=self.model, patch=self.patch, preset=self.preset_name, steps=self.preset.steps,
            batch=self.preset.batch, dtypes=tuple(self.dtypes), seed=self.seed, device_type=self.device_type,
            run_id=run.id, parallel=self.parallel, accum=self.accum, mutant=self.mutant or "", run_path=str(run.path),
            rl=self.rl,
        )  # fmt: skip
        title = f"converge {self.model} --parallel {self.parallel} x{self.nproc}"
        with life.progress(title, total=len(self.dtypes)) as advance:
            facts = launch.run_job(
                job, nproc=self.nproc, planned=len(self.dtypes), unit="cases",
                timeout_s=self.timeout_s, echo=None if life.quiet else launch.echo_with(advance),
            )  # fmt: skip
        life.completed = facts.pop("completed_cases")
        for dt, c in facts.pop("done").get("curves", {}).items():
            self._curves(run.path, dt, f"{title} {dt}", c["ref"], c["ours"], c["truth"])
        life.facts.update(facts)

    def _curves(self, folder: Path, dtype: str, title: str, ref, ours, truth) -> None:
        self.curves += [(dtype, i, *row) for i, row in enumerate(zip(ref, ours, truth, strict=True))]
        loss_curves_png(folder / f"loss_{dtype}.png", ref, ours, title=title, vocab=self.preset.vocab, truth=truth)

    def rows(self, life: Life) -> pd.DataFrame:
        life.run.writer.close()
        return load_records(life.run.path / "records.csv") if self.nproc else life.run.writer.frame()

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        with open(life.run.path / "curves.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(CURVE_COLUMNS)
            w.writerows(self.curves)
        title = f"ligerbench converge {self.model} --patch {self.patch} ({life.run.id})"
        self.verdict_line, self.table = report(df, life.run.path, life.run.env, title=title)

    def exit_code(self, life: Life, df: pd.DataFrame) -> ExitCode:
        return ExitCode(summary.exit_code(df, life.run.env))

    def json_extra(self, life: Life, df: pd.DataFrame) -> dict:
        failures = summary.problems(df)[["case", "quantity", "value", "limit", "verdict"]].to_dict("records")
        return {"problems": runs.problems(life.run.env, df), "failures": failures}

    def show(self, life: Life, df: pd.DataFrame) -> None:
        out = Console()
        rows, styles = self.table
        for case in dict.fromkeys(r[0] for r in rows):
            mine = [(r[1:5], s) for r, s in zip(rows, styles, strict=True) if r[0] == case]
            tables.show(out, case, REPORT_COLUMNS[1:5], [m for m, _ in mine], right=("value", "limit"),
                        row_styles=[s for _, s in mine])  # fmt: skip
        for line in [*skipped.lines(df), self.verdict_line]:
            out.print(skipped.wrapped(line, out.width), soft_wrap=True, markup=False)


REPORT_COLUMNS = ("case", "quantity", "value", "limit", "verdict", "message")


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def report(df: pd.DataFrame, path: Path, env: dict, *, title: str) -> tuple[str, tuple[list, list]]:
    """summary.md (every row, message included); returns its verdict line and the terminal
    table's rows and styles. The case is the table's title when the run has one (the rows' case
    ids are long and alike), messages stay in summary.md, and every cell is plain text:
    `logits_to_keep[train,k=0]` shows as written."""
    cols = REPORT_COLUMNS
    lines = [f"# {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows, styles = [], []
    for _, r in df.iterrows():
        verdict = r["verdict"]  # the Checker records a reported-only row as `info` itself
        cells = [r["case"], r["quantity"], _fmt(r["value"]), _fmt(r["limit"]), verdict, str(r["message"])]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        rows.append(cells)
        styles.append({"fail": "red", "error": "red"}.get(verdict))
    bad = summary.problems(df)
    verdict = f"{len(bad)} comparison(s) out of tolerance or errored" if len(bad) else "all comparisons in tolerance"
    why = runs.problems(env, df)
    if why and not len(bad):
        verdict = "NOT PASSED: " + "; ".join(why)
    lines += ["", verdict, ""]
    (path / "summary.md").write_text("\n".join(lines))
    return verdict, (rows, styles)
