"""A convergence run is evidence only on a fixture that stays in its regime: the float64 run's loss
is bounded by SPIKE_FACTOR x log(V), and a run whose loss spikes (the GRPO fixture that went from
about 1 to about 5,000 at step 3) fails that row."""

import csv
import math
from pathlib import Path

from ligerbench.converge.models import PRESETS
from ligerbench.suites.converge import SPIKE_FACTOR, loss_spike

RUNS = Path(__file__).resolve().parent.parent / "results" / "runs"
# the float64 curves of `converge llama-mini --rl grpo --nproc 4 --parallel fsdp2_tp` on four H100s
# (tree 00171d4, committed in bb562e3 as results/runs/converge-llama-mini-grpo-fsdp2_tp-4xh100): the
# fixture before its learning rate was lowered. The run itself left results/runs, whose converge
# runs hold limits of at most 1 (tests/test_committed_converge_limits.py), and its bf16 top-k
# log-probs had been judged against 1.78; its curves stay here, the spike they show being the point
SPIKING = Path(__file__).resolve().parent / "data" / "converge-grpo-fsdp2_tp-4xh100-spiking-curves.csv"


def test_a_loss_that_spikes_past_twice_log_v_is_out_of_bounds():
    losses = [0.9, 1.1, 4.8e3, 260.0, 3.0, 1.2]
    peak, bound, at = loss_spike(losses, vocab=512)
    assert (peak, at) == (4.8e3, 2)
    assert peak > bound == SPIKE_FACTOR * math.log(512)


def test_nan_is_the_worst_step():
    peak, bound, at = loss_spike([0.5, math.nan, 0.4], vocab=512)
    assert at == 1 and math.isnan(peak) and not peak <= bound


def test_the_well_conditioned_grpo_and_sft_curves_stay_within():
    # the float64 GRPO loss on four H200s (results/runs/converge-llama-mini-grpo-fsdp2_tp-fp32-4xh200):
    # 0.0383 at step 0, its peak 1.78 at step 1, 0.248 at the end; an SFT loss starting at log(V)
    grpo = [0.0383, 1.7813, 0.62, 0.58, 1.17, 0.45, 0.248]
    sft = [math.log(512) + 0.1, 5.9, 5.1, 4.2, 3.3]
    for losses in (grpo, sft):
        peak, bound, _ = loss_spike(losses, vocab=512)
        assert peak <= bound


def _float64_losses(run: str, dtype: str) -> list[float]:
    rows = csv.DictReader((SPIKING if run == "spiking" else RUNS / run / "curves.csv").open())
    return [float(r["loss_float64"]) for r in rows if r["dtype"] == dtype]


def test_the_committed_spiking_grpo_runs_fail_and_the_conditioned_ones_pass():
    # the 4-GPU runs whose fsdp2_tp plan departed at step 53 (2026-11-27, the learning rate since
    # lowered) spiked to ~5,000 at step 3; the runs on the conditioned fixture stay within
    for run, dtype, bounded in (
        ("spiking", "fp32", False),
        ("spiking", "bf16", False),
        ("converge-llama-mini-grpo-fsdp2_tp-fp32-4xh200", "fp32", True),
        ("converge-llama-mini-grpo-fsdp2_tp_strided-bf16-4xh200", "bf16", True),
    ):
        peak, bound, _ = loss_spike(_float64_losses(run, dtype), vocab=PRESETS["gpu"].vocab)
        assert (peak <= bound) == bounded, (run, dtype, peak, bound)
