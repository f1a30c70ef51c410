#!/usr/bin/env bash
# Issue 34, "quick on a GPU is quick": the quick verify of each kernel in $KERNELS with its
# default providers, all at once on one GPU (the machine's 16 cores shared: each figure is an
# upper bound on the run alone), first with empty Triton and inductor caches (cold), then again
# (warm). Prints per kernel and pass: exit code, seconds, and the verdict line.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
rm -rf /tmp/qc
for pass in cold warm; do
  for k in $KERNELS; do
    (
      t0=$(date +%s.%N)
      timeout "${LIMIT:-270}" $L verify --kernel "$k" --preset quick --device cuda --out "$R/$pass-$k" > "$R/$pass-$k.log" 2>&1
      rc=$?
      echo "$k $pass: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/$pass-$k"/*/summary.md 2>/dev/null | cut -c1-120)"
    ) &
  done
  wait
done
finish
