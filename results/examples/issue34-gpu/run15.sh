#!/usr/bin/env bash
# Issue 34, session 17: where a warm quick verify's minute goes (kd, flp). One cold pass of both
# at once fills the caches; then each runs alone, warm, under cProfile: the functions with the
# most cumulative time, and the time by provider (the verify engine's run_case by provider).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
K="kd flp"
for k in $K; do
  timeout 250 $L verify --kernel "$k" --preset quick --device cuda --out "$R/cold-$k" > "$R/cold-$k.log" 2>&1 &
done
wait
echo "cold pass done at $(( $(date +%s) - T0 )) s"
for k in $K; do
  t0=$(date +%s)
  timeout 160 python3 -m cProfile -o "$R/$k.prof" -m ligerbench.cli verify --kernel "$k" --preset quick --device cuda \
      --out "$R/warm-$k" > "$R/warm-$k.log" 2>&1
  echo "== $k warm under cProfile: rc=$? $(( $(date +%s) - t0 )) s"
  python3 - "$R/$k.prof" <<'PY'
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative").print_stats(40)
PY
done 2>&1 | cut -c1-170
finish
