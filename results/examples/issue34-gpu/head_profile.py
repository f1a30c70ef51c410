"""Where a fused head's time goes: CUDA kernel time of one forward + backward, by kernel, for
bench providers at one point of a kernel's sweep (inputs from the bench's own make_inputs).
torch.profiler; the events' sum, not the wall time (bench gives that).

    export PYTHONPATH=/tmp/site:$PWD
    python3 results/examples/issue34-gpu/head_profile.py grpo llama3-8b ours_liger_memory liger_triton
    python3 results/examples/issue34-gpu/head_profile.py flp llama3-8b ours ours_large_slices
"""

import sys
from collections import defaultdict

import torch
from bench_point import point_of, step_of
from torch.profiler import ProfilerActivity, profile

kernel, label, *names = sys.argv[1:]
spec, point = point_of(kernel, label)
dev = torch.device("cuda")
print(torch.cuda.get_device_name(), kernel, point.label, point.case.id, flush=True)


def profile_one(name: str) -> None:
    forward = step_of(kernel, spec, point, name, dev)

    def step():
        forward().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = e.name[:90]
            by_name[k][0] += 1
            by_name[k][1] += e.device_time_total / 1e3
    total = sum(v[1] for v in by_name.values())
    print(f"\n## {name}: {total:.2f} ms of CUDA kernel time")
    for k, (n, ms) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"{ms:8.3f} ms {n:5d} x  {k}", flush=True)


for name in names:
    profile_one(name)
    torch.cuda.empty_cache()
