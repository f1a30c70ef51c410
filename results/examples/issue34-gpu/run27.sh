#!/usr/bin/env bash
# Issue 34, session 19, call 1: the weight-gradient accumulation probe (dw_probe.py: can a
# Triton GEMM hide dW's [V, H] traffic behind its math where cuBLAS's addmm_ does not?); on an
# H200 also lp's tokens sweep and flp's heads sweep beside the peers (the H200 rows never measured).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 360 python3 results/examples/issue34-gpu/dw_probe.py 2>&1 | tee "$R/dw_probe.txt"
if nvidia-smi -L | grep -q H200; then
  step timeout 150 $L bench --kernel lp --sweep tokens --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -20 | tee "$R/lp.txt"
  step timeout 200 $L bench --kernel flp --sweep heads --provider ours --provider torch_compile --provider trl_chunked \
      --provider ours_trl_call --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -24 | tee "$R/flp.txt"
fi
finish
