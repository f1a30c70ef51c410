#!/usr/bin/env bash
# Issue 34, session 19, call 4: lp's and flp's quick verifies after their textbook yardstick took
# the softcap's tanh one ulp nearer 0 (TRL's chunked float32 softcap row, docs/peers.md), each
# single-GPU kernel's quick verify cold alone (session 18 measured these four at once), and the
# failures each run recorded, by provider and quantity.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_alone, ...
cold_alone 150 lp flp pref grpo kd flkd 2>&1 | tee "$R/passes.txt"
for k in lp flp pref grpo kd flkd; do
  echo "== $k failures (provider, quantity)"
  grep -h "^  FAIL" "$R/cold-$k.log" | awk '{print $3, $4}' | sort | uniq -c | head -20
done 2>&1 | tee -a "$R/passes.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
