"""Session 11: flp's ours_small_chunks over the limit (fp32, peaked, up-sums): how the error of
grad_weight moves with the chunk budget and the upstream kind; each run twice."""

import functools
import json
import os

import torch

from ligerbench import tolerance
from ligerbench.cases import DTYPES
from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs
from ligerbench.suites.flp.axes import case as flp_case
from ligerbench.suites.flp.spec import eager_in_dtype, make_problem, reference, run_flp

out = {}
for up in ("sums", "both"):
    case = flp_case(
        n=2048, v=128256, h=1024, dtype="fp32", upstream=up, ignore_pattern="leading_run", logits="peaked", layout="3d"
    )
    p = make_problem(case, 0, torch.device("cuda"))
    ref, eager = reference(p), eager_in_dtype(p)
    for name, kw in {
        "default": {},
        "16KiB": dict(chunk_bytes=16 * 1024),
        "64KiB": dict(chunk_bytes=64 * 1024),
        "1MiB": dict(chunk_bytes=2**20),
        "16MiB": dict(chunk_bytes=16 * 2**20),
        "rows7": dict(backward_split="rows", chunk_rows=7),
    }.items():
        fn = functools.partial(fused_linear_log_probs, **kw)
        for rep in range(2):
            got = run_flp(fn, p)
            r = {}
            for q in ("logp", "entropy", "grad_hidden", "grad_weight"):
                err = tolerance.rel_error(got.values[q], ref.values[q])
                e_err = tolerance.rel_error(eager.values[q], ref.values[q])
                limit = tolerance.limit_for(e_err, DTYPES["fp32"])
                r[q] = [float(f"{err:.3g}"), float(f"{e_err:.3g}"), round(err / limit, 3)]
            out[f"{case.id} {name} {rep}"] = r
            print(case.id[-40:], name, rep, r["grad_weight"], r["grad_hidden"], flush=True)
json.dump(out, open(os.path.join(os.environ["OUT"], "flp_small_chunks.json"), "w"), indent=1)
