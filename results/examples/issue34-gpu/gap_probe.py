"""Where a fused head's wall time exceeds its kernels' time: one forward + backward as bench
times it (GPU idle at the start, synchronized at the end), under torch.profiler with CPU and CUDA
activities. Prints, per provider: the wall time of the region, the time before its first kernel
starts (host work the GPU waits for), the GPU's idle time between its first and last kernel, and
the kernels' busy time.

    export PYTHONPATH=/tmp/site:$PWD
    python3 results/examples/issue34-gpu/gap_probe.py grpo llama3-8b ours_liger_memory liger_triton
"""

import sys

import torch
from bench_point import point_of, step_of
from torch.profiler import ProfilerActivity, profile, record_function

kernel, label, *names = sys.argv[1:]
spec, point = point_of(kernel, label)
dev = torch.device("cuda")
print(torch.cuda.get_device_name(), kernel, point.case.id, flush=True)


def busy_union(spans):
    total, end = 0.0, -1e30
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def probe(name: str) -> None:
    forward = step_of(kernel, spec, point, name, dev)

    def step():
        torch.cuda.synchronize()
        with record_function("region"):
            forward().backward()
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    rows = []
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
        events = prof.events()
        region = next(e for e in events if e.name == "region" and e.device_type == torch.autograd.DeviceType.CPU)
        r0, r1 = region.time_range.start, region.time_range.end
        spans = [(e.time_range.start, e.time_range.end) for e in events
                 if e.device_type == torch.autograd.DeviceType.CUDA and r0 <= e.time_range.start <= r1]  # fmt: skip
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        busy = busy_union(spans)
        rows.append(((r1 - r0) / 1e3, (first - r0) / 1e3, (last - first - busy) / 1e3, busy / 1e3, len(spans)))
    wall, lead, idle, busy, n = sorted(rows)[1]  # the median run by wall time
    print(f"{name}: wall {wall:.2f} ms; before the first kernel {lead:.2f} ms; idle between kernels {idle:.2f} ms; "
          f"kernels busy {busy:.2f} ms ({n} kernels)", flush=True)  # fmt: skip


for name in names:
    probe(name)
    torch.cuda.empty_cache()
