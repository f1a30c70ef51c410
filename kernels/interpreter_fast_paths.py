"""Triton's interpreter, faster, with the same numbers: where its Python front end does work
whose result is thrown away or rebuilt identically on every operation, do it once.

Under TRITON_INTERPRET=1 (our kernels on CPU tensors) every `+`, `*`, `tl.where`, load and
store of a kernel runs Triton's front end in Python (type checks, broadcasting, a new block type
and tensor object) around one numpy call; that front end, not the numpy work, is nearly all of
a CPU `verify` and of the tests. Each function below replaces one or two private names of
Triton's (`triton.runtime.interpreter`, `triton.language.core`) with code that gives the same
values and the same errors, and records the name in `REPLACED`; each is idempotent and does
nothing on a Triton without those names (another release: the slow path, the same numbers).
`install()` runs them, from `triton_mode.decide` and only for the interpreter: compiled kernels
(a GPU) never see them. `tritons_own()` puts Triton's own functions back for a block, for the
tests that run our kernels both ways and compare the bits (tests/test_interpreter_fast_paths.py).

Measured with py-spy and cProfile on `ligerbench verify --kernel flce --preset quick --device cpu`
(Triton 3.9, one thread): numbers in each function's docstring.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import math

_ABSENT = object()
REPLACED: list[tuple[object, str, object]] = []  # (owner, name, Triton's own value or _ABSENT)
# Called as tritons_own() swaps functions either way: a language kept patched (triton_mode) is
# released, so the next launch patches it with the functions then in place.
ON_SWAP: list = []


def install() -> None:
    """Every fast path below; idempotent."""
    try:
        from triton.runtime import interpreter as it
    except ImportError:
        return
    _skip_dropped_overflow_checks(it)
    _reuse_block_shapes(it.tl.core)
    _same_shape_needs_no_broadcast(it)
    _same_type_needs_no_promotion(it)
    _call_builtins_directly(it)
    _walk_each_namespace_once(it)


def _replace(owner, name: str, make) -> None:
    """owner.name = make(current value), recorded; nothing when the name is absent or ours."""
    current = getattr(owner, name, None)
    if current is None or getattr(current, "_ligerbench", False):
        return
    new = make(current)
    new._ligerbench = True
    REPLACED.append((owner, name, vars(owner).get(name, _ABSENT)))
    setattr(owner, name, new)


@contextlib.contextmanager
def tritons_own():
    """Triton's own functions in place of every fast path while the block runs."""
    ours = [(owner, name, getattr(owner, name)) for owner, name, _ in REPLACED]
    for release in ON_SWAP:
        release()
    for owner, name, own in REPLACED:
        if own is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, own)
    try:
        yield
    finally:
        for release in ON_SWAP:
            release()
        for owner, name, new in ours:
            setattr(owner, name, new)


def _skip_dropped_overflow_checks(it) -> None:
    """Skip the interpreter's integer overflow check while its `device_assert` would drop it.

    Every `+`, `-` and `*` on two 8-, 16- or 32-bit integers first builds an overflow check:
    both operands cast to int64, the operation again, both bounds as constants, two comparisons
    and their `and`, and only then `device_assert`, which returns at once unless the builder's
    `options.debug` is set (never, in Triton's interpreter: `InterpreterOptions()`). The check
    changes no value and cannot raise on its way, so without debug it is skipped: 23% of the
    CPU time of the flce verify (our kernels' offsets and indices are int32). With debug set it
    runs as before. Only the interpreter's own semantic object gets the attribute, and only when
    this Triton's `device_assert` is seen to drop a false condition without debug."""
    semantic = getattr(it, "interpreter_semantic", None)
    if not hasattr(getattr(semantic, "builder", None), "options") or not _drops_asserts_without_debug(it, semantic):
        return

    def make(check):
        @functools.wraps(check)
        def check_when_kept(lhs, rhs, binary_op):
            if semantic.builder.options.debug:
                return check(lhs, rhs, binary_op)
            return None

        return check_when_kept

    _replace(semantic, "binary_op_sanitize_overflow_impl", make)


def _drops_asserts_without_debug(it, semantic) -> bool:
    try:
        import numpy as np

        false = it.tl.core.tensor(it.TensorHandle(np.zeros(1, dtype=bool), it.tl.int1), it.tl.int1)
        return not semantic.builder.options.debug and semantic.device_assert(false, "probe", None) is None
    except Exception:  # another Triton: keep its own check
        return False


