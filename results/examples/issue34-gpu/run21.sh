#!/usr/bin/env bash
# Issue 34, session 18: Liger's float32 softcap gradient against the textbook slope's own
# roundings (softcap_slope_probe.py); grpo at Liger's memory beside Liger, with where the kernel
# time goes; then lp, flp, kd and pref's quick verify cold (each its own caches, four at once)
# and warm, each alone.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
step timeout 90 python3 results/examples/issue34-gpu/softcap_slope_probe.py 2>&1 | tee "$R/softcap_slope_probe.txt" | tail -14
step timeout 120 $L bench --kernel grpo --provider ours_liger_memory --provider liger_triton --out "$R" 2>&1 \
    | grep -v "^$\|^|---" | tail -8 | tee "$R/grpo_bench.txt"
step timeout 60 python3 results/examples/issue34-gpu/head_profile.py grpo llama3-8b ours_liger_memory liger_triton \
    2>&1 | tee "$R/grpo_profile.txt" | grep -v "^$" | head -34
cold_at_once 280 lp flp kd pref 2>&1 | tee "$R/passes.txt"
warm_alone 80 lp flp kd pref 2>&1 | tee -a "$R/passes.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
