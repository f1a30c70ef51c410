"""`-k EXPR`: pytest's keyword expressions over names (case ids, mutant names).

    match = compile_expr("bf16 and not (sum or mean)")
    match("ce/n16/v1000/bf16/none/up-ones/none/plain/normal")   # True

A word matches when it is a substring of the name, case-insensitively (as in pytest); words are
joined with `and`, `or`, `not` and parentheses. A word is any run of characters other than
whitespace and parentheses, so a case id (`ce/n16/v1000/...`, `[train,k=0]`) is one word.
A malformed expression raises ValueError naming what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_OPERATORS = ("and", "or", "not")


def compile_expr(expr: str) -> Callable[[str], bool]:
    tokens = _TOKEN.findall(expr)
    if not tokens:
        raise ValueError(f"empty -k expression {expr!r}")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        tok = peek()
        if tok is None:
            raise ValueError(f"-k {expr!r}: unexpected end of expression")
        pos += 1
        return tok

    def parse_joined(word: str, operand, joined) -> Callable[[str], bool]:
        """operand (word operand)*, left to right: joined(a, b, s) matches s for `a word b`."""
        left = operand()
        while peek() == word:
            take()
            a, b = left, operand()
            left = lambda s, a=a, b=b: joined(a, b, s)  # noqa: E731
        return left

    def parse_or() -> Callable[[str], bool]:
        return parse_joined("or", parse_and, lambda a, b, s: a(s) or b(s))

    def parse_and() -> Callable[[str], bool]:
        return parse_joined("and", parse_not, lambda a, b, s: a(s) and b(s))

    def parse_not() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = parse_not()
            return lambda s: not inner(s)
        return parse_atom()

    def parse_atom() -> Callable[[str], bool]:
        tok = take()
        if tok == "(":
            inner = parse_or()
            if take() != ")":
                raise ValueError(f"-k {expr!r}: expected ')'")
            return inner
        if tok == ")" or tok in _OPERATORS:
            raise ValueError(f"-k {expr!r}: unexpected {tok!r}")
        word = tok.lower()
        return lambda s: word in s.lower()

    match = parse_or()
    if pos != len(tokens):
        raise ValueError(f"-k {expr!r}: unexpected {tokens[pos]!r}")
    return match
