#!/usr/bin/env bash
# Issues 34 and 35, session 16, third GPU call: one-block-a-program backwards against the row walk
# (bwd_split_probe.py: lp beside TRL, the distillation backward), the stop probe (SIGTERM to the
# flce heads bench with every provider), then the kd and flkd benches beside the peers.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"; mkdir -p "$R"
T0=$(date +%s)
nvidia-smi -L
step() { echo "== $* (at $(( $(date +%s) - T0 )) s)"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 120 python3 results/examples/issue34-gpu/bwd_split_probe.py 2>&1 | tail -24
AFTER=60 step bash results/examples/issue34-gpu/stop_probe.sh 2>&1 | tail -8
step timeout 60 $L bench --kernel kd --sweep tokens --tokens 2048 --out "$R" 2>&1 | tail -12
step timeout 230 $L bench --kernel flkd --sweep heads --out "$R" 2>&1 | tail -30
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
