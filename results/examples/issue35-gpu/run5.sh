#!/usr/bin/env bash
# Issues 34 and 35, session 16, second GPU call: the distillation kernels' launch configs
# (kd_config_sweep.py), flkd's time and memory at budgets of 224 / 260 / 280 MiB and at larger
# groups (flkd_rows_probe.py, Liger beside), lp's forward configs against TRL's kernel
# (issue34-gpu/lp_split.py), and kd's quick verify of ours after the libdevice exp was reverted.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 120 python3 results/examples/issue35-gpu/kd_config_sweep.py 2>&1 | tail -20
step timeout 150 python3 results/examples/issue35-gpu/flkd_rows_probe.py 2>&1 | tail -14
step timeout 100 python3 results/examples/issue34-gpu/lp_split.py 2>&1 | tail -30
step timeout 120 $L verify --kernel kd --device cuda --preset quick --provider ours --out "$R" 2>&1 | tail -6
finish
