#!/usr/bin/env bash
# Issue 34, session 17: quick verify alone, warm. The caches are filled by one cold pass of the
# four kernels at once, then each kernel's quick verify runs alone with its default providers;
# the seconds are the whole CLI's, import included.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
cold_at_once 280 flp grpo flkd kd
warm_alone 150 flp grpo flkd kd
finish
