"""The numerical patterns a failing check may show, named on its FAIL line (KernelSpec.hints),
so that the reader knows what to look at before calling a kernel wrong. Each is read off the
case's own axes and shown only where the check's error is one the pattern can make (a rounding
pattern never explains a NaN, an inf or a bug's 10-100%); a hint says where to look, it never
changes a verdict.

    numerical_hints(case, "grad_logits")  ->  ("a softcap slope that cancels: ...",)
"""

from __future__ import annotations

from ligerbench.cases import OPTIONS, Case

SOFTCAP = (
    "a softcap slope that cancels: autograd's 1 - tanh^2 loses its digits where |tanh| -> 1 (large or "
    "confident logits); 1 / cosh^2 keeps them"
)
PEAKED_ENTROPY = (
    "the entropy of a peaked row: -(p * logp).sum() with logp = z - logsumexp(z) cancels where one p is ~1; "
    "log s + u / s (s, u the row's sums after its max) keeps the digits"
)
SIXTEEN_BITS = (
    "16-bit inputs: logits rounded to 16 bits before the float32 math, or a gradient rounded twice, show as "
    "errors of a few 2**-8 (bf16) or 2**-11 (fp16); fp16 gradients below 6.1e-5 are subnormal and keep fewer "
    "digits"
)

PEAKED = ("peaked", "confident")
# the log-prob kernels' upstream values that send a gradient through the entropy
ENTROPY_UP = ("both", "entropy", "sums", "zero_rows")


# The largest relative error each pattern explains: a rounding pattern never explains a NaN, an inf,
# or an error past these (a softcap slope or a peaked row's entropy can lose every digit of a small
# value: up to 1; 16-bit roundings a few steps of the dtype: 16 of them).
EXPLAINS_UP_TO = {SOFTCAP: 1.0, PEAKED_ENTROPY: 1.0}
SIXTEEN_BIT_STEPS = {"bf16": 16 * 2.0**-8, "fp16": 16 * 2.0**-11}


def numerical_hints(case: Case, quantity: str, error: float | None = None) -> tuple[str, ...]:
    """The known patterns the case and quantity can show (none when no axis points at one), and,
    given the check's error, only those that can explain an error of that size (EXPLAINS_UP_TO)."""
    found = []
    capped = case.get("softcap") or OPTIONS.get(case.get("option"), {}).get("softcap")
    if capped and quantity.startswith("grad_"):
        found.append((SOFTCAP, EXPLAINS_UP_TO[SOFTCAP]))
    through_entropy = quantity == "entropy" or (quantity.startswith("grad_") and case.get("upstream") in ENTROPY_UP)
    if case.get("logits") in PEAKED and through_entropy:
        found.append((PEAKED_ENTROPY, EXPLAINS_UP_TO[PEAKED_ENTROPY]))
    if case.get("dtype") in SIXTEEN_BIT_STEPS:
        found.append((SIXTEEN_BITS, SIXTEEN_BIT_STEPS[case.get("dtype")]))
    return tuple(text for text, up_to in found if error is None or error <= up_to)
