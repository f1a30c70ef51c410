# ruff: noqa: B023 -- each closure is timed within its own iteration
"""Where lp's time goes against TRL's kernel on one GPU: forward and backward apart, our backward
at several column splits (BWD_BLOCKS_PER_PROGRAM) and our forward at several launch configs.
bf16, V=151936, T=0.7; CUDA events, median of 30 after 5 warm-ups (the logits, 1.2-2.4 GB,
overflow L2, so no flush is needed).

    PYTHONPATH=/tmp/site:$PWD python3 results/examples/issue34-gpu/lp_split.py
"""

import statistics

import torch

from ligerbench.kernels import log_probs as lp

V, T = 151936, 0.7


def timed(fn, reps=30):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    from trl.kernels import selective_log_softmax_and_entropy as trl_fused

    defaults = lp._GPU_FWD, lp._GPU_BWD
    print(f"{torch.cuda.get_device_name()}, V={V}, bf16")
    for n in (4096, 8192):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(n, V, device="cuda", dtype=torch.bfloat16, generator=g)
        tgt = torch.randint(0, V, (n,), device="cuda", generator=g)
        up = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        mask = torch.ones(n, dtype=torch.bool, device="cuda")
        floor = 3 * n * V * 2 / 1e6  # bytes / 1e6 = ms at 1 GB/s... shown as GB/s below
        xl = x.clone().requires_grad_(True)

        def trl_step():
            a, b = trl_fused(xl, tgt, T, mask)
            torch.autograd.backward((a, b), up)

        def ours_step():
            a, b = lp.log_probs(xl, tgt, temperature=T)
            torch.autograd.backward((a, b), up)

        def trl_fwd():
            with torch.no_grad():
                trl_fused(x, tgt, T, mask)

        def ours_fwd():
            lp.log_probs_rows(x, tgt[:, None], temperature=T, softcap=None, logit_scale=1.0, ignore_index=-100)

        _, _, stats = lp.log_probs_rows(
            x, tgt[:, None], temperature=T, softcap=None, logit_scale=1.0, ignore_index=-100
        )
        grad = torch.empty_like(x)

        def ours_bwd():
            lp.log_probs_grad_rows(
                x,
                tgt[:, None],
                stats,
                up[0][:, None].contiguous(),
                up[1],
                grad,
                temperature=T,
                softcap=None,
                logit_scale=1.0,
                ignore_index=-100,
            )

        t = timed(trl_step)
        print(f"N={n} trl full {t:.3f} ms ({floor / t:.0f} GB/s)")
        print(f"N={n} trl fwd {timed(trl_fwd):.3f} ms")
        print(f"N={n} ours full {timed(ours_step):.3f} ms; fwd {timed(ours_fwd):.3f} ms; bwd {timed(ours_bwd):.3f} ms")
        for block, warps in ((2048, 8), (4096, 8), (4096, 16), (8192, 16), (8192, 32), (1024, 4)):
            lp._GPU_FWD = lp._GPU_BWD = (block, warps)
            try:
                print(
                    f"N={n} ours fwd block={block} warps={warps} {timed(ours_fwd):.3f} ms; bwd {timed(ours_bwd):.3f} ms"
                )
            except Exception as exc:  # noqa: BLE001 -- a config that does not compile is reported
                print(f"N={n} block={block} warps={warps}: {type(exc).__name__} {str(exc)[:100]}")
        lp._GPU_FWD, lp._GPU_BWD = defaults
        print(f"N={n} ours fwd default {timed(ours_fwd):.3f} ms")


if __name__ == "__main__":
    main()
