#!/usr/bin/env bash
# Issue 35, session 15, on one lent GPU: flkd after the gradients moved into forward (quick
# verify with every provider, selftest, the heads bench at N=8192 with ours_recompute beside
# ours), then converge llama-mini --distill for the three divergences (fp32 and bf16).
# Run from the repo root: PYTHONPATH=$PWD bash results/examples/issue35-gpu/run3.sh [steps...]
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-$PWD}"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step() { echo "== $*"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(verify bench converge)
for s in "${steps[@]}"; do
  case "$s" in
    verify)
      step timeout 210 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -12
      step timeout 60 $L selftest --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -4 ;;
    bench)
      step timeout 200 $L bench --kernel flkd --sweep heads --out "$R" 2>&1 | tail -24 ;;
    probe)
      step timeout 200 python3 results/examples/issue35-gpu/flkd_rows_probe.py 2>&1 | tail -12 ;;
    converge-*)
      step timeout 280 $L converge llama-mini --distill "${s#converge-}" --device cuda --out "$R" 2>&1 | tail -14 ;;
    converge)
      for d in jsd forward_kl reverse_kl; do
        step timeout 240 $L converge llama-mini --distill "$d" --device cuda --out "$R" 2>&1 | tail -14
      done ;;
  esac
done
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
