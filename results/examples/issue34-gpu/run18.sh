#!/usr/bin/env bash
# Issue 34, session 17: every single-GPU kernel's quick verify after the float specialization
# (kd and flp: run17.sh): one cold pass of the rest at once, then each alone, warm.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 230 lp grpo flkd ce flce
warm_alone 100 lp grpo flkd ce flce
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
