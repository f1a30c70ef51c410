"""`ligerbench audit LIBRARY`: every kernel a peer library has providers for, verified for that
library's providers alone, and one markdown section of what came out of it.

    ligerbench audit verl --device cpu
    ligerbench audit trl --device cpu --where dtype=fp32
    ligerbench audit liger --preset full --device cuda

For each kernel with a provider whose `Provider.library` is LIBRARY, one verify run over the
kernel's preset grid (the same plan, job and run folder as `verify --kernel K --provider P ...`:
ligerbench/verify/engine.py, ligerbench/verify/job.py under ligerbench/lifecycle.py), then
OUT/audit-<library>.md: per provider its cases (passed, failed, errored, skipped), the dtypes it
was compared on ("never ran on bf16" where a dtype of the grid has no compared case), its skip
reasons with counts, and every failing check, each under "listed in docs/peers.md" when a
passage of that page that classifies failing checks names the provider and the quantity (a
textual match: `listed_in`), otherwise "unclassified". Findings are the output, not a failure:
exit 0 once the runs completed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import pandas as pd
import typer
from rich.console import Console

from ligerbench import axes, lifecycle, runs, tables, verdict
from ligerbench import env as environment
from ligerbench.builtin import default_registry
from ligerbench.exits import ExitCode
from ligerbench.lifecycle import Life
from ligerbench.registry import Provider, Registry
from ligerbench.verify.engine import make_plan
from ligerbench.verify.job import VerifyJob

# the page that classifies the peers' failing checks (in a source checkout; absent from a wheel)
PEERS_DOC = Path(__file__).resolve().parents[2] / "docs" / "peers.md"
# short and common names of the libraries, as users type them -> Provider.library
ALIASES = {"liger": "liger-kernel", "ligerkernel": "liger-kernel", "pytorch": "torch"}
EXAMPLE_ROWS = 1  # cases named per skip reason


def audit(
    library: Annotated[
        str,
        typer.Argument(
            metavar="LIBRARY",
            help="A peer library, as `ligerbench list` names it under library: trl, verl, liger-kernel (liger), "
            "torch (pytorch); any case.",
            show_default=False,
        ),
    ],
    preset: Annotated[
        str, typer.Option(metavar="NAME", help="Case sizes: quick (CPU), full (GPU); auto by device.")
    ] = ("quick"),
    device: Annotated[
        str, typer.Option("--device", metavar="DEVICE", help="Where to run: auto, cpu or cuda; auto prefers CUDA.")
    ] = "auto",
    where: Annotated[
        Optional[list[str]],
        typer.Option(
            "--where",
            metavar="AXIS=VALUE",
            help="Only cases with AXIS=VALUE (repeatable), as verify's --where, in every kernel that has the "
            "axis and value; a kernel that lacks them is left out, and said so.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    strict: Annotated[
        bool, typer.Option("--strict", help="Hold the providers to the careful yardstick alone, as verify --strict.")
    ] = False,
    out: Annotated[
        Path, typer.Option(metavar="DIR", help="Results root: one verify run folder per kernel, and the audit.")
    ] = runs.DEFAULT_ROOT,
):
    """Verify one peer library's providers on every kernel it has.

    For each kernel that has providers of LIBRARY: one verify run over the kernel's preset grid,
    that library's providers alone, its run folder under OUT as verify writes it. Then
    OUT/audit-<library>.md: per provider the cases run, passed, failed, errored and skipped, the
    dtypes it was compared on ("never ran on bf16" where none of the grid's bf16 cases was
    compared), its skip reasons with counts, and every failing check, under "listed in
    docs/peers.md" where that page names the provider and the quantity, else "unclassified".

    Exit status: 0 when the runs completed, whatever they found (failing checks are the audit's
    findings, not its failure), 2 on a usage error (an unknown library, preset or --where) or
    unusable input, 1 when a run could not complete what it planned, 130 when interrupted (the
    audit of what completed is still written).

    Examples:

      ligerbench audit verl --device cpu

      ligerbench audit trl --device cpu --where dtype=fp32

      ligerbench audit liger --preset full --device cuda
    """
    dev, mode = runs.resolve_device(device)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    lib = resolve_library(registry, library)
    preset_name = runs.resolve_preset(preset, dev, list(registry.presets))
    audited, left_out = _plans(registry, lib, preset_name, dev.type, where or [], strict)
    code = ExitCode.OK
    results: list[KernelRun] = []
    for kernel, plan, selection in audited:
        names = [p.name for p in plan.providers]
        runs.console.print(
            f"audit {lib}: verify {kernel}: preset {preset_name}, {len(plan.cases)} cases, {', '.join(names)}",
            markup=False,
        )
        job = AuditJob(plan, registry, dev, seed=seed, preset=preset_name)
        status = lifecycle.execute(job, quiet=False, device=dev, triton_mode=mode, seed=seed, out=out,
                                   filters=selection, preset=preset_name, kernel=kernel)  # fmt: skip
        if job.path is None:  # nothing came back (cannot happen after execute returns; never a silent pass)
            code = ExitCode.FAILED
            continue
        dtype_of = {c.id: c.get("dtype") for c in plan.cases}
        order = _dtype_order(registry, kernel, preset_name)
        results.append(
            KernelRun(
                kernel,
                names,
                dtype_of,
                [d for d in order if d in set(dtype_of.values())],
                job.frame,
                job.path,
                incomplete=_incomplete(job.env),
                known_as={p.name: doc_names(p) for p in plan.providers},
                shared=_shared(registry, kernel),
            )  # fmt: skip
        )
        if status in (ExitCode.INTERRUPTED, ExitCode.TERMINATED):
            code = status
            break
        if results[-1].incomplete:
            code = ExitCode.FAILED
    facts = {
        "preset": preset_name,
        "device": dev.type,
        "seed": seed,
        "where": list(where or []),
        "strict": strict,
        "pinned": sorted({p.pinned for p in registry.providers.values() if p.library == lib and p.pinned}),
        "installed": environment.version_of(lib),
    }
    text = audit_markdown(lib, results, left_out=left_out, facts=facts, peers_doc=PEERS_DOC,
                          interrupted=code in (ExitCode.INTERRUPTED, ExitCode.TERMINATED))  # fmt: skip
    path = Path(out) / f"audit-{lib}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    _show(results, left_out)
    if code == ExitCode.FAILED:
        runs.console.print("audit: a run did not complete what it planned (its audit section says which)")
    verdict.say(code, audit_tally(results), path)
    return code


def audit_tally(results: list[KernelRun]) -> verdict.Tally:
    """The audit's verdict line: its runs' cases and checks; the failures and errors are the
    library's (the audit's findings: it passes when its runs complete, whatever they found)."""
    frames = [r.frame for r in results if r.frame is not None and len(r.frame)]
    df = pd.concat(frames) if frames else pd.DataFrame(columns=["case", "verdict"])
    cases = sum(int(r.frame["case"].nunique()) for r in results if r.frame is not None and len(r.frame))
    return verdict.of_rows(df, cases, failed_word="failed (findings)")


# ----------------------------------------------------------------------------- selection


def known_libraries(registry: Registry) -> list[str]:
    """The peer libraries the registry's verifiable providers come from."""
    return sorted({p.library for p in _verifiable(registry) if p.library})


