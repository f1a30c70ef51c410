#!/usr/bin/env bash
# Issue 34, "quick on a GPU is quick": does torch._inductor's CPU vector-ISA check (g++ test
# builds in subprocesses, seen under cProfile in a warm lp quick verify) cost a warm run its
# seconds? lp quick verify: cold with TORCHINDUCTOR_VEC_ISA_OK=1 (fills the caches), then warm
# with it, then warm without it. Wall seconds of each.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export TRITON_CACHE_DIR=/tmp/vc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/vc/inductor
K="${KERNEL:-lp}"
run() {  # label, env assignments...
  local label="$1"; shift
  t0=$(date +%s.%N)
  env "$@" timeout 240 python3 -m ligerbench.cli verify --kernel "$K" --preset quick --device cuda --out /tmp/vr > /tmp/v.log 2>&1
  echo "$K $label: rc=$? $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -m1 -o 'Status: [A-Z]*' /tmp/vr/*/summary.md | tail -1)"
  rm -rf /tmp/vr
}
run "cold, VEC_ISA_OK=1" TORCHINDUCTOR_VEC_ISA_OK=1
run "warm, VEC_ISA_OK=1" TORCHINDUCTOR_VEC_ISA_OK=1
run "warm, default" X=1
