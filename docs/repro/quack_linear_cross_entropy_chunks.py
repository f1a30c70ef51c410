"""QuACK 0.6.5 (`quack.linear_cross_entropy.chunked_linear_cross_entropy`, CuTe DSL; SM90 or newer)
at the Llama-3-8B head (H=4096, V=128256), bf16, N=8192 tokens: its default chunk (4096 rows) and
two others, each against the float64 loss, and the error it raises where it raises.

Reported by a bench on an H200 (2026-11-27): at its default chunk the call raised
`ValueError: operand 'v': m == n makes row/col inference ambiguous`, while chunk 4000 and 1024 ran.
The Gemma-2 (H=2304) and Qwen2.5 (H=3584) heads ran at the default chunk: the second block below
tries a square chunk (chunk_size == H) at a smaller head, to tell whether a [chunk, H] operand
with chunk == H is what it cannot place.

    pip install --target <dir>/site-packages quack-kernels==0.6.5 nvidia-cutlass-dsl==4.7.1 \
        nvidia-cutlass-dsl-libs-core==4.7.1 nvidia-cutlass-dsl-libs-base==4.7.1 nvidia-cutlass-dsl-libs-cu13==4.7.1 \
        nvidia-cuda-nvdisasm apache-tvm-ffi torch-c-dlpack-ext
    PYTHONPATH=<dir>/site-packages:<dir>/site-packages/nvidia_cutlass_dsl/dsl_packages \
        python docs/repro/quack_linear_cross_entropy_chunks.py       # needs a CUDA GPU (SM90+)
"""

import torch
import torch.nn.functional as F
from quack.linear_cross_entropy import chunked_linear_cross_entropy

torch.manual_seed(0)
n, h, v = 8192, 4096, 128256
hidden = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
weight = (torch.randn(v, h, device="cuda") * h**-0.5).bfloat16()
target = torch.randint(0, v, (n,), device="cuda")
truth = F.cross_entropy(hidden.double() @ weight.double().t(), target).item()


def run(hidden, weight, target, chunk, truth):
    x = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    kw = {} if chunk is None else {"chunk_size": chunk}
    name = "default" if chunk is None else f"chunk_size={chunk}"
    try:
        loss = chunked_linear_cross_entropy(x, w, target, **kw)
        loss.backward()
        torch.cuda.synchronize()
        print(f"{name}: loss {loss.item():.6f}, float64 {truth:.6f}, rel {abs(loss.item() - truth) / truth:.2e}")
    except Exception as exc:  # the finding: which chunk raises, and what
        print(f"{name}: {type(exc).__name__}: {exc}")


print(f"N={n}, H={h}, V={v}")
for chunk in (None, 4096, 4000, 1024):
    run(hidden, weight, target, chunk, truth)

n, h, v = 4096, 2048, 32000
hidden = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
weight = (torch.randn(v, h, device="cuda") * h**-0.5).bfloat16()
target = torch.randint(0, v, (n,), device="cuda")
truth = F.cross_entropy(hidden.double() @ weight.double().t(), target).item()
print(f"N={n}, H={h}, V={v}")
for chunk in (2048, 2040, 1024):
    run(hidden, weight, target, chunk, truth)
