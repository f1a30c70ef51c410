#!/usr/bin/env bash
# Issue 34, session 17: quick verify alone, warm. The caches are filled by one cold pass of the
# four kernels at once (quick_waves.sh's first pass), then each kernel's quick verify runs alone
# with its default providers; the seconds are the whole CLI's, import included.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
K="flp grpo flkd kd"
for k in $K; do
  timeout 280 $L verify --kernel "$k" --preset quick --device cuda --out "$R/cold-$k" > "$R/cold-$k.log" 2>&1 &
done
wait
echo "cold pass (four at once) done at $(( $(date +%s) - T0 )) s"
for k in $K; do
  t0=$(date +%s.%N)
  timeout 150 $L verify --kernel "$k" --preset quick --device cuda --out "$R/warm-$k" > "$R/warm-$k.log" 2>&1
  rc=$?
  echo "$k warm, alone: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/warm-$k"/*/summary.md | cut -c1-100)"
done
finish
