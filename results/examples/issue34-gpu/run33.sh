#!/usr/bin/env bash
# Issue 34, session 19: where the time goes at the Gemma-2 head (V = 256000, H = 2304), where
# ours sits furthest above its four products: flp ours and ours_trl_call beside TRL's chunked
# head, and flce ours (its vocabulary split) beside torch.compile.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 150 python3 results/examples/issue34-gpu/head_profile.py flp gemma2-2b ours ours_trl_call trl_chunked 2>&1 | tee "$R/flp_gemma.txt"
step timeout 150 python3 results/examples/issue34-gpu/head_profile.py flce gemma2-2b ours torch_compile 2>&1 | tee "$R/flce_gemma.txt"
finish