def resolve_library(registry: Registry, name: str) -> str:
    """LIBRARY as typed -> a Provider.library: any case, `_` for `-`, the aliases (liger, pytorch),
    or the first word of one library's name (liger -> liger-kernel). Unknown: a usage error listing them."""
    known = known_libraries(registry)
    typed = name.strip().lower().replace("_", "-")
    typed = ALIASES.get(typed, ALIASES.get(typed.replace("-", ""), typed))
    if typed in known:
        return typed
    first = [k for k in known if k.split("-")[0] == typed]
    if len(first) == 1:
        return first[0]
    raise runs.usage_error(f"unknown library {name!r}; choose from {', '.join(known) or 'none registered'}", "LIBRARY")


def _verifiable(registry: Registry):
    return [p for p in registry.providers.values() if not p.mutant and not p.bench_only]


def _plans(registry: Registry, lib: str, preset: str, device_type: str, where: list[str], strict: bool):
    """[(kernel, plan, selection)] for every kernel with a verifiable provider of `lib`, and
    {kernel: why it is left out} for those --where or the device rule out."""
    by_kernel: dict[str, list[str]] = {}
    for p in _verifiable(registry):
        if p.library == lib:
            by_kernel.setdefault(p.kernel, []).append(p.name)
    audited, left_out, unknown = [], {}, []
    for kernel, names in by_kernel.items():
        spec = registry.kernels[kernel]
        try:
            filters = axes.parse_where(spec.axes, preset, where, kernel=kernel)
        except axes.UnknownAxisValue as exc:
            left_out[kernel] = str(exc)
            unknown.append(str(exc))
            continue
        if device_type not in spec.simulated_devices:  # as verify without --nproc refuses it
            left_out[kernel] = (f"its ranks are simulated on {', '.join(spec.simulated_devices)} only: "
                                f"verify --kernel {kernel} --nproc N")  # fmt: skip
            continue
        plan = make_plan(registry, kernel=kernel, preset=preset, device_type=device_type, providers=names,
                         case_filter=lambda c, f=filters: axes.case_matches(c, f), strict=strict)  # fmt: skip
        if not plan.cases:
            left_out[kernel] = "no case matches these filters on this device"
            continue
        selection = {k: sorted(v) for k, v in filters.items() if v} | {"provider": names, "strict": strict}
        audited.append((kernel, plan, {k: v for k, v in selection.items() if v}))
    if not audited:
        why = unknown[0] if unknown and len(unknown) == len(by_kernel) else "no kernel has a case for it here"
        raise runs.usage_error(f"nothing of {lib} to verify with this selection: {why}", "--where")
    return audited, left_out


