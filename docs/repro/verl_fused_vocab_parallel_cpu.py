"""verl 0.9.1's fused `linear_cross_entropy` over a vocab-parallel group, on 2 gloo ranks on CPU
through Triton's interpreter: what a rank gets when the group is passed as
`dist_process_group`, and when None is passed (what `vp_flp`'s harness hands a provider for
"the default group" under torch.distributed, and what our first adapter forwarded to verl).

    pip install --no-deps verl==0.9.1
    python -O docs/repro/verl_fused_vocab_parallel_cpu.py

verl's kernel is written for CUDA only, so this emulation steps around four CUDA-only things,
none of which touch its arithmetic: `python -O` drops its `assert t.is_cuda` lines; NVTX ranges
and its side stream (the TP path overlaps one all-reduce on it) become no-ops; and the
interpreter is handed boolean masks (verl builds one mask from a scalar comparison, which the
interpreter stores as an integer and refuses). docs/repro/verl_fused_vocab_parallel.py is the
same check on real GPUs.
"""

import contextlib
import importlib
import importlib.metadata
import os
import sys
import types
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

N, H, V, WORLD = 32, 128, 512, 2


def _cpu_shims() -> None:
    torch.cuda.nvtx.range = lambda *a, **k: contextlib.nullcontext()
    builder = interpreter.InterpreterBuilder
    store, load = builder.create_masked_store, builder.create_masked_load

    def boolean(mask):
        return interpreter.TensorHandle(np.asarray(mask.data).astype(bool), mask.dtype)

    builder.create_masked_store = lambda self, p, v, m, c: store(self, p, v, boolean(m), c)
    builder.create_masked_load = lambda self, p, m, o, c, vol: load(self, p, boolean(m), o, c, vol)


class _NoStreams:
    """verl's side stream and its events, for a CPU run: every call in order on one stream."""

    Stream = Event = lambda *a, **k: _NoStreams()
    stream = staticmethod(lambda s: contextlib.nullcontext())

    def current_stream(self):
        return self

    def __getattr__(self, name):  # record_event, wait_event
        return lambda *a, **k: None


def _verl():
    root = Path(str(importlib.metadata.distribution("verl").locate_file(""))) / "verl"
    for name, folder in (("verl", root), ("verl.utils", root / "utils")):
        sys.modules.setdefault(name, types.ModuleType(name)).__path__ = [str(folder)]
    fused = importlib.import_module("verl.utils.kernel.linear_cross_entropy")
    importlib.import_module("verl.utils.kernel.kernels").get_torch_device = lambda: _NoStreams()
    return fused


def rank_main(rank: int, port: int) -> None:
    _cpu_shims()
    fused = _verl()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.manual_seed(0)  # the same inputs on every rank
    hidden = torch.randn(N, H)
    weight = torch.randn(V, H) * H**-0.5
    target = torch.randint(0, V, (N,))
    up_logp, up_ent = torch.randn(N), torch.randn(N)
    shard = V // WORLD
    mine = weight[rank * shard : (rank + 1) * shard].contiguous()

    hd, wd = hidden.double().requires_grad_(True), weight.double().requires_grad_(True)
    lp_all = torch.log_softmax(hd @ wd.t(), -1)
    ref_logp, ref_ent = lp_all.gather(-1, target[:, None]).squeeze(-1), -(lp_all.exp() * lp_all).sum(-1)
    ((ref_logp * up_logp.double()).sum() + (ref_ent * up_ent.double()).sum()).backward()

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    for label, group in (("dist_process_group=group", dist.group.WORLD), ("dist_process_group=None", None)):
        hs, ws = hidden.clone().requires_grad_(True), mine.clone().requires_grad_(True)
        logp, entropy = fused.linear_cross_entropy(hs, ws, target, 1.0, "none", group)
        ((logp * up_logp).sum() + (entropy * up_ent).sum()).backward()
        grad_hidden = hs.grad.clone()
        dist.all_reduce(grad_hidden)  # a tensor-parallel layer's backward: the partial gradients summed
        ent_off = (ref_ent - entropy.double()).mean().item()
        ref_shard = wd.grad[rank * shard : (rank + 1) * shard]
        print(
            f"rank {rank} {label}: logp error {rel(logp.nan_to_num(), ref_logp):.2e} (NaN {logp.isnan().sum().item()}"
            f" of {N}; {(target >= shard).sum().item()} targets past this shard's width, never stored without the "
            f"group); entropy error {rel(entropy, ref_ent):.2e} (float64's minus it, mean {ent_off:.4f}; "
            f"ln {WORLD} = {np.log(WORLD):.4f}); grad_hidden summed {rel(grad_hidden, hd.grad):.2e}, unsummed "
            f"{rel(hs.grad, hd.grad):.2e}; grad_weight shard {rel(ws.grad, ref_shard):.2e}",
            flush=True,
        )
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(29511,), nprocs=WORLD)
