"""PyTorch's CPU bfloat16 matmul on an AMX CPU reads past the end of each row of a strided left
operand: `torch.mm(a, w)` with `a` a [17, 100] bfloat16 view whose rows lie 200 elements apart
gives NaN rows when the bytes between the rows hold a NaN or an infinity (they are multiplied
by zero padding). Contiguous rows are read right. Seen with torch 2.13.0+cpu on a CPU with
amx_bf16 (oneDNN's brg_matmul:avx10_1_512_amx, ONEDNN_VERBOSE=1), at one thread; 64 rows show
it at two threads too. `ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` or `torch.backends.mkldnn` off
hides it. On a CPU without AMX every line prints [] and True.

    OMP_NUM_THREADS=1 python docs/repro/torch_cpu_bf16_mm_strided_rows.py
"""

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
rows, k, n = 17, 100, 7
w = torch.randn(k, n).bfloat16()
for gap in (0.0, float("nan"), float("inf")):
    store = torch.full((rows, 2 * k), gap, dtype=torch.bfloat16)
    a = store[:, :k]  # rows 2k elements apart; the gaps are never part of the view
    a.copy_(torch.randn(rows, k).bfloat16())
    out = torch.mm(a, w)
    ref = torch.mm(a.contiguous(), w)
    bad = torch.isnan(out).any(1).nonzero().flatten().tolist()
    print(f"gap {gap}: NaN rows of the strided product {bad}; equal to the contiguous product: {torch.equal(out, ref)}")