def _dtype_order(registry: Registry, kernel: str, preset: str) -> list[str]:
    for a in registry.kernels[kernel].axes:
        if a.name == "dtype":
            return [str(v) for v in a.values_for(preset)]
    return []


def _incomplete(env: dict | None) -> str:
    """Why a run did not complete what it planned ("" when it did)."""
    m = (env or {}).get("run") or {}
    if m.get("interrupted"):
        return f"interrupted after {m.get('completed')} of {m.get('planned')} cases"
    if not m.get("finished") or m.get("completed", 0) < m.get("planned", 0):
        return f"completed {m.get('completed')} of {m.get('planned')} cases"
    return ""


class AuditJob(VerifyJob):
    """verify's job, unchanged, keeping its run's folder, rows and env.json for the audit."""

    path: Path | None = None
    frame: pd.DataFrame | None = None
    env: dict | None = None

    def summarize(self, life: Life, df: pd.DataFrame) -> None:
        super().summarize(life, df)
        self.path, self.frame, self.env = life.run.path, df, life.run.env


# ----------------------------------------------------------------------------- the markdown


@dataclass
class KernelRun:
    """One kernel's verify run, as the audit reads it."""

    kernel: str
    providers: list[str]
    dtype_of: dict[str, str | None]  # case id -> its dtype
    dtypes: list[str]  # the grid's dtypes, in the axis's order
    frame: pd.DataFrame
    path: Path
    incomplete: str = ""  # why it did not complete ("" when it did)
    # provider -> (its library, the code names its description gives): how docs/peers.md may name it
    known_as: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # quantities summed over every row (a weight's gradient: Rows.shared), which no provider keeps
    # bit for bit over a reordered batch: left out of the batch-invariance column
    shared: tuple[str, ...] = ()


