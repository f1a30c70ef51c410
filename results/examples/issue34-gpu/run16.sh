#!/usr/bin/env bash
# Issue 34, session 17: which compiled graph of a quick verify holds CPU (C++) kernels, the ones
# that send inductor to its CPU vector-ISA check (g++ test builds, ~40 s a process on the H100
# box: run15's profile). One provider at a time, inductor's output code logged; the C++ kernels'
# count and the first one's surroundings.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
for kp in kd:torch_compile flp:torch_compile kd:liger flp:liger; do
  k=${kp%%:*}; p=${kp##*:}
  t0=$(date +%s)
  TORCH_LOGS=output_code timeout 150 $L verify --kernel "$k" --preset quick --device cuda --provider "$p" \
      --out "$R/$k-$p" > "$R/$k-$p.log" 2>&1
  echo "== $k $p: rc=$? $(( $(date +%s) - t0 )) s; C++ kernels: $(grep -c "async_compile.cpp" "$R/$k-$p.log"), Triton kernels: $(grep -c "async_compile.triton(" "$R/$k-$p.log")"
  grep -m1 -B40 -A25 "async_compile.cpp" "$R/$k-$p.log" | grep -v "^\s*$" | cut -c1-160 | head -70
done
finish
