"""Two findings in Liger-Kernel 0.8.5's distillation losses (docs/peers.md, "Distillation"), public
API only, each printed next to a float64 reference. CPU is enough (Liger's JSD kernel runs under
Triton's interpreter; the fused linear JSD with compiled=False is PyTorch):

    TRITON_INTERPRET=1 python docs/repro/liger_distill.py

1. LigerFusedLinearJSDLoss on bf16 inputs forms each chunk's logits in bf16 (the product in the
   inputs' dtype) before the softmax: the distillation loss is off by percents.
2. LigerJSD returns NaN when the vocabulary has -inf (masked/padded) columns in both inputs, at
   every beta (0, 0.5, 1): its kernel forms P * (Y - X) = 0 * (-inf - -inf). PyTorch's own
   F.kl_div(log_target=True) gives the same NaN, and Liger's docs take log-probs of a model's
   finite logits: outside its contract, declared in its `supports` (docs/peers.md).
"""

import torch
from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss
from liger_kernel.transformers.jsd import LigerJSD

torch.manual_seed(0)
N, H, V, T = 12, 32, 500, 2.0


def jsd64(xs, xt, beta, temperature):
    lp = torch.log_softmax(xs.double() / temperature, -1)
    lq = torch.log_softmax(xt.double() / temperature, -1)
    lm = torch.logaddexp(lp + torch.log1p(torch.tensor(-beta)), lq + torch.log(torch.tensor(beta)))
    return beta * (lq.exp() * (lq - lm)).sum(-1) + (1 - beta) * (lp.exp() * (lp - lm)).sum(-1)


hs, ws = torch.randn(N, H), torch.randn(V, H) / H**0.5
ht, wt = torch.randn(N, H + 16), torch.randn(V, H + 16) / (H + 16) ** 0.5
labels = torch.randint(0, V, (N,))
loss_fn = LigerFusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0, beta=0.5, temperature=T, compiled=False)
for dtype in (torch.float32, torch.bfloat16):
    a, b, c, d = (x.to(dtype) for x in (hs, ws, ht, wt))  # the truth is of these very (rounded) inputs
    truth = jsd64(a.double() @ b.double().T, c.double() @ d.double().T, 0.5, T).mean().item()
    got = loss_fn(a, b, c, d, labels).item()
    print(
        f"1. LigerFusedLinearJSDLoss {str(dtype):15} JSD {got:.6f}   float64 {truth:.6f}   "
        f"rel err {abs(got - truth) / truth:.2e}"
    )

s, t = torch.randn(4, 64), torch.randn(4, 64)
s[:, 60:] = t[:, 60:] = float("-inf")  # a padded vocabulary, masked
log_q, log_p = torch.log_softmax(s, -1), torch.log_softmax(t, -1)
live = slice(0, 60)
kl = (log_p[:, live].exp().double() * (log_p[:, live].double() - log_q[:, live].double())).sum(-1).mean().item()
for beta in (0.0, 0.5, 1.0):
    print(f"2. LigerJSD(beta={beta}) with -inf columns: {LigerJSD(beta=beta)(log_q, log_p).item()}")
got = torch.nn.functional.kl_div(log_q, log_p, reduction="batchmean", log_target=True).item()
print(f"   F.kl_div(log_target=True): {got}   float64 forward KL {kl:.6f}")
