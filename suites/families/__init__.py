"""The semantics and planted bugs a family of kernels shares, restated once in float64: the
log-prob family (`log_prob`, `log_prob_mutants`: lp, flp, vp_flp, and grpo's log-probs) and the
distillation family (`distill`, `distill_mutants`: kd, flkd)."""
