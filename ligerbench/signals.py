"""How a run stops when told to: SIGINT and SIGTERM while its work runs (ligerbench/lifecycle.py
drives them; the exit codes are ligerbench/exits.py's).

    with stop_signals(on_stuck=give_up):      # SIGINT raises KeyboardInterrupt, SIGTERM Terminated
        work()                                # each unit of work ends with stop_point()
    with signals_held():                      # the write-up: a repeated signal cannot cut it short
        summary()

Three ways a stop can fail, each seen or possible on a GPU, and what answers each:

  - native code replaces the handler at the C level (LLVM, at Triton's first compile):
    `stop_point()` puts it back once per unit of work;
  - the exception lands where it is kept (a `__del__`, a weakref or GC callback, a library's
    `except BaseException`) and the work goes on: seen on an H100, a `bench --kernel flce --sweep
    heads` still running 10 s after `timeout`'s SIGTERM. `stop_point()` raises it again at the
    next unit's end (bench: the next provider at a sweep point);
  - the main thread sits in native code (a compile, a device sync) or in one unit long enough
    (a cold torch.compile of a large head) that the next unit's end is far off: no Python-level
    handler runs there. A watchdog thread hears the signal through signal.set_wakeup_fd (the
    C-level handler writes to it from any thread) and, `grace_s()` seconds later, if the run
    has not been written up, calls `on_stuck(signum)`, which writes the manifest from the rows
    already written and ends the process (lifecycle.execute's `give_up`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

from ligerbench.exits import Terminated

STOPS = (signal.SIGINT, signal.SIGTERM)
# Seconds from the first stop signal to the watchdog's forced end: `timeout -k 10`, CI runners and
# docs/usage.md's promise ("Exit codes and run manifests": a run stops within 10 s of either signal)
# give a run 10 s; the write-up (rows, manifest, summary, plots) takes 1-3 s.
# LIGERBENCH_STOP_GRACE_S sets it (the tests make it short).
GRACE_S = 8.0
_WAKE_DONE = b"\x00"  # written by stop_signals' exit: no signal has number 0


def grace_s() -> float:
    return float(os.environ.get("LIGERBENCH_STOP_GRACE_S", GRACE_S))


class _Stopping:
    """The stop_signals in force: its handler and the first stop signal it received, if any."""

    def __init__(self, handler: Callable):
        self.handler = handler
        self.signum: int | None = None


_IN_FORCE: list[_Stopping] = []


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stop_point() -> None:
    """The end of a unit of work (Life.done): put the run's handler back at the C level, and
    raise the stop again if a signal came and its exception was kept by the code it landed in.

    The handler: native code can replace it behind Python's back: the first Triton compile on a
    GPU registers LLVM's signal handlers (seen on an H100: a SIGTERM during `verify --kernel flce
    --preset full` then ended the process at once, with no summary and a manifest at 0 rows,
    while signal.getsignal still named ours). LLVM registers once a process, so from the unit
    after the first compile on, the run ends cleanly."""
    if not (_IN_FORCE and _main_thread()):
        return
    stopping = _IN_FORCE[-1]
    for s in STOPS:
        signal.signal(s, stopping.handler)
    if stopping.signum is not None:
        raise Terminated if stopping.signum == signal.SIGTERM else KeyboardInterrupt


@contextlib.contextmanager
def stop_signals(on_stuck: Callable[[int], None] | None = None) -> Iterator[None]:
    """While the work runs, SIGINT raises KeyboardInterrupt and SIGTERM raises Terminated, once:
    Python's default for SIGTERM would end the process without a word, and a repeat (`timeout`
    signals the process and then its whole group, a user presses Ctrl-C twice) would land in the
    middle of the clean-up. The previous handlers come back afterwards, unless a real signal came:
    then both are ignored until the process exits. With `on_stuck`, a watchdog calls it
    `grace_s()` after the first signal if this block has not ended by then (module docstring).
    Outside the main thread no handler can be set, and nothing changes."""
    if not _main_thread():
        yield
        return

    def stop(signum, frame):
        if stopping.signum is not None:  # already on its way out: the first signal's exception is being handled
            return
        stopping.signum = signum
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    stopping = _Stopping(stop)
    previous = {s: signal.signal(s, stop) for s in STOPS}
    _IN_FORCE.append(stopping)
    watchdog = _Watchdog(on_stuck) if on_stuck else None
    try:
        yield
    finally:
        if watchdog:
            watchdog.stop()
        _IN_FORCE.remove(stopping)
        for s, handler in previous.items():
            # once a real signal arrived the process is on its way out: a repeat (`timeout`
            # signals the process, then its group) must not kill it with the default action
            # between here and its exit code (seen: -15 instead of 143 when the clean-up was fast)
            signal.signal(s, signal.SIG_IGN if stopping.signum is not None else handler)


class _Watchdog:
    """A daemon thread reading the wakeup fd: on SIGINT or SIGTERM it waits grace_s() for stop(),
    then calls on_stuck(signum). Only one wakeup fd exists a process; the previous one comes back."""

    def __init__(self, on_stuck: Callable[[int], None]):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # set_wakeup_fd's requirement
        try:
            self.previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter: no watchdog
            self.previous = None
            self._close()
            self.thread = None
            return
        self.thread = threading.Thread(target=self._watch, args=(on_stuck, grace_s()), daemon=True)
        self.thread.start()

    def _watch(self, on_stuck: Callable[[int], None], grace: float) -> None:
        signum = None
        while signum is None:
            data = os.read(self.read_fd, 64)
            if not data or _WAKE_DONE in data:
                return
            signum = next((s for s in data if s in STOPS), None)
        deadline = time.monotonic() + grace
        while True:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:  # the grace ran out with the run still not written up
                on_stuck(signum)
                return
            if _WAKE_DONE in os.read(self.read_fd, 64):
                return
            # a repeated signal (`timeout` signals the process, then its group): keep waiting

    def stop(self) -> None:
        if self.thread is None:
            return
        signal.set_wakeup_fd(self.previous)
        os.write(self.write_fd, _WAKE_DONE)
        self.thread.join(timeout=1.0)
        self._close()

    def _close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while a stopped run is written up (rows, manifest, summary): a
    second Ctrl-C or a CI runner's repeated SIGTERM must not cut the summary short."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in STOPS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
