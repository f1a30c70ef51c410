"""`converge MODEL --distill jsd|forward_kl|reverse_kl`: a mini student trained from a fixed mini
teacher with our fused distillation loss (kernels/fused_linear_distill.py, `flkd`: the student's
last hidden state and lm_head weight, the teacher's), against the same divergence on full logits
in plain PyTorch (transformers' logits path, then suites/families/distill.py's loss as users
write it, TRL's generalized_jsd_loss) and a float64 run of that path, judged like `converge`
(suites/converge/__init__.py's judge_trajectory: loss per step, final parameters, eval top-k log-probs).

The teacher: the same architecture built from its config with its own fixed seed, then trained
`preset.steps` steps of transformers' loss on the synthetic language (ligerbench/converge/data.py,
its own data seed) so that its distribution is worth copying (a random-init teacher is nearly
uniform, and a student matching it would train on almost nothing). It is float32 for the fp32 and
bf16 students (its rounding is not under test: the logits path sees the same teacher), and the
same weights upcast to float64 for the float64 run. Its last hidden states on the training
batches are computed once; the student's every run sees the same ones.

The loss: the divergence at temperature 2 (jsd at beta 0.5), over the response tokens (labels
shifted by one; prompt and padding ignored), mean over them. At T = 2 a temperature applied to
one side only changes the objective; a KL taken in the wrong direction changes it too
(tests/test_converge_distill.py plants both).

Checked besides the trajectory: `flkd_active`, our op ran once per training step (a run that
silently took the logits path would compare transformers with itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ligerbench.converge.checker import Checker, ConvergeCase, ConvergeResult, build, run_converge
from ligerbench.converge.data import IGNORE, Batch, make_batches
from ligerbench.converge.models import build_model
from ligerbench.converge.train import eval_logprobs, train
from ligerbench.kernels.fused_linear_distill import fused_linear_distill
from ligerbench.suites.converge import judge_trajectory
from ligerbench.suites.families.distill import reference

DIVERGENCES = ("jsd", "forward_kl", "reverse_kl")
TEMPERATURE = 2.0
BETA = 0.5  # jsd only: the symmetric JSD
TEACHER_SEED = 1009  # the teacher's weights and data: fixed, apart from the student's --seed
# The teacher trains faster than the students (whose rate keeps transformers' bf16 run near the
# float64 run: ligerbench/converge/models.py's LR): at the students' rate its distribution stays
# near uniform after the preset's steps (the tiny preset's jsd 0.009 at step 0) and the students
# have almost nothing to learn; its own rounding is not under test.
TEACHER_LR_SCALE = 3.0
# final-logit softcapping is not in flkd (no softcap): a softcapped student's logits path
# would be another objective
NO_SOFTCAP = ("llama-mini", "qwen3-mini", "mistral-mini")


@dataclass(frozen=True)
class Teacher:
    """The fixed teacher's lm_head weight [V, H] and last hidden states on each training batch,
    [B, T, H], in one dtype (float32, or float64 for the float64 run)."""

    weight: torch.Tensor
    hidden: list[torch.Tensor]


def _targets(inputs: dict) -> torch.Tensor:
    """The next-token labels (as transformers' loss shifts them): the rows the divergence counts."""
    return torch.nn.functional.pad(inputs["labels"], (0, 1), value=IGNORE)[..., 1:]


_TEACHERS: dict[tuple, torch.nn.Module] = {}  # the trained float32 teacher per (model, preset, device)


def _trained_teacher(case: ConvergeCase) -> torch.nn.Module:
    p = case.preset
    key = (case.model, p, case.device)
    if key not in _TEACHERS:
        model = build_model(case.model, p, seed=TEACHER_SEED, dtype=torch.float32, device=case.device)
        data = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=p.steps, seed=TEACHER_SEED)
        train(model, data, lr=TEACHER_LR_SCALE * p.lr)
        model.eval()
        _TEACHERS.clear()
        _TEACHERS[key] = model
    return _TEACHERS[key]


def teacher_for(case: ConvergeCase, batches: list[Batch], dtype: torch.dtype) -> Teacher:
    model = _trained_teacher(case)  # (trained with gradients: outside no_grad)
    with torch.no_grad():
        if dtype != torch.float32:
            upcast = build_model(case.model, case.preset, seed=TEACHER_SEED, dtype=dtype, device=case.device)
            upcast.load_state_dict(model.state_dict())  # the same weights, in `dtype`
            model = upcast.eval()
        hidden = []
        for b in batches:
            b = b.to(case.device)
            hidden.append(model.model(input_ids=b.input_ids, attention_mask=b.attention_mask).last_hidden_state)
        return Teacher(model.lm_head.weight.detach().clone(), hidden)


