#!/usr/bin/env bash
# Issue 34, session 17, third call: flp against TRL's chunked head with ours at a 2 GiB budget;
# the quick verify of the other five kernels at once, cold and warm (quick_waves.sh); then kd's
# and vp_flp's alone, warm, to size what running them at once added.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 150 $L bench --kernel flp --sweep heads --provider ours_large_slices --provider ours_trl_call \
    --provider trl_chunked --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -24
finish && mv "$OUT/runs.tgz" "$OUT/runs-bench.tgz"
KERNELS="vp_ce vp_flce vp_flp pref kd" LIMIT=200 bash results/examples/issue34-gpu/quick_waves.sh
mv "$OUT/runs.tgz" "$OUT/runs-waves.tgz"
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
for k in kd vp_flp; do
  step timeout 120 $L verify --kernel $k --preset quick --device cuda --out /tmp/alone/$k > /dev/null 2>&1
  grep -ho 'Status: [A-Z]*.*cases run' /tmp/alone/$k/*/summary.md
done
