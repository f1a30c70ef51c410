"""One self-contained page of a run: report.md (plots beside it as PNG files) and report.html
(the same page, plots embedded as base64 PNG, so it can be mailed or attached to a CI job).

    from ligerbench.report.build import build
    md_path, html_path = build(Path("results/<run-id>"))

Sections, each shown when the run has it: environment (env.json), verdicts per suite and
provider, failures, checks against float64 (worst error / limit per suite and provider, plotted),
bench measurements (a table per case, time and memory plotted), the kill matrix of a selftest run,
and every PNG the run wrote itself (bench and converge plots). All of it is read from the run's
records.csv and the files beside it: a report is a view of the rows.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ligerbench import runs
from ligerbench.plotting import pyplot
from ligerbench.records import load_records, records_file
from ligerbench.verify import summary

BENCH_METRICS = ("time_ms", "p20_ms", "p80_ms", "ratio_time_ms", "rate", "pct_ceiling", "extra_mib", "peak_mib")
CHECK_CLIP = 2.0  # report_checks.png: error/limit axis from 0 to 2 (the limit at its middle)
PLOT_PREFIX = "report_"  # the report's own PNGs; others in the folder are the run's


@dataclass(frozen=True)
class Block:
    kind: str  # "h2" | "text" | "table" | "image"
    text: str = ""
    table: pd.DataFrame | None = None
    image: Path | None = None


class Unreadable(Exception):
    """The run folder cannot be read (damaged records.csv or env.json): exit 2, said in one line."""


def _load(run: Path) -> tuple[pd.DataFrame, dict]:
    try:
        df = load_records(records_file(run))
        env_path = run / "env.json"
        env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    except (KeyError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise Unreadable(f"{run}: cannot read its records.csv or env.json ({' '.join(str(exc).split())})") from exc
    if not isinstance(env, dict):
        raise Unreadable(f"{run}: env.json is not an object")
    return df, env


def verdict(df: pd.DataFrame, env: dict, run: Path) -> tuple[bool, str, list[str]]:
    """(passed, status line, manifest problems): the rows, read through the run's manifest."""
    why = runs.problems(env, df)
    m = env.get("run") or {}
    if m.get("interrupted"):
        return False, f"INTERRUPTED: {'; '.join(why)}", why
    if (run / "kill_matrix.csv").is_file():  # selftest: failing rows are the point; the verdict is the matrix
        try:
            left = pd.read_csv(run / "kill_matrix.csv").query("verdict != 'killed'")["mutant"].tolist()
        except (KeyError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
            raise Unreadable(f"{run / 'kill_matrix.csv'}: cannot read it ({exc})") from exc
        if left:
            return False, f"FAILED: mutants survived every suite: {', '.join(left)}", why
        if why:
            return False, f"NOT PASSED: {'; '.join(why)}", why
        return True, "PASSED: every mutant killed", why
    bad = summary.problems(df)
    if len(bad):
        return False, f"FAILED: {len(bad)} failing or erroring rows", why
    if why:
        return False, f"NOT PASSED: {'; '.join(why)}", why
    return True, "PASSED: no failing or erroring row, and the run finished what it planned", why


def _environment(env: dict) -> pd.DataFrame:
    keys = [k for k in env if k != "argv"]
    values = [json.dumps(env[k]) if isinstance(env[k], dict) else env[k] for k in keys]
    return pd.DataFrame({"key": keys, "value": values})


def _check_plot(df: pd.DataFrame, path: Path) -> Path | None:
    compared = df[df["verdict"].isin(["pass", "fail"]) & (df["metric"] == "rel_l2") & (df["limit"] > 0)]
    if compared.empty:
        return None
    worst = (compared["value"] / compared["limit"]).groupby([compared["suite"], compared["provider"]]).max()
    labels = [f"{s} / {p}" for s, p in worst.index]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(worst) + 1.5))
    colors = ["tab:red" if v > 1 else "tab:green" for v in worst.values]
    # bars are compared by length: a linear axis from zero. A failure far past the limit would
    # flatten every other bar, so bars stop at CLIP x the limit and carry their value as text.
    shown = [min(v, CHECK_CLIP) for v in worst.values]
    ax.barh(labels, shown, color=colors)
    for y, v in enumerate(worst.values):
        if v > CHECK_CLIP:
            ax.text(CHECK_CLIP, y, f" {v:.3g} (off scale)", va="center", ha="right", color="white", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)  # the limit: right of it fails
    ax.set_xlim(0, CHECK_CLIP)
    ax.set_xlabel(f"worst error / limit (<= 1 passes; linear from 0, clipped at {CHECK_CLIP:g})")
    ax.set_title("checks against float64: worst case per suite and provider")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _bench_plot(bench: pd.DataFrame, metric: str, label: str, path: Path) -> Path | None:
    rows = bench[(bench["metric"] == metric) & bench["value"].notna()]
    if metric == "time_ms":  # the timed mode, not the clone's own time
        rows = rows[rows["quantity"] != "clone"]
    if rows.empty:
        return None
    table = rows.pivot_table(index="case", columns="provider", values="value", aggfunc="first")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    table.plot.bar(ax=ax, width=0.8)
    ax.set_ylabel(label)
    ax.set_xticks(range(len(table.index)), [c.split("/", 1)[1][:40] for c in table.index], rotation=20, ha="right")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _bench_table(bench: pd.DataFrame) -> pd.DataFrame:
    rows = bench[bench["metric"].isin(BENCH_METRICS) & (bench["quantity"] != "clone")]
    table = rows.pivot_table(index=["case", "provider"], columns="metric", values="value", aggfunc="first")
    return table[[m for m in BENCH_METRICS if m in table.columns]].reset_index()


