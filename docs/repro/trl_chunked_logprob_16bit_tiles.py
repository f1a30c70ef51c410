"""TRL 1.16.0's ChunkedLogProbFunction forms each logits tile in the hidden states' 16-bit dtype
(its compute dtype, unless autocast or `cast_lm_head_to_fp32`), then takes the softmax of the
rounded tile: the class of Liger #1432. Worst where the logits sit far from 0 (every logit ~200
below zero through a bias, as in verl #7439): log-probs and gradients several percent off.

    pip install trl==1.16.0 torch && python docs/repro/trl_chunked_logprob_16bit_tiles.py

Runs on CPU (TRL's PyTorch tiles) and on CUDA (its Triton folds); prints TRL's error and the
error of float32 logits from the same bf16 inputs, both against float64.
"""

import torch
from trl.kernels import ChunkedLogProbFunction

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n, h, v = 24, 32, 500
hidden = torch.randn(n, h).bfloat16().to(device)
weight = (torch.randn(v, h) * h**-0.5).bfloat16().to(device)
bias = (torch.randn(v) - 200.0).bfloat16().to(device)  # every logit ~200 below zero
target = torch.randint(0, v, (n,), device=device)


def truth(dtype):
    x = hidden.to(dtype) @ weight.to(dtype).t() + bias.to(dtype)
    return torch.log_softmax(x, -1).gather(-1, target[:, None]).squeeze(-1).double()


logp, *_ = ChunkedLogProbFunction.apply(hidden, weight, bias, target, 1.0, 32768, None, 1.0, ("entropy",))
ref = truth(torch.float64)
rel = lambda a: ((a.double() - ref).norm() / ref.norm()).item()  # noqa: E731
print(f"device {device}")
print(f"TRL ChunkedLogProbFunction log-probs: relative error {rel(logp):.3e}")
print(f"float32 logits from the same bf16 inputs: relative error {rel(truth(torch.float32)):.3e}")
i = (logp.double() - ref).abs().argmax().item()
print(f"worst token {i}: TRL {logp[i].item():.6f}, float64 {ref[i].item():.6f}")
