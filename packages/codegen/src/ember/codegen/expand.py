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


def _copies(root: UOp, rngs: list[UOp]) -> tuple[UOp, ...]:
    """root at each point of rngs. One walk of the graph: only the nodes that depend on rngs are rebuilt per point
    (a 32 x 8 tile is 256 copies; a full substitute per copy walked the whole graph 256 times)."""
    order = root.toposort()
    moved = set(rngs)
    for u in order:
        if u not in moved and any(s in moved for s in u.src):
            moved.add(u)
    dependent = [u for u in order if u in moved and u.op is not Ops.RANGE]
    out = []
    for point in _points(rngs):
        new = dict(point)
        for u in dependent:
            new[u] = u.replace(src=tuple(new.get(s, s) for s in u.src))
        out.append(new.get(root, root))
    return tuple(out)


def _expandable(r: UOp, kind: AxisType) -> bool:
    return r.arg[1] is kind and r.src[0].op is Ops.CONST


def unroll_reduce(red: UOp) -> UOp | None:
    unrolled = [r for r in red.src[1:] if _expandable(r, AxisType.UNROLL)]
    if not unrolled:
        return None
    # the copies are the terms of the reduce (a NOOP of them): lowering folds them into the accumulator one by one,
    # acc+t0+t1+..., the order of the loop they replace (and a chain of multiply-adds)
    terms = UOp(Ops.NOOP, red.dtype, _copies(red.src[0], unrolled))
    return UOp(Ops.REDUCE, red.dtype, (terms, *(r for r in red.src[1:] if r not in unrolled)), red.arg)


def upcast_store(e: UOp) -> UOp | None:
    upcast = [r for r in e.src[1:] if _expandable(r, AxisType.UPCAST)]
    if not upcast:
        return None
    stores = _copies(e.src[0], upcast)
    rest = tuple(r for r in e.src[1:] if r not in upcast)
    body = UOp(Ops.NOOP, dtypes.void, stores)
    return UOp(Ops.END, dtypes.void, (body, *rest)) if rest else body


pm_expand = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), unroll_reduce),
    (UPat(Ops.END, name="e"), upcast_store),
])
