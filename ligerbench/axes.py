"""A kernel's case axes, declared the way a pytest grid is: each axis a name, its values (per
preset where they differ) and what each value stands for (the caller it represents). Case ids,
records columns, `verify --where`, verify's axis options (`--reduction none`), `gate --subset` and
`list` are all derived from the declaration, so a kernel with new axes edits nothing outside its
own package.

    Axis("reduction", "how the per-token losses are reduced", ("none", "mean", "sum"), default="mean",
         means={"none": "a per-token loss the caller masks or weights", ...})
    parse_where(axes, "quick", ["reduction=none", "dtype=bf16"])  ->  {"reduction": {"none"}, "dtype": {"bf16"}}
    parse_axis_options(axes, ["--reduction", "none"])  ->  ["reduction=none"]
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NO_DEFAULT = object()  # an axis every case must name (no value stands in when it is left out)


@dataclass(frozen=True)
class Axis:
    """One parameter of a kernel's cases."""

    name: str
    about: str  # what the axis is, one line (`ligerbench list` shows it)
    # every value a case may take: one tuple, or per preset ({"quick": ..., "full": ...})
    values: tuple | Mapping[str, tuple] = field(hash=False)
    # value -> the caller it stands for (why the value is in the grid); shown by `list`
    means: Mapping[Any, str] = field(default_factory=dict, hash=False)
    default: Any = NO_DEFAULT  # the value of a case that does not name the axis
    # how a value is written in a case id: tag + value ("n" -> n16, "up-" -> up-ones); `label`
    # replaces that when given; a value in `hidden` is left out of the id (older ids still match)
    tag: str = ""
    label: Callable[[Any], str] | None = field(default=None, compare=False)
    hidden: tuple = ()
    glued: bool = False  # written onto the previous part of the id instead of a part of its own

    def values_for(self, preset: str | None = None) -> tuple:
        """The axis's values in a preset (all presets' values, in order, when preset is None)."""
        if not isinstance(self.values, Mapping):
            return tuple(self.values)
        if preset is None:
            return tuple(dict.fromkeys(v for vals in self.values.values() for v in vals))
        return tuple(self.values.get(preset, ()))

    def part(self, value: Any) -> str | None:
        """This axis's part of a case id, or None where the value is left out."""
        if value in self.hidden:
            return None
        return self.label(value) if self.label is not None else f"{self.tag}{value}"


def case_id(kernel: str, params: Mapping[str, Any], axes: Iterable[Axis]) -> str:
    """kernel/part/part/...: the parts of the declared axes, in declared order."""
    parts = [kernel]
    for axis in axes:
        if axis.name not in params:
            continue
        part = axis.part(params[axis.name])
        if part is None:
            continue
        if axis.glued:
            parts[-1] += part
        else:
            parts.append(part)
    return "/".join(parts)


def fill(kernel: str, axes: tuple[Axis, ...], values: Mapping[str, Any]) -> dict[str, Any]:
    """A case's params in declared axis order, defaults filled in; unknown or missing ones refused."""
    names = [a.name for a in axes]
    unknown = [k for k in values if k not in names]
    if unknown:
        raise ValueError(f"kernel {kernel!r} has no axis {', '.join(unknown)}; its axes: {', '.join(names)}")
    out = {}
    for a in axes:
        if a.name in values:
            out[a.name] = values[a.name]
        elif a.default is not NO_DEFAULT:
            out[a.name] = a.default
        else:
            raise ValueError(f"a case of kernel {kernel!r} must name its {a.name!r} ({a.about})")
    return out


# ----------------------------------------------------------------------------- --where AXIS=VALUE


class UnknownAxisValue(ValueError):
    """A --where (or --subset) names an axis the kernel lacks, or a value the axis lacks; the
    message lists the valid ones. The CLI maps it to a usage error (exit 2)."""


