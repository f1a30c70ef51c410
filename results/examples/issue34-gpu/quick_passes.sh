# Sourced after gpu_call.sh by the quick-verify calls (run14.sh .. run22.sh): a kernel's quick
# verify with its default providers, several at once or each alone, into $R. Each kernel has its
# own Triton and inductor caches (/tmp/qc/KERNEL), so "cold" is cold for each kernel (lp and flp
# share kernels; a shared cache would give the second a start).
#   cold_at_once SECONDS KERNEL...   all at once, fresh caches; a line each: exit code, seconds, verdict
#   cold_alone SECONDS KERNEL...     one after another, each on fresh caches; a line each
#   warm_alone SECONDS KERNEL...     one after another on those caches; a line each
caches() { export TRITON_CACHE_DIR=/tmp/qc/$1/triton TORCHINDUCTOR_CACHE_DIR=/tmp/qc/$1/inductor; }
one_pass() {  # label limit kernel: one verify, then its line
  local label=$1 limit=$2 k=$3 t0 rc
  t0=$(date +%s.%N)
  (caches "$k"; timeout "$limit" $L verify --kernel "$k" --preset quick --device cuda --out "$R/$label-$k" > "$R/$label-$k.log" 2>&1)
  rc=$?
  echo "$k $label: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(grep -ho 'Status: [A-Z]*.*cases run' "$R/$label-$k"/*/summary.md | cut -c1-100)"
}
cold_at_once() {
  local limit=$1 k; shift
  for k in "$@"; do rm -rf "/tmp/qc/$k"; one_pass cold "$limit" "$k" & done
  wait
  echo "cold pass ($# at once) done at $(( $(date +%s) - T0 )) s"
}
warm_alone() {
  local limit=$1 k; shift
  for k in "$@"; do one_pass warm "$limit" "$k"; done
}
cold_alone() {
  local limit=$1 k; shift
  for k in "$@"; do rm -rf "/tmp/qc/$k"; one_pass cold "$limit" "$k"; done
}
