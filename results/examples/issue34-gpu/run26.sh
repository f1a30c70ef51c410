#!/usr/bin/env bash
# Issue 34, session 18: flce's quick verify cold alone and warm after _ce_fwd_kernel's per-row
# options became runtime flags (ce: run25.sh).
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 220 flce 2>&1 | tee "$R/passes.txt"
warm_alone 90 flce 2>&1 | tee -a "$R/passes.txt"
grep -h "^  FAIL" "$R/warm-flce.log" | awk '{print $3}' | sort | uniq -c | tee -a "$R/passes.txt"
find /tmp/qc/flce/triton -name '*.cubin' | sed 's|.*/||' | sort | uniq -c | sort -rn | head -8 | tee -a "$R/passes.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
