#!/usr/bin/env bash
# Issue 34, session 17: after flp's gradient moved under its float32 logits (4 bytes a logit)
# and the first chunk's weight-gradient product is written, not added: the new race test, lp
# against TRL, flp and grpo beside their peers, and where grpo's and flp's time goes.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_log_probs_shared_storage.py tests/test_flce_shared_storage.py 2>&1 | tail -3
step timeout 100 $L bench --kernel lp --sweep tokens --provider ours --provider trl_triton --out "$R" 2>&1 \
    | grep -v "^$\|^|---" | tail -14
step timeout 200 $L bench --kernel flp --sweep heads --provider ours --provider ours_large_slices \
    --provider ours_trl_call --provider trl_chunked --provider compile_bf16_product --out "$R" 2>&1 \
    | grep -v "^$\|^|---" | tail -32
step timeout 170 $L bench --kernel grpo --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -18
step timeout 60 python3 results/examples/issue34-gpu/head_profile.py grpo llama3-8b ours_liger_memory liger_triton
step timeout 45 python3 results/examples/issue34-gpu/head_profile.py flp llama3-8b ours_large_slices
finish
