#!/usr/bin/env bash
# Issue 34, "quick on a GPU is quick": each kernel's quick verify on one GPU with its default
# providers, twice: cold (fresh Triton and inductor caches under /tmp) and warm (the same caches
# again), with the wall time of each and the compiled variants the Triton cache holds after it.
# Run from the repository root; the table is $OUT/summary.txt, the rest of $OUT stays small.
#
#   OUT=/tmp/q bash results/examples/issue34-gpu/quick_profile.sh                  # ce flce lp flp grpo pref
#   OUT=/tmp/q KERNELS="flp ce" PER_PROVIDER=1 bash results/examples/issue34-gpu/quick_profile.sh  # + each provider alone, warm
#   OUT=/tmp/q KERNELS= NPROC=2 bash results/examples/issue34-gpu/quick_profile.sh # vp_ce vp_flce vp_flp on 2 GPUs
#
# Columns: wall seconds of the whole command (imports included), cases completed of planned, s a
# case, compiled Triton variants in the cache after the pass (ours: our kernels, by name, e.g.
# _ce_fwd_kernel=31; inductor: torch.compile's generated kernels; other: the peers'), and
# torch.compile's recompiles (TORCH_LOGS=recompiles, counted in the run's torch.log). The count
# the cold pass implies on CPU is results/examples/issue34-gpu/count_variants.py's.
set -uo pipefail
: "${OUT:?set OUT to an empty folder for the results}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_LOGS="${TORCH_LOGS:-recompiles}"
KERNELS="${KERNELS-ce flce lp flp grpo pref}"
NPROC="${NPROC:-0}"
DEVICE="${DEVICE:-cuda}"  # cpu: tries the script itself on a machine without a GPU (no cubins there)
LIMIT="${LIMIT:-900}"  # seconds a pass may take before timeout ends it (it then shows rc 124)
L="python3 -m ligerbench.cli"
WORK="$(mktemp -d /tmp/ligerbench-quick-profile.XXXXXX)"  # caches and run folders: not under $OUT
mkdir -p "$OUT/logs"
summary="$OUT/summary.txt"

now() { date +%s.%N; }
seconds() { python3 -c "print(f'{$2 - $1:.1f}')"; }

variants() {  # the compiled kernels in a Triton cache, by the kernel's name (one binary each)
    find "$1" -type f \( -name '*.cubin' -o -name '*.hsaco' \) 2>/dev/null | python3 -c '
import collections, os, sys
names = collections.Counter(os.path.basename(p).rsplit(".", 1)[0] for p in sys.stdin.read().split())
ours = {n: c for n, c in names.items() if n.startswith("_")}
inductor = sum(c for n, c in names.items() if n.startswith("triton_"))
other = sum(names.values()) - sum(ours.values()) - inductor
print(f"{sum(names.values())} (ours {sum(ours.values())}: "
      + " ".join(f"{n}={c}" for n, c in sorted(ours.items(), key=lambda x: -x[1]))
      + f"; inductor {inductor}; other {other})")'
}

run_pass() {  # kernel, label, cache folder, extra verify arguments...
    local kernel="$1" label="$2" caches="$3"
    shift 3
    local runs="$WORK/runs/$kernel-$label" log="$OUT/logs/$kernel-$label"
    mkdir -p "$runs"
    local t0 t1 rc
    t0="$(now)"
    TRITON_CACHE_DIR="$caches/triton" TORCHINDUCTOR_CACHE_DIR="$caches/inductor" \
        timeout "$LIMIT" $L verify --kernel "$kernel" --preset quick --device "$DEVICE" --out "$runs" --json "$@" \
        > "$log.json" 2> "$log.err"
    rc=$?
    t1="$(now)"
    local counts recompiles run
    counts="$(python3 -c "
import json, sys
try:
    d = json.load(open('$log.json'))
    print(d['completed'], d['planned'], d['completed'] or 1)
except Exception:
    print('? ? 1')")"
    set -- $counts
    run="$(ls -d "$runs"/*/ 2>/dev/null | head -1)"
    recompiles="$(cat "$run/torch.log" 2>/dev/null | grep -c 'Recompiling function' || true)"
    tail -c 3000 "$log.err" > "$log.err.tail" && mv "$log.err.tail" "$log.err"
    local wall
    wall="$(seconds "$t0" "$t1")"
    printf "%-8s %-22s rc %-3s %7s s  %4s/%-4s cases %6s s/case  recompiles %-4s variants %s\n" \
        "$kernel" "$label" "$rc" "$wall" "$1" "$2" "$(python3 -c "print(f'{$wall / $3:.2f}')")" \
        "$recompiles" "$(variants "$caches/triton")" | tee -a "$summary"
}

{
    echo "# quick verify on a GPU, cold and warm caches ($(date -u +%FT%TZ))"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    t0="$(now)"; python3 -c "import ligerbench.cli"; echo "import ligerbench.cli: $(seconds "$t0" "$(now)") s"
} | tee "$summary"

for kernel in $KERNELS; do
    caches="$WORK/caches/$kernel"
    run_pass "$kernel" cold "$caches"
    run_pass "$kernel" warm "$caches"
    if [ "${PER_PROVIDER:-0}" = 1 ]; then
        providers="$($L verify --kernel "$kernel" --preset quick --device "$DEVICE" --collect-only --json 2>/dev/null \
            | python3 -c 'import json, sys; print(" ".join(json.load(sys.stdin)["providers"]))')"
        for p in $providers; do
            run_pass "$kernel" "warm:$p" "$caches" --provider "$p"
        done
    fi
done
if [ "$NPROC" -gt 1 ]; then
    for kernel in vp_ce vp_flce vp_flp; do
        caches="$WORK/caches/$kernel"
        run_pass "$kernel" "cold-nproc$NPROC" "$caches" --nproc "$NPROC"
        run_pass "$kernel" "warm-nproc$NPROC" "$caches" --nproc "$NPROC"
    done
fi
echo "caches and run folders: $WORK (not in \$OUT)" | tee -a "$summary"