def _reuse_block_shapes(core) -> None:
    """Build each block shape's Triton objects once, not for every block type and tensor.

    A `block_type` turns its shape into a `triton.language.tuple` of ints (validated, its numel
    and its text for the type's name), and every `tensor` turns that into another tuple of
    `constexpr`s with its own tuple type: a few of each per operation, 27% of the flce verify's
    CPU time (cProfile: 99k block types and 201k tensors in a small ce and flce run). None of
    these objects is changed after it is built (Triton changes a tuple only while compiling a
    kernel's arguments, never a shape), so a shape of plain ints met before gets the same shape
    tuple, numel and text, and a tensor of such a block type a fresh tuple of the same
    constexprs and tuple type. A shape of anything but ints (constexprs, bools, an empty or an
    invalid shape: Triton raises) and a type built another way take Triton's own code. Installed
    only where Triton builds these objects with exactly the attributes set here."""
    block_type, tensor = getattr(core, "block_type", None), getattr(core, "tensor", None)
    names = ("tuple", "tuple_type", "constexpr", "_type_for_tuple_values", "float32")
    if block_type is None or tensor is None or not all(hasattr(core, n) for n in names):
        return
    if not _built_as_expected(core):
        return
    tl_tuple, constexpr = core.tuple, core.constexpr
    shapes: dict[builtins.tuple, tuple] = {}  # ints -> (shape tuple, numel, text)
    dims_of: dict[int, tuple] = {}  # id of a shape tuple kept in `shapes` -> (numel, dims, dims' type)
    no_dims = (constexpr(1), [], core._type_for_tuple_values([]))

    def make_block_init(own):
        @functools.wraps(own)
        def block_init(self, element_ty, shape):
            kind = type(shape)
            key = builtins.tuple(shape) if kind is list else builtins.tuple(shape.values) if kind is tl_tuple else None
            if key is None or not all(type(d) is int for d in key):
                return own(self, element_ty, shape)
            known = shapes.get(key)
            if known is None:
                own(self, element_ty, shape)  # raises for a shape Triton refuses
                dims = [constexpr(d) for d in self.shape]
                dims_of[id(self.shape)] = (constexpr(math.prod(self.shape)), dims, core._type_for_tuple_values(dims))
                shapes[key] = (self.shape, self.numel, str(self.shape))
                return None
            self.element_ty = element_ty
            self.shape, self.numel, text = known
            self.name = f"<{text}, {element_ty}>"
            return None

        return block_init

    def make_tensor_init(own):
        @functools.wraps(own)
        def tensor_init(self, handle, type):
            known = dims_of.get(id(type.shape)) if type.is_block() else no_dims
            if known is None:
                return own(self, handle, type)
            numel, dims, dims_type = known
            self.handle = handle
            self.shape = tl_tuple(dims, dims_type)
            self.numel = numel
            self.type = type
            self.dtype = type.scalar
            return None

        return tensor_init

    _replace(block_type, "__init__", make_block_init)
    _replace(tensor, "__init__", make_tensor_init)


def _built_as_expected(core) -> bool:
    """Whether Triton's own block type and tensor have the attributes `_reuse_block_shapes` sets."""
    try:
        block = core.block_type(core.float32, [2, 4])
        t = core.tensor(None, block)
    except Exception:
        return False
    return (
        set(vars(block)) == {"element_ty", "shape", "numel", "name"}
        and type(block.shape) is core.tuple
        and block.name == f"<{block.shape}, {block.element_ty}>"
        and set(vars(t)) == {"handle", "shape", "numel", "type", "dtype"}
        and type(t.shape) is core.tuple
        and all(type(d) is core.constexpr for d in t.shape)
    )


def _same_shape_needs_no_broadcast(it) -> None:
    """Return two blocks of one shape as they are, without Triton's walk over their shapes.

    `broadcast_impl_value` runs before every binary operation; for two blocks it compares their
    shapes dimension by dimension through `triton.language.tuple` (a constexpr per index) and
    then compares the result with the left shape through another tuple, only to return both
    operands untouched when the shapes are equal. Two block types whose shape is one and the
    same object (`_reuse_block_shapes` hands every block type of a shape the same tuple) are
    that case: 8% of the flce verify's CPU time. Anything else goes to Triton's own function."""
    semantic, block_type = getattr(it, "interpreter_semantic", None), getattr(it.tl.core, "block_type", None)
    if semantic is None or block_type is None:
        return

    def make(own):
        @functools.wraps(own)
        def broadcast(lhs, rhs):
            lhs_ty, rhs_ty = lhs.type, rhs.type
            if lhs_ty.__class__ is block_type and rhs_ty.__class__ is block_type and lhs_ty.shape is rhs_ty.shape:
                return lhs, rhs
            return own(lhs, rhs)

        return broadcast

    _replace(semantic, "broadcast_impl_value", make)


