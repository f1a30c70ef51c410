#!/usr/bin/env bash
# Issues 34 and 35, session 16, second GPU call: the distillation kernels' launch configs
# (kd_config_sweep.py), flkd's time and memory at budgets of 224 / 260 / 280 MiB and at larger
# groups (flkd_rows_probe.py, Liger beside), lp's forward configs against TRL's kernel
# (issue34-gpu/lp_split.py), and kd's quick verify of ours after the libdevice exp was reverted.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"; mkdir -p "$R"
T0=$(date +%s)
nvidia-smi -L
step() { echo "== $* (at $(( $(date +%s) - T0 )) s)"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 120 python3 results/examples/issue35-gpu/kd_config_sweep.py 2>&1 | tail -20
step timeout 150 python3 results/examples/issue35-gpu/flkd_rows_probe.py 2>&1 | tail -14
step timeout 100 python3 results/examples/issue34-gpu/lp_split.py 2>&1 | tail -30
step timeout 120 $L verify --kernel kd --device cuda --preset quick --provider ours --out "$R" 2>&1 | tail -6
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
