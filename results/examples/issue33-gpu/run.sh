#!/usr/bin/env bash
# Issue 33 on a lent GPU: the peers (TRL 1.16.0, verl 0.9.1, Liger-Kernel 0.8.5) verified and
# benched beside ours. Run from the repository root with the peers' wheels in .whl/ (carried):
#   bash results/examples/issue33-gpu/run.sh verify   # quick verify of lp, flp, grpo with every peer
#   bash results/examples/issue33-gpu/run.sh bench    # lp tokens, flp heads, grpo heads beside the peers
# Writes runs and logs under $OUT (tarred: the device returns few files).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LB="python3 -m ligerbench.cli"
runs=/tmp/runs; mkdir -p $runs
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import trl, liger_kernel, tensordict; print('trl', trl.__version__)" >> $OUT/gpu.txt 2>&1
stamp() { echo "$(date +%s.%N | cut -c1-14) $*" >> $OUT/times.txt; }
case "${1:-verify}" in
verify)
    for k in lp flp grpo; do
        case $k in
            lp) P="--provider ours --provider textbook --provider trl_triton --provider trl --provider trl_unfused --provider verl" ;;
            flp) P="--provider ours --provider textbook --provider trl_chunked --provider verl_fused --provider liger" ;;
            grpo) P="--provider ours --provider eager --provider liger_triton --provider liger_fused_linear" ;;
        esac
        stamp "verify $k start"
        timeout 280 $LB verify --kernel $k --preset quick --device cuda $P --out $runs > $OUT/verify-$k.log 2>&1
        echo "rc=$?" >> $OUT/verify-$k.log
        stamp "verify $k end"
    done ;;
bench)
    stamp "bench lp start"
    timeout 200 $LB bench --kernel lp --sweep tokens --provider ours --provider trl_triton --provider trl \
        --provider verl --provider eager_plain --provider compile_plain --out $runs > $OUT/bench-lp.log 2>&1
    echo "rc=$?" >> $OUT/bench-lp.log
    stamp "bench flp start"
    timeout 220 $LB bench --kernel flp --sweep heads --provider ours --provider trl_chunked --provider verl_fused \
        --provider liger_torch_path --provider compile_bf16_product --out $runs > $OUT/bench-flp.log 2>&1
    echo "rc=$?" >> $OUT/bench-flp.log
    stamp "bench grpo start"
    timeout 150 $LB bench --kernel grpo --sweep heads --provider ours --provider liger_triton \
        --provider liger_fused_linear --provider compile_bf16_product --provider eager_bf16_product \
        --out $runs > $OUT/bench-grpo.log 2>&1
    echo "rc=$?" >> $OUT/bench-grpo.log
    stamp "bench end" ;;
esac
tar czf $OUT/runs-${1:-verify}.tgz -C $runs .
