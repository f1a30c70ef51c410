#!/usr/bin/env bash
# Issue 34, session 17: where a warm quick verify's minute goes (kd, flp). One cold pass of both
# at once fills the caches; then each runs alone, warm, under cProfile: the functions with the
# most cumulative time.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
K="kd flp"
cold_at_once 250 $K
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
