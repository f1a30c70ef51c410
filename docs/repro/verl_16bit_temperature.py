"""verl 0.9.1's FSDP engine scales bf16 logits by the temperature in bf16, the temperature itself
cast to bf16 (`_scale_logits_by_temperature`: logits / temperature.to(logits.dtype); 0.7 becomes
0.69921875), then `verl.utils.torch_functional.logprobs_from_logits` (without flash-attn's cross
entropy: log_softmax in the logits' dtype, bf16 out). The log-probs the policy loss compares with
the rollout's carry the 16-bit rounding of every logit and of T.

    pip install --no-deps verl==0.9.1 && pip install tensordict==0.10.0 torch transformers
    python docs/repro/verl_16bit_temperature.py

verl's package __init__ imports its trainer (Ray): the module is loaded as ligerbench does
(suites/peers/verl.py, `load`), without running that __init__.
"""

import importlib
import importlib.metadata
import sys
import types
from pathlib import Path

import torch

root = Path(str(importlib.metadata.distribution("verl").locate_file(""))) / "verl"
for name, folder in (("verl", root), ("verl.utils", root / "utils")):
    sys.modules.setdefault(name, types.ModuleType(name)).__path__ = [str(folder)]
functional = importlib.import_module("verl.utils.torch_functional")

torch.manual_seed(0)
n, v, temperature = 64, 4096, 0.7
logits = (3 * torch.randn(n, v)).bfloat16()
target = torch.randint(0, v, (n,))

scaled = logits / torch.tensor(temperature).clamp(min=1e-8).to(logits.dtype)  # the engine's line
verl_logp = functional.logprobs_from_logits(scaled, target, inplace_backward=False)
ref = torch.log_softmax(logits.double() / temperature, -1).gather(-1, target[:, None]).squeeze(-1)
fp32 = torch.log_softmax(logits.float() / temperature, -1).gather(-1, target[:, None]).squeeze(-1)
rel = lambda a: ((a.double() - ref).norm() / ref.norm()).item()  # noqa: E731
print(f"temperature {temperature} in bf16: {torch.tensor(temperature).bfloat16().item()}")
print(f"verl log-probs ({verl_logp.dtype}): relative error {rel(verl_logp):.3e}")
print(f"float32 math from the same bf16 logits: relative error {rel(fp32):.3e}")
i = (verl_logp.double() - ref).abs().argmax().item()
print(f"worst token {i}: verl {verl_logp[i].item():.6f}, float64 {ref[i].item():.6f}")
