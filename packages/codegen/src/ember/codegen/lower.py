"""Lowering: a kernel AST with REDUCEs becomes loads and stores of accumulators, ready to linearize.

A REDUCE(value, *ranges) becomes
    acc  = DEFINE_REG(identity)                 declared once
    init = STORE(acc, identity, *outer_ranges)  before its loops, once per iteration of the ranges it lives in
    upd  = STORE(acc, LOAD(acc, init, *ranges) <op> value, *ranges)
    res  = LOAD(acc, END(upd, *ranges))         after its loops
"""

from __future__ import annotations

import itertools

from ember.codegen.opt import _KIND_ORDER
from ember.uops import AxisType, DType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


def reduce_identity(op: Ops, dtype: DType) -> int | float | bool:
    if op is Ops.ADD:
        return False if dtype == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dtype == dtypes.bool else 1
    if op is Ops.MAX:
        return -float("inf") if dtypes.is_float(dtype) else dtypes.min(dtype)
    raise NotImplementedError(f"reduce_identity: no identity for {op}")


def open_ranges(u: UOp) -> set[UOp]:
    """The RANGEs a value depends on that are not closed below it (by an END)."""
    rs: dict[UOp, frozenset[UOp]] = {}
    for n in u.toposort():
        s = frozenset().union(*(rs[x] for x in n.src)) if n.src else frozenset()
        if n.op is Ops.RANGE:
            s = s | {n}
        elif n.op is Ops.END:
            s = s - set(n.src[1:])
        rs[n] = s
    return set(rs[u])


def range_order(r: UOp) -> tuple[int, int]:
    return (_KIND_ORDER[r.arg[1]], r.arg[0])


def lower_reduce(red: UOp, ctx: itertools.count) -> UOp:
    value, rngs = red.src[0], tuple(sorted(red.src[1:], key=range_order))
    identity = UOp.const(red.dtype, reduce_identity(red.arg, red.dtype))
    acc = UOp(Ops.DEFINE_REG, red.dtype, (identity,), next(ctx))
    outer = tuple(sorted(open_ranges(value) - set(rngs), key=range_order))
    init = UOp(Ops.STORE, dtypes.void, (acc, identity, *outer))
    cur = UOp(Ops.LOAD, red.dtype, (acc, init, *rngs))
    new = cur.alu(red.arg, value) if red.arg is not Ops.ADD or red.dtype != dtypes.bool else cur | value
    update = UOp(Ops.STORE, dtypes.void, (acc, new, *rngs))
    return UOp(Ops.LOAD, red.dtype, (acc, UOp(Ops.END, dtypes.void, (update, *rngs))))


def sort_end_ranges(e: UOp) -> UOp | None:
    # output loops nest in range order: threads outermost, upcast innermost
    rngs = tuple(sorted(e.src[1:], key=range_order))
    return None if rngs == e.src[1:] else e.replace(src=(e.src[0], *rngs))


pm_lower_reduce = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), lower_reduce),
    (UPat(Ops.END, src=(UPat(Ops.STORE, src=(UPat(Ops.INDEX), UPat.var()), allow_any_len=True),),
          allow_any_len=True, name="e"), sort_end_ranges),
])


def lower(ast: UOp) -> UOp:
    """The kernel with every REDUCE turned into accumulator loads and stores."""
    return graph_rewrite(ast, pm_lower_reduce, ctx=itertools.count(), name="lower reduce")


__all__ = ["lower", "open_ranges", "reduce_identity", "range_order", "AxisType"]
