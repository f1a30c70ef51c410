#!/usr/bin/env bash
# Issue 34, session 18: the GPU tests (ce's bug-13 fix among them: its kernel branch had run only
# in the interpreter), why torch.compile's float32 flce loss on confident rows failed
# (compile_flce_confident.py), on an H200 lp against TRL and flp against torch.compile, ce's
# quick verify cold then warm, and where grpo's warm quick verify spends its time (cProfile).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
step timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tail -4
step timeout 100 python3 results/examples/issue34-gpu/compile_flce_confident.py 8 2>&1 | tail -10
case "$GPU" in *H200*)
  step timeout 90 $L bench --kernel lp --sweep tokens --provider ours --provider trl_triton --out "$R" 2>&1 \
      | grep -v "^$\|^|---" | tail -14
  step timeout 150 $L bench --kernel flp --sweep heads --provider ours --provider compile_bf16_product --out "$R" 2>&1 \
      | grep -v "^$\|^|---" | tail -20 ;;
esac
cold_at_once 170 ce grpo
warm_alone 80 ce
grep -h "FAIL" "$R"/warm-ce.log | cut -c1-220 | head -20
if [ $(( $(date +%s) - T0 )) -lt 470 ]; then
  timeout 100 python3 -m cProfile -o /tmp/grpo.prof -m ligerbench.cli verify --kernel grpo --preset quick \
      --device cuda --out "$R/prof-grpo" > "$R/prof-grpo.log" 2>&1
  echo "grpo warm under cProfile: rc=$? at $(( $(date +%s) - T0 )) s"
  python3 -c "
import pstats
s = pstats.Stats('/tmp/grpo.prof', stream=open('$R/grpo-profile.txt', 'w'))
s.sort_stats('cumulative').print_stats(60); s.sort_stats('tottime').print_stats(30)"
  grep -A75 "ncalls" "$R/grpo-profile.txt" | cut -c1-170 | head -75
fi
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
