# Sourced by the GPU-call scripts of results/examples (issue34-gpu/run6.sh .. run9.sh,
# issue35-gpu/run4.sh .. run7.sh): the peers' wheels (.whl3/) installed under /tmp/site, the
# environment, $L (the CLI), $R (run folders under $OUT, tarred by `finish`), and `step`, which
# runs a command and prints its exit code and seconds.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl3/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
export LIGERBENCH_COMMIT="${LIGERBENCH_COMMIT:-unknown}"  # pass the hash from here: the device copy's git metadata can be stale
L="python3 -m ligerbench.cli"
R="$OUT/r"
mkdir -p "$R"
T0=$(date +%s)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step() { echo "== $* (at $(( $(date +%s) - T0 )) s)"; local t0=$(date +%s); "$@"; echo "rc=$? in $(( $(date +%s) - t0 )) s"; }
finish() { tar czf "$OUT/runs.tgz" -C "$OUT" r && rm -rf "$R"; }
