"""Index rules of the kernel graph: one-hot reduces become gathers, nested reduces merge, a reduce range read through
a division splits in two, and an index expression simplifies under its validity condition (the bounds a PAD puts on
the ranges).

    value = graph_rewrite(value, symbolic + pm_reduce_collapse)   # inside rangeify's kernel rewrite
    flat = simplify_given_valid(flat, gate)                        # a LOAD's address under its gate
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from ember.uops import AxisType, Ops, PatternMatcher, UOp, UPat, dtypes, gate_loads, symbolic


# *** one-hot reduces: a sum over r of (r == y) * v(r) is v(y), where y is in r's bounds ***
def _onehot_value(c: UOp, r: UOp) -> UOp | None:
    """y when `c` is the comparison r == y (either side; r maybe cast), y not depending on r."""
    if c.op is not Ops.CMPEQ:
        return None
    for a, b in (c.src, c.src[::-1]):
        if (a is r or (a.op is Ops.CAST and a.src[0] is r)) and r not in b.toposort():
            return b
    return None


def onehot_pick(x: UOp, r: UOp) -> tuple[UOp, UOp] | None:
    """(y, v) when x is where(r == y, v, 0), or a product with the factor cast(r == y) (v: the other factors)."""
    if x.op is Ops.WHERE and x.src[2].op is Ops.CONST and x.src[2].arg == 0 and \
            (y := _onehot_value(x.src[0], r)) is not None:
        return y, x.src[1]
    factors, stack = [], [x]
    while stack:
        if (u := stack.pop()).op is Ops.MUL:
            stack.extend(u.src)
        else:
            factors.append(u)
    for i, f in enumerate(factors):
        if f.op is Ops.CAST and f.src[0].dtype == dtypes.bool and (y := _onehot_value(f.src[0], r)) is not None:
            rest = factors[:i] + factors[i + 1:]
            return y, functools.reduce(lambda a, b: a * b, rest) if rest else x.const_like(1)
    return None


def index_in_range(y: UOp, n: int) -> tuple[UOp, UOp]:
    """y as an index, and the condition 0 <= y < n (in the form `simplify_given_valid` reads as bounds)."""
    yi = y if y.dtype == dtypes.index else y.cast(dtypes.index)
    return yi, (yi < n) & ((yi < 0) ^ True)


def collapse_onehot_reduce(red: UOp) -> UOp | None:
    """REDUCE(ADD) over r of a one-hot pick of r == y: the one term it keeps, v(y), gated by 0 <= y < size(r). The
    loads that now depend on y are gated too, so a y out of bounds reads nothing (a gather, not a sum of N terms:
    an embedding lookup or a cross-entropy's label pick built from comparisons with an arange)."""
    if red.arg is not Ops.ADD:
        return None
    for r in red.src[1:]:
        if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST or (hit := onehot_pick(red.src[0], r)) is None:
            continue
        y, v = hit
        yi, valid = index_in_range(y, r.src[0].arg)
        out = valid.where(gate_loads(v.substitute({r: yi}), yi, valid), red.const_like(0))
        rest = tuple(s for s in red.src[1:] if s is not r)
        return UOp(Ops.REDUCE, red.dtype, (out, *rest), red.arg) if rest else out
    return None


def merge_nested_reduce(outer: UOp, inner: UOp) -> UOp | None:
    """REDUCE(REDUCE(x, *a), *b) with one op: one REDUCE(x, *a, *b), one accumulator (a sum over a broadcast axis of
    a matmul, as the gradient of grouped-query attention makes, would hold a second tile of them)."""
    if inner.arg is not outer.arg or inner.dtype != outer.dtype:
        return None
    return UOp(Ops.REDUCE, outer.dtype, (inner.src[0], *inner.src[1:], *outer.src[1:]), outer.arg)


# reduces that fold away in the kernel graph: a one-hot pick, a reduce of a reduce
pm_reduce_collapse = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), collapse_onehot_reduce),
    (UPat(Ops.REDUCE, src=(UPat(Ops.REDUCE, name="inner"),), allow_any_len=True, name="outer"), merge_nested_reduce),
])


