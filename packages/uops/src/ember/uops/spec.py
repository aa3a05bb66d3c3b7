"""Per-stage verifiers: `verify(sink, stage)` fails loudly, naming the stage and the offending op.

Each stage is a PatternMatcher whose rules return True for a well-formed node; a node no rule accepts is an error.
"""

from __future__ import annotations

from typing import Any

from ember.uops.dtype import PtrDType, dtypes
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.ops import UOp
from ember.uops.rewrite import PatternMatcher, UPat
from ember.uops.shape import is_int


class SpecError(ValueError):
    """A graph has a node that its stage does not allow."""


def _is_sint(x: Any) -> bool:
    return is_int(x) or (isinstance(x, UOp) and dtypes.is_int(x.dtype))


def _is_sint_tuple(arg: Any) -> bool:
    return isinstance(arg, tuple) and all(_is_sint(x) for x in arg)


def _is_pairs(arg: Any) -> bool:
    return isinstance(arg, tuple) and all(isinstance(p, tuple) and len(p) == 2 and _is_sint_tuple(p) for p in arg)


def _const_ok(c: UOp) -> bool:
    kind = bool if c.dtype == dtypes.bool else int if dtypes.is_int(c.dtype) else float
    return c.dtype.count == 1 and type(c.arg) is kind and all(s.op is Ops.DEVICE for s in c.src)


def _alu_ok(a: UOp) -> bool:
    n = 1 if a.op in GroupOp.Unary else 2 if a.op in GroupOp.Binary else 3
    if len(a.src) != n:
        return False
    if a.op is Ops.WHERE:
        return a.src[0].dtype.scalar() == dtypes.bool and a.src[1].dtype == a.src[2].dtype == a.dtype
    if a.op in (Ops.SHL, Ops.SHR):
        return a.src[0].dtype == a.dtype and dtypes.is_int(a.dtype)
    if any(s.dtype != a.src[0].dtype for s in a.src):
        return False
    if a.op in GroupOp.Comparison:
        return a.dtype.scalar() == dtypes.bool
    if a.op in (Ops.AND, Ops.OR, Ops.XOR):
        return a.dtype == a.src[0].dtype and not dtypes.is_float(a.dtype)
    return a.dtype == a.src[0].dtype


_same_dtype_unary = lambda x: len(x.src) == 1 and x.dtype == x.src[0].dtype  # noqa: E731

spec_shared = PatternMatcher([
    (UPat(Ops.CONST, name="c"), _const_ok),
    (UPat(Ops.DEVICE, src=(), name="d"), lambda d: isinstance(d.arg, str) or
     (isinstance(d.arg, tuple) and all(isinstance(x, str) for x in d.arg))),
    (UPat(Ops.DEFINE_VAR, src=(), name="v"), lambda v: dtypes.is_int(v.dtype) and isinstance(v.arg, tuple) and
     len(v.arg) == 3 and isinstance(v.arg[0], str) and is_int(v.arg[1]) and is_int(v.arg[2])),
    (UPat(Ops.BIND, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), name="b"),
     lambda b: b.dtype == b.src[0].dtype and b.src[0].arg[1] <= b.src[1].arg <= b.src[0].arg[2]),
    (UPat(GroupOp.ALU, name="a"), _alu_ok),
    (UPat((Ops.CAST, Ops.BITCAST), src=(UPat.var(),)), lambda: True),
    (UPat(Ops.SINK, dtype=dtypes.void), lambda: True),
])

