"""How many compiled variants of each Triton kernel a quick verify implies on a GPU, counted on
CPU (issue 34, "quick on a GPU is quick"): every launch through Triton's interpreter is also
handed to the binder a CUDA JITFunction would use (triton.runtime.jit, the same constexprs, the
same specialisation of ints on ==1 and divisibility by 16, of pointers on 16-byte alignment, the
same launch options), and the distinct cache keys are counted per kernel. Each distinct key is
one compile on a cold cache.

    python3 results/examples/issue34-gpu/count_variants.py ce flce lp flp grpo pref > variants.txt

Caveats: the CPU grid is the quick preset's for device cpu (flp and lp add fp16 cases on cuda);
CPU allocations are 64-byte aligned where CUDA's are 512, so a storage offset can differ in
alignment; providers that need a GPU (torch_compile) do not run here.
"""

from __future__ import annotations

import collections
import inspect
import os
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime import interpreter  # noqa: E402
from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)  # an H100; the H200 is the same target
KEYS: dict[str, set] = collections.defaultdict(set)
LAUNCHES: collections.Counter = collections.Counter()
CONSTEXPRS: dict[str, list[str]] = {}
SEEN: dict = collections.defaultdict(lambda: collections.defaultdict(set))  # kernel -> parameter -> its keys
_BINDERS: dict = {}


def _binder(kernel):
    """The binder of the JITFunction triton.jit would have made of `kernel` on a GPU (its
    do_not_specialize lists included)."""
    fn = kernel.fn
    if fn not in _BINDERS:
        accepted = inspect.signature(JITFunction.__init__).parameters
        jit = JITFunction(fn, **{k: v for k, v in kernel.kwargs.items() if k in accepted})
        CONSTEXPRS[fn.__qualname__] = [p.name for p in jit.params if p.is_constexpr]
        _BINDERS[fn] = create_function_from_signature(jit.signature, jit.params, make_backend(TARGET))
    return _BINDERS[fn]


_run = interpreter.InterpretedFunction.run


def _counted_run(self, *args, grid, warmup, **kwargs):
    name = self.fn.__qualname__
    _, specialization, options = _binder(self)(*args, **kwargs)
    KEYS[name].add(compute_cache_key({}, specialization, options))
    LAUNCHES[name] += 1
    for param, spec in zip(self.arg_names, specialization, strict=False):
        SEEN[name][param].add(str(spec[1:]) if spec[0] == "constexpr" else str(spec))
    return _run(self, *args, grid=grid, warmup=warmup, **kwargs)


def main(kernels: list[str]) -> None:
    interpreter.InterpretedFunction.run = _counted_run
    from typer.testing import CliRunner

    from ligerbench.cli import app

    runner = CliRunner()
    print(f"{'kernel':8} {'triton kernel':28} {'variants':>8} {'launches':>8}  constexpr parameters")
    for kernel in kernels:
        KEYS.clear()
        LAUNCHES.clear()
        SEEN.clear()
        t0 = time.perf_counter()
        result = runner.invoke(app, ["verify", "--kernel", kernel, "--preset", "quick", "--device", "cpu",
                                     "--out", "/tmp/ligerbench-count-variants", "--json"])  # fmt: skip
        took = time.perf_counter() - t0
        for name in sorted(KEYS):
            print(f"{kernel:8} {name:28} {len(KEYS[name]):8d} {LAUNCHES[name]:8d}  {', '.join(CONSTEXPRS[name])}")
            varying = {p: len(v) for p, v in SEEN[name].items() if len(v) > 1}
            print(f"{'':8} {'':28} parameters whose key varies (distinct keys): {varying}")
        print(f"{kernel:8} {'(total)':28} {sum(map(len, KEYS.values())):8d} {sum(LAUNCHES.values()):8d}  "
              f"verify exit {result.exit_code}, {took:.0f} s on CPU")  # fmt: skip
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:] or ["ce", "flce", "lp", "flp", "grpo", "pref"])
