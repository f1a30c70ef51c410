"""Liger's float32 softcap gradient on large and confident rows failed the default verdict by
1.06-1.56x (H100, session 18). Is it a draw of the textbook formula's own roundings (1 - tanh^2
cancels where tanh -> 1, so one ulp of tanh moves the slope a lot) or worse than that formula?
Per case, the logits' gradient's relative error against float64 for:

  textbook   ce_torch as users write it (autograd through torch.tanh: 1 - y^2)
  lse        the same, loss as logsumexp(x) - x_t
  t64        the textbook slope 1 - t^2 with t the correctly rounded tanh (float64, then float32)
  t+1ulp     the same with every t one ulp toward 0 (a tanh 1 ulp off, as a fast tanh may be)
  liger      Liger's cross entropy (libdevice tanh)

Run from the repository root on a GPU: python3 results/examples/issue34-gpu/softcap_slope_probe.py
"""

import torch

from ligerbench.builtin import default_registry
from ligerbench.suites.ce import spec
from ligerbench.suites.ce.axes import case
from ligerbench.suites.device_tanh import tanh_as_given
from ligerbench.tolerance import rel_error

CASES = [dict(n=16, v=1000, dtype="fp32", reduction="none", upstream=up, ignore_pattern="random_10", option="softcap",
              logits=kind) for kind in ("large", "confident") for up in ("ones", "random")]  # fmt: skip


def with_tanh(move_ulps: int):
    def fn(logits, target, *, softcap, **options):
        u = logits / softcap
        t = torch.tanh(u.detach().double()).float()
        if move_ulps:
            t = torch.nextafter(t, torch.zeros_like(t))
        x = softcap * tanh_as_given(u, t)
        return spec.ce_torch(x, target, softcap=None, **options)

    return fn


def main() -> None:
    dev = torch.device("cuda")
    liger = default_registry().providers[("ce", "liger")].load()
    forms = {"textbook": lambda *a, **k: spec.ce_torch(*a, **k, textbook=True),
             "lse": lambda *a, **k: spec.ce_torch(*a, **k, textbook="logsumexp"),
             "t64": with_tanh(0), "t+1ulp": with_tanh(1), "liger": liger}  # fmt: skip
    print(torch.cuda.get_device_name())
    for seed in range(3):
        for params in CASES:
            c = case(**params)
            p = spec.make_problem(c, seed, dev)
            truth = spec.reference(p).values["grad_logits"]
            errors = {k: rel_error(spec.run_ce(fn, p).values["grad_logits"], truth) for k, fn in forms.items()}
            print(f"seed {seed} {c.id:60s} " + " ".join(f"{k} {e:.3g}" for k, e in errors.items()), flush=True)


if __name__ == "__main__":
    main()
