"""Results folders: `results/<run-id>/` with records.csv, summary.md and env.json.

Run ids are unique (time, command, kernel and a random suffix) and folders are created with
exist_ok=False, so no run overwrites another."""

from __future__ import annotations

import datetime
import json
import secrets
from pathlib import Path

DEFAULT_ROOT = Path("results")


def new_run_dir(root: Path, command: str, kernel: str) -> tuple[str, Path]:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{command}-{kernel}-{secrets.token_hex(3)}"
    path = Path(root) / run_id
    path.mkdir(parents=True, exist_ok=False)
    return run_id, path


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
