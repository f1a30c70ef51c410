"""On the GPU: flce at torch.compile's memory budget (the [N, V] bf16 logits less 64 MiB) and at the
default, store float32 against shifted16 (and auto), the four bench heads, N=8192, bf16:
fwd+bwd median ms (do_bench) and peak extra MiB."""
import json, sys, torch, triton
from triton.testing import do_bench
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy as flce
HEADS = {"llama3-8b": (4096, 128256), "gemma2-2b": (2304, 256000), "qwen2.5-7b": (3584, 152064), "mistral-7b": (4096, 32768)}
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
n = 8192
for name, (h, v) in HEADS.items():
    x = torch.randn(n, h, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = (torch.randn(v, h, generator=g, device="cuda", dtype=torch.bfloat16) * h**-0.5).requires_grad_(True)
    t = torch.randint(0, v, (n,), generator=g, device="cuda"); t[torch.rand(n, generator=g, device="cuda") < 0.1] = -100
    compile_mem = n * v * 2 - (64 << 20)
    res = {}
    for label, kw in [("default auto", {}), ("compile_mem auto", dict(chunk_bytes=compile_mem)),
                      ("compile_mem float32", dict(chunk_bytes=compile_mem, store="float32")),
                      ("compile_mem shifted16", dict(chunk_bytes=compile_mem, store="shifted16")),
                      ("2x compile_mem float32", dict(chunk_bytes=2 * compile_mem, store="float32"))]:
        def step():
            x.grad = None; w.grad = None
            flce(x, w, t, **kw).backward()
        try:
            step(); torch.cuda.synchronize()
            base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
            step(); torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            res[label] = dict(ms=do_bench(step, rep=300), extra_mib=peak)
        except Exception as e:
            res[label] = repr(e)[:200]
    out[name] = res
    print(name, json.dumps(res), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