def _same_type_needs_no_promotion(it) -> None:
    """Skip the implicit-cast machinery for two tensors of one integer or float type.

    `binary_op_type_checking_impl` asks, for every binary operation, which type to compute in
    (`computation_type_impl`: a chain of type tests) and casts both operands to it. For two
    tensors whose scalar type is one and the same integer, float32 or float64 type object, that
    type is the answer (Triton's rules: an integer with itself promotes to itself, a float32 or
    float64 stays, and neither is a pointer), so both casts return their operand unchanged and
    only the broadcast is left to do. A quarter of the binary operations of the flce verify;
    float16, bfloat16 and fp8 (a division computes them in float32), pointers, Python numbers
    and mixed types go to Triton's own function."""
    semantic, tl = getattr(it, "interpreter_semantic", None), it.tl
    tensor = getattr(tl.core, "tensor", None)
    if semantic is None or tensor is None:
        return
    kept = {tl.int1, tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8, tl.uint16, tl.uint32, tl.uint64,
            tl.float32, tl.float64}  # fmt: skip
    kept = {id(t): t for t in kept if _promotes_to_itself(semantic, tensor, t)}  # by identity

    def make(own):
        @functools.wraps(own)
        def type_checking(lhs, rhs, allow_lhs_ptr=False, allow_rhs_ptr=False, arithmetic_check=True, div_or_mod=False):
            if (lhs.__class__ is tensor and rhs.__class__ is tensor and arithmetic_check
                    and lhs.dtype is rhs.dtype and id(lhs.dtype) in kept):  # fmt: skip
                return semantic.broadcast_impl_value(lhs, rhs)
            return own(lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)

        return type_checking

    _replace(semantic, "binary_op_type_checking_impl", make)


def _promotes_to_itself(semantic, tensor, dtype) -> bool:
    """Whether this Triton computes two `dtype` tensors in `dtype` and casts one to it unchanged."""
    try:
        same = all(semantic.computation_type_impl(dtype, False, dtype, False, d) is dtype for d in (False, True))
        value = tensor(None, dtype)
        return same and semantic.cast(value, dtype) is value
    except Exception:
        return False


def _call_builtins_directly(it) -> None:
    """Call a builtin's own function from its patched name, not through two wrappers.

    Each launch points every builtin of `triton.language` (`tl.exp`, `tensor.__add__`, ...) at a
    lambda that copies the call's keyword arguments without `_semantic` and calls the builtin's
    wrapper with the interpreter's semantic object; that wrapper only checks that `_semantic` was
    given and calls the function it wraps. Every operation of a kernel goes through both: 6% of
    the main thread of the flce verify (py-spy). Here the patched name calls the wrapped function
    itself with the same arguments and the same semantic object. Taken only for a member whose
    code is Triton's builtin wrapper (then `__wrapped__` is the function it calls); any other
    member goes to Triton's own lambda."""
    core = it.tl.core
    builtin = getattr(core, "builtin", None)
    if builtin is None or getattr(it, "_patch_attr", None) is None or not hasattr(it, "interpreter_semantic"):
        return
    try:
        wrapper_code = builtin(lambda: None).__code__
    except Exception:  # another Triton
        return

    def make(own):
        @functools.wraps(own)
        def patch_attr(obj, name, member, builder, scope):
            fn = getattr(member, "__wrapped__", None)
            if fn is None or getattr(member, "__code__", None) is not wrapper_code:
                return own(obj, name, member, builder, scope)

            def new_member(*args, **kwargs):
                kwargs.pop("_semantic", None)
                return fn(*args, **kwargs, _semantic=it.interpreter_semantic)

            scope.set_attr(obj, name, new_member)
            return None

        return patch_attr

    _replace(it, "_patch_attr", make)


def _walk_each_namespace_once(it) -> None:
    """List a namespace's builtins once, not on every launch.

    Each launch patches `triton.language`, `tl.math`, `tl.tensor` and the tensor descriptor
    class, finding their builtins with `inspect.getmembers` (every attribute fetched and sorted):
    3% of the main thread of the flce verify. The builtins a namespace holds change only when its
    attributes do, so the names found are kept with the number of attributes of the namespace
    (its own and, for a class, its bases') and each member's identity; any difference and the
    namespace is walked again, as Triton walks it. A walk that finds no builtin (the namespace was
    patched already in this launch, through another module that holds it) patches nothing, as
    Triton's does, and is not kept."""
    if getattr(it, "_patch_builtin", None) is None or not hasattr(it.tl.core, "is_builtin"):
        return
    import inspect

    is_builtin = it.tl.core.is_builtin
    known: dict[int, tuple] = {}  # id(namespace) -> (namespace, its size, [(name, builtin)])

    def size(pkg) -> tuple:
        return tuple(len(vars(c)) for c in pkg.__mro__) if isinstance(pkg, type) else (len(vars(pkg)),)

    def make(own):
        @functools.wraps(own)
        def patch_builtin(pkg, builder, scope):
            entry = known.get(id(pkg))
            if (
                entry is None
                or entry[0] is not pkg
                or entry[1] != size(pkg)
                or any(getattr(pkg, name, None) is not member for name, member in entry[2])
            ):
                members = [(name, member) for name, member in inspect.getmembers(pkg) if is_builtin(member)]
                if members:  # none: patched already in this launch (kept only from an unpatched walk)
                    known[id(pkg)] = (pkg, size(pkg), members)
            else:
                members = entry[2]
            for name, member in members:
                it._patch_attr(pkg, name, member, builder, scope)

        return patch_builtin

    _replace(it, "_patch_builtin", make)
