"""`-k EXPR` as in pytest: substrings joined by and/or/not and parentheses, case-insensitive."""

import pytest

from ligerbench.kexpr import compile_expr

IDS = [
    "ce/n16/v1000/fp32/none/up-ones/none/plain/normal",
    "ce/n16/v1000/bf16/sum/up-random/leading_run/softcap/normal",
    "ce/n1/v1000/bf16/mean/up-ones/all/plain/confident",
]


# each expression exercises one rule: a bare substring, and, or, not, precedence, parentheses,
# case folding, and an exact id (what a FAIL line prints) selecting only itself
@pytest.mark.parametrize(
    "expr, expected",
    [
        ("bf16", [1, 2]),
        ("bf16 and sum", [1]),
        ("fp32 or confident", [0, 2]),
        ("not bf16", [0]),
        ("fp32 or bf16 and mean", [0, 2]),  # and binds tighter than or
        ("(fp32 or bf16) and not (sum or mean)", [0]),
        ("BF16 and SOFTCAP", [1]),
        (IDS[1], [1]),
    ],
)
def test_selects(expr, expected):
    match = compile_expr(expr)
    assert [i for i, name in enumerate(IDS) if match(name)] == expected


@pytest.mark.parametrize("expr", ["", "bf16 and", "(bf16", "bf16)", "and bf16", "not", "bf16 fp32"])
def test_malformed_is_refused(expr):
    with pytest.raises(ValueError):
        compile_expr(expr)
