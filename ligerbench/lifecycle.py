"""One run's life, the same for every command that makes a run folder (verify, bench, converge,
selftest): start, work with a progress bar, Ctrl-C and SIGTERM, finish, summary, manifest, the
JSON or the tables, and the exit code.

    code = lifecycle.execute(VerifyJob(...), quiet=as_json, device=dev, triton_mode=mode, seed=0,
                             out=Path("results"), filters=selection, preset="quick")

A Job (verify/job.py, bench/job.py, converge/job.py, selftest/job.py) says what the run does and
how it reads: `work(life)` writes records and counts what it completed (life.done()); the rest
has defaults below. The order is fixed here, once:

    1. job.before_start()       facts for env.json known before the run (bench: the ceilings)
    2. runs.start               the folder, env.json (manifest: not finished), records.csv
    3. job.work(life)           SIGINT raises KeyboardInterrupt, SIGTERM raises Terminated (in the
                                main thread, once, only while the work runs; again at the unit's
                                end if the code it landed in kept it; a watchdog ends a run still
                                working 8 s later: ligerbench/signals.py); -x/--maxfail raises
                                StopEarly; each life.done() rewrites the manifest's counts
    4. job.rows(life)           the rows as written (records.csv re-read when ranks wrote it); then
                                run.finish: the manifest's rows and completed are counted from
                                what was written, interrupted/stopped_early/finished set
    5. job.summarize(life, df)  summary.md and whatever the job writes beside it
    6. the exit code            130 after Ctrl-C, 143 after SIGTERM, else job.exit_code
    7. --json: one JSON object on stdout (runs.json_report), else job.show; then job.tell (both)
    8. the verdict line, last on the terminal (not with --json): PASSED or FAILED as the exit
       code says, job.tally's counts and the run folder (ligerbench/verdict.py)

Steps 4 and 5 run whatever stopped the work, with SIGINT and SIGTERM held off, so a run stopped
by `timeout`, a CI runner or Ctrl-C keeps its completed rows, a summary and a manifest that says
so. Only SIGKILL leaves an unfinished run (env.json: finished false), which every reader refuses.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd
from rich.text import Text

from ligerbench import runs, verdict
from ligerbench.exits import ExitCode, Terminated
from ligerbench.signals import grace_s, signals_held, stop_point, stop_signals


@dataclass
class Life:
    """What a job's work sees of its run: the run itself, its progress bars and its counts."""

    run: runs.Run
    quiet: bool  # --json: no progress bar, no tables
    completed: int = 0  # units done (cases, steps, dtypes, mutants), as the manifest counts them
    facts: dict = field(default_factory=dict)  # more for env.json (the launcher's, ...)
    stopped_by: ExitCode | None = None  # INTERRUPTED or TERMINATED
    stopped_early: bool = False  # -x / --maxfail

    def progress(self, title: str, total: int):
        return self.run.progress(title, total, disable=self.quiet)

    def done(self, n: int = 1) -> None:
        """`n` units completed: counted, and in env.json at once (a run killed outright then says
        how far it got); then a stop signal whose exception was kept is raised again here."""
        self.completed += n
        if self.run is not None:
            self.run.checkpoint(self.completed)
        stop_point()

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


class Job:
    """A command's run: what it plans, how it works and how its rows read. Subclasses set the
    class-level facts and `work`; every other step has a default."""

    command: str  # verify, bench, converge, selftest
    label: str  # the run's label (its kernel, model, ...)
    unit: str = "cases"  # what planned and completed count
    planned: int = 0

    def before_start(self) -> dict:
        return {}

    def work(self, life: Life) -> None:
        raise NotImplementedError

    def rows(self, life: Life) -> pd.DataFrame:
        life.run.writer.close()
        return life.run.writer.frame()

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        pass

    def exit_code(self, life: Life, df: pd.DataFrame) -> ExitCode:
        bad = df["verdict"].isin(["fail", "error"]).any() if len(df) else False
        return ExitCode.FAILED if bad or runs.problems(life.run.env, df) else ExitCode.OK

    def counts(self, life: Life, df: pd.DataFrame) -> dict:
        return runs.verdict_counts(df)

    def json_extra(self, life: Life, df: pd.DataFrame) -> dict:
        return {"problems": runs.problems(life.run.env, df)}

    def tally(self, life: Life, df: pd.DataFrame) -> verdict.Tally:
        """The verdict line's counts: the units completed, rows compared, failed and errored."""
        return verdict.of_rows(df, life.completed, self.unit)

    def show(self, life: Life, df: pd.DataFrame) -> None:
        pass

    def tell(self, life: Life, df: pd.DataFrame, code: ExitCode) -> None:
        pass