def same_row(run: KernelRun, provider: str) -> tuple[str, str]:
    """The provider's determinism and batch invariance as the same-row suites measured them
    (ligerbench/verify/invariance.py): "yes" (every distance 0 ulp), "no: up to N ulp", or "-"
    where the run measured none (a suite not selected, every case skipped). Reported, never a
    verdict: a peer is judged by what it promises (docs/checks.md)."""
    df = run.frame
    mine = df[(df["provider"] == provider) & (df["metric"] == "ulp_max")]
    mine = mine[pd.to_numeric(mine["value"], errors="coerce").notna()]

    def cell(rows: pd.DataFrame) -> str:
        if rows.empty:
            return "-"
        worst = float(pd.to_numeric(rows["value"]).max())
        return (
            "yes" if worst == 0 else "no: a NaN on one side" if worst == float("inf") else f"no: up to {worst:.0f} ulp"
        )

    rows = mine[mine["suite"] == "batch_invariance"]
    per_row = rows[~rows["quantity"].astype(str).str.split(":").str[-1].isin(run.shared)]
    return cell(mine[mine["suite"] == "determinism"]), cell(per_row)


def _shared(registry: Registry, kernel: str) -> tuple[str, ...]:
    rows = registry.kernel(kernel).rows
    return tuple(rows.shared) if rows is not None else ()


def case_counts(df: pd.DataFrame, provider: str) -> dict[str, int]:
    """A provider's cases by outcome; a case counts once: errored if any check errored, else failed
    if any failed, else passed if any passed, else skipped (every check skipped)."""
    mine = df[df["provider"] == provider]
    verdicts = mine.groupby("case")["verdict"].agg(set) if len(mine) else pd.Series(dtype=object)
    out = {"cases": len(verdicts), "passed": 0, "failed": 0, "errored": 0, "skipped": 0}
    for seen in verdicts:
        key = (
            "errored" if "error" in seen else "failed" if "fail" in seen else "passed" if "pass" in seen else "skipped"
        )
        out[key] += 1
    return out


def compared_by_dtype(run: KernelRun, provider: str) -> dict[str, tuple[int, int]]:
    """dtype -> (cases compared with the truth, cases of the grid) for one provider."""
    mine = run.frame[run.frame["provider"] == provider]
    compared = set(mine.loc[mine["verdict"].isin(["pass", "fail"]), "case"])
    out = {}
    for d in run.dtypes:
        ids = [c for c, dt in run.dtype_of.items() if dt == d]
        out[d] = (sum(c in compared for c in ids), len(ids))
    return out


def peer_passages(text: str) -> list[tuple[int, str]]:
    """docs/peers.md as (first line number, passage): each table row, list item and paragraph that
    classifies (names a class: (a), (b), (c), ...), past the page's first section (its inventory of
    libraries and providers, which names every provider); every passage there if none classifies."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    out: list[tuple[int, str]] = []
    para: list[str] = []
    first = 0
    for i in range(start, len(lines) + 1):
        line = lines[i] if i < len(lines) else ""
        if line.lstrip().startswith("|") or not line.strip() or line.startswith("#"):
            if para:
                out.append((first + 1, " ".join(para)))
                para = []
            if line.lstrip().startswith("|") and not set(line.strip()) <= set("|-: "):
                out.append((i + 1, line))
            continue
        if para and line.startswith("- "):  # a list item is a passage of its own
            out.append((first + 1, " ".join(para)))
            para = []
        if not para:
            first = i
        para.append(line.strip())
    classifying = [(n, p) for n, p in out if CLASS_MARK.search(p)]
    return classifying or out


CLASS_MARK = re.compile(r"(?<!\w)\([a-z]\)")  # docs/peers.md's classes: (a) a defect of the peer, ...


def _quantity_words(quantity: str) -> list[str]:
    """The quantity's name, and the word the docs use for it (gradient, log-prob)."""
    words = [quantity]
    if "grad" in quantity:
        words.append("gradient")
    if quantity in ("logp", "log_probs", "logprobs"):
        words += ["log-prob", "log prob"]
    return words


def doc_names(provider: Provider) -> tuple[str, tuple[str, ...]]:
    """(its library, the code names in its description): docs/peers.md often names a peer by what
    it calls (TRL `ChunkedLogProbFunction`) rather than by the provider's name (trl_chunked)."""
    names = []
    for token in re.findall(r"[A-Za-z_][\w.]*\w", provider.description):
        last = token.rsplit(".", 1)[-1]
        if len(last) >= 8 and ("_" in last.strip("_") or re.fullmatch(r"[A-Z][a-z0-9]+[A-Z]\w*", last)):
            names.append(last)
    return provider.library, tuple(dict.fromkeys(names))


