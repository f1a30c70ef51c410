"""Liger-Kernel 0.8.5's fused NLL + entropy, through its PyTorch path (what its frontend runs off
SM90, and on CPU): the logits chunk is formed in the inputs' bf16 before the softmax (the class
of Liger #1432), and the entropy comes back in bf16. Logits ~200 from 0 (a bias folded into the
hidden states here, as the function takes none) make it percent-off.

    pip install liger-kernel==0.8.5 torch && python docs/repro/liger_flp_16bit_chunks.py
"""

import torch
from liger_kernel.ops.fused_linear_scaled_cross_entropy import _FusedLinearPPOFallbackFunction as F

torch.manual_seed(0)
n, h, v = 24, 32, 500
hidden = torch.randn(n, h)
weight = torch.randn(v, h) * h**-0.5
hidden[:, 0] = 1.0  # a constant feature: weight[:, 0] acts as a bias
weight[:, 0] = -200.0 + 0.0 * weight[:, 0]
hidden, weight = hidden.bfloat16(), weight.bfloat16()
target = torch.randint(0, v, (n,))

# (input, weight, target, temperature, ignore_index, return_entropy)
nll, entropy = F.apply(hidden, weight, target, 1.0, -100, True)
x = hidden.double() @ weight.double().t()
ref = torch.log_softmax(x, -1).gather(-1, target[:, None]).squeeze(-1)
fp32 = torch.log_softmax(hidden.float() @ weight.float().t(), -1).gather(-1, target[:, None]).squeeze(-1)
rel = lambda a: ((a.double() - ref).norm() / ref.norm()).item()  # noqa: E731
print(f"Liger log-probs (-nll, {nll.dtype}): relative error {rel(-nll):.3e}; entropy dtype {entropy.dtype}")
print(f"float32 logits from the same bf16 inputs: relative error {rel(fp32):.3e}")
