#!/usr/bin/env bash
# Issue 35 on one lent GPU (one call, ~10 min): kd and flkd quick (every provider: ours strict, Liger's
# and TRL's adapters compiled), the full preset for ours, selftest of both, and the bench targets
# (kd tokens sweep at V=152064 and its divergences; flkd heads at N=8192, Qwen2.5-7B and Llama-3-8B
# sized, bf16: time against the best peer, extra memory against the student's gradients + 25%).
# Run from the repo root: PYTHONPATH=$PWD bash results/examples/issue35-gpu/run.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-$PWD}"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
pip list 2>/dev/null | grep -Ei "liger|^trl " || echo "peers not installed: their rows will be skips"
step() { echo "== $*"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 150 $L verify --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -40
step timeout 150 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -40
step timeout 150 $L verify --kernel kd --device cuda --preset full --provider ours --repeat 2 --out "$R" 2>&1 | tail -20
step timeout 150 $L verify --kernel flkd --device cuda --preset full --provider ours --provider ours_small_chunks --out "$R" 2>&1 | tail -20
step timeout 60 $L selftest --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -12
step timeout 60 $L selftest --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -12
step timeout 120 $L bench --kernel kd --sweep tokens --out "$R" 2>&1 | tail -25
step timeout 90 $L bench --kernel kd --sweep divergences --out "$R" 2>&1 | tail -25
step timeout 150 $L bench --kernel flkd --sweep heads --out "$R" 2>&1 | tail -25
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
