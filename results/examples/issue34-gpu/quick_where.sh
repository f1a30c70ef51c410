#!/usr/bin/env bash
# Issue 34, "quick on a GPU is quick": lp's quick verify with its default providers, cold and warm
# (fresh Triton and inductor caches), then a third, warm, pass under cProfile: where the
# seconds of a warm run go (the functions with the most cumulative time, ours by file).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
K="${KERNEL:-lp}"
for pass in cold warm; do
  t0=$(date +%s.%N)
  timeout 240 python3 -m ligerbench.cli verify --kernel "$K" --preset quick --device cuda --out /tmp/qr > /tmp/q-$pass.log 2>&1
  echo "$K $pass: rc=$? $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -m1 'cases run' /tmp/qr/*/summary.md 2>/dev/null | tail -1 | cut -c1-120)"
  rm -rf /tmp/qr
done
timeout 240 python3 -m cProfile -o /tmp/q.prof -m ligerbench.cli verify --kernel "$K" --preset quick --device cuda --out /tmp/qr > /dev/null 2>&1
python3 - <<'PY'
import pstats
s = pstats.Stats("/tmp/q.prof")
s.sort_stats("cumulative").print_stats(45)
PY
