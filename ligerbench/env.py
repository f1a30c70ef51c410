"""The environment a run came from, saved beside its records as env.json."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def git_commit(repo: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo, timeout=10, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=repo,
            timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except Exception:
        return None


# The peer libraries whose installed versions every run records (suites/peers/ pins them;
# tests/test_peers.py checks every library a provider names is here).
PEER_DISTRIBUTIONS = (
    "liger-kernel",
    "cut-cross-entropy",
    "trl",
    "verl",
    "unsloth",
    "unsloth_zoo",
    "tensordict",
    "torch",
    "quack-kernels",
    "nvidia-cutlass-dsl",
)  # torch: its own linear_cross_entropy (suites/peers/torch_native.py); the CUTLASS DSL: QuACK's


def peer_versions() -> dict[str, str | None]:
    return {name: _version(name) for name in PEER_DISTRIBUTIONS}


def version_of(distribution: str) -> str | None:
    """The installed version of a distribution, or None."""
    return _version(distribution)


def capture(device: torch.device, seed: int, **extra) -> dict:
    on_gpu = device.type == "cuda"
    return {
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device_type": device.type,
        "device_name": torch.cuda.get_device_name(device) if on_gpu else platform.processor() or platform.machine(),
        "triton_mode": "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled",
        "seed": seed,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "liger_kernel": _version("liger-kernel") or _version("liger_kernel"),
        "cut_cross_entropy": _version("cut-cross-entropy") or _version("cut_cross_entropy"),
        "peers": peer_versions(),
        # a copy of the tree whose .git is missing or stale (e.g. on a lent GPU box) is told its commit
        "git_commit": os.environ.get("LIGERBENCH_COMMIT") or git_commit(Path(__file__).resolve().parent.parent),
        "argv": sys.argv,
        **extra,
    }
