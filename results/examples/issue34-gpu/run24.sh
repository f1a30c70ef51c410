#!/usr/bin/env bash
# Issue 34, session 18: where ce's cold quick verify spends its 210-245 s (run22.sh, run23.sh):
# one cold pass alone under cProfile (own caches), the functions with the most cumulative time,
# and the compiled Triton variants the cache holds after it, by kernel name.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # caches
rm -rf /tmp/qc/ce; caches ce
t0=$(date +%s)
timeout 290 python3 -m cProfile -o /tmp/ce.prof -m ligerbench.cli verify --kernel ce --preset quick --device cuda \
    --out "$R/prof-ce" > "$R/prof-ce.log" 2>&1
echo "ce cold under cProfile: rc=$? $(( $(date +%s) - t0 )) s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R"/prof-ce/*/summary.md | cut -c1-90)"
python3 -c "
import pstats
s = pstats.Stats('/tmp/ce.prof', stream=open('$R/ce-profile.txt', 'w'))
s.sort_stats('cumulative').print_stats(80); s.sort_stats('tottime').print_stats(30)"
grep -A60 "ncalls" "$R/ce-profile.txt" | cut -c1-160 | head -62
find /tmp/qc/ce/triton -name '*.cubin' | python3 -c '
import collections, os, sys
c = collections.Counter(os.path.basename(p).rsplit(".", 1)[0] for p in sys.stdin.read().split())
print(sum(c.values()), "cubins:", ", ".join(f"{k}={v}" for k, v in c.most_common(25)))' | tee "$R/variants.txt"
find "$R" \( -name torch.log -o -name records.csv \) -delete
finish
