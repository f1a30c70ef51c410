"""A selftest run, as ligerbench/lifecycle.py drives it: every chosen mutant through its suites
(engine.py), then the kill matrix (killmatrix.py) as kill_matrix.csv and kill_matrix.md, and on
the terminal. Exit 1 when a mutant survives every suite.

    job = SelftestJob(registry, mutants, preset="quick", device=dev, seed=0, label="all")
    code = lifecycle.execute(job, quiet=False, device=dev, triton_mode=mode, seed=0, out=out, filters={})
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pandas as pd
import torch
from rich.console import Console
from rich.text import Text

from ligerbench import runs, tables, verdict
from ligerbench.exits import ExitCode
from ligerbench.lifecycle import Job, Life
from ligerbench.registry import Registry
from ligerbench.selftest import engine, killmatrix

STYLES = {"killed": "green", "survived": "red", "SURVIVED": "bold red"}


@dataclass
class SelftestJob(Job):
    registry: Registry
    mutants: list  # the chosen Mutants, in the order they run
    preset: str
    device: torch.device
    seed: int
    label: str  # the kernel, or "all"
    table: pd.DataFrame | None = field(default=None, init=False)  # the kill matrix
    command = "selftest"
    unit = "mutants"

    @property
    def planned(self) -> int:
        return len(self.mutants)

    def work(self, life: Life) -> None:
        random.seed(self.seed)
        names = {m.name for m in self.mutants}
        begun: list[str] = []  # mutants in the order they started; all but the last are done
        with life.progress("selftest", total=len(self.mutants)) as advance:

            def on_step(step: str) -> None:
                who = step.split(" ", 1)[0]
                if who in names and who not in begun:
                    if begun:
                        advance(f"{begun[-1]} done")
                    begun.append(who)

            run = life.run
            ctx = engine.Context(preset=self.preset, device=self.device, seed=self.seed, run_id=run.id,
                                 writer=run.writer, on_step=on_step)  # fmt: skip
            engine.run(self.registry, self.mutants, ctx)
            if begun:
                advance(f"{begun[-1]} done")

    def rows(self, life: Life) -> pd.DataFrame:
        life.run.writer.close()
        ran = {r.provider for r in life.run.writer.rows}
        started = sum(m.name in ran for m in self.mutants)  # the last one started may be partial when interrupted
        life.completed = started - 1 if life.interrupted and started else started
        return life.run.writer.frame()

    def _judged(self, life: Life, df: pd.DataFrame) -> list:
        """The mutants the kill matrix covers: those that ran when interrupted, else all."""
        ran = set(df["provider"]) if len(df) else set()
        return [m for m in self.mutants if m.name in ran] if life.interrupted else self.mutants

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        judged = self._judged(life, df)
        self.table = killmatrix.matrix(df, judged)
        self.table.to_csv(life.run.path / "kill_matrix.csv", index=False)
        title = f"ligerbench selftest --preset {self.preset} ({life.run.id})"
        (life.run.path / "kill_matrix.md").write_text(killmatrix.markdown(df, judged, life.run.env, title=title))

    def exit_code(self, life: Life, df: pd.DataFrame) -> ExitCode:
        bad = killmatrix.survivors(self.table) or runs.problems(life.run.env, df)
        return ExitCode.FAILED if bad else ExitCode.OK

    def counts(self, life: Life, df: pd.DataFrame) -> dict:
        left = killmatrix.survivors(self.table)
        counts = {"mutants": len(self.mutants), "killed": len(self.table) - len(left), "survived": len(left)}
        return counts | runs.verdict_counts(df)

    def json_extra(self, life: Life, df: pd.DataFrame) -> dict:
        return {"survivors": killmatrix.survivors(self.table), "problems": runs.problems(life.run.env, df)}

    def tally(self, life: Life, df: pd.DataFrame) -> verdict.Tally:
        """Mutants run, the checks made on them and their controls, the mutants that survived and
        the checks the control itself fails (a mutant's failures are its kills, not failures)."""
        base = verdict.of_rows(df, life.completed, self.unit)
        control = killmatrix.control_problems(df, self._judged(life, df)) if len(df) else df
        return verdict.Tally(base.units, base.unit, base.checks, len(killmatrix.survivors(self.table)),
                             len(control), failed_word="survived", errors_word="control failures")  # fmt: skip

    def show(self, life: Life, df: pd.DataFrame) -> None:
        bad_control = killmatrix.control_problems(df, self.mutants)
        print_matrix(self.table, bad_control, life.run.env["duration_s"])


def collect(chosen: list, preset: str, selection: dict, as_json: bool) -> None:
    """--collect-only: the mutants a run would take."""
    facts = {"command": "selftest", "preset": preset, "filters": selection, "mutants": len(chosen)}
    facts["mutant_names"] = [m.name for m in chosen]
    if as_json:
        runs.print_json(facts)
        return
    for m in chosen:
        print(f"{m.name}  ({m.campaign}, {m.kernel or '-'}; suites {', '.join(m.suites)})")
    print(f"{len(chosen)} mutants; preset {preset}")


def print_matrix(table: pd.DataFrame, bad_control: pd.DataFrame, seconds: float) -> None:
    out = Console()
    shown = table.drop(columns="about")  # descriptions live in kill_matrix.md
    if tables.grid_width(list(shown.columns), shown.values.tolist()) <= out.width:
        tables.show(out, "kill matrix (mutant x suite)", list(shown.columns), shown.values.tolist(), styles=STYLES)
    else:  # narrow: one line per mutant, the suites named by what they did (n/a left out)
        out.print(Text("kill matrix (mutant: suites that killed it / it survived; n/a left out)", style="bold"))
        suites = [
            c for c in shown.columns if c not in ("mutant", "kernel", "verdict", killmatrix.DEFAULT_VERDICT, "needs")
        ]
        for _, row in shown.iterrows():
            line = Text(f"{row['mutant']} ({row['kernel'] or '-'}): ")
            killed = [x for x in suites if row[x] == "killed"]
            survived = [x for x in suites if row[x] == "survived"]
            if killed:
                line.append("killed by ", style="green")
                line.append(", ".join(killed))
            else:
                line.append(row["verdict"], style=STYLES.get(row["verdict"], ""))
            if survived:
                line.append("; survived " + ", ".join(survived))
            if row[killmatrix.DEFAULT_VERDICT] == "survived":
                line.append("; the strict verdict alone catches it")
            out.print(line)
    if len(bad_control):
        out.print(f"[yellow]the control fails {len(bad_control)} checks (no kill counted there):[/]")
        for _, r in bad_control.head(20).iterrows():
            out.print(f"  {r['verdict']} {r['suite']} {r['provider']} {r['quantity']} {r['case']}", markup=False)
    left = table.loc[table["verdict"] != "killed", "mutant"].tolist()
    if left:
        out.print(f"[bold red]{len(left)} mutant(s) survived every suite:[/] {', '.join(left)}")
    else:
        out.print(f"[green]every mutant killed[/] ({len(table)} mutants, {seconds:.0f} s)")