def execute(job: Job, *, quiet: bool, **start) -> ExitCode:
    """Run `job` from start to exit code (module docstring); `start` goes to runs.start."""
    extra = job.before_start()
    run = runs.start(job.command, job.label, unit=job.unit, planned=job.planned, **start, **extra)
    life = Life(run, quiet)

    def give_up(signum: int) -> None:
        """The watchdog's end of a run that did not stop within grace_s() of the signal
        (ligerbench/signals.py): the manifest from the rows already written, then the exit code.
        The lock with a timeout and the message by a raw write: the main thread, stuck, may hold
        the lock or the console's."""
        name = signal.Signals(signum).name
        code = ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED
        why = (f"the work did not stop within {grace_s():g} s of {name} (native code, or code that kept the "
               "signal's exception): the process ended there, without a summary")  # fmt: skip
        if run.lock.acquire(timeout=1.0) and not run.manifest["finished"]:
            run.finish(interrupted=True, planned=job.planned, completed=life.completed, rows=run.rows_on_disk(),
                       **life.facts, stopped_by=name, forced_stop=why)  # fmt: skip
        m, how = run.manifest, "terminated (SIGTERM)" if code == ExitCode.TERMINATED else "interrupted"
        os.write(2, f"\n{why}\n{how} after {m['completed']} of {m['planned']} {m['unit']}: the {m['rows']} "
                    f"completed rows are kept in {run.path}\n".encode())  # fmt: skip
        os._exit(int(code))

    with stop_signals(on_stuck=give_up), torch_logs_to(run.path / "torch.log"):
        try:
            job.work(life)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
            life.stopped_by = ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED
        except runs.StopEarly:
            life.stopped_early = True
        finally:
            with signals_held():
                df = job.rows(life)
                stopped = {"stopped_by": signal.Signals(life.stopped_by - 128).name} if life.interrupted else {}
                run.finish(
                    interrupted=life.interrupted,
                    planned=job.planned,
                    completed=life.completed,
                    stopped_early=life.stopped_early,
                    rows=len(df),
                    **life.facts,
                    **stopped,
                )
                job.summarize(life, df)
    code = life.stopped_by or job.exit_code(life, df)
    if quiet:
        report = runs.json_report(
            run.env, exit_code=int(code), status=code.status, counts=job.counts(life, df), path=run.path
        )
        runs.print_json({**report, **job.json_extra(life, df)})
    else:
        job.show(life, df)
    job.tell(life, df, code)
    if life.interrupted:
        runs.say_interrupted(run, "terminated (SIGTERM)" if code == ExitCode.TERMINATED else "interrupted")
    elif life.stopped_early:
        m = run.manifest
        runs.console.print(f"stopped early (-x/--maxfail): {m['completed']} of {m['planned']} {m['unit']}")
    elif code == ExitCode.FAILED and not quiet and not (len(df) and df["verdict"].isin(["fail", "error"]).any()):
        for why in runs.problems(run.env, df):  # no failing row: say what kept it from passing
            runs.console.print(Text(f"not passed: {why}"), soft_wrap=True)
    if not quiet:
        verdict.say(code, job.tally(life, df), run.path)
    return code


# Loggers whose warnings belong to the run, not the terminal: torch.compile's providers recompile
# for every new shape and dtype of a grid, and dynamo's recompilation warnings filled the screen.
TORCH_LOGGERS = ("torch._dynamo", "torch._inductor", "torch.fx")
# Python warnings raised from here belong to the run too: Triton's interpreter computes masked
# lanes with numpy, which warns of their divide-by-zero and overflow ("RuntimeWarning: divide by
# zero encountered in divide" on every CPU verify); what reaches the outputs is compared anyway.
INTERPRETER_FILE = "triton/runtime/interpreter.py"


@contextlib.contextmanager
def torch_logs_to(path) -> Iterator[None]:
    """While the work runs, PyTorch's compiler loggers and the warnings of Triton's interpreter
    write to `path` (the run folder's torch.log) instead of the terminal; the loggers' handlers
    and propagation, and warnings.showwarning, come back afterwards."""
    import logging
    import warnings

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if str(filename).replace("\\", "/").endswith(INTERPRETER_FILE):
            with open(path, "a") as f:
                f.write(warnings.formatwarning(message, category, filename, lineno, line))
            return
        shown(message, category, filename, lineno, file, line)

    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in TORCH_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate
        handler.close()
