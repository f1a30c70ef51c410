"""A run keeps its SIGTERM handler when native code replaces it behind Python's back (on a GPU,
LLVM inside Triton's first compile does: a killed `verify --kernel flce` lost its summary)."""

import signal
import subprocess
import sys

import pytest

SCRIPT = """
import ctypes, os, signal, sys
from ligerbench.lifecycle import Life, Terminated
from ligerbench.signals import stop_point, stop_signals
libc = ctypes.CDLL(None)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
with stop_signals():
    libc.signal(signal.SIGTERM, None)  # SIG_DFL at the C level; signal.getsignal still names ours
    if sys.argv[1] == "reassert":
        stop_point()
    if sys.argv[1] == "done":
        Life(None, True).done()  # a unit of work finished: the run's handler is put back
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    except Terminated:
        print("terminated cleanly", flush=True)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="libc signal() through ctypes")
@pytest.mark.parametrize("mode", ["reassert", "done", "none"])
def test_the_handler_is_put_back_after_native_code_replaced_it(mode):
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60)
    if mode != "none":
        assert done.returncode == 0 and "terminated cleanly" in done.stdout, done.stderr
    else:  # the failure the reassertion prevents: the default action ends the process without a word
        assert done.returncode == -signal.SIGTERM and "terminated cleanly" not in done.stdout


KEPT = """
import os, signal
from ligerbench.lifecycle import Life, Terminated
from ligerbench.signals import stop_signals
with stop_signals():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    except BaseException:  # a library's except BaseException, a __del__: the work goes on
        pass
    print("work went on", flush=True)
    try:
        Life(None, True).done()  # the unit's end: the stop comes back here
    except Terminated:
        print("stopped at the unit's end", flush=True)
"""


def test_a_stop_whose_exception_was_kept_is_raised_again_at_the_end_of_the_unit():
    done = subprocess.run([sys.executable, "-c", KEPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split("\n")[:2] == ["work went on", "stopped at the unit's end"], done
