#!/usr/bin/env bash
# Issue 34, session 19, call 3, on two GPUs: the vocabulary-parallel kernels' quick verifies on
# real NCCL ranks, cold (fresh caches): vp_flce (never run on two GPUs in this issue), vp_flp, vp_ce.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$R/gpus.txt"
for ks in vp_flce:250 vp_flp:140 vp_ce:150; do
  k=${ks%%:*} secs=${ks##*:}
  export TRITON_CACHE_DIR=/tmp/qc/$k/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/$k/inductor
  step timeout $secs $L verify --kernel $k --preset quick --nproc 2 --device cuda --out "$R/$k" 2>&1 | tail -6 | tee -a "$R/passes.txt"
  grep -ho 'Status: [A-Z]*.*cases run' "$R/$k"/*/summary.md | tee -a "$R/passes.txt"
  grep -h "^  FAIL\|^| FAIL" "$R/$k"/*/summary.md 2>/dev/null | head -20 | tee -a "$R/passes.txt"
done
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
