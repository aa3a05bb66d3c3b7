"""Expand: UPCAST and UNROLL ranges are unrolled into copies of the code they index.

An UNROLL range of a REDUCE becomes the terms of the reduce (a NOOP of the value at each of its points, folded
into the accumulator in order by lowering); an UPCAST range of a store becomes one store per point. The copies are
independent: `vectorize` turns alike ones into vector ops, and the reduces they hold share one loop after lowering.
"""

from __future__ import annotations

import functools
import itertools
import math

from ember.uops import AxisType, Ops, PatternMatcher, UOp, UPat, dtypes


def _copies(root: UOp, rngs: list[UOp]) -> tuple[UOp, ...]:
    """root at each point of rngs (in `itertools.product` order). One walk of the graph, and each node is rebuilt once
    per point of the ranges it depends on, not of all of them: in a 32 x 8 tile a load of a row is 32 copies, not 256
    (a full substitute per copy walked the whole graph 256 times)."""
    sizes = tuple(r.src[0].arg for r in rngs)
    axes: dict[UOp, tuple[int, ...]] = {r: (i,) for i, r in enumerate(rngs)}  # the rngs (by position) a node uses
    copies: dict[UOp, list[UOp]] = {r: [UOp.const(dtypes.index, v) for v in range(n)] for r, n in zip(rngs, sizes)}
    for u in root.toposort():
        if u.op is Ops.RANGE or not (used := [axes[s] for s in u.src if s in axes]):
            continue
        a = axes[u] = used[0] if all(x == used[0] for x in used) else tuple(sorted(set().union(*used)))
        n = math.prod(sizes[x] for x in a)
        # each source's copy at each point of a, as columns: zip gives the sources of each copy
        cols = [[s] * n if s not in axes else copies[s] if axes[s] == a else
                [copies[s][j] for j in _projection(sizes, a, axes[s])] for s in u.src]
        copies[u] = [UOp(u.op, u.dtype, src, u.arg, u.tag) for src in zip(*cols)]
    if root not in axes:
        return (root,) * math.prod(sizes)
    return tuple(copies[root][j] for j in _projection(sizes, tuple(range(len(rngs))), axes[root]))


@functools.cache
def _projection(sizes: tuple[int, ...], axes: tuple[int, ...], sub: tuple[int, ...]) -> tuple[int, ...]:
    """For each point of the ranges `axes` (product order), the position of its part on `sub` (a subset of axes)."""
    ret = []
    for point in itertools.product(*(range(sizes[x]) for x in axes)):
        at = dict(zip(axes, point))
        pos = 0
        for x in sub:
            pos = pos * sizes[x] + at[x]
        ret.append(pos)
    return tuple(ret)


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
    # (the stores of a multi-output kernel, a NOOP of them, become one flat NOOP of all their copies)
    # (once each: a store the upcast axis does not index, a row statistic beside a row of outputs, is one copy)
    stores = tuple(dict.fromkeys(s for c in _copies(e.src[0], upcast) for s in (c.src if c.op is Ops.NOOP else (c,))))
    rest = tuple(r for r in e.src[1:] if r not in upcast)
    body = UOp(Ops.NOOP, dtypes.void, stores)
    return UOp(Ops.END, dtypes.void, (body, *rest)) if rest else body


pm_expand = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), unroll_reduce),
    (UPat(Ops.END, name="e"), upcast_store),
])
