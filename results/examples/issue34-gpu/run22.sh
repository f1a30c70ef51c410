#!/usr/bin/env bash
# Issue 34, session 18: flkd, ce, flce and grpo's quick verify cold (each its own caches, four at
# once) and warm, each alone (lp, flp, kd, pref: run21.sh), after the third textbook form (a
# softcap's tanh one ulp off) and the one-class loss's natural magnitude; the peers' failures.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 300 flkd ce flce grpo 2>&1 | tee "$R/passes.txt"
warm_alone 90 flkd ce flce grpo 2>&1 | tee -a "$R/passes.txt"
for k in flkd ce flce grpo; do
  echo "== $k: failed checks by provider"; grep -h "^  FAIL" "$R/warm-$k.log" | awk '{print $3}' | sort | uniq -c
  grep -h "^  FAIL" "$R/warm-$k.log" | grep -v "lay-transposed\|nan (a mean over no\|bf16\|fp16" | cut -c1-240 | head -8
done 2>&1 | tee "$R/failures.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