def blocks(run: Path, df: pd.DataFrame, env: dict) -> list[Block]:
    _, status, _ = verdict(df, env, run)
    m = env.get("run") or {}
    done = f"{m.get('completed')} of {m.get('planned')} {m.get('unit')} run; " if m else ""
    out = [
        Block("text", f"**{status}.** {done}{len(df)} records in `{run.name}/records.csv`."),
        Block("h2", "Environment"),
        Block("table", table=_environment(env)),
        Block("h2", "Verdicts per suite and provider"),
        Block("table", table=summary.counts(df)),
    ]
    bad = summary.problems(df)
    if len(bad):
        out += [Block("h2", f"Failures and errors ({len(bad)}; first 100)"), Block("table", table=bad.head(100))]
    plot = _check_plot(df, run / f"{PLOT_PREFIX}checks.png")
    if plot:
        out += [Block("h2", "Checks against float64"), Block("image", image=plot)]
    bench = df[df["suite"] == "bench"]
    if len(bench):
        out += [Block("h2", "Measurements"), Block("table", table=_bench_table(bench))]
        for metric, label in (("time_ms", "median time, ms"), ("extra_mib", "extra memory over inputs, MiB")):
            plot = _bench_plot(bench, metric, label, run / f"{PLOT_PREFIX}{metric}.png")
            if plot:
                out.append(Block("image", image=plot))
    if (run / "kill_matrix.csv").is_file():
        out += [Block("h2", "Kill matrix"), Block("table", table=pd.read_csv(run / "kill_matrix.csv"))]
    theirs = sorted(p for p in run.glob("*.png") if not p.name.startswith(PLOT_PREFIX))
    if theirs:
        out += [Block("h2", "Plots of the run"), *[Block("image", image=p) for p in theirs]]
    return out


def _cell(v) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def to_markdown(title: str, page: list[Block]) -> str:
    lines = [f"# {title}", ""]
    for b in page:
        if b.kind == "h2":
            lines += [f"## {b.text}", ""]
        elif b.kind == "text":
            lines += [b.text, ""]
        elif b.kind == "table":
            lines.append(summary.markdown_table(b.table, list(b.table.columns)))
        elif b.kind == "image":
            lines += [f"![{b.image.stem}]({b.image.name})", ""]
    return "\n".join(lines)


def to_html(title: str, page: list[Block]) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif;max-width:1200px;margin:auto}}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for b in page:
        if b.kind == "h2":
            parts.append(f"<h2>{esc(b.text)}</h2>")
        elif b.kind == "text":
            parts.append(f"<p>{esc(b.text).replace('**', '')}</p>")
        elif b.kind == "table":
            head = "".join(f"<th>{esc(str(c))}</th>" for c in b.table.columns)
            body = "".join(
                "<tr>" + "".join(f"<td>{esc(_cell(v))}</td>" for v in row) + "</tr>"
                for row in b.table.itertuples(index=False)
            )
            parts.append(f"<table><tr>{head}</tr>{body}</table>")
        elif b.kind == "image":
            data = base64.b64encode(b.image.read_bytes()).decode()
            parts.append(f"<p><img alt='{esc(b.image.stem)}' src='data:image/png;base64,{data}'></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def build(run: Path) -> tuple[Path, Path, dict]:
    """Writes report.md (+ its PNGs) and report.html into the run folder; returns their paths and
    the run's verdict (passed, status, problems, counts, env). Unreadable on a damaged folder;
    OSError when the folder cannot be written."""
    run = Path(run)
    df, env = _load(run)
    title = f"ligerbench {env.get('command', 'run')} report: {run.name}"
    page = blocks(run, df, env)
    md, page_html = run / "report.md", run / "report.html"
    md.write_text(to_markdown(title, page))
    page_html.write_text(to_html(title, page))
    passed, status, problems = verdict(df, env, run)
    facts = {"passed": passed, "status": status, "problems": problems, "counts": runs.verdict_counts(df), "env": env}
    return md, page_html, facts
