#!/usr/bin/env bash
# Issue 34, session 17, second call: where grpo's and flp's wall time exceeds their kernels'
# (gap_probe.py), then the quick verify of six kernels at once, cold and warm (quick_waves.sh).
export PYTHONPATH="/tmp/site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
timeout 90 python3 results/examples/issue34-gpu/gap_probe.py grpo llama3-8b ours_liger_memory liger_triton ours
timeout 60 python3 results/examples/issue34-gpu/gap_probe.py flp llama3-8b ours_large_slices trl_chunked
KERNELS="ce flce lp flp grpo flkd" bash results/examples/issue34-gpu/quick_waves.sh
