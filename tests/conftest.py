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

And one setting for time in every run: each test runs on a Python frame stack with room to spare
(`pytest_runtest_protocol` below), see `_on_a_roomy_frame_stack`.
"""

import os
import sys

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


def _on_a_roomy_frame_stack(fn, *args):
    """fn(*args), its callees' frames in a fresh 512 KiB chunk of the thread's frame stack.

    CPython 3.11 keeps Python frames in 16 KiB chunks, allocates a chunk (mmap) when a call does
    not fit in the current one and frees it (munmap) when that call returns (python/cpython#142183,
    fixed by caching a chunk in later releases). A loop whose calls cross a chunk's end thrashes:
    every call maps, faults in and unmaps fresh pages. Which loop crosses an end depends only on
    the stack's depth, so a test that runs fast from the command line can thrash under pytest,
    whose own frames sit below it: Triton's interpreter did, selftest of flce 49 CPU-s from the
    command line, 126 CPU-s (65 of them in the kernel) in a test worker, with 8.6M page faults.
    This function's frame declares a 256 KiB evaluation stack it never uses, so calling it opens
    a new chunk sized to twice that, and the frames below it (a whole test) fit in the other half."""
    return fn(*args)


if sys.implementation.name == "cpython":  # 32768 words: 8 * (32768 + overhead) > 256 KiB, a 512 KiB chunk
    _on_a_roomy_frame_stack.__code__ = _on_a_roomy_frame_stack.__code__.replace(co_stacksize=32768)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """pytest's own protocol (setup, call, teardown, reports), on a roomy frame stack."""
    from _pytest.runner import pytest_runtest_protocol as protocol

    return _on_a_roomy_frame_stack(protocol, item, nextitem)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core and one more. Some tests wait rather than compute (a stalled
    rank's collective timeout, NCCL's watchdog grace, a wall clock, a signal's grace: about a
    minute of waiting in all); with a worker per core, that core idled meanwhile."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


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
