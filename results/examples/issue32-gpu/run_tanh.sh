#!/usr/bin/env bash
# Issue 32, after the softcap's tanh became libdevice's when compiled (kernels/triton_math.py):
# every kernel that takes a softcap, quick on the GPUs, ours only (strict), softcap cases where
# the grid has an option axis; vp_* on two ranks. Run from the repo root, one call.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD" LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"
L="python3 -m ligerbench.cli verify --device cuda --preset quick --out $OUT/r"
step() { echo "== $*"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
step timeout 120 $L --kernel vp_flp --nproc 2 --provider ours --provider ours_3_slices 2>&1 | tail -8
step timeout 90 python3 results/examples/issue32-gpu/softcap_entropy.py 2>&1 | tail -5
step timeout 100 $L --kernel flp --provider ours --provider ours_small_chunks --provider ours_rows 2>&1 | tail -6
step timeout 60 $L --kernel lp --provider ours 2>&1 | tail -6
step timeout 90 $L --kernel ce --provider ours --option softcap --option all 2>&1 | tail -6
step timeout 90 $L --kernel flce --provider ours --option softcap --option all 2>&1 | tail -6
step timeout 90 $L --kernel vp_ce --nproc 2 --provider ours --option softcap --option all 2>&1 | tail -6
tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$OUT/r"