def _word(text: str, flags: int = 0) -> re.Pattern:
    """`text` as a word: not part of a longer name, a path or a file name (trl, not suites/peers/trl.py)."""
    return re.compile(rf"(?<![\w/.-]){text}(?![\w-]|\.py)", flags)


# how docs/peers.md names a library in its prose
LIBRARY_WORDS = {"liger-kernel": "Liger", "torch": "PyTorch", "trl": "TRL"}


def listed_in(
    passages: list[tuple[int, str]], provider: str, quantity: str, library: str = "", code_names: tuple[str, ...] = ()
) -> int | None:
    """The line of docs/peers.md whose passage names the quantity and the provider, or None. A
    textual match: the provider's name, or its library as the page writes it (TRL, verl, Liger, PyTorch) beside one of
    its code names (`doc_names`); the quantity's name, or the docs' word for it (gradient, log-prob)."""
    who = _word(re.escape(provider))
    lib = _word(re.escape(LIBRARY_WORDS.get(library, library)), re.IGNORECASE) if library else None
    calls = [re.compile(rf"(?<!\w){re.escape(n)}(?!\w)") for n in code_names]  # trl.kernels.<name> too
    what = re.compile("|".join(rf"(?<![\w-]){re.escape(w)}" for w in _quantity_words(quantity)), re.IGNORECASE)
    for line, passage in passages:
        if not what.search(passage):
            continue
        if who.search(passage) or (lib and lib.search(passage) and any(c.search(passage) for c in calls)):
            return line
    return None


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _num(x) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    return "-" if x != x else f"{x:.3g}"


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def audit_markdown(
    library: str,
    results: list[KernelRun],
    *,
    left_out: dict[str, str],
    facts: dict,
    peers_doc: Path | None,
    interrupted: bool = False,
) -> str:
    """The audit of one library as a markdown section (see the module docstring)."""
    doc_text = peers_doc.read_text() if peers_doc is not None and peers_doc.is_file() else None
    passages = peer_passages(doc_text) if doc_text is not None else []
    where = ", ".join(facts.get("where") or []) or "none"
    pinned = ", ".join(facts.get("pinned") or []) or "no pin"
    parts = [
        f"## Audit of {library}\n",
        f"`verify` of {library}'s providers alone on every kernel it has them for: preset {facts.get('preset')}, "
        f"device {facts.get('device')}, seed {facts.get('seed')}, filters: {where}"
        + (", --strict" if facts.get("strict") else "")
        + f". {library} installed: {facts.get('installed') or 'not installed'} (pinned: {pinned}).\n",
    ]
    if interrupted:
        parts.append("**Interrupted: the runs below are those that completed (the last one in part).**\n")
    rows = ["| kernel | providers | cases | run folder |", "|---|---|---|---|"]
    for r in results:
        note = f" ({r.incomplete})" if r.incomplete else ""
        rows.append(f"| {r.kernel} | {', '.join(r.providers)} | {len(r.dtype_of)}{note} | `{r.path}` |")
    parts.append("\n".join(rows) + "\n")
    if left_out:
        parts.append("Not run:\n\n" + "\n".join(f"- {k}: {_cell(v)}" for k, v in left_out.items()) + "\n")
    summary = ["| provider | kernel | cases | passed | failed | errored | skipped | compared on | deterministic "
               "| rows batch-invariant |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        for p in r.providers:
            c = case_counts(r.frame, p)
            on = ", ".join(f"{d} {n}/{total}" for d, (n, total) in compared_by_dtype(r, p).items()) or "-"
            det, rows_ = same_row(r, p)
            summary.append(f"| {p} | {r.kernel} | {c['cases']} | {c['passed']} | {c['failed']} | {c['errored']} | "
                           f"{c['skipped']} | {on} | {det} | {rows_} |")  # fmt: skip
    parts.append(
        "A case counts once: errored if a check of it errored, else failed if one failed, else passed if one "
        'passed; skipped when every check of it was skipped. "Compared on": cases of each dtype compared '
        'with the float64 truth, of the grid\'s. "Deterministic" and "rows batch-invariant": the same-row '
        "suites' largest distance in ulp (a second call on the same inputs; a row alone, moved, in a smaller "
        'and a padded batch), reported, not judged: "-" where none was measured.\n'
    )
    parts.append("\n".join(summary) + "\n")
    if doc_text is None:
        parts.append("docs/peers.md was not found here: every failing check below is unclassified.\n")
    for r in results:
        for p in r.providers:
            parts.append(_provider_section(r, p, passages))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts))