def parse_where(
    axes: tuple[Axis, ...], preset: str | None, items: Iterable[str], *, kernel: str = "", as_options: bool = False
) -> dict:
    """AXIS=VALUE items (repeatable; values of one axis are alternatives, axes all apply) ->
    {axis: {value, ...}}, each value the axis's own (an int axis gets an int). The values a
    preset allows are those the axis declares for it. `as_options`: the items came from axis
    options (parse_axis_options), and a message names them as typed, `--reduction 'bogus'`."""
    by_name = {a.name: a for a in axes}
    of = f" of kernel {kernel}" if kernel else ""
    out: dict[str, set] = {}
    for item in items:
        name, sep, text = item.partition("=")
        typed = f"{option_name(name)} {text!r}" if as_options else f"--where {item!r}"
        if not sep or not name or not text:
            raise UnknownAxisValue(f"{typed}: expected AXIS=VALUE, e.g. reduction=none")
        if name not in by_name:
            raise UnknownAxisValue(f"{typed}: no axis {name!r}{of}; its axes: {', '.join(by_name)}")
        known = by_name[name].values_for(preset)
        match = [v for v in known if _same(v, text)]
        if not match:
            shown = ", ".join(map(str, known))
            raise UnknownAxisValue(f"{typed}: {text!r} is not a {name}{of}; choose from {shown}")
        out.setdefault(name, set()).add(match[0])
    return out


def option_name(axis: str) -> str:
    """The command-line option of an axis: `ignore_pattern` -> `--ignore-pattern`."""
    return "--" + axis.replace("_", "-")


def parse_axis_options(
    axes: tuple[Axis, ...], tokens: Sequence[str], *, kernel: str = "", reserved: Iterable[str] = ()
) -> list[str]:
    """Axis options, each axis an option of its own name (`_` written `-`): the tokens a command
    did not know itself, `--reduction none` or `--reduction=none`, repeatable -> AXIS=VALUE items
    for parse_where (which checks the values). An option that is no axis of the kernel, one with
    no value and a stray argument are refused (UnknownAxisValue), naming the axis options.
    `reserved`: the command's own option names; an axis whose option is one of them is reached
    through --where only (the command's option wins).

        parse_axis_options(axes, ["--reduction", "none", "--dtype=bf16"])  ->  ["reduction=none", "dtype=bf16"]
    """
    reserved = set(reserved)
    by_option = {option_name(a.name): a for a in axes if option_name(a.name) not in reserved}
    where_only = [a.name for a in axes if option_name(a.name) in reserved]
    items: list[str] = []
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        if not token.startswith("--") or token == "--":
            last = option_name(items[-1].partition("=")[0]) if items else ""
            hint = f" (one value per option: {last} A {last} B)" if last else ""
            raise UnknownAxisValue(f"unexpected argument {token!r}{hint}")
        opt, sep, text = token.partition("=")
        if opt not in by_option:
            of = f" for kernel {kernel}" if kernel else ""
            also = f" (through --where only: {', '.join(where_only)})" if where_only else ""
            near = difflib.get_close_matches(opt, [*by_option, *(r for r in reserved if r.startswith("--"))], n=1)
            guess = f"; did you mean {near[0]}?" if near else ""
            raise UnknownAxisValue(f"no such option {opt}{of}; its axis options: {', '.join(by_option)}{also}{guess}")
        axis = by_option[opt]
        if not sep:
            text = rest.pop(0) if rest and not rest[0].startswith("--") else ""
        if not text:
            shown = ", ".join(map(str, axis.values_for()))
            raise UnknownAxisValue(f"option {opt} needs a value ({opt} VALUE), one of {shown}")
        items.append(f"{axis.name}={text}")
    return items


def _same(value: Any, text: str) -> bool:
    """A typed value against the text of --where: 4 names 4.0, true names True."""
    if str(value) == text:
        return True
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(text) == value
        except ValueError:
            return False
    return False


def case_matches(case, filters: Mapping[str, set]) -> bool:
    """A case is kept when, for each filtered axis, its value is one of those chosen."""
    return all(not chosen or case.get(name) in chosen for name, chosen in filters.items())


def summary(axes: tuple[Axis, ...]) -> str:
    """One line: each axis with its values (all presets'), as `list` prints it."""
    return "; ".join(f"{a.name}: {', '.join(map(str, a.values_for()))}" for a in axes)


def describe(axes: tuple[Axis, ...]) -> list[dict]:
    """The axes as plain data (`ligerbench list --json`)."""
    return [
        {
            "name": a.name,
            "about": a.about,
            "values": {p: list(v) for p, v in a.values.items()} if isinstance(a.values, Mapping) else list(a.values),
            "means": {str(k): v for k, v in a.means.items()},
        }
        for a in axes
    ]
