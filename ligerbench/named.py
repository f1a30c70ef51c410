"""Providers named on the command line (`--provider`): ad-hoc ones added to the registry, and
no green without evidence for any of them.

    names = named.add_adhoc(registry, kernel, provider, mutates_input=mutates_input)
    named.require_loadable(registry, kernel, names, dev.type)      # Refused (exit 1), reason printed
    ...  # the run
    missing = named.missing_evidence(df, names)                    # exit 1 when one checked nothing
    named.print_missing(missing)

A name with a `:` is an ad-hoc provider (`mypkg.losses:my_ce`, `path/to/file.py:my_ce`:
ligerbench/adhoc.py). A provider the user asked for by name that cannot load, or that
every selected case skipped, makes the command exit 1 with the reason on the terminal: the run
compared nothing for it, and a green exit would say it had been checked.
"""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from ligerbench import adhoc, runs
from ligerbench.exits import Refused
from ligerbench.registry import Registry

# verdicts that show the provider ran and was compared with the truth
EVIDENCE = ("pass", "fail")


def add_adhoc(registry: Registry, kernel: str, names: list[str] | None, *, mutates_input: bool = False) -> list[str]:
    """Register each ad-hoc name of `names` for `kernel`; returns the names (the same list)."""
    names = list(names or [])
    specs = [n for n in names if adhoc.is_adhoc(n)]
    if mutates_input and not specs:
        raise runs.usage_error(
            "--mutates-input declares an ad-hoc provider (--provider MODULE:FUNCTION) writes its inputs; "
            "a registered provider declares it itself",
            "--mutates-input",
        )
    for spec in dict.fromkeys(specs):
        if (kernel, spec) in registry.providers:
            continue
        try:
            registry.add(adhoc.provider(kernel, spec, mutates_input=mutates_input))
        except ValueError as exc:
            raise runs.usage_error(str(exc), "--provider") from exc
    return names


def require_loadable(registry: Registry, kernel: str, names: list[str], device_type: str) -> None:
    """Exit 1, naming each reason, when a provider asked for by name cannot run on this device."""
    reasons = {}
    for name in dict.fromkeys(names):
        plugin = registry.failed_claims.get((kernel, name))
        if plugin is not None:  # the built-in of that name would answer for a plugin that is not there
            error = dict(registry.plugin_errors).get(plugin, "")
            reasons[name] = f"{name} was claimed by plugin {plugin!r}, which failed to load ({error})"
            continue
        reason = registry.provider(kernel, name).unavailable(device_type, ranks_known=False)  # ranks start later
        if reason:
            reasons[name] = reason
    if reasons:
        runs.console.print("[bold red]cannot run the provider(s) you named:[/]")
        for reason in reasons.values():
            runs.console.print(Text(f"  {reason}"), soft_wrap=True)
        runs.console.print("nothing was checked for them, so this is not a pass (exit 1)")
        raise Refused("a provider asked for by name cannot run here")


def missing_evidence(df: pd.DataFrame, names: list[str], evidence: tuple[str, ...] = EVIDENCE) -> dict[str, str]:
    """For each named provider with no row whose verdict is `evidence` (verify: compared with the
    truth; bench: measured): why (its skip or error messages)."""
    out = {}
    for name in dict.fromkeys(names):
        mine = df[df["provider"] == name] if len(df) else df
        if len(mine) and mine["verdict"].isin(evidence).any():
            continue
        if not len(mine):
            out[name] = "no case of this selection ran it"
            continue
        messages = list(dict.fromkeys(m for m in mine["message"].astype(str) if m))
        more = f" (and {len(messages) - 3} other reasons)" if len(messages) > 3 else ""
        what = "reported as info, never judged" if (mine["verdict"] == "info").any() else "skipped or errored"
        # rows with no message: figures no limit applies to (a same-row distance of 0 ulp, say)
        why = "; ".join(messages[:3]) + more if messages else f"{len(mine)} rows, none with a limit"
        out[name] = f"every case was {what}: {why}"
    return out


def print_missing(missing: dict[str, str]) -> None:
    """Name, on the terminal, each named provider that was compared on no case."""
    for name, reason in missing.items():
        runs.console.print(Text.assemble((f"{name} was named but checked on no case: ", "bold red"), reason))
    if missing:
        runs.console.print("nothing was compared for it, so this is not a pass (exit 1)")


def mark_summary(text: str, missing: dict[str, str]) -> str:
    """summary.md of a run whose named providers were checked on no case: never PASSED."""
    if not missing:
        return text
    text = text.replace("**Status: PASSED.**", "**Status: FAILED (a named provider was checked on no case).**", 1)
    lines = [f"- `{name}`: {reason}" for name, reason in missing.items()]
    return text + "\n## Named providers checked on no case\n\n" + "\n".join(lines) + "\n"
