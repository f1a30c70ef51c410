#!/usr/bin/env bash
# Issue 34, session 16: grpo and flp beside their peers after lp's backward read its single
# target once a row (both run log_probs' backward).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L
timeout 200 python3 -m ligerbench.cli bench --kernel grpo --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -16
timeout 230 python3 -m ligerbench.cli bench --kernel flp --sweep heads --provider ours --provider trl_chunked \
    --provider compile_bf16_product --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -24
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
