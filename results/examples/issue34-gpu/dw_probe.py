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
def _tile(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's output tile (row block, column block), GROUP_M row blocks a group."""
    pid = tl.program_id(0)
    per_group = GROUP_M * tl.cdiv(N, BN)
    first_m = (pid // per_group) * GROUP_M
    size_m = min(tl.cdiv(M, BM) - first_m, GROUP_M)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


@triton.jit
def _dw_acc_kernel(
    g_ptr,
    h_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_gk,
    stride_hk,
    stride_cm,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    ACCUM: tl.constexpr,
):
    pid_m, pid_n = _tile(M, N, BM, BN, GROUP_M)
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
        a = tl.load(
            g_ptr + kk[None, :].to(tl.int64) * stride_gk + rm[:, None],
            mask=(kk[None, :] < K) & (rm[:, None] < M),
            other=0.0,
        )
        b = tl.load(
            h_ptr + kk[:, None].to(tl.int64) * stride_hk + rn[None, :],
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def _dw_acc_tma_kernel(
    g_desc,
    h_desc,
    c_desc,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    ACCUM: tl.constexpr,
):
    """The same product through tensor-memory-accelerator descriptors (host-made): g's tile is
    loaded [BK, BM] and transposed in shared memory."""
    pid_m, pid_n = _tile(M, N, BM, BN, GROUP_M)
    if ACCUM:
        acc = c_desc.load([pid_m * BM, pid_n * BN]).to(tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = g_desc.load([k0, pid_m * BM])
        b = h_desc.load([k0, pid_n * BN])
        acc = tl.dot(a.T, b, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def dw_tma(c, g, h, cfg, accum=True):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, warps, stages, group = cfg
    m, n = c.shape
    k = g.shape[0]
    gd = TensorDescriptor.from_tensor(g, [bk, bm])
    hd = TensorDescriptor.from_tensor(h, [bk, bn])
    cd = TensorDescriptor.from_tensor(c, [bm, bn])
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _dw_acc_tma_kernel[grid](
        gd, hd, cd, m, n, k, BM=bm, BN=bn, BK=bk, GROUP_M=group, ACCUM=accum, num_warps=warps, num_stages=stages
    )


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
    _dw_acc_kernel[grid](
        g,
        h,
        c,
        m,
        n,
        k,
        g.stride(0),
        h.stride(0),
        c.stride(0),
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP_M=group,
        ACCUM=accum,
        num_warps=warps,
        num_stages=stages,
    )


def ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200)


def time_shape(name, w, k):
    """Every provider at one head and chunk size: {provider: ms}; checks each Triton result."""
    v, hh = w.shape
    g = torch.randn(k, v, device=w.device, dtype=torch.bfloat16) * 1e-3
    h = torch.randn(k, hh, device=w.device, dtype=torch.bfloat16)
    c = w.clone()
    ref = w.float() + g.t().float() @ h.float()
    c.addmm_(g.t(), h)
    print(f"{name} K={k} cublas addmm_: max err {(c.float() - ref).abs().max().item():.3e}")
    res = {"cublas_addmm": ms(lambda: c.addmm_(g.t(), h)), "cublas_mm": ms(lambda: torch.mm(g.t(), h, out=c))}
    for label, fn, cfgs in (("tma", dw_tma, CONFIGS[:4]), ("triton", dw_triton, CONFIGS)):
        for cfg in cfgs:
            c.copy_(w)
            try:
                fn(c, g, h, cfg)
            except Exception as e:  # out of shared memory, a descriptor Triton 3.6 lacks, ...
                print(f"{name} K={k} {label}{cfg}: {type(e).__name__}: {str(e)[:200]}")
                continue
            print(f"{name} K={k} {label}{cfg}: max err {(c.float() - ref).abs().max().item():.3e}")
            res[f"{label}{cfg}"] = ms(lambda fn=fn, cfg=cfg: fn(c, g, h, cfg))
            res[f"{label}{cfg}_noacc"] = ms(lambda fn=fn, cfg=cfg: fn(c, g, h, cfg, accum=False))
    return res


def ceiling(dev, v=128256, hh=4096, k=8192):
    g = torch.randn(k, v, device=dev, dtype=torch.bfloat16)
    h = torch.randn(k, hh, device=dev, dtype=torch.bfloat16)
    t = ms(lambda: torch.mm(g.t(), h))
    print(f"ceiling: mm K={k} {t:.3f} ms, {2 * k * v * hh / t / 1e9:.1f} TFLOP/s")


def main():
    torch.manual_seed(0)
    dev = "cuda"
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    heads = {
        "llama3-8b": (128256, 4096, (384, 576, 768)),
        "qwen2.5-7b": (152064, 3584, (512, 640)),
        "gemma2-2b": (256000, 2304, (192, 320, 448)),
    }
    # the matmul ceiling this GPU reaches: one product of the Llama-3 head's size at K = 8192
    ceiling(dev)
    for name, (v, hh, ks) in heads.items():
        w = torch.randn(v, hh, device=dev, dtype=torch.bfloat16) * 0.01
        for k in ks:
            res = time_shape(name, w, k)
            traffic = 2 * v * hh * 2 / 3.0e12 * 1e3
            print(f"{name} V={v} H={hh} K={k}: traffic of dW read+write at 3.0 TB/s {traffic:.3f} ms")
            for key, val in sorted(res.items(), key=lambda kv: kv[1]):
                print(f"  {key:45s} {val:.3f} ms  {2 * k * v * hh / val / 1e9:.1f} TFLOP/s")
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
