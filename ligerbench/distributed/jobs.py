"""What a --nproc run hands its ranks: one frozen dataclass per kind of job, written to the run
folder as job.json by the parent (ligerbench/distributed/launch.py) and read back by every rank
(ligerbench/commands/ranks.py dispatches on the type):

    dump(VerifyRankJob(run_id="r", run_path="/runs/r", device_type="cpu", seed=0, kernel="vp_ce",
                       preset="quick", suites=("correctness",), providers=("ours",), cases=("c1",)), path)
    job = load(path)  # a VerifyRankJob again; an unknown kind or a missing field: JobFileError

A job names what the rank rebuilds (cases, providers and points by id), never live objects:
each rank builds its own registry and plan from the same code and checks it found them all.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


class JobFileError(ValueError):
    """job.json is not a job this version writes (an unknown kind, a missing or extra field)."""


@dataclass(frozen=True, kw_only=True)
class RankJob:
    run_id: str
    run_path: str  # the run folder: rank 0 writes records.csv and ranks_done.json there
    device_type: str  # "cpu" (gloo) or "cuda" (NCCL, one rank per GPU)
    seed: int
    collective_timeout_s: float = 0.0  # set by launch.run_job from the run's wall clock

    @property
    def label(self) -> str:
        """What a launcher error record names as its kernel."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class VerifyRankJob(RankJob):
    kernel: str
    preset: str
    suites: tuple[str, ...]
    providers: tuple[str, ...]
    cases: tuple[str, ...]
    strict: bool = False  # verify --strict
    repeat: int = 1  # verify --repeat N

    @property
    def label(self) -> str:
        return self.kernel


@dataclass(frozen=True, kw_only=True)
class BenchRankJob(RankJob):
    kernel: str
    sweep: str
    mode: str
    dtype: str
    tokens: int | None
    smoke: bool
    rep_ms: float
    mutates_input: bool = False  # ad-hoc providers named on the command line (ligerbench/named.py)
    providers: tuple[str, ...]
    cases: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.kernel


@dataclass(frozen=True, kw_only=True)
class ConvergeRankJob(RankJob):
    model: str
    patch: str
    preset: str
    steps: int
    batch: int
    dtypes: tuple[str, ...]
    parallel: str
    accum: int = 1
    mutant: str = ""  # a planted normaliser bug of ligerbench/converge/mutants.py, or "" for none
    rl: str = ""  # `converge --rl KIND` (suites/converge/rl.py), or "" for the causal LM loss

    @property
    def label(self) -> str:
        return self.patch


KINDS: dict[str, type[RankJob]] = {c.__name__: c for c in (VerifyRankJob, BenchRankJob, ConvergeRankJob)}


def dump(job: RankJob, path: Path) -> None:
    path.write_text(json.dumps({"kind": type(job).__name__, **dataclasses.asdict(job)}, indent=2) + "\n")


def load(path: Path) -> RankJob:
    data = json.loads(Path(path).read_text())
    kind = KINDS.get(data.pop("kind", None))
    if kind is None:
        raise JobFileError(f"{path}: kind must be one of {', '.join(KINDS)}")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    wrong = sorted(set(data) ^ set(fields))
    if wrong:
        raise JobFileError(f"{path}: a {kind.__name__} with fields {', '.join(wrong)} missing or unknown")
    # JSON has lists where the dataclass has tuples: turn them back so jobs compare and hash
    return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