def _provider_section(run: KernelRun, provider: str, passages: list[tuple[int, str]]) -> str:
    df = run.frame
    mine = df[df["provider"] == provider]
    c = case_counts(df, provider)
    lines = [
        f"### {provider} ({run.kernel})\n",
        f"{c['cases']} cases: {c['passed']} passed, {c['failed']} failed, {c['errored']} errored, "
        f"{c['skipped']} skipped.\n",
    ]
    by_dtype = compared_by_dtype(run, provider)
    if by_dtype:
        ran = [f"{d} ({n} of {total} cases)" for d, (n, total) in by_dtype.items() if n]
        lines.append(f"- ran on: {', '.join(ran) or 'nothing (no case compared)'}")
        for d, (n, total) in by_dtype.items():
            if not n:
                lines.append(f"- never ran on {d} (0 of its {total} cases compared)")
    skipped = mine[mine["verdict"] == "skip"]
    if len(skipped):
        lines.append("- skip reasons (cases, checks):")
        for reason, group in skipped.groupby("message", sort=False):
            cases = list(dict.fromkeys(group["case"]))
            shown = ", ".join(f"`{x}`" for x in cases[:EXAMPLE_ROWS]) + (" ..." if len(cases) > EXAMPLE_ROWS else "")
            why = _cell(reason) or "(no reason given)"
            lines.append(f"  - {_n(len(cases), 'case')}, {_n(len(group), 'check')}: {why} (e.g. {shown})")
    else:
        lines.append("- skip reasons: none")
    bad = mine[mine["verdict"].isin(["fail", "error"])]
    if bad.empty:
        lines.append("- failing checks: none\n")
        return "\n".join(lines) + "\n"
    listed, unclassified = [], []
    for _, row in bad.iterrows():
        at = listed_in(passages, provider, str(row["quantity"]), *run.known_as.get(provider, ("", ())))
        error = _num(row["value"]) if row["verdict"] == "fail" else f"error: {_cell(row['message'])[:160]}"
        cells = [f"`{row['case']}`", str(row["quantity"]), error, _num(row["limit"])]
        (listed if at is not None else unclassified).append(cells + ([f"line {at}"] if at is not None else []))
    lines.append(f"- failing checks: {len(bad)} ({len(listed)} listed in docs/peers.md, {len(unclassified)} "
                 "unclassified)\n")  # fmt: skip
    if listed:
        lines += [
            "Listed in docs/peers.md:\n",
            "| case | quantity | error | limit | docs/peers.md |",
            "|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in listed]
        lines.append("")
    if unclassified:
        lines += ["Unclassified:\n", "| case | quantity | error | limit |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in unclassified]
        lines.append("")
    return "\n".join(lines) + "\n"


def _show(results: list[KernelRun], left_out: dict[str, str]) -> None:
    """The per-provider counts on the terminal (the verdict line names the audit's file)."""
    out = Console()
    rows = []
    for r in results:
        for p in r.providers:
            c = case_counts(r.frame, p)
            never = [d for d, (n, _) in compared_by_dtype(r, p).items() if not n]
            rows.append([p, r.kernel, c["cases"], c["passed"], c["failed"], c["errored"], c["skipped"],
                         ", ".join(never) or "-"])  # fmt: skip
    columns = ["provider", "kernel", "cases", "passed", "failed", "errored", "skipped", "never ran on"]
    tables.show(out, "audit: per provider (cases)", columns, rows, right=columns[2:7])
    for kernel, why in left_out.items():
        out.print(f"not run: {kernel}: {why}", soft_wrap=True, markup=False)
