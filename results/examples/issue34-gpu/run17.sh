#!/usr/bin/env bash
# Issue 34, session 17: after compiled() specialized float arguments: kd's and flp's quick verify,
# cold (both at once, inductor's output code logged: C++ kernels counted), then each alone, warm.
. results/examples/gpu_call.sh  # wheels, environment, $L, $R, step, finish
. results/examples/issue34-gpu/quick_passes.sh  # cold_at_once, warm_alone
TORCH_LOGS=output_code cold_at_once 250 kd flp
for k in kd flp; do
  echo "$k cold: C++ kernels in its compiled graphs: $(cat "$R"/cold-$k/*/torch.log | grep -c 'async_compile.cpp'), Triton: $(cat "$R"/cold-$k/*/torch.log | grep -c 'async_compile.triton(')"
done
warm_alone 150 kd flp
find "$R" -name torch.log -delete
finish
