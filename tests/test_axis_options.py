"""Every axis a kernel declares is a `verify` option of its own name (`--reduction none`, the same
as `--where reduction=none`), for the built-in kernels and a plugin's alike; and every command's
`-h` reads well at 80 columns (no line wider, no option help squeezed into a narrow column)."""

from __future__ import annotations

import json

import kl_plugin
import pytest
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench import axes
from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
COMMON = ["--device", "cpu", "--preset", "quick", "--collect-only", "--json"]
WIDE = {"COLUMNS": "300"}  # an error's one line stays one line in the panel


def collect(*args: str) -> tuple[int, list[str] | None]:
    """verify --collect-only: its exit code and the case ids it would run (None on an error)."""
    result = runner.invoke(app, ["verify", *args, *COMMON], env=WIDE)
    ids = json.loads(result.stdout)["case_ids"] if result.exit_code == 0 else None
    return result.exit_code, ids


def refused(*args: str) -> str:
    """A verify refused as a usage error: exit 2, no traceback; the error text, one line."""
    result = runner.invoke(app, ["verify", *args, *COMMON], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = [ln.strip("│ ") for ln in result.stderr.splitlines() if ln.startswith("│")]
    return line


# ----------------------------------------------------------------------------- the options


def test_an_axis_option_selects_what_where_selects():
    code, by_option = collect("--kernel", "ce", "--reduction", "none")
    assert code == 0
    _, by_where = collect("--kernel", "ce", "--where", "reduction=none")
    _, everything = collect("--kernel", "ce")
    assert by_option == by_where and 0 < len(by_option) < len(everything)
    assert all("/none/up-" in c for c in by_option)  # the reduction part of each id
    assert collect("--kernel", "ce", "--reduction=none") == (0, by_where)


def test_values_of_one_axis_are_alternatives_and_combine_with_where():
    _, two = collect("--kernel", "ce", "--reduction", "none", "--reduction", "sum")
    _, where_two = collect("--kernel", "ce", "--where", "reduction=none", "--where", "reduction=sum")
    assert two == where_two and len(two) > len(collect("--kernel", "ce", "--reduction", "none")[1])
    _, mixed = collect("--kernel", "ce", "--where", "reduction=none", "--reduction=sum")
    assert mixed == where_two  # --where and the option name alternatives of one axis
    _, both = collect("--kernel", "ce", "--reduction", "none", "--where", "dtype=bf16")
    _, where_both = collect("--kernel", "ce", "--where", "reduction=none", "--where", "dtype=bf16")
    assert both == where_both and both and all("/bf16/none/" in c for c in both)


def test_an_axis_with_an_underscore_is_an_option_with_a_dash():
    code, ids = collect("--kernel", "ce", "--ignore-pattern", "leading_run", "--logits", "confident")
    assert code == 0
    assert ids == collect("--kernel", "ce", "--where", "ignore_pattern=leading_run", "--where", "logits=confident")[1]
    assert ids and all("/leading_run/" in c and "/confident" in c for c in ids)


def test_real_options_keep_their_meaning_beside_axis_options():
    code, ids = collect("--kernel", "ce", "--dtype", "fp32", "-k", "sum", "--reduction", "sum")
    assert code == 0 and ids and all("/fp32/sum/" in c for c in ids)


def test_an_unknown_option_names_the_kernels_axis_options():
    line = refused("--kernel", "ce", "--foo", "1")
    assert line.startswith("no such option --foo for kernel ce; its axis options: --n, --v, --dtype, --reduction")
    assert "--ignore-pattern" in line and "--where" not in line
    assert "did you mean --provider?" in refused("--kernel", "ce", "--provder", "ours")


def test_an_unknown_value_names_the_valid_values_as_typed():
    line = refused("--kernel", "ce", "--reduction", "bogus")
    assert line == "--reduction 'bogus': 'bogus' is not a reduction of kernel ce; choose from none, mean, sum"
    assert refused("--kernel", "ce", "--reduction=bogus") == line
    assert "--ignore-pattern 'lead'" in refused("--kernel", "ce", "--ignore-pattern", "lead")
    # the --where form reads as before
    assert "--where 'reduction=bogus'" in refused("--kernel", "ce", "--where", "reduction=bogus")


def test_an_option_without_a_value_and_stray_arguments_are_refused():
    assert refused("--kernel", "ce", "--reduction").startswith("option --reduction needs a value")
    assert refused("--kernel", "ce", "--reduction", "--dtype", "bf16").startswith("option --reduction needs a value")
    assert refused("--kernel", "ce", "--reduction=").startswith("option --reduction needs a value")
    assert refused("--kernel", "ce", "stray") == "unexpected argument 'stray'"
    assert "unexpected argument 'sum'" in refused("--kernel", "ce", "--reduction", "none", "sum")
    # an axis of another kernel is no option of this one
    assert refused("--kernel", "ce", "--h", "32").startswith("no such option --h for kernel ce")


def _axis_cases():
    """Each built-in kernel's every axis, with its rarest value among the kernel's quick cases on
    CPU (one that selects something, and not everything where the axis varies)."""
    for name, spec in default_registry(plugins=False).kernels.items():
        grid = spec.grid("quick", "cpu")
        for axis in spec.axes:
            counts = {}
            for case in grid:
                counts[case.get(axis.name)] = counts.get(case.get(axis.name), 0) + 1
            value = min(counts, key=lambda v: (counts[v], str(v)))
            yield pytest.param(name, axis.name, str(value), id=f"{name}-{axis.name}")


@pytest.mark.parametrize(("kernel", "axis", "value"), list(_axis_cases()))
def test_every_axis_of_every_builtin_kernel_is_an_option(kernel, axis, value):
    option = axes.option_name(axis)
    by_option = collect("--kernel", kernel, option, value)
    assert by_option == collect("--kernel", kernel, "--where", f"{axis}={value}")
    assert by_option[0] == 0 and by_option[1]


def test_no_builtin_axis_is_shadowed_by_a_verify_option():
    """Were one (an axis named `device`), --device would stay verify's and the axis --where's only
    (-h would say so); today none is."""
    import typer.main

    command = typer.main.get_command(app).commands["verify"]
    own = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
    for name, spec in default_registry(plugins=False).kernels.items():
        assert not own & {axes.option_name(a.name) for a in spec.axes}, name
    assert "--where only" not in runner.invoke(app, ["verify", "-h"], env=WIDE).stdout


def test_a_plugin_kernels_own_axis_is_an_option(monkeypatch):
    register_plugin(monkeypatch, kl_plugin.register, name="kl")
    code, ids = collect("--kernel", "kl", "--teacher-temperature", "4.0")
    assert code == 0 and ids and all("/T4.0" in c for c in ids)
    assert (code, ids) == collect("--kernel", "kl", "--where", "teacher_temperature=4.0")
    assert collect("--kernel", "kl", "--teacher-temperature=4") == (0, ids)  # 4 names 4.0
    line = refused("--kernel", "kl", "--teacher-temperature", "2")
    assert line == "--teacher-temperature '2': '2' is not a teacher_temperature of kernel kl; choose from 1.0, 4.0"
    listed = runner.invoke(app, ["verify", "-h"], env={"COLUMNS": "120"}).stdout
    assert "--teacher-temperature" in listed  # -h's "Axis options" lists the plugin's kernel too


# ----------------------------------------------------------------------------- parse_axis_options


def test_parse_axis_options_is_a_pure_reading_of_the_tokens():
    ce = default_registry(plugins=False).kernels["ce"].axes
    tokens = ["--reduction", "none", "--ignore-pattern=leading_run", "--reduction", "sum"]
    assert axes.parse_axis_options(ce, tokens) == ["reduction=none", "ignore_pattern=leading_run", "reduction=sum"]
    assert axes.parse_axis_options(ce, []) == []
    with pytest.raises(axes.UnknownAxisValue, match="no such option --dtype.*through --where only: dtype"):
        axes.parse_axis_options(ce, ["--dtype", "bf16"], reserved={"--dtype"})  # a command's own option wins
    # values are parse_where's to check, named as typed
    with pytest.raises(axes.UnknownAxisValue, match=r"^--dtype 'fp64': 'fp64' is not a dtype"):
        axes.parse_where(ce, "quick", axes.parse_axis_options(ce, ["--dtype", "fp64"]), as_options=True)


# ----------------------------------------------------------------------------- -h at 80 columns

COMMANDS = ("verify", "list", "bench", "converge", "selftest", "gate", "report")


def squeezed(help_text: str) -> list[str]:
    """The lines of an option panel whose text continues in a column narrower than 30: a help
    wrapped beside wide name, short-name, type and metavar columns."""
    out = []
    for line in help_text.splitlines():
        inner = line[2:-1] if line.startswith("│") else ""
        text = inner.lstrip()
        if text and inner[0] == " " and len(inner) - (len(inner) - len(text)) < 30:
            out.append(line)
    return out


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_reads_well_at_80_columns(command, monkeypatch):
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)  # COLUMNS, not a width read at import
    args = [command, "-h"] if command else ["-h"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    assert squeezed(result.stdout) == []
    if command:
        assert "Examples:" in result.stdout and f"ligerbench {command}" in result.stdout
    wide = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert max(len(line) for line in wide.stdout.splitlines()) <= 120 and squeezed(wide.stdout) == []


def test_verify_help_shows_the_axis_options(monkeypatch):
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    text = runner.invoke(app, ["verify", "-h"], env={"COLUMNS": "80"}).stdout
    flat = " ".join(text.replace("│", " ").split())
    for example in ("--reduction none", "--dtype bf16", "--ignore-pattern leading_run", "--logits confident"):
        assert example in flat
    assert "ligerbench list" in flat and "Axis options" in text
    examples = [line.rstrip() for line in text[text.index("Examples:") :].splitlines()]
    assert examples[2] == "   ligerbench verify --kernel ce --reduction none"  # the first example
    # a long example wraps under itself, indented, not back to the margin
    assert "       --provider ours -x" in examples
    # every registered kernel's row in the axis panel
    for name in default_registry().kernels:
        assert any(line.startswith(f"│ {name} ") for line in text.splitlines()), name