spec_tensor = spec_shared + PatternMatcher([
    (UPat(Ops.UNIQUE, src=(), name="u"), lambda u: is_int(u.arg)),
    (UPat(Ops.BUFFER, src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE)), name="b"),
     lambda b: is_int(b.arg) and b.arg >= 0 and b.dtype != dtypes.void and not isinstance(b.dtype, PtrDType)),
    (UPat(Ops.IOTA, src=(UPat(Ops.DEVICE),), name="x"), lambda x: is_int(x.arg) and x.arg >= 0 and
     dtypes.is_int(x.dtype) and x.dtype.count == 1),
    (UPat(Ops.BUFFER_VIEW, src=(UPat(Ops.BUFFER),), name="b"),
     lambda b: isinstance(b.arg, tuple) and len(b.arg) == 2 and all(is_int(x) and x >= 0 for x in b.arg)),
    (UPat((Ops.RESHAPE, Ops.EXPAND), name="x"), lambda x: _same_dtype_unary(x) and _is_sint_tuple(x.arg)),
    (UPat(Ops.PERMUTE, name="x"), lambda x: _same_dtype_unary(x) and isinstance(x.arg, tuple) and
     all(is_int(a) for a in x.arg)),
    (UPat((Ops.PAD, Ops.SHRINK), name="x"), lambda x: _same_dtype_unary(x) and _is_pairs(x.arg)),
    (UPat(Ops.FLIP, name="x"), lambda x: _same_dtype_unary(x) and isinstance(x.arg, tuple) and
     all(isinstance(a, bool) for a in x.arg)),
    (UPat(Ops.REDUCE_AXIS, name="x"), lambda x: _same_dtype_unary(x) and isinstance(x.arg, tuple) and
     len(x.arg) == 2 and x.arg[0] in GroupOp.Reduce and all(is_int(a) for a in x.arg[1])),
    (UPat((Ops.CONTIGUOUS, Ops.DETACH), name="x"), _same_dtype_unary),
    (UPat(Ops.COPY, src=(UPat.var("x"), UPat(Ops.DEVICE)), name="c"), lambda c, x: c.dtype == x.dtype),
    (UPat(Ops.ASSIGN, src=(UPat.var("t"), UPat.var("v")), name="a"), lambda a, t, v: a.dtype == t.dtype == v.dtype),
    (UPat(Ops.MSTACK, name="m"), lambda m: len(m.src) > 0 and all(s.dtype == m.dtype for s in m.src) and
     (m.arg is None or is_int(m.arg))),
    (UPat(Ops.MSELECT, src=(UPat.var("x"),), name="m"), lambda m, x: isinstance(m.arg, tuple) and len(m.arg) == 2 and
     is_int(m.arg[0]) and (m.arg[1] is None or is_int(m.arg[1])) and m.dtype == x.dtype),
])

# kernel ASTs: only the op set is checked here; the codegen stages add their own rules
_KERNEL_OPS = GroupOp.ALU | {Ops.PARAM, Ops.DEFINE_VAR, Ops.BIND, Ops.CONST, Ops.VCONST, Ops.RANGE, Ops.INDEX,
                             Ops.LOAD, Ops.STORE, Ops.END, Ops.REDUCE, Ops.SINK, Ops.CAST, Ops.BITCAST,
                             Ops.VECTORIZE, Ops.GEP, Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.BARRIER, Ops.SPECIAL,
                             Ops.IF, Ops.ENDIF, Ops.WMMA, Ops.NOOP}
spec_kernel = spec_shared + PatternMatcher([(UPat(tuple(_KERNEL_OPS - {Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})),
                                             lambda: True)])

STAGES: dict[str, PatternMatcher] = {"tensor": spec_tensor, "kernel": spec_kernel}


def verify(sink: UOp, stage: str = "tensor") -> None:
    """Check every node under `sink` against the rules of `stage`; raise SpecError naming the first bad node."""
    if (pm := STAGES.get(stage)) is None:
        raise ValueError(f"verify: unknown stage {stage!r}; stages: {sorted(STAGES)}")
    for u in sink.toposort():
        if pm.rewrite(u) is not True:
            srcs = ", ".join(f"{s.op.name}:{s.dtype!r}" for s in u.src)
            raise SpecError(f"spec({stage}): invalid {u.op.name} node: dtype={u.dtype!r} src=({srcs}) arg={u.arg!r}")
        if stage == "tensor":
            try:
                u.shape  # noqa: B018 - shape inference validates the movement and ALU shapes
            except ValueError as e:
                raise SpecError(f"spec({stage}): invalid {u.op.name} node: {e}") from e
