"""Float32 products from 16-bit operands, shared by the fused kernels (flce, flp, their
vocab-parallel forms): a chunk's logits formed in float32 and never rounded to 16 bits (a
rounded logit of a confident row moves its loss by percent: docs/bugs.md, "What the careful
yardstick found in our own kernels"), the float32 accumulation of a weight gradient, and the
per-chunk buffers."""

from __future__ import annotations

import torch

_FP32_OUT_MM: dict[tuple[str, str], bool] = {}  # (device type, "addmm" | "mm") -> whether out_dtype runs there


def add_product_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, first: bool = False) -> None:
    """acc (float32) += a @ b for 16-bit a, b, with the product accumulated in fp32 and never
    rounded to 16 bits; first=True: acc = a @ b (acc's old values, e.g. of torch.empty, never
    read). cuBLAS does it directly (torch's out_dtype matmul, CUDA only); elsewhere the operands
    are upcast first (exact, slower, 2x the operand memory: fine on CPU)."""
    if a.dtype == torch.float32:
        torch.mm(a, b, out=acc) if first else acc.addmm_(a, b)
        return
    kind = (acc.device.type, "mm" if first else "addmm")
    if _FP32_OUT_MM.get(kind, True):
        try:
            if first:
                torch.mm(a, b, out_dtype=torch.float32, out=acc)
            else:
                torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
            _FP32_OUT_MM[kind] = True
            return
        except (RuntimeError, TypeError, NotImplementedError):
            _FP32_OUT_MM[kind] = False
    torch.mm(a.float(), b.float(), out=acc) if first else acc.addmm_(a.float(), b.float())


def logits_fp32(h_c: torch.Tensor, w: torch.Tensor, b32: torch.Tensor | None, out: torch.Tensor) -> None:
    """out = h_c @ w.T (+ b32) in float32, the product accumulated in float32 and never rounded
    to 16 bits. cuBLAS does it straight from 16-bit operands (torch's out_dtype matmul, CUDA
    only); elsewhere the operands are upcast first (exact, more memory: fine on CPU)."""
    if h_c.dtype == torch.float32:
        if b32 is None:
            torch.mm(h_c, w.t(), out=out)
        else:
            torch.addmm(b32, h_c, w.t(), out=out)
        return
    kind = (out.device.type, "mm")
    done = False
    if _FP32_OUT_MM.get(kind, True):
        try:
            torch.mm(h_c, w.t(), out_dtype=torch.float32, out=out)
            _FP32_OUT_MM[kind] = done = True
        except (RuntimeError, TypeError, NotImplementedError):
            _FP32_OUT_MM[kind] = False
    if not done:
        torch.mm(h_c.float(), w.float().t(), out=out)
    if b32 is not None:
        out += b32


def grad_times(grad: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """out = grad @ w for a chunk's gradient `grad` [rows, V] that may lie over or under its
    float32 logits (grad_over_logits, grad_under_logits: rows 2V elements apart). On CPU such
    rows are first copied together: PyTorch's CPU bfloat16 matmul (oneDNN's AMX kernel,
    brg_matmul:avx10_1_512_amx; torch 2.13, oneDNN 3.12) reads each row of a strided left operand
    past its last column, up to its K block (28 elements more at V=100), and multiplies them by
    zero padding: when the bytes there (the low half of a float32 logit, read as a bfloat16) are
    a NaN or an infinity, 0 * NaN makes that whole row of the product NaN. Contiguous rows are
    read right. On a GPU cuBLAS reads only the view: no copy."""
    if grad.device.type == "cpu" and grad.dim() == 2 and grad.shape[0] > 0 and grad.stride(0) != grad.shape[1]:
        grad = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device).copy_(grad)
    torch.mm(grad, w, out=out)


# Bytes per logit of a chunk whose 16-bit gradient is written into its float32 logits' storage
# (grad_over_logits): the float32 logit alone.
SHARED_LOGIT_BYTES = 4


def grad_over_logits(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A [rows, V] view, in `dtype`, for the gradient of float32 `logits` [rows, V] (contiguous),
    laid in the same storage: the logits themselves for float32, else the upper half of each
    row's bytes (row stride 2V elements of a 16-bit dtype). Safe only for a writer that, within
    a row, reads a block of logits before writing any gradient and walks the row from its last
    block to its first, as cross_entropy's pass 2 does: the gradient of columns [c, c+B) lands
    in bytes 2V+2c .. 2V+2c+2B of the row, above every logit byte still to be read (those of
    columns < c end at byte 4c <= 2V + 2c). Each row's gradient lies in its own row's bytes, so
    rows never meet (one a program on a GPU; a tile's rows under the interpreter run each
    operation together: kernels/row_tiles.py)."""
    if dtype == torch.float32:
        return logits
    rows, v = logits.shape
    return logits.view(dtype).view(rows, 2 * v)[:, v:]


def grad_under_logits(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """grad_over_logits for a writer that walks each row from its FIRST block to its last, as
    log_probs' backward kernel does: the gradient lies in the lower half of each row's bytes.
    The gradient of columns [c, c+B) lands in bytes 2c .. 2c+2B, over the logits of columns
    < (c+B)/2 <= c (for c >= B), read already; the first block (c = 0) overwrites only logits of
    its own, which it reads before it writes; the logits still to be read (columns >= c+B) start
    at byte 4c+4B, above every byte written so far. Each row's gradient lies in its own bytes, so
    rows never meet (kernels/row_tiles.py);
    within a program the kernel puts a barrier before each block's store (its warps run apart:
    docs/bugs.md, bug 9)."""
    if dtype == torch.float32:
        return logits
    rows, v = logits.shape
    return logits.view(dtype).view(rows, 2 * v)[:, :v]