def _loss_fn(teacher: Teacher, divergence: str, student_loss: Callable) -> Callable:
    steps = iter(range(len(teacher.hidden)))

    def loss_fn(model, inputs: dict) -> torch.Tensor:
        i = next(steps)
        return student_loss(model, inputs, teacher.hidden[i], teacher.weight, divergence)

    return loss_fn


def _options(divergence: str) -> dict:
    return dict(divergence=divergence, beta=BETA, temperature=TEMPERATURE, reduction="mean")


def _theirs(model, inputs, teacher_hidden, teacher_weight, divergence) -> torch.Tensor:
    """transformers' logits, upcast as transformers' loss does (a float64 model's stay float64),
    and the divergence on the full logits of both."""
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    logits = logits if logits.dtype == torch.float64 else logits.float()
    teacher_logits = teacher_hidden @ teacher_weight.T
    return reference(logits, teacher_logits, _targets(inputs), textbook=True, **_options(divergence))


def _ours(calls: list):
    def fn(model, inputs, teacher_hidden, teacher_weight, divergence) -> torch.Tensor:
        calls.append(1)
        hidden = model.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
        return fused_linear_distill(hidden, model.lm_head.weight, teacher_hidden, teacher_weight, _targets(inputs),
                                    **_options(divergence))  # fmt: skip

    return fn


def check_distill_trajectory(c: Checker, on_step=None) -> ConvergeResult:
    case, p = c.case, c.case.preset
    if case.model not in NO_SOFTCAP:
        raise ValueError(f"--distill trains {', '.join(NO_SOFTCAP)} (flkd has no final-logit softcap)")
    batches = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=p.steps, seed=case.seed)
    held_out = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=1, seed=case.seed + 1)[0]
    teacher = teacher_for(case, batches, torch.float32)

    def step_cb(who):
        return (lambda i, v: on_step(who, i, v)) if on_step else None

    ref_model = build(case)
    ref = train(ref_model, batches, lr=p.lr, on_step=step_cb("ref"), loss_fn=_loss_fn(teacher, case.distill, _theirs))
    ref_lp = eval_logprobs(ref_model, held_out)
    del ref_model

    calls: list = []
    model = build(case)
    ours = train(model, batches, lr=p.lr, on_step=step_cb("ours"),
                 loss_fn=_loss_fn(teacher, case.distill, _ours(calls)))  # fmt: skip
    our_lp = eval_logprobs(model, held_out)
    del model
    c.record("flkd_active", abs(len(calls) - p.steps), 0, metric="calls_missing", unit="calls",
             message=f"fused_linear_distill calls in {p.steps} training steps: {len(calls)}")  # fmt: skip

    truth, truth_lp = _float64_run(case, batches, held_out, step_cb("float64"))
    judge_trajectory(c, ref, ours, truth, (ref_lp, our_lp, truth_lp), held_out)
    return ConvergeResult(ref=ref, ours=ours, truth=truth)


_TRUTH: dict[tuple, tuple] = {}  # one float64 run per (model, preset, seed, device, divergence): shared by the dtypes


def _float64_run(case: ConvergeCase, batches, held_out, on_step):
    key = (case.model, case.preset, case.seed, case.device, case.distill)
    if key not in _TRUTH:
        teacher = teacher_for(case, batches, torch.float64)
        model = build_model(case.model, case.preset, seed=case.seed, dtype=torch.float64, device=case.device)
        run = train(model, batches, lr=case.preset.lr, on_step=on_step,
                    loss_fn=_loss_fn(teacher, case.distill, _theirs))  # fmt: skip
        _TRUTH.clear()
        _TRUTH[key] = (run, eval_logprobs(model, held_out))
    return _TRUTH[key]


CHECKS = {"distill_trajectory": check_distill_trajectory}


def run_case(case: ConvergeCase, **options) -> ConvergeResult:
    """`converge --distill DIVERGENCE` on one case (case.patch "flkd", case.distill the divergence);
    options as run_converge's (run_id, sink, on_step)."""
    return run_converge(case, CHECKS, **options)
