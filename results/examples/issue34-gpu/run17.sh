#!/usr/bin/env bash
# Issue 34, session 17: after compiled() specialized float arguments: kd's and flp's quick verify,
# cold (both at once, inductor's output code logged: C++ kernels counted), then each alone, warm.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
K="kd flp"
for k in $K; do
  TORCH_LOGS=output_code timeout 250 $L verify --kernel "$k" --preset quick --device cuda --out "$R/cold-$k" \
      > "$R/cold-$k.log" 2>&1 &
done
wait
for k in $K; do
  echo "$k cold: C++ kernels in its compiled graphs: $(cat "$R"/cold-$k/*/torch.log | grep -c 'async_compile.cpp'), Triton: $(cat "$R"/cold-$k/*/torch.log | grep -c 'async_compile.triton(')"
done
echo "cold pass done at $(( $(date +%s) - T0 )) s"
for k in $K; do
  t0=$(date +%s.%N)
  timeout 150 $L verify --kernel "$k" --preset quick --device cuda --out "$R/warm-$k" > "$R/warm-$k.log" 2>&1
  rc=$?
  echo "$k warm, alone: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/warm-$k"/*/summary.md | cut -c1-100)"
done
find "$R" -name torch.log -delete
finish
