"""Test setup: without a GPU our Triton kernels run through Triton's interpreter (the kernels
decide that themselves when imported: ligerbench/kernels/triton_mode.py).

Under pytest-xdist (`-n auto`, README's test command) two more settings, for time only:
  - each worker's PyTorch gets its share of the cores (cores // workers threads), in this
    process and, through OMP_NUM_THREADS, in the processes it starts: two workers of two
    threads each on CI's two cores spent their time in OpenMP waits (a selftest of flce and one
    of ce side by side: 81 and 91 s at two threads each, 49 and 61 s at one);
  - the tests marked `slow(seconds=S)` are sent to the workers first, longest first, one at a time
    (`pytest_xdist_make_scheduler`): sent in xdist's default chunks of consecutive tests, the
    longest landed last on one worker while the other had finished.
"""

import os

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, len(os.sched_getaffinity(0)) // WORKERS) if hasattr(os, "sched_getaffinity") else 1
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))  # before torch is imported; and for subprocesses

import pytest  # noqa: E402
import torch  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if WORKERS > 1:
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # in case torch was imported first


def expected_seconds(item) -> float:
    """A test's `slow(seconds=S)` (alone, on CI's two cores), 0 for any other."""
    marker = item.get_closest_marker("slow")
    return float(marker.kwargs.get("seconds", 0)) if marker else 0.0


def pytest_collection_modifyitems(config, items):
    # One process holds the kernels in one Triton mode: compiled when it sees a GPU, interpreted
    # otherwise. Tests that drive the CPU path (the CLI with --device cpu, --smoke, models on CPU)
    # need the interpreter; on a GPU machine, `CUDA_VISIBLE_DEVICES= pytest` runs them.
    if torch.cuda.is_available():
        marker, reason = "interpreter", "needs Triton's interpreter; run with CUDA_VISIBLE_DEVICES= to include"
    else:
        marker, reason = "gpu", "needs a CUDA device"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)
    # the longest first (a stable sort: the rest keep pytest's order); every worker sorts alike
    items.sort(key=lambda item: -expected_seconds(item))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's load scheduling, its tests sent one at a time (each worker keeps two queued), so
    the longest, sorted first, start first on every worker."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    config.option.maxschedchunk = 1
    return LoadScheduling(config, log)


@pytest.fixture
def device() -> str:
    return DEVICE
