#!/usr/bin/env bash
# Issue 32 on the lent GPUs (one call): vp_flp quick on two GPUs (ours is held to --strict by
# declaration), flp quick on one GPU with every provider (the textbook one included), and ce
# quick with --repeat 4 for our kernel (a race shows as differing bits). Run from the repo root.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli"
R="$OUT/r"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step() { echo "== $*"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 240 $L verify --kernel vp_flp --nproc 2 --device cuda --preset quick --out "$R" 2>&1 | tail -30
step timeout 150 $L verify --kernel flp --device cuda --preset quick --out "$R" 2>&1 | tail -30
step timeout 120 $L verify --kernel ce --device cuda --preset quick --provider ours --provider textbook --repeat 4 --out "$R" 2>&1 | tail -20
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"
