#!/usr/bin/env bash
# Issue 34 on one GPU: lp's launch configs against TRL's kernel, then lp verify (ours, quick) and
# the lp and flp benches beside the peers. Run from the repo root with the peers' wheels in .whl/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
L="python3 -m ligerbench.cli"; R=/tmp/r; mkdir -p $R
timeout 120 python3 results/examples/issue34-gpu/lp_split.py > $OUT/lp_split.txt 2>&1
timeout 120 $L verify --kernel lp --preset quick --device cuda --provider ours --provider trl_triton --out $R > $OUT/verify-lp.log 2>&1; echo "rc=$?" >> $OUT/verify-lp.log
timeout 150 $L bench --kernel lp --sweep tokens --provider ours --provider trl_triton --provider trl \
    --provider compile_plain --out $R > $OUT/bench-lp.log 2>&1; echo "rc=$?" >> $OUT/bench-lp.log
timeout 170 $L bench --kernel flp --sweep heads --provider ours --provider trl_chunked --provider compile_bf16_product \
    --out $R > $OUT/bench-flp.log 2>&1; echo "rc=$?" >> $OUT/bench-flp.log
tar czf $OUT/runs.tgz -C $R .
