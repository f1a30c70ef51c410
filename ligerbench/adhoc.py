"""Ad-hoc providers: a kernel author's callable, named on the command line, no package needed.

    ligerbench verify --kernel ce --provider mypkg.losses:my_ce
    ligerbench verify --kernel ce --provider path/to/losses.py:my_ce

`module:attr` imports the module (the current directory is searched too, as `python -m` would)
and `file.py:attr` loads that file alone, under a private module name; `attr` may be dotted
(`Losses.forward`). The provider is named by the text given, declared non-mutating unless the
command's `--mutates-input` says otherwise, and runs on every device. A `supports` attribute on
the callable (case -> reason or None) declares the cases it cannot run (docs/providers.md).

Anything that goes wrong while loading (no such module or file, an exception inside it, no such
attribute, not callable) makes the provider unavailable with that reason, never a crash; a
command that was asked for it by name then exits 1 and prints the reason (ligerbench/named.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ligerbench.registry import Provider


def is_adhoc(name: str) -> bool:
    """A provider name is an ad-hoc spec when it has a `:` (registered names never do)."""
    return ":" in name


def split(spec: str) -> tuple[str, str]:
    """('mypkg.losses', 'my_ce') from 'mypkg.losses:my_ce'; the last `:` separates."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION or PATH.py:FUNCTION")
    return where, attr


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        top = name.split(".")[0]
        # the console script's sys.path lacks the working directory; `python -m` has it
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(name)


def _load_file(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"_ligerbench_adhoc_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@functools.cache
def load(spec: str) -> Callable:
    """The callable a spec names (cached: a provider is loaded once per case). What goes wrong
    is raised as it is (ModuleNotFoundError, FileNotFoundError, AttributeError, an error inside
    the module): Provider.unavailable turns it into the reason."""
    where, attr = split(spec)
    obj = _load_file(Path(where)) if where.endswith(".py") else _import_module(where)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{attr} is a {type(obj).__name__}, not a callable")
    return obj


def _always(case) -> str | None:
    return None


def provider(kernel: str, spec: str, *, mutates_input: bool = False) -> Provider:
    """A Provider for `spec`. The callable is loaded now when it can be, to read its `supports`;
    when it cannot, the provider's load() raises the reason again (it is then unavailable)."""
    try:
        supports = getattr(load(spec), "supports", None) or _always
    except Exception:  # noqa: BLE001 -- unavailable: run_plan asks load() again and reports why
        supports = _always
    if not callable(supports):
        raise ValueError(f"{spec}: its `supports` attribute must be a callable (case -> reason or None)")
    where = "a file" if split(spec)[0].endswith(".py") else "a module"
    return Provider(
        name=spec,
        kernel=kernel,
        description=f"ad-hoc: {split(spec)[1]} from {where}, named on the command line",
        load=lambda: load(spec),
        mutates_input=mutates_input,
        supports=supports,
    )
