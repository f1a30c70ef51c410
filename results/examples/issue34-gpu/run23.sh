#!/usr/bin/env bash
# Issue 34, session 18: ce's and flce's quick verify cold, each alone (four at once they took
# 212 and 182 s: run22.sh), then grpo at Liger's memory beside Liger once more.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 240 ce 2>&1 | tee "$R/passes.txt"
cold_at_once 240 flce 2>&1 | tee -a "$R/passes.txt"
step timeout 120 $L bench --kernel grpo --provider ours_liger_memory --provider liger_triton --out "$R" 2>&1 \
    | grep -v "^$\|^|---" | tail -8 | tee "$R/grpo_bench.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
