#!/usr/bin/env bash
# Issue 34, session 16: lp's backward with the single target read once a row, on whichever GPU
# this runs: its launch configs beside TRL (bwd_config_probe.py), then the tokens bench beside TRL.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L
timeout 120 python3 results/examples/issue34-gpu/bwd_config_probe.py 2>&1 | tail -12
timeout 150 python3 -m ligerbench.cli bench --kernel lp --sweep tokens --tokens 8192 --provider ours \
    --provider trl_triton --out "$R" 2>&1 | grep -v "^$" | tail -22
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
