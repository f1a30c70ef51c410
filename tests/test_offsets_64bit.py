"""Rows past 2**31 elements: every Triton kernel in kernels/ forms its offsets from a 64-bit row.

A program id is a 32-bit integer; `row * stride` in 32 bits wraps once the logits (or a chunk of
them) pass 2**31 elements (N = 32768 rows at V = 128256), and the last rows then read and write
another row's memory. No CPU run can reach that size, so the check is on the source: in every
@triton.jit function,

- the program id along axis 0 (the row, or the first of a grid-stride loop's rows) is cast to
  tl.int64 where it is read, and
- no value derived from a program id that was not cast (a column block's index) is multiplied by
  a stride or by a size the caller passes (only by a tl.constexpr block width, which stays small).

Both rules are shown to reject a planted 32-bit variant of a kernel of this repository.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def _is_jit(node: ast.FunctionDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


def _program_id(node: ast.AST) -> int | None:
    """The axis of `tl.program_id(axis)`, or None when `node` is no such call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "program_id":
        arg = node.args[0] if node.args else None
        return arg.value if isinstance(arg, ast.Constant) else -1
    return None


def _is_int64_cast(node: ast.AST) -> bool:
    """`<expr>.to(tl.int64)`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "to"
        and any(isinstance(a, ast.Attribute) and a.attr == "int64" for a in node.args)
    )


def _uses(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` reads a name of `names` outside any .to(tl.int64) cast (or an uncast program id)."""
    if _is_int64_cast(node):
        return False
    if _program_id(node) is not None:
        return True
    if isinstance(node, ast.Name):
        return node.id in names
    return any(_uses(child, names) for child in ast.iter_child_nodes(node))


def _uncast_row_ids(node: ast.AST) -> list[ast.AST]:
    """The `tl.program_id(0)` calls in `node` that no .to(tl.int64) wraps."""
    if _is_int64_cast(node):
        return []
    if _program_id(node) == 0:
        return [node]
    return [found for child in ast.iter_child_nodes(node) for found in _uncast_row_ids(child)]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def problems(source: str, filename: str = "<kernel>") -> list[str]:
    """The 32-bit offsets in `source`'s @triton.jit functions, one line each."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not (isinstance(fn, ast.FunctionDef) and _is_jit(fn)):
            continue
        constexpr = {
            a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
        }
        sizes = {a.arg for a in fn.args.args} - constexpr  # strides, sizes and pointers the caller passes
        narrow: set[str] = set()  # names holding a 32-bit program id, or arithmetic on one
        for node in sorted((n for n in ast.walk(fn) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            if _uncast_row_ids(node.value):
                out.append(f"{filename}:{node.lineno} {fn.name}: the row's program id is read without .to(tl.int64)")
            if _uses(node.value, narrow):
                narrow |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            for mine, other in ((node.left, node.right), (node.right, node.left)):
                if _uses(mine, narrow) and _names(other) & sizes:
                    out.append(f"{filename}:{node.lineno} {fn.name}: {ast.unparse(node)} multiplies a 32-bit "
                               "program id by a size the caller passes")  # fmt: skip
                    break
    return out


def _jit_sources() -> list[Path]:
    return sorted(p for p in KERNELS.glob("*.py") if "@triton.jit" in p.read_text())


def test_there_are_kernels_to_check():
    # a glob that found nothing would make every check below vacuous
    assert len(_jit_sources()) >= 5
    count = sum(1 for p in _jit_sources() for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.FunctionDef) and _is_jit(n))  # fmt: skip
    assert count >= 10


@pytest.mark.parametrize("path", _jit_sources(), ids=lambda p: p.name)
def test_kernel_offsets_are_64_bit(path: Path):
    assert problems(path.read_text(), path.name) == []


def _planted(path: str, old: str, new: str) -> str:
    source = (KERNELS / path).read_text()
    assert old in source, f"the planted variant's anchor is gone from {path}: update the test"
    return source.replace(old, new)


def test_a_row_read_in_32_bits_is_rejected():
    # log_probs' backward with its rows left a 32-bit program id: rows * stride_g wraps past 2**31
    source = _planted(
        "log_probs.py", "tile_rows(tl.program_id(0).to(tl.int64), ROWS)", "tile_rows(tl.program_id(0), ROWS)"
    )
    found = problems(source, "log_probs.py")
    assert any("without .to(tl.int64)" in f for f in found)
    assert any("rows * stride_g" in f for f in found)


def test_a_block_index_times_a_stride_is_rejected():
    # shifted_logits' block statistics addressed by the column block's 32-bit id times a stride
    source = _planted("shifted_logits.py", "tl.store(m_ptr + rows * stride_st + blk, m, mask=in_n)",
                      "tl.store(m_ptr + rows * stride_st + blk * stride_st, m, mask=in_n)")  # fmt: skip
    found = problems(source, "shifted_logits.py")
    assert any("blk * stride_st" in f for f in found), found


def test_a_block_index_times_a_constexpr_block_is_accepted():
    source = """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1)
    cols = b * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + row * stride + cols)
"""
    assert problems(source) == []
