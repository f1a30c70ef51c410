"""PyTorch compiler warnings go to the run's torch.log, not the terminal: dynamo's recompilation
warnings used to fill the screen during a verify with the torch.compile peer."""

from __future__ import annotations

import logging

from ligerbench.lifecycle import torch_logs_to


def test_dynamo_warnings_land_in_the_run_log_and_the_loggers_come_back(tmp_path, capsys):
    logger = logging.getLogger("torch._dynamo.convert_frame")  # a child: what dynamo really logs to
    parent = logging.getLogger("torch._dynamo")
    before = (parent.handlers[:], parent.propagate)
    with torch_logs_to(tmp_path / "torch.log"):
        logger.warning("torch._dynamo hit config.recompile_limit (8)")
    assert "recompile_limit" in (tmp_path / "torch.log").read_text()
    assert "recompile_limit" not in capsys.readouterr().err
    assert (parent.handlers, parent.propagate) == before


def test_the_interpreters_numpy_warnings_land_in_the_run_log_and_others_do_not(tmp_path):
    import warnings

    elsewhere = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest, **kw: elsewhere.append(str(message))  # the terminal
        before = warnings.showwarning
        with torch_logs_to(tmp_path / "torch.log"):
            interpreter = "/site-packages/triton/runtime/interpreter.py"
            warnings.warn_explicit("divide by zero encountered in divide", RuntimeWarning, interpreter, 599)
            warnings.warn_explicit("a provider's own deprecation", DeprecationWarning, "/mypkg/losses.py", 3)
        assert warnings.showwarning is before
    log = (tmp_path / "torch.log").read_text()
    assert "divide by zero" in log and elsewhere == ["a provider's own deprecation"]
