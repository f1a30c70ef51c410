#!/usr/bin/env bash
# Issue 34, session 19, call 5: another sample of the two targets that sessions 17-18 found level
# (grpo at Liger's memory; flp at TRL's memory at the Gemma-2 head), with flp against torch.compile.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 200 $L bench --kernel grpo --provider ours --provider ours_liger_memory --provider liger_triton \
    --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -16 | tee "$R/grpo.txt"
step timeout 300 $L bench --kernel flp --sweep heads --provider ours --provider torch_compile --provider trl_chunked \
    --provider ours_trl_call --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -30 | tee "$R/flp.txt"
find "$R" \( -name torch.log -o -name records.csv -o -name '*.png' \) -delete
finish
