"""Expand: UPCAST and UNROLL ranges are unrolled into copies of the code they index.

An UNROLL range of a REDUCE becomes the terms of the reduce (a NOOP of the value at each of its points, folded
into the accumulator in order by lowering); an UPCAST range of a store becomes one store per point. The copies are
independent: `vectorize` turns alike ones into vector ops, and the reduces they hold share one loop after lowering.
"""

from __future__ import annotations

import itertools

from ember.uops import AxisType, Ops, PatternMatcher, UOp, UPat, dtypes


def _points(rngs: list[UOp]) -> list[dict[UOp, UOp]]:
    sizes = [range(r.src[0].arg) for r in rngs]
    return [{r: UOp.const(dtypes.index, v) for r, v in zip(rngs, p)} for p in itertools.product(*sizes)]


def _expandable(r: UOp, kind: AxisType) -> bool:
    return r.arg[1] is kind and r.src[0].op is Ops.CONST


def unroll_reduce(red: UOp) -> UOp | None:
    unrolled = [r for r in red.src[1:] if _expandable(r, AxisType.UNROLL)]
    if not unrolled:
        return None
    # the copies are the terms of the reduce (a NOOP of them): lowering folds them into the accumulator one by one,
    # acc+t0+t1+..., the order of the loop they replace (and a chain of multiply-adds)
    terms = UOp(Ops.NOOP, red.dtype, tuple(red.src[0].substitute(p) for p in _points(unrolled)))
    return UOp(Ops.REDUCE, red.dtype, (terms, *(r for r in red.src[1:] if r not in unrolled)), red.arg)


def upcast_store(e: UOp) -> UOp | None:
    upcast = [r for r in e.src[1:] if _expandable(r, AxisType.UPCAST)]
    if not upcast:
        return None
    stores = tuple(e.src[0].substitute(p) for p in _points(upcast))
    rest = tuple(r for r in e.src[1:] if r not in upcast)
    body = UOp(Ops.NOOP, dtypes.void, stores)
    return UOp(Ops.END, dtypes.void, (body, *rest)) if rest else body


pm_expand = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), unroll_reduce),
    (UPat(Ops.END, name="e"), upcast_store),
])
