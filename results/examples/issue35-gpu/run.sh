#!/usr/bin/env bash
# Issue 35 on one lent GPU (one call, ~7 min; each step capped): kd and flkd quick with every
# provider (ours strict; Liger's and TRL's adapters; torch.compile), selftest of both, one bench
# each (kd: N=2048 at V=152064; flkd: Qwen2.5-7B and Llama-3-8B heads at N=4096, bf16), and the
# reverse-KL probe of finding 3 (reverse_kl_orders.py). The first run's log: h200-first/.
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
step timeout 150 $L verify --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -30
step timeout 120 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -30
step timeout 40 $L selftest --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -8
step timeout 40 $L selftest --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -8
step timeout 60 $L bench --kernel kd --sweep tokens --tokens 2048 --out "$R" 2>&1 | tail -20
step timeout 90 $L bench --kernel flkd --sweep heads --tokens 4096 --out "$R" 2>&1 | tail -20
step timeout 40 python3 results/examples/issue35-gpu/reverse_kl_orders.py 2>&1 | tail -8
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
