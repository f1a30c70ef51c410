#!/usr/bin/env bash
# Issues 34 and 35, session 16, last GPU call on the final kernels: kd and flkd quick verify with
# every provider (the forward's launch config by rows; torch_compile's calls past dynamo's
# recompile limit now skip with the reason), then converge llama-mini --distill jsd.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
step timeout 200 $L verify --kernel kd --device cuda --preset quick --out "$R" 2>&1 | tail -25
step timeout 200 $L verify --kernel flkd --device cuda --preset quick --out "$R" 2>&1 | tail -25
step timeout 170 $L converge llama-mini --distill jsd --device cuda --out "$R" 2>&1 | tail -14
for run in "$R"/*verify*; do gzip -9 "$run/records.csv"; done
finish
