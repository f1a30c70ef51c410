#!/usr/bin/env bash
# Issue 34, "a bench told to stop, stops", on a GPU: the heads bench of flce with every provider,
# sent SIGTERM by `timeout` after $AFTER s (the issue's H100 case used 140 s). Prints how long the
# process took to end after the signal, its exit code, and what its manifest says against the
# rows records.csv holds. Run from the repo root: AFTER=60 bash results/examples/issue34-gpu/stop_probe.sh
AFTER="${AFTER:-60}"
OUTDIR="$(mktemp -d /tmp/stop-probe.XXXXXX)"
t0=$(date +%s.%N)
timeout -s TERM "$AFTER" python3 -m ligerbench.cli bench --kernel flce --sweep heads --out "$OUTDIR" > "$OUTDIR/log" 2>&1
rc=$?
t1=$(date +%s.%N)
python3 - "$OUTDIR" "$t0" "$t1" "$AFTER" "$rc" <<'PY'
import glob, json, sys
import pandas as pd
out, t0, t1, after, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
run = sorted(glob.glob(f"{out}/*bench-flce*"))[-1]
env = json.load(open(f"{run}/env.json"))
m = env["run"]
rows = pd.read_csv(f"{run}/records.csv") if glob.glob(f"{run}/records.csv") else pd.DataFrame()
print(f"exit {rc}; ended {t1 - t0 - after:.1f} s after SIGTERM (sent at {after:.0f} s)")
print("manifest:", {k: m.get(k) for k in ("unit", "planned", "completed", "rows", "interrupted", "finished")},
      "stopped_by", env.get("stopped_by"), "forced_stop", env.get("forced_stop"))
print("records.csv rows:", len(rows))
PY
tail -3 "$OUTDIR/log"
