#!/usr/bin/env bash
# Issue 34, session 17, on two GPUs: vp_flp's quick verify on real ranks (its backward is flp's
# since this session, the gradient under the logits), then on one GPU the grpo bench after
# "auto" took the recompute path on an H100, and flce's heads (ours, torch.compile) after the
# first chunk's weight-gradient product is written instead of added.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step timeout 240 $L verify --kernel vp_flp --preset quick --nproc 2 --device cuda --out "$R" 2>&1 | tail -4
grep -ho 'Status: [A-Z]*.*cases run' "$R"/*verify-vp_flp*/summary.md
export CUDA_VISIBLE_DEVICES=0
step timeout 150 $L bench --kernel grpo --provider ours --provider ours_recompute --provider ours_liger_memory \
    --provider liger_triton --out "$R" 2>&1 | grep -v "^$\|^|---" | tail -14
step timeout 150 $L bench --kernel flce --sweep heads --provider ours --provider torch_compile --out "$R" 2>&1 \
    | grep -v "^$\|^|---" | tail -20
finish
