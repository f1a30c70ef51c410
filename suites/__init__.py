"""Suites: what ligerbench checks and measures. One package per kernel (`ce/`, `flce/`, `vp_ce/`,
`vp_flce/`, `lp/`, `flp/`, `vp_flp/`, `grpo/`, `pref/`, `kd/`, `flkd/`: spec, providers, planted
bugs, grid, bench, and the `register(registry)` that builtin.py calls); beside them `peers/` (one
file per third-party library), `converge/` (mini-model training checks), `families/` (the
semantics a family of kernels shares) and `common/` (what every kernel's suites draw on)."""
