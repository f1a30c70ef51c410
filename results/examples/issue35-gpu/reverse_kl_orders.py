"""Issue 35, finding 3: is torch.compile's float32 reverse-KL loss on one case (5.88e-7 against a
limit of 5.72e-7 on an H200; careful and textbook 1.67e-7) a way of writing it that the textbook
yardstick lacks, or the spread of one float32 reduction's order? Prints, on the case, the loss's
relative error of: the careful yardstick, the textbook one (F.kl_div), MiniLLM's / DistiLLM's
reverse KL (softmax * log q - softmax * log p, summed), torch.compile of the careful formula as
verify runs it, and the careful formula with each row's sum over V split into k chunks (the
orders a correct float32 kernel may take).

    python results/examples/issue35-gpu/reverse_kl_orders.py      # a GPU; CPU runs too (no compile)
"""

import torch
import torch.nn.functional as F

from ligerbench.suites import distill_semantics as semantics
from ligerbench.suites.kd import spec
from ligerbench.suites.kd.axes import case
from ligerbench.suites.kd.providers import eager_fp32
from ligerbench.tolerance import rel_error

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
c = case(n=8, v=1000, dtype="fp32", divergence="reverse_kl", temperature=2.0, teacher_grad=True)
problem = spec.make_problem(c, 0, device)
truth = spec.reference(problem).values["loss"]


def err(fn) -> float:
    return rel_error(spec.run_kd(fn, problem).values["loss"], truth)


def minillm(student, teacher, labels=None, *, temperature=1.0, ignore_index=-100, **_):
    p = F.softmax(student / temperature, dim=-1, dtype=torch.float32)
    lp = F.log_softmax(student / temperature, dim=-1, dtype=torch.float32)
    lq = F.log_softmax(teacher.detach() / temperature, dim=-1, dtype=torch.float32)
    rows = -(p * lq - p * lp).sum(-1)
    counted = labels != ignore_index
    return (rows * counted).sum() / counted.sum()


def chunked(k: int):
    def fn(student, teacher, labels=None, *, temperature=1.0, ignore_index=-100, **_):
        lp, lq = semantics.log_probs(student, teacher, None, temperature)
        terms = lp.exp() * (lp - lq)
        rows = sum(part.sum(-1) for part in terms.chunk(k, dim=-1))
        return semantics.reduce(rows, labels != ignore_index, "mean")

    return fn


print(c.id, "on", device)
print(f"careful   {rel_error(spec.eager_in_dtype(problem).values['loss'], truth):.3g}")
print(f"textbook  {rel_error(spec.textbook(problem).values['loss'], truth):.3g}")
print(f"minillm   {err(minillm):.3g}")
if device.type == "cuda":
    print(f"compile   {err(torch.compile(eager_fp32, dynamic=True)):.3g}")
spread = {k: err(chunked(k)) for k in (1, 2, 4, 8, 16, 32, 64, 125)}
print("chunks    " + "  ".join(f"{k}:{e:.3g}" for k, e in spread.items()), f"  max {max(spread.values()):.3g}")
