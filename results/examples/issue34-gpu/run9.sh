#!/usr/bin/env bash
# Issue 34, session 16: grpo and flp beside their peers after lp's backward read its single
# target once a row (both run log_probs' backward).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
timeout 200 python3 -m ligerbench.cli bench --kernel grpo --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -16
timeout 230 python3 -m ligerbench.cli bench --kernel flp --sweep heads --provider ours --provider trl_chunked \
    --provider compile_bf16_product --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -24
finish
