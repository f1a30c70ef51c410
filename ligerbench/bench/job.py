"""A bench run, as ligerbench/lifecycle.py drives it: the ceilings measured first (they go into
env.json), the plan's steps timed in this process (engine.py) or on N ranks (--nproc N, a
collective kernel: rank 0 writes the measured rows), then the derived figures and targets as
rows of their own, summary.md, the plots and (--baseline) a copy of the run folder. With several
rank counts (--nproc 1,2,4) the ranks are started once per count, each launch in a folder of its
own (ranks<N>/: its job.json, launch.log and markers), its rows then appended to the run's
records.csv; the report and scaling.png put the counts side by side (scaling.py).

    job = BenchJob(plan, kernel="ce", sweep="vocab", dtype="bf16", tokens=None, rep_ms=600.0)
    code = lifecycle.execute(job, quiet=False, device=dev, triton_mode=mode, seed=0, out=out, filters={})
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from ligerbench import named, runs, verdict
from ligerbench import records as rec
from ligerbench.bench import ceilings, metrics, pareto, plots, scaling
from ligerbench.bench import report as bench_report
from ligerbench.bench import terminal as bench_terminal
from ligerbench.bench.engine import NOT_A_MEASUREMENT, SMOKE_MESSAGE, Plan, run_plan
from ligerbench.distributed import jobs, launch
from ligerbench.exits import ExitCode
from ligerbench.lifecycle import Job, Life

console = runs.console


@dataclass
class BenchJob(Job):
    plan: Plan
    kernel: str
    sweep: str
    dtype: str
    tokens: int | None  # as given (the ranks rebuild the sweep from it)
    rep_ms: float
    named: list[str] = field(default_factory=list)  # providers asked for by name: each must be timed
    mutates_input: bool = False  # the ad-hoc providers' declaration, for the ranks
    nprocs: tuple[int, ...] = ()  # the rank counts, each a launch of its own; none: in this process
    timeout_s: float = 1800.0  # each launch's wall clock
    baseline: Path | None = None  # copy the run folder here when it completes
    ceiling: dict = field(default_factory=dict, init=False)
    ceiling_rows: list = field(default_factory=list, init=False)
    unmeasured: dict = field(default_factory=dict, init=False)
    command = "bench"
    unit = "steps"

    @property
    def label(self) -> str:
        return self.kernel

    @property
    def planned(self) -> int:
        return len(self.plan.points) * len(self.plan.providers)

    @property
    def verdict(self) -> str:
        return NOT_A_MEASUREMENT if self.plan.smoke else "measured"

    @property
    def title(self) -> str:
        return f"ligerbench bench {self.kernel} --sweep {self.sweep} --mode {self.plan.mode}"

    def before_start(self) -> dict:
        if self.plan.mode != "full":
            console.print(f"[yellow]note:[/] {bench_report.FAIRNESS_NOTE}")
        console.print("measuring the ceilings (copy bandwidth, bf16 matmul) ...")
        self.ceiling = ceilings.measure(self.plan.device)
        if self.nprocs and self.plan.device.type == "cuda":
            torch.cuda.empty_cache()  # the ranks (one per GPU) get GPU 0's memory back
        smoke = self.plan.smoke
        return {"kernel": self.kernel, "sweep": self.sweep, "mode": self.plan.mode, "dtype": self.dtype,
                "ceilings": self.ceiling, "measurement": not smoke, "note": SMOKE_MESSAGE if smoke else ""}  # fmt: skip

    def work(self, life: Life) -> None:
        run = life.run
        message = SMOKE_MESSAGE if self.plan.smoke else "measured at the start of the run"
        self.ceiling_rows = metrics.ceiling_records(
            self.ceiling, run_id=run.id, kernel=self.kernel, verdict=self.verdict, message=message
        )
        for r in [] if self.nprocs else self.ceiling_rows:  # with --nproc: written once the ranks' rows are back
            run.writer.write(r)
        with life.progress(f"bench {self.kernel} {self.sweep}", total=self.planned) as advance:

            def on_step(step: str) -> None:  # a provider's rows at a point are written
                advance(step)
                life.done()  # counted; a stop signal whose exception was kept is raised here

            if not self.nprocs:
                run_plan(self.plan, run_id=run.id, writer=run.writer, on_step=on_step)
                return
            run.writer.close()  # the ranks' rank 0 writes the measured rows
            launches, folders = {}, []
            try:
                for nproc in self.nprocs:
                    folder = run.path if len(self.nprocs) == 1 else run.path / f"ranks{nproc}"
                    folder.mkdir(exist_ok=True)
                    folders.append(folder)
                    launches[nproc] = self._launch(life, advance, nproc, folder)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the ranks are stopped; their steps counted from their rows
                self._gather(run.path, folders)
                life.completed = sum(launch.units_with_records(f / "records.csv", "steps") for f in folders)
                raise
            self._gather(run.path, folders)
            life.completed = sum(facts.pop("completed_steps") for facts in launches.values())
            if len(launches) == 1:
                life.facts.update(next(iter(launches.values())))
            else:
                backends = {facts["backend"] for facts in launches.values()} - {""}
                life.facts.update(nproc=list(launches), backend=", ".join(sorted(backends)),
                                  launches={str(n): facts for n, facts in launches.items()})  # fmt: skip

    def _launch(self, life: Life, advance, nproc: int, folder: Path) -> dict:
        """The plan's points at `nproc` ranks, run by them; rank 0 writes folder/records.csv."""
        plan, run = self.plan, life.run
        points = [p for p in plan.points if p.case.world == nproc]
        job = jobs.BenchRankJob(
            kernel=self.kernel, device_type=plan.device.type, seed=plan.seed, run_id=run.id, run_path=str(folder),
            sweep=self.sweep, mode=plan.mode, dtype=self.dtype, tokens=self.tokens, smoke=plan.smoke,
            rep_ms=self.rep_ms, mutates_input=self.mutates_input, providers=tuple(p.name for p in plan.providers),
            cases=tuple(p.case.id for p in points),
        )  # fmt: skip
        echo = None if life.quiet else launch.echo_with(advance)
        facts = launch.run_job(job, nproc=nproc, planned=len(points) * len(plan.providers), unit="steps",
                               timeout_s=self.timeout_s, echo=echo)  # fmt: skip
        facts.pop("done")
        return facts

    @staticmethod
    def _gather(path: Path, folders: list[Path]) -> None:
        """Each launch's rows (its launcher's errors included) appended to the run's records.csv."""
        writer = rec.RecordWriter(path / "records.csv", append=True)
        try:
            for folder in folders:
                rows = folder / "records.csv"
                if folder != path and rows.exists() and rows.stat().st_size:
                    for r in rec.from_frame(rec.load_records(rows)):
                        writer.write(r)
        finally:
            writer.close()

    def rows(self, life: Life) -> pd.DataFrame:
        run = life.run
        if self.nprocs:  # after the ranks' rows (launcher errors included): the ceilings, then what follows
            run.writer.close()
            run.writer = rec.RecordWriter(run.path / "records.csv", append=True)
            for r in self.ceiling_rows:
                run.writer.write(r)
        cases = {p.case.id: p.case for p in self.plan.points}
        measured = list(run.writer.rows)
        spec = self.plan.spec
        for r in metrics.derive(measured, spec, cases, self.ceiling) + metrics.target_records(measured, spec, cases):
            run.writer.write(r)
        run.writer.close()
        df = run.writer.frame()
        timed = df[df["metric"] == "time_ms"]
        self.unmeasured = {} if life.interrupted else named.missing_evidence(timed, self.named, (self.verdict,))
        return df

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        run, plan = life.run, self.plan
        title = f"{self.title} ({run.id})"
        text = bench_report.markdown(
            df, list(plan.points), plan.spec, title=title, mode=plan.mode, sweep=self.sweep,
            ceilings=self.ceiling, env=run.env, smoke=plan.smoke, interrupted=life.interrupted,
        )  # fmt: skip
        (run.path / "summary.md").write_text(text)
        shown = title + (" NOT A MEASUREMENT" if plan.smoke else "")
        points = list(plan.points)
        scaling.draw(df, points, mode=plan.mode, title=shown, folder=run.path)
        # a scaling run's sweep plots show its most ranks: a line through every count would zigzag
        headline = scaling.largest(points)
        at = f" at {headline[0].case.world} ranks" if len(headline) < len(points) else ""
        plots.draw(df, headline, sweep=self.sweep, mode=plan.mode, title=shown + at, folder=run.path)
        pareto.draw(df, headline, title=title + at, folder=run.path)

    def exit_code(self, life: Life, df: pd.DataFrame) -> ExitCode:
        errors = df["verdict"].isin(["error", "fail"]).any()
        return ExitCode.FAILED if errors or runs.problems(life.run.env, df) or self.unmeasured else ExitCode.OK

    def counts(self, life: Life, df: pd.DataFrame) -> dict:
        counts = runs.verdict_counts(df)
        return counts | {"measured": counts.pop("measured", 0), "not_a_measurement": counts.pop("not_a_measurement", 0)}

    def json_extra(self, life: Life, df: pd.DataFrame) -> dict:
        return {"measurement": not self.plan.smoke, "problems": runs.problems(life.run.env, df)}

    def show(self, life: Life, df: pd.DataFrame) -> None:
        plan = self.plan
        bench_terminal.show(Console(), df, list(plan.points), plan.spec, sweep=self.sweep, mode=plan.mode,
                            smoke=plan.smoke)  # fmt: skip

    def tally(self, life: Life, df: pd.DataFrame) -> verdict.Tally:
        """Steps completed; measurements: the providers timed at a point, and the targets judged;
        errors: the steps that raised."""
        timed = df[df["metric"] == "time_ms"] if len(df) else df
        judged = df[df["verdict"].isin(["pass", "fail"])] if len(df) else df
        measured = int(timed["verdict"].isin([self.verdict]).sum()) if len(df) else 0
        failed = int((judged["verdict"] == "fail").sum()) if len(df) else 0
        errors = int((df["verdict"] == "error").sum()) if len(df) else 0
        return verdict.Tally(life.completed, self.unit, measured + len(judged), failed, errors, "measurements")

    def tell(self, life: Life, df: pd.DataFrame, code: ExitCode) -> None:
        if self.baseline is not None and not life.interrupted:
            if self.baseline.exists():
                shutil.rmtree(self.baseline)
            shutil.copytree(life.run.path, self.baseline)
            console.print(f"baseline written: {self.baseline} (commit it)")
        named.print_missing(self.unmeasured)
