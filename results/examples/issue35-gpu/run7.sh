#!/usr/bin/env bash
# Issues 34 and 35, session 16, last GPU call on the final kernels: kd and flkd quick verify with
# every provider (the forward's launch config by rows; torch_compile's calls past dynamo's
# recompile limit now skip with the reason), then converge llama-mini --distill jsd.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"; mkdir -p "$R"
T0=$(date +%s)
nvidia-smi -L
step() { echo "== $* (at $(( $(date +%s) - T0 )) s)"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 200 $L verify --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -25
step timeout 200 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -25
step timeout 170 $L converge llama-mini --distill jsd --device cuda --out "$R" 2>&1 | tail -14
for run in "$R"/*verify*; do gzip -9 "$run/records.csv"; done
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
