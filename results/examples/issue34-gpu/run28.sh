#!/usr/bin/env bash
# Issue 34, session 19, call 2: dw_probe.py again with a TMA-descriptor Triton GEMM beside the
# pointer one (run27's best Triton reached 0.64-0.75x of cuBLAS's mm), and ce's tokens bench gated
# against its baseline (session 18's gate flagged three small-N ratios, not re-measured then).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 300 python3 results/examples/issue34-gpu/dw_probe.py 2>&1 | tee "$R/dw_probe.txt" | grep -v "max err"
step timeout 150 $L bench --kernel ce --sweep tokens --rep-ms 60 --out "$R/bench" 2>&1 | grep -v "^$\|^|---" | tail -22 | tee "$R/ce_bench.txt"
step $L gate "$(ls -d "$R"/bench/*-bench-ce-*)" --baseline results/baselines/bench-ce-tokens-full 2>&1 | grep -v "^$" | head -30 | tee "$R/ce_gate.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
