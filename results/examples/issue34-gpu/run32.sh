#!/usr/bin/env bash
# Issue 34, session 19, call 7: the H200 rows, if this call gets an H200 (asked as nvidia-h200-x2;
# one GPU used): lp's tokens sweep beside the peers, flp's heads beside torch.compile of the bf16
# product and TRL's chunked head. On any other GPU it stops at once.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
if ! nvidia-smi -L | grep -q H200; then echo "not an H200: nothing run"; finish; exit 0; fi
export CUDA_VISIBLE_DEVICES=0
step timeout 200 $L bench --kernel lp --sweep tokens --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -40 | tee "$R/lp.txt"
step timeout 300 $L bench --kernel flp --sweep heads --provider ours --provider compile_bf16_product \
    --provider trl_chunked --provider ours_trl_call --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -30 | tee "$R/flp.txt"
find "$R" \( -name torch.log -o -name records.csv -o -name '*.png' \) -delete
finish
