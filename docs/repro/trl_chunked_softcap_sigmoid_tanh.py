"""TRL 1.16 (docs/peers.md, "Every failing check, classified"): ChunkedLogProbFunction's Triton
fold (the path TRL takes on CUDA) forms the softcap's tanh as 2 * sigmoid(2u) - 1. That identity
carries sigmoid's rounding next to 1/2 (about 2**-25) into tanh as an absolute error, so where
|tanh(u)| is well below 1 (logits small beside the softcap, as Gemma-2's 30 leaves most of them)
tanh is off by many of its own ulps, and the log-probs by softcap * that / temperature. PyTorch's
torch.tanh, which users write, and TRL's own PyTorch path keep tanh within an ulp.

Printed: (1) the identity's error against float64 tanh, in ulps of tanh, beside torch.tanh's;
(2) TRL's log-probs with a softcap of 30 at temperature 0.6 (its Triton fold; on CPU through
Triton's interpreter), its PyTorch tiles, and PyTorch as users write it: the largest relative
error against float64. An H100 quick verify (2026-11-26) failed TRL's float32 log-prob there
at 4.85e-7 against a limit of 3.18e-7 (textbook 2.95e-8).

    pip install trl==1.16.0
    python docs/repro/trl_chunked_softcap_sigmoid_tanh.py    # on a GPU, or on CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates TRL's kernels
import trl.kernels.chunked_logprob as chunked  # noqa: E402
from trl.kernels import ChunkedLogProbFunction  # noqa: E402

# (1) the identity in float32, over tanh's range well below 1
u = torch.linspace(1e-3, 0.5, 100_000)
exact = torch.tanh(u.double())
ulp = (torch.nextafter(exact.float(), torch.tensor(2.0)) - exact.float()).double()
by_sigmoid = 2 * torch.sigmoid(2 * u) - 1
print(f"2*sigmoid(2u)-1: worst {((by_sigmoid.double() - exact).abs() / ulp).max():.1f} ulps of tanh; "
      f"torch.tanh: {((torch.tanh(u).double() - exact).abs() / ulp).max():.1f}")  # fmt: skip

# (2) TRL's log-probs, softcap 30, temperature 0.6, float32
n, h, v, softcap, temperature = 64, 32, 500, 30.0, 0.6
g = torch.Generator().manual_seed(0)
hidden = torch.randn(n, h, generator=g).to(device)
weight = (torch.randn(v, h, generator=g) * 0.5).to(device)
target = torch.randint(0, v, (n,), generator=g).to(device)
z = hidden.double() @ weight.double().t()
truth = torch.log_softmax(softcap * torch.tanh(z / softcap) / temperature, -1).gather(1, target[:, None])[:, 0]


def rel(x):
    return ((x.double() - truth).abs() / truth.abs()).max().item()


def trl(triton_fold: bool):
    chunked._use_triton = lambda _device: triton_fold
    logp, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, target, temperature, 4096, softcap, 1.0, ())
    return logp


users = torch.log_softmax(softcap * torch.tanh(hidden @ weight.t() / softcap) / temperature, -1)
print(f"largest |tanh(u)| here: {torch.tanh(z / softcap).abs().max():.3f}")
print(f"log-probs, relative error against float64: TRL's Triton fold {rel(trl(True)):.2e}, "
      f"TRL's PyTorch tiles {rel(trl(False)):.2e}, PyTorch as users write it "
      f"{rel(users.gather(1, target[:, None])[:, 0]):.2e}")  # fmt: skip
