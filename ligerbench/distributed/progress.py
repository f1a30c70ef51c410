"""What each rank of a --nproc run leaves in the run folder for the parent: its marker of the
unit it is on (verify case, bench step, converge dtype), so that the parent can name the rank
that stalled or raised and its unit; its Python stacks when it is stopped; and, rank 0 only, the
rows (`rank_writer`):

    progress = RankProgress(run_path, rank, unit="cases", labels=("c1", "c2"))
    progress.joined()        # in the group, before its first unit
    progress.start(0)        # ranks/rank<R>.json: {"state": "working", "index": 0, "label": "c1", ...}
    progress.failed(exc)     # state "raised", the error, and whether a collective failed
    progress.finished()      # state "done"

    lines = diagnose(run_path, world=4, exit_codes={"1": "3"}, ended=time.time())

Each rank rewrites its own small JSON file (atomically: a reader never sees half a file) as it
starts each unit; a unit is seconds to minutes of work, so the writes cost nothing. A rank that
stalls stops rewriting it: at the end its file still says what it was on, and since when, while
the ranks that waited for it in a collective say they gave up there. The same folder holds each
rank's stack as faulthandler wrote it when the rank was stopped (`stack_file`).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch.distributed as dist

from ligerbench.records import Record, RecordWriter

FOLDER = "ranks"  # in the run folder
MARKER, STACK = "rank{rank}.json", "rank{rank}-stack.txt"
# a launcher that starts ranks must see this in their command line before it signals a pid read
# from a marker: a pid reused by another process since is left alone
COMMAND_MARK = "ligerbench.commands.ranks"


def marker_path(run_path: Path, rank: int) -> Path:
    return Path(run_path) / FOLDER / MARKER.format(rank=rank)


def stack_file(run_path: Path, rank: int) -> Path:
    """Where rank `rank` has faulthandler write its Python stacks when it is stopped (SIGTERM) or
    aborts (the NCCL watchdog's SIGABRT past the collective timeout)."""
    path = Path(run_path) / FOLDER / STACK.format(rank=rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class Discard:
    """What the ranks other than 0 write their rows to: nowhere (the engines only call write()).

    Not a RecordWriter onto os.devnull: that writer rewrote its file atomically (a temporary
    file beside it, then os.replace) on its first row and at close, so each such rank, running
    as root, replaced /dev/null itself with a regular file, and from three ranks on they raced
    on /dev/null.tmp: one raised FileNotFoundError as the first step's rows were written, while
    the others waited for it in the next step's collective."""

    def write(self, record: Record) -> None:
        pass

    def close(self) -> None:
        pass


def rank_writer(run_path: Path, rank: int) -> RecordWriter | Discard:
    """Rank 0's RecordWriter onto run_path/records.csv (the rows the parent reads), a Discard
    for every other rank."""
    return RecordWriter(Path(run_path) / "records.csv") if rank == 0 else Discard()


def collective_failure(exc: BaseException) -> bool:
    """A collective failed or timed out (here or in an exception it was raised from): the ranks
    are out of step and the run cannot go on (the next collective would pair with another rank's
    different one)."""
    dist_error = getattr(dist, "DistError", None)  # torch >= 2.2
    seen: BaseException | None = exc
    while seen is not None:
        if dist_error is not None and isinstance(seen, dist_error):
            return True
        text = str(seen).lower()
        if isinstance(seen, RuntimeError) and any(k in text for k in ("gloo", "nccl", "timed out", "connection")):
            return True
        seen = seen.__cause__
    return False


class RankProgress:
    """This rank's marker. `on_start(index)` runs as the rank starts each unit (0-based), after
    the marker says so: fault injection plants a stall or a crash there (commands/ranks.py)."""

    def __init__(
        self,
        run_path: Path,
        rank: int,
        *,
        unit: str = "cases",
        labels: Sequence[str] = (),
        on_start: Callable[[int], None] = lambda index: None,
    ):
        self.path = marker_path(run_path, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rank, self.unit, self.labels, self.on_start = rank, unit, tuple(labels), on_start
        self.facts: dict = {"rank": rank, "pid": os.getpid(), "unit": unit, "planned": len(self.labels)}
        self._write(state="starting")

    def plan(self, labels: Sequence[str]) -> None:
        """The units in the order the rank runs them (known once it has rebuilt its plan)."""
        self.labels = tuple(labels)
        self.facts["planned"] = len(self.labels)

    def joined(self) -> None:
        self._write(state="joined")

    def start(self, index: int) -> None:
        """The rank starts unit `index` (0-based); past the last one, it is done with its units."""
        if index >= len(self.labels):
            self._write(state="ending", index=index)
            return
        self._write(state="working", index=index, label=self.labels[index])
        self.on_start(index)

    def failed(self, exc: BaseException) -> None:
        error = traceback.format_exception_only(type(exc), exc)[-1].strip()
        self._write(state="raised", error=error[:1000], collective=collective_failure(exc))

    def finished(self) -> None:
        self._write(state="done")

    def _write(self, **facts) -> None:
        self.facts.update(facts, since=time.time())
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.facts) + "\n")
        os.replace(tmp, self.path)


def clear(run_path: Path) -> None:
    """Forget the markers and stacks of ranks launched into this folder before."""
    for path in (Path(run_path) / FOLDER).glob("rank*"):
        path.unlink(missing_ok=True)


def read_markers(run_path: Path) -> dict[int, dict]:
    """Every rank's last marker, by rank (a rank that never started has none)."""
    found = {}
    for path in sorted((Path(run_path) / FOLDER).glob(MARKER.format(rank="*"))):
        try:
            facts = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found[int(facts["rank"])] = facts
    return found


def rank_pids(run_path: Path) -> list[int]:
    """The ranks' process ids, each still running this run's ranks' command (checked in
    /proc, so a reused pid is never taken for a rank)."""
    pids = []
    for facts in read_markers(run_path).values():
        pid = int(facts.get("pid", 0))
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if COMMAND_MARK in command and str(run_path) in command:
            pids.append(pid)
    return pids


# exit codes of ranks stopped from outside (torch.distributed.run's SIGTERM, then SIGKILL): not
# a failure of their own
STOPPED = {"-15", "-9"}


def _unit(facts: dict) -> str:
    """'case <id> (its 3rd of 8)': where a marker says its rank was."""
    kind = {"cases": "case", "steps": "step", "dtypes": "dtype"}.get(facts.get("unit", ""), "unit")
    state, index, planned = facts.get("state"), facts.get("index"), facts.get("planned", 0)
    if state == "starting":
        return "its start, before it joined the group"
    if state == "ending":
        return f"the final barrier, after its {planned} {kind}s"
    if index is None:
        return f"the group, before its first {kind}"
    return f"{kind} {facts.get('label', '?')} (its {_ordinal(index + 1)} of {planned})"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _stack_tail(run_path: Path, rank: int, frames: int = 4) -> str:
    """The innermost frames of the main thread's stack the rank wrote when stopped, or ''."""
    path = Path(run_path) / FOLDER / STACK.format(rank=rank)
    text = path.read_text(errors="replace") if path.exists() else ""
    blocks = [b for b in text.split("\n\n") if "most recent call first" in b]
    if not blocks:
        return ""
    main = next((b for b in blocks if "Current thread" in b), blocks[0])
    lines = [ln.strip() for ln in main.splitlines()[1:] if ln.strip().startswith("File")]
    return " <- ".join(lines[:frames])


def diagnose(
    run_path: Path, world: int, *, exit_codes: dict[str, str], ended: float, timed_out: dict[str, str] | None = None
) -> list[str]:
    """Lines naming the rank(s) that stopped the run, each with the unit it was on: one that
    raised, died or never started; else one that stalled, seen by the others giving up on it
    in a collective, or by being behind them when the run was killed. Then the ranks that
    waited. `timed_out`: ranks that NCCL's watchdog ended at the collective timeout (they
    abort with no exception of their own to mark), with its message. [] when every rank
    finished."""
    timed_out = timed_out or {}
    markers = read_markers(run_path)
    culprits, waited, working = [], [], []
    for rank in range(world):
        facts = markers.get(rank)
        code = exit_codes.get(str(rank))
        if facts is None:
            culprits.append(f"rank {rank} never started (it wrote no marker)")
        elif facts.get("state") == "done":
            continue
        elif facts.get("state") == "raised" and facts.get("collective"):
            waited.append((rank, facts.get("error", "")))
        elif facts.get("state") == "raised":
            culprits.append(f"rank {rank} raised in {_unit(facts)}: {facts.get('error', '')}")
        elif str(rank) in timed_out:
            waited.append((rank, timed_out[str(rank)]))
        elif code is not None and code not in STOPPED:
            culprits.append(f"rank {rank} died (exit code {code}) in {_unit(facts)}")
        else:
            working.append((rank, facts))
    if not culprits and working:
        # Nobody raised or died of its own. A rank still at work when the others gave up waiting
        # in a collective stalled; without such a wait (the wall clock ended the run), the ranks
        # behind the others did.
        behind = min(_position(f) for _, f in working)
        stalled = working if waited else [(r, f) for r, f in working if _position(f) == behind]
        if waited or len(stalled) < len(working):
            for rank, facts in stalled:
                idle = ended - float(facts.get("since", ended))
                stack = _stack_tail(run_path, rank)
                culprits.append(
                    f"rank {rank} stalled in {_unit(facts)}: no progress for {idle:.0f} s before the run ended"
                    + (f"; its stack when stopped: {stack}" if stack else "")
                )
            working = [(r, f) for r, f in working if (r, f) not in stalled]
    lines = culprits
    if waited:
        ranks = ", ".join(str(r) for r, _ in waited)
        whom = "for it " if culprits else ""
        lines.append(f"rank(s) {ranks} gave up waiting {whom}in a collective: {waited[0][1]}")
    for rank, facts in working:
        lines.append(f"rank {rank} was in {_unit(facts)} when the run ended")
    return lines


def _position(facts: dict) -> tuple[int, int]:
    """How far a rank got: its state's order, then the unit's index."""
    order = {"starting": 0, "joined": 1, "working": 2, "ending": 3}.get(facts.get("state", ""), 2)
    return (order, int(facts.get("index") or 0))
