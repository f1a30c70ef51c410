#!/usr/bin/env bash
# Issues 34 and 35, session 16, one lent GPU: flkd quick verify with every provider (does the
# careful yardstick's CPU draw clear ours' float32 reverse-KL check?), the reverse-KL probe on
# the GPU, a per-kernel profile of the fused heads (heads_profile.py), kd's bench beside Liger,
# and on an H100 lp's tokens bench beside TRL's Triton kernel (issue 34 asks for both GPUs).
# Run from the repo root with the peers' wheels in .whl3/: bash results/examples/issue35-gpu/run4.sh
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 230 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -16
step timeout 40 python3 results/examples/issue35-gpu/reverse_kl_logits_probe.py cuda 2>&1 | tail -14
step timeout 150 python3 results/examples/issue35-gpu/heads_profile.py flkd-qwen flce-gemma flce-llama 2>&1 | tail -110
step timeout 60 $L bench --kernel kd --sweep tokens --tokens 2048 --out "$R" 2>&1 | tail -14
if nvidia-smi -L | grep -q H100 && [ $(( $(date +%s) - T0 )) -lt 470 ]; then
  step timeout 110 $L bench --kernel lp --sweep tokens --tokens 8192 --provider ours --provider trl_triton --out "$R" 2>&1 | tail -14
fi
finish
