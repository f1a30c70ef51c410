"""Issue 34, flce against torch.compile: can the weight-gradient accumulation of a token chunk,
dW[V, H] += g[K, V].T @ h[K, H] (K = the chunk's tokens), hide its [V, H] read and write behind
its math? cuBLAS's addmm_ runs them in series (session 12: 1.15 ms at K = 576 on the H100,
0.76 of math, 0.70 of traffic). This times, per head and chunk size: cuBLAS's addmm_, cuBLAS's
mm (no accumulate: the math alone), and a Triton GEMM that starts its accumulator from dW's
tile (several tile shapes; two programs an SM can overlap one's traffic with the other's math).
GPU only. Prints one line per (shape, provider) and checks the Triton result against addmm_'s.

    python results/examples/issue34-gpu/dw_probe.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _dw_acc_kernel(
    g_ptr, h_ptr, c_ptr, M, N, K, stride_gk, stride_hk, stride_cm,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, ACCUM: tl.constexpr,
):
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    per_group = GROUP_M * n_n
    first_m = (pid // per_group) * GROUP_M
    size_m = min(n_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :]
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if ACCUM:
        acc = tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(g_ptr + kk[None, :].to(tl.int64) * stride_gk + rm[:, None], mask=(kk[None, :] < K) & (rm[:, None] < M), other=0.0)
        b = tl.load(h_ptr + kk[:, None].to(tl.int64) * stride_hk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


CONFIGS = [  # (BM, BN, BK, warps, stages, GROUP_M)
    (128, 256, 64, 8, 3, 8),
    (128, 128, 64, 4, 4, 8),
    (128, 128, 64, 8, 3, 8),
    (256, 128, 64, 8, 3, 8),
    (128, 64, 64, 4, 4, 8),
    (64, 256, 64, 4, 4, 8),
]


def dw_triton(c, g, h, cfg, accum=True):
    bm, bn, bk, warps, stages, group = cfg
    m, n = c.shape
    k = g.shape[0]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _dw_acc_kernel[grid](g, h, c, m, n, k, g.stride(0), h.stride(0), c.stride(0),
                         BM=bm, BN=bn, BK=bk, GROUP_M=group, ACCUM=accum, num_warps=warps, num_stages=stages)


def ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200)


def main():
    torch.manual_seed(0)
    dev = "cuda"
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    heads = {"llama3-8b": (128256, 4096, (384, 576, 768)), "qwen2.5-7b": (152064, 3584, (512, 640)),
             "gemma2-2b": (256000, 2304, (192, 320, 448))}
    # the matmul ceiling this GPU reaches: one product of the Llama-3 head's size at K = 8192
    v, hh = 128256, 4096
    g = torch.randn(8192, v, device=dev, dtype=torch.bfloat16)
    h = torch.randn(8192, hh, device=dev, dtype=torch.bfloat16)
    t = ms(lambda: torch.mm(g.t(), h))
    print(f"ceiling: mm K=8192 {t:.3f} ms, {2 * 8192 * v * hh / t / 1e9:.1f} TFLOP/s")
    del g, h
    for name, (v, hh, ks) in heads.items():
        w = torch.randn(v, hh, device=dev, dtype=torch.bfloat16) * 0.01
        for k in ks:
            g = torch.randn(k, v, device=dev, dtype=torch.bfloat16) * 1e-3
            h = torch.randn(k, hh, device=dev, dtype=torch.bfloat16)
            c = w.clone()
            flop = 2 * k * v * hh
            ref = w.float() + g.t().float() @ h.float()
            res = {}
            res["cublas_addmm"] = ms(lambda: c.addmm_(g.t(), h))
            res["cublas_mm"] = ms(lambda: torch.mm(g.t(), h, out=c))
            for cfg in CONFIGS:
                c.copy_(w)
                try:
                    dw_triton(c, g, h, cfg)
                except Exception as e:  # out of shared memory and the like
                    print(f"{name} K={k} triton{cfg}: {type(e).__name__}")
                    continue
                err = (c.float() - ref).abs().max().item()
                c.copy_(w)
                c.addmm_(g.t(), h)
                err_cublas = (c.float() - ref).abs().max().item()
                res[f"triton{cfg}"] = ms(lambda: dw_triton(c, g, h, cfg))
                res[f"triton{cfg}_noacc"] = ms(lambda: dw_triton(c, g, h, cfg, accum=False))
                print(f"{name} K={k} triton{cfg}: max err {err:.3e} (cublas {err_cublas:.3e})")
            traffic = 2 * v * hh * 2 / 3.0e12 * 1e3
            print(f"{name} V={v} H={hh} K={k}: traffic of dW read+write at 3.0 TB/s {traffic:.3f} ms")
            for key, val in sorted(res.items(), key=lambda kv: kv[1]):
                print(f"  {key:45s} {val:.3f} ms  {flop / val / 1e9:.1f} TFLOP/s")
            del g, h, c, ref
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
