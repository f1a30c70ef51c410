#!/usr/bin/env bash
# Issues 34 and 35, session 16, third GPU call: one-block-a-program backwards against the row walk
# (bwd_split_probe.py: lp beside TRL, the distillation backward; that step needs fa1492e, whose
# code and probe were removed after the run), the stop probe (SIGTERM to the
# flce heads bench with every provider), then the kd and flkd benches beside the peers.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
AFTER=60 step bash results/examples/issue34-gpu/stop_probe.sh 2>&1 | tail -8
step timeout 60 $L bench --kernel kd --sweep tokens --tokens 2048 --out "$R" 2>&1 | tail -12
step timeout 230 $L bench --kernel flkd --sweep heads --out "$R" 2>&1 | tail -30
finish
