#!/usr/bin/env bash
# Issue 34, session 16: lp's backward with the single target read once a row, on whichever GPU
# this runs: its launch configs beside TRL (bwd_config_probe.py), then the tokens bench beside TRL.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
timeout 120 python3 results/examples/issue34-gpu/bwd_config_probe.py 2>&1 | tail -12
timeout 150 python3 -m ligerbench.cli bench --kernel lp --sweep tokens --tokens 8192 --provider ours \
    --provider trl_triton --out "$R" 2>&1 | grep -v "^$" | tail -22
finish
