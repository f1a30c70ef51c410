"""Session 11: the flce fp16 'large' failures of the full preset: a race in pass 2 (warps storing
a 16-bit gradient over float32 logits others have yet to read)? Runs each failing case several
times with the barriers off (as before the fix) and on, and times flce/ce with and without."""

import functools
import json
import os

import torch
from triton.testing import do_bench

from ligerbench import tolerance
from ligerbench.cases import DTYPES
from ligerbench.kernels import cross_entropy as ce
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.suites.flce.axes import case as flce_case
from ligerbench.suites.flce.spec import eager_in_dtype, make_problem, reference, run_flce

real_level = ce._sync_level
out = {}


def level(mode):
    ce._sync_level = real_level if mode == "fixed" else (lambda grad, logits: 0)


specs = [
    dict(dtype="fp16", reduction="none", upstream="ones", logits="large"),
    dict(dtype="fp16", reduction="sum", upstream="random", logits="large"),
    dict(dtype="bf16", reduction="sum", upstream="random", logits="large"),
    dict(dtype="fp16", reduction="none", upstream="random", logits="large"),
]
for sp in specs:
    case = flce_case(n=4096, v=32000, h=1024, ignore_pattern="random_10", option="plain", **sp)
    p = make_problem(case, 0, torch.device("cuda"))
    ref, eager = reference(p), eager_in_dtype(p)
    fn = functools.partial(fused_linear_cross_entropy, return_z_loss=True)
    for mode in ("unsynced", "fixed"):
        level(mode)
        ratios = []
        for _rep in range(8):
            got = run_flce(fn, p)
            r = {}
            for q in ("loss", "grad_hidden", "grad_weight"):
                err = tolerance.rel_error(got.values.get(q), ref.values[q])
                lim = tolerance.limit_for(tolerance.rel_error(eager.values[q], ref.values[q]), DTYPES[case.dtype])
                r[q] = round(err / lim, 3)
            ratios.append(r)
        out[f"{case.id} {mode}"] = ratios
        print(case.id, mode, [x["grad_hidden"] for x in ratios], [x["grad_weight"] for x in ratios], flush=True)
level("fixed")


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


dev = "cuda"
torch.manual_seed(0)
timing = {}
for name, (n, h, v) in {"llama3-8b": (8192, 4096, 128256), "mistral-7b": (8192, 4096, 32768)}.items():
    hid = torch.randn(n, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(v, h, device=dev, dtype=torch.bfloat16) / h**0.5).requires_grad_()
    t = torch.randint(0, v, (n,), device=dev)

    def step(hid=hid, w=w, t=t):
        hid.grad = w.grad = None
        fused_linear_cross_entropy(hid, w, t).backward()

    for mode in ("unsynced", "fixed", "unsynced", "fixed"):
        level(mode)
        step()
        torch.cuda.synchronize()
        timing.setdefault(f"flce {name} {mode}", []).append(round(bench(step), 3))
    del hid, w
x = torch.randn(8192, 128256, device=dev, dtype=torch.bfloat16)
t = torch.randint(0, 128256, (8192,), device=dev)
for inplace in (False, True):
    for mode in ("unsynced", "fixed", "unsynced", "fixed"):
        level(mode)

        def step(inplace=inplace):
            xl = x.detach().requires_grad_()
            ce.cross_entropy(xl, t, inplace_backward=inplace, check_targets=False).backward()

        step()
        timing.setdefault(f"ce inplace={inplace} {mode}", []).append(round(bench(step), 3))
level("fixed")
print(json.dumps(timing, indent=1))
json.dump(
    {"errors_over_limit": out, "timing_ms": timing, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
    open(os.path.join(os.environ["OUT"], "race.json"), "w"),
    indent=1,
)
