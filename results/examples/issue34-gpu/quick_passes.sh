# Sourced after gpu_call.sh by the quick-verify calls (run14.sh, run17.sh, run18.sh): a kernel's
# quick verify with its default providers, several at once or each alone, into $R.
#   cold_at_once SECONDS KERNEL...   all at once (to fill the caches), logs $R/cold-KERNEL.log
#   warm_alone SECONDS KERNEL...     one after another, a line each: exit code, seconds, verdict
export TRITON_CACHE_DIR=/tmp/qc/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/inductor
cold_at_once() {
  local limit=$1 k; shift
  for k in "$@"; do
    timeout "$limit" $L verify --kernel "$k" --preset quick --device cuda --out "$R/cold-$k" > "$R/cold-$k.log" 2>&1 &
  done
  wait
  echo "cold pass ($# at once) done at $(( $(date +%s) - T0 )) s"
}
warm_alone() {
  local limit=$1 k t0 rc; shift
  for k in "$@"; do
    t0=$(date +%s.%N)
    timeout "$limit" $L verify --kernel "$k" --preset quick --device cuda --out "$R/warm-$k" > "$R/warm-$k.log" 2>&1
    rc=$?
    echo "$k warm, alone: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/warm-$k"/*/summary.md | cut -c1-100)"
  done
}
