#!/usr/bin/env bash
# Issue 34, session 18, after the cross entropy's second textbook form (logsumexp(x) - x_t) and
# device.prepare's end of inductor's CPU ISA probe on GPU runs: ce, flce and grpo's quick verify
# with their default providers, cold (three at once) then each alone, warm; the peers' failures.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 250 ce flce grpo 2>&1 | tee "$R/passes.txt"
warm_alone 110 grpo flce ce 2>&1 | tee -a "$R/passes.txt"
for k in ce flce grpo; do
  echo "== $k: failed checks by provider"; grep -h "^  FAIL" "$R/warm-$k.log" | awk '{print $3}' | sort | uniq -c
  grep -h "^  FAIL" "$R/warm-$k.log" | grep -v "liger" | cut -c1-240 | head -8
done 2>&1 | tee "$R/failures.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