# *** reduce ranges read through a division: split, so the addresses are affine ***
def split_reduce_range(ctx: Iterator[int], red: UOp) -> UOp | None:
    """REDUCE over a range r whose value reads r // c or r % c (c divides r's size) is a REDUCE over two ranges hi, lo
    with r = hi*c + lo, where those are hi and lo. A reduce over axes a reshape merged after a transpose makes them:
    `x.transpose(1, 2).reshape(b, t, heads * head_dim) @ w` (merging attention heads) reads head r // head_dim at
    stride t * head_dim; split, the kernel is a plain matmul to codegen. `ctx` numbers the new ranges."""
    body = red.src[0]
    divmods = [u for u in body.toposort() if u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is Ops.CONST]  # (one walk)
    for r in red.src[1:]:
        if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST:
            continue
        n = r.src[0].arg
        c = next((u.src[1].arg for u in divmods if u.src[0] is r and 1 < u.src[1].arg < n and n % u.src[1].arg == 0),
                 None)
        if c is None:
            continue
        hi, lo = UOp.range(n // c, next(ctx), AxisType.REDUCE), UOp.range(c, next(ctx), AxisType.REDUCE)
        ranges = [x for s in red.src[1:] for x in ((hi, lo) if s is r else (s,))]
        return UOp(Ops.REDUCE, red.dtype, (body.substitute({r: hi * c + lo}), *ranges), red.arg)
    return None


pm_split_reduce_ranges = symbolic + PatternMatcher([(UPat(Ops.REDUCE, name="red"), split_reduce_range)])


# *** simplification under a validity condition ***
def _parse_bound(clause: UOp) -> tuple[UOp, int | None, int | None] | None:
    """(x, lo, hi) for a clause `x < c` (hi = c-1) or `(x < c) ^ True` (lo = c) on an int expression x."""
    if clause.op is Ops.CMPLT and clause.src[1].op is Ops.CONST and dtypes.is_int(clause.src[0].dtype):
        return clause.src[0], None, clause.src[1].arg - 1
    if clause.op is Ops.XOR and clause.src[1].op is Ops.CONST and clause.src[1].arg is True and \
            (inner := _parse_bound(clause.src[0])) is not None and inner[2] is not None:
        return inner[0], inner[2] + 1, None
    return None


def simplify_given_valid(idx: UOp, valid: UOp | None) -> UOp:
    """`idx` simplified knowing `valid` holds (a conjunction of bounds on variables and ranges, as PAD makes)."""
    return idx.simplify() if valid is None else _simplify_given_valid(idx, valid)


@functools.lru_cache(maxsize=4096)  # (the kernels of a model's layers read through the same padded views)
def _simplify_given_valid(idx: UOp, valid: UOp) -> UOp:
    clauses, stack = [], [valid.simplify()]
    while stack:
        if (u := stack.pop()).op is Ops.AND and u.dtype == dtypes.bool:
            stack.extend(u.src)
        else:
            clauses.append(u)
    bounds: dict[UOp, list[int]] = {}
    for cl in clauses:
        if (b := _parse_bound(cl)) is not None and b[0].op in (Ops.RANGE, Ops.DEFINE_VAR, Ops.SPECIAL):
            lo, hi = bounds.setdefault(b[0], [int(b[0].vmin), int(b[0].vmax)])
            bounds[b[0]] = [max(lo, b[1]) if b[1] is not None else lo, min(hi, b[2]) if b[2] is not None else hi]
    if not bounds or any(lo > hi for lo, hi in bounds.values()):
        return idx.simplify()
    narrowed = {v: UOp.variable(f"_valid{i}", lo, hi, v.dtype) for i, (v, (lo, hi)) in enumerate(bounds.items())}
    ret = idx.substitute(narrowed).simplify().substitute({n: v for v, n in narrowed.items()})
    return ret if len(ret.toposort()) <= len((plain := idx.simplify()).toposort()) else plain
