#!/usr/bin/env bash
# Issue 34, session 18: after _ce_fwd_kernel's per-row options became runtime flags (fewer
# compiled variants): the GPU tests, ce's quick verify cold alone and warm, and ce's tokens bench
# gated against its committed baseline (ours' ratios to the peers in the same run).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
step timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tail -2 | tee "$R/gpu_tests.txt"
cold_at_once 240 ce 2>&1 | tee "$R/passes.txt"
warm_alone 90 ce 2>&1 | tee -a "$R/passes.txt"
grep -h "^  FAIL" "$R/warm-ce.log" | awk '{print $3}' | sort | uniq -c | tee -a "$R/passes.txt"
find /tmp/qc/ce/triton -name '_ce_fwd_kernel.cubin' | wc -l | sed 's/^/_ce_fwd_kernel variants: /' | tee -a "$R/passes.txt"
step timeout 150 $L bench --kernel ce --sweep tokens --rep-ms 60 --out "$R/bench" 2>&1 | grep -v "^$\|^|---" | tail -22
step $L gate "$(ls -d "$R"/bench/*-bench-ce-*)" --baseline results/baselines/bench-ce-tokens-full 2>&1 | grep -v "^$" | head -30
find "$R" \( -name torch.log -o \( -name records.csv -path "*-verify-*" \) \) -delete
finish
