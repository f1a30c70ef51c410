"""A verify run, as ligerbench/lifecycle.py drives it: the plan's cases in this process (the
engine, engine.py) or on N ranks started through torch.distributed.run (--nproc N: rank 0 writes
the records, ligerbench/distributed/launch.py); then summary.md, the JSON or the tables.

    code = lifecycle.execute(VerifyJob(plan, registry, dev, seed=0, preset="quick", named=["ours"]),
                             quiet=False, device=dev, triton_mode=mode, seed=0, out=out, filters={})

Exit 1 also when a provider the user named was compared on no case (ligerbench/named.py).
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from ligerbench import named, runs
from ligerbench.cases import Case
from ligerbench.distributed import launch
from ligerbench.exits import ExitCode
from ligerbench.lifecycle import Job, Life
from ligerbench.records import load_records
from ligerbench.registry import Registry
from ligerbench.verify import diagnose, summary, terminal
from ligerbench.verify.engine import Plan, run_plan


@dataclass
class VerifyJob(Job):
    plan: Plan
    registry: Registry
    device: torch.device
    seed: int
    preset: str
    named: list[str] = field(default_factory=list)  # providers asked for by name: each needs evidence
    maxfail: int | None = None  # -x / --maxfail: stop after this many failing cases
    nproc: int = 0  # 0: in this process
    timeout_s: float = 1800.0  # --nproc: the ranks' wall clock
    unchecked: dict = field(default_factory=dict, init=False)  # named provider -> why it was compared on no case
    command = "verify"

    @property
    def label(self) -> str:
        return self.plan.kernel

    @property
    def planned(self) -> int:
        return len(self.plan.cases)

    def work(self, life: Life) -> None:
        random.seed(self.seed)
        run = life.run
        failing = runs.FailingCases(run.writer, self.maxfail)
        with life.progress(f"verify {self.plan.kernel}", total=self.planned) as advance:

            def on_case(c: Case) -> None:
                life.done()
                advance(c.id)
                failing.check()

            if not self.nproc:
                run_plan(self.plan, self.registry, run_id=run.id, seed=self.seed, device=self.device,
                         writer=run.writer, on_case=on_case)  # fmt: skip
                return
            run.writer.close()  # the ranks' rank 0 writes the records
            facts = launch.run_plan_on_ranks(
                self.plan, nproc=self.nproc, run_id=run.id, run_path=run.path, seed=self.seed, preset=self.preset,
                device_type=self.device.type, timeout_s=self.timeout_s,
                echo=None if life.quiet else launch.echo_with(advance),
            )  # fmt: skip
            life.completed = facts.pop("completed_cases")
            life.facts.update(facts)

    def rows(self, life: Life) -> pd.DataFrame:
        life.run.writer.close()
        df = load_records(life.run.path / "records.csv") if self.nproc else life.run.writer.frame()
        self.unchecked = {} if life.interrupted else named.missing_evidence(df, self.named)
        life.facts["unchecked_providers"] = self.unchecked
        if self.nproc:
            life.facts.setdefault("nproc", self.nproc)
        return df

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        text = summary.summary_markdown(df, life.run.env, title=f"ligerbench verify {self.plan.kernel} ({life.run.id})",
                                        families=self._families())  # fmt: skip
        (life.run.path / "summary.md").write_text(named.mark_summary(text, self.unchecked))

    def exit_code(self, life: Life, df: pd.DataFrame) -> ExitCode:
        return ExitCode(max(summary.exit_code(df, life.run.env), 1 if self.unchecked else 0))

    def json_extra(self, life: Life, df: pd.DataFrame) -> dict:
        bad = summary.problems(df)
        failures = bad[["suite", "provider", "case", "quantity", "value", "limit", "verdict", "message"]]
        return {
            "problems": runs.problems(life.run.env, df),
            "failures": failures.to_dict("records"),
            "failing_cases": int(bad["case"].nunique()),
            "shared_by_failures": diagnose.shared_values(df, self._axes()),
            "suspect_checks": diagnose.suspects(df, self._families()).to_dict("records"),
            "interpreter_hints": self._hints(life, df),
            "unchecked_providers": self.unchecked,
        }

    def _families(self) -> dict[str, str]:
        """provider -> its family (Provider.lineage), for the consensus check."""
        return {p.name: p.lineage for p in self.plan.providers}

    def _axes(self) -> list[str]:
        return [a.name for a in self.registry.kernels[self.plan.kernel].axes]

    def _hints(self, life: Life, df: pd.DataFrame) -> list[str]:
        mode = life.run.env.get("triton_mode", "")
        if mode != "interpreter" or not summary.problems(df).shape[0]:
            return []
        from ligerbench.kernels.interpreter_defects import found

        return diagnose.interpreter_hints(df, mode, found())

    def show(self, life: Life, df: pd.DataFrame) -> None:
        signature = self.registry.kernels[self.plan.kernel].signature
        hints = [*diagnose.suspect_lines(df, self._families()), *diagnose.repeated_errors(df, signature),
                 *self._hints(life, df)]  # fmt: skip
        print_tables(df, life.run.path, self.plan.kernel, self._axes(), hints, rerun=self.rerun)

    def rerun(self, provider: str, case: str) -> str:
        return rerun_command(
            self.plan.kernel,
            provider,
            case,
            preset=self.preset,
            seed=self.seed,
            device=self.device.type,
            nproc=self.nproc,
        )

    def tell(self, life: Life, df: pd.DataFrame, code: ExitCode) -> None:
        named.print_missing(self.unchecked)


def collect(plan: Plan, kernel: str, preset: str, selection: dict, as_json: bool) -> None:
    """--collect-only: what a run with these options would take, without running it."""
    ids = [c.id for c in plan.cases]
    facts = {
        "command": "verify",
        "kernel": kernel,
        "preset": preset,
        "filters": selection,
        "cases": len(ids),
        "providers": [p.name for p in plan.providers],
        "suites": [s.name for s in plan.suites],
        "case_ids": ids,
    }
    if as_json:
        runs.print_json(facts)
        return
    for i in ids:
        print(i)
    print(
        f"{len(ids)} cases x {len(plan.providers)} providers ({', '.join(facts['providers'])}); "
        f"suites {', '.join(facts['suites'])}; preset {preset}"
    )


def rerun_command(kernel: str, provider: str, case: str, *, preset: str, seed: int, device: str, nproc: int) -> str:
    """The command that runs one failing case again: the same preset, seed, device and ranks."""
    line = f"ligerbench verify --kernel {kernel} --provider {provider} --case {case} --preset {preset}"
    line += f" --device {device}" + (f" --seed {seed}" if seed else "") + (f" --nproc {nproc}" if nproc else "")
    return line


def print_tables(
    df: pd.DataFrame, path: Path, kernel: str, axes: list[str] = (), hints: list[str] = (), rerun=None
) -> None:
    out = Console()
    terminal.show_counts(out, df)
    bad = summary.problems(df)
    if len(bad):
        # plain lines, not a table: case ids are long and must survive a narrow terminal
        cases = bad["case"].nunique()
        out.print(
            f"[bold red]{len(bad)} failing checks in {cases} case{'s' if cases != 1 else ''}[/] "
            "(suite provider quantity, the case, what was wrong):"
        )
        # a provider that raised one and the same error everywhere is said once (diagnose.repeated_errors)
        errors = bad[bad["verdict"] == "error"]
        once = {p for p, m in errors.groupby("provider")["message"] if m.nunique() == 1}
        listed = bad[~((bad["verdict"] == "error") & bad["provider"].isin(once))]
        for _, r in listed.head(50).iterrows():
            detail = r["message"] or f"{r['value']:.3g} > {r['limit']:.3g}"
            # three parts, each within the width: the case id whole (as --case takes it), the detail
            # wrapped at words under it
            out.print(f"  {r['verdict'].upper()} {r['suite']} {r['provider']} {r['quantity']}", markup=False)
            out.print(f"    {r['case']}", soft_wrap=True, markup=False)
            wrapped = textwrap.fill(detail, out.width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                    break_long_words=False, break_on_hyphens=False)  # fmt: skip
            out.print(wrapped, soft_wrap=True, markup=False)
        if len(listed) > 50:
            out.print(f"  ... and {len(listed) - 50} more in {path / 'records.csv'}")
        for line in [*diagnose.shared_values(df, list(axes)), *hints]:
            out.print(line, soft_wrap=True, markup=False)
        first = bad.iloc[0]
        again = (
            rerun(first["provider"], first["case"])
            if rerun
            else (f"ligerbench verify --kernel {kernel} --provider {first['provider']} --case {first['case']}")
        )
        out.print(f"re-run one: {again}", soft_wrap=True, markup=False)
