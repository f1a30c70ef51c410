"""Suites: what ligerbench checks and measures. One package per kernel (`ce/`, `flce/`, `vp_ce/`,
`vp_flce/`: spec, providers, planted bugs, grid, bench, and the `register(registry)` that
builtin.py calls); beside them what several kernels share: `covering.py` (all-pairs designs),
`input_mutants.py` (planted input-handling bugs), `split_step.py` (a step split over ranks or
micro-batches, and its planted per-piece normaliser), `bench_shapes.py`, `presets.py`, and the
convergence checks (`converge*.py`)."""
