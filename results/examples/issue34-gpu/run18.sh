#!/usr/bin/env bash
# Issue 34, session 17: every single-GPU kernel's quick verify after the float specialization
# (kd and flp: run17.sh): one cold pass of the rest at once, then each alone, warm.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
K="lp grpo flkd ce flce"
for k in $K; do
  timeout 230 $L verify --kernel "$k" --preset quick --device cuda --out "$R/cold-$k" > "$R/cold-$k.log" 2>&1 &
done
wait
echo "cold pass (five at once) done at $(( $(date +%s) - T0 )) s"
for k in $K; do
  t0=$(date +%s.%N)
  timeout 100 $L verify --kernel "$k" --preset quick --device cuda --out "$R/warm-$k" > "$R/warm-$k.log" 2>&1
  rc=$?
  echo "$k warm, alone: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/warm-$k"/*/summary.md | cut -c1-100)"
done
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
