"""Lowering: a kernel AST with REDUCEs becomes loads and stores of accumulators, ready to linearize.

A REDUCE(value, *ranges) becomes
    acc  = DEFINE_REG(identity)                 declared once
    init = STORE(acc, identity, *outer_ranges)  before its loops, once per iteration of the ranges it lives in
    upd  = STORE(acc, LOAD(acc, init, *ranges) <op> value, *ranges)
    res  = LOAD(acc, END(upd, *ranges))         after its loops
"""

from __future__ import annotations

import itertools

from ember.codegen.expand import pm_expand
from ember.codegen.linearize import open_range_sets
from ember.codegen.opt import range_order, reduce_identity
from ember.codegen.renderer import Renderer
from ember.codegen.vectorize import vectorize
from ember.uops import DType, GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, pm_divmod, symbolic_simple


def lower_reduces(reduces: list[UOp], ids: itertools.count, open_ranges: dict[UOp, frozenset[UOp]]) -> dict[UOp, UOp]:
    """Accumulators for REDUCEs over the same ranges, updated in one shared loop: {reduce: its result}.
    `open_ranges`: the RANGEs each node depends on that are not closed below it (`open_range_sets`)."""
    rngs = tuple(sorted(reduces[0].src[1:], key=range_order))
    updates, accs = [], []
    for red in reduces:
        acc_dt = accumulator_dtype(red)
        # a vector accumulator (vectorize) starts with the identity in every lane
        init_val = UOp.const(acc_dt.scalar(), reduce_identity(red.arg, acc_dt.scalar())).arg
        identity = UOp(Ops.CONST, acc_dt, (), init_val)
        acc = UOp(Ops.DEFINE_REG, acc_dt, (identity,), next(ids))
        outer = tuple(sorted(open_ranges[red.src[0]] - set(rngs), key=range_order))
        init = UOp(Ops.STORE, dtypes.void, (acc, identity, *outer))
        new = fold_terms(red, UOp(Ops.LOAD, acc_dt, (acc, init, *rngs)), acc_dt)
        updates.append(UOp(Ops.STORE, dtypes.void, (acc, new, *rngs)))
        accs.append(acc)
    body = updates[0] if len(updates) == 1 else UOp(Ops.NOOP, dtypes.void, tuple(updates))
    end = UOp(Ops.END, dtypes.void, (body, *rngs))
    return {red: UOp(Ops.LOAD, acc.dtype, (acc, end)).cast(red.dtype) for red, acc in zip(reduces, accs)}


def accumulator_dtype(red: UOp) -> DType:
    """A bfloat16 reduce accumulates in float32 (as PyTorch does), rounded once at the end."""
    return dtypes.float32 if red.dtype == dtypes.bfloat16 else red.dtype


def fold_terms(red: UOp, start: UOp | None, dtype: DType) -> UOp:
    """start <op> t0 <op> t1 ... over the terms of a reduce (the NOOP an unroll made, or its one value), in order."""
    terms = red.src[0].src if red.src[0].op is Ops.NOOP else (red.src[0],)
    ret = start
    for t in terms:
        t = t.cast(dtype)
        ret = t if ret is None else (ret | t if red.arg is Ops.ADD and dtype == dtypes.bool else ret.alu(red.arg, t))
    assert ret is not None, "fold_terms: a reduce without terms"
    return ret


def sort_end_ranges(e: UOp) -> UOp | None:
    # output loops nest in range order: threads outermost, upcast innermost
    rngs = tuple(sorted(e.src[1:], key=range_order))
    return None if rngs == e.src[1:] else e.replace(src=(e.src[0], *rngs))


def _via_float(x: UOp) -> UOp | None:
    # bfloat16 math runs in float32: cast the sources up, compute, round the result back
    if x.op in GroupOp.Comparison:
        return x.replace(src=tuple(s.cast(dtypes.float32) for s in x.src))
    src = tuple(s.cast(dtypes.float32) if s.dtype == dtypes.bfloat16 else s for s in x.src)
    return x.replace(dtype=dtypes.float32, src=src).cast(dtypes.bfloat16)


pm_decompose = PatternMatcher([
    (UPat(GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}, dtype=dtypes.bfloat16, name="x"), _via_float),
    (UPat(GroupOp.Comparison, src=(UPat.var(dtype=dtypes.bfloat16), UPat.var()), name="x"), _via_float),
])

pm_sort_ends = PatternMatcher([
    (UPat(Ops.END, src=(UPat(Ops.STORE, src=(UPat(Ops.INDEX), UPat.var()), allow_any_len=True),),
          allow_any_len=True, name="e"), sort_end_ranges),
])

# the copies an expansion makes differ in constants: folding those and the divisions they feed is all they need
# (the kernel had the whole symbolic pass before; over all the copies its term rules cost twice the expansion)
pm_lower_expand = pm_sort_ends + pm_expand + symbolic_simple + pm_divmod


def lower(ast: UOp, renderer: Renderer | None = None) -> UOp:
    """The kernel with UPCAST/UNROLL ranges expanded (and vectorized as `renderer` allows), every REDUCE
    turned into accumulator loads and stores, and bfloat16 math done in float32.
    Innermost reduces go first; reduces over the same ranges (the copies an upcast made) share one loop."""
    ast = graph_rewrite(ast, pm_lower_expand, name="expand")
    ast = vectorize(ast, renderer if renderer is not None else Renderer())
    ids = itertools.count()
    # one walk of the kernel per level of nesting (not one per reduce: an upcast tile holds dozens of them)
    while True:
        nodes = ast.toposort()
        if not (reduces := [u for u in nodes if u.op is Ops.REDUCE]):
            break
        holds_reduce: dict[UOp, bool] = {}
        for u in nodes:
            holds_reduce[u] = u.op is Ops.REDUCE or any(holds_reduce[s] for s in u.src)
        open_ranges = open_range_sets(nodes)
        inner = [r for r in reduces if not holds_reduce[r.src[0]]]
        groups: dict[tuple[UOp, ...], list[UOp]] = {}
        mapping: dict[UOp, UOp] = {}
        for r in inner:
            if len(r.src) == 1:  # every range unrolled: the terms folded, no loop
                mapping[r] = fold_terms(r, None, accumulator_dtype(r)).cast(r.dtype)
            else:
                groups.setdefault(tuple(sorted(r.src[1:], key=range_order)), []).append(r)
        for group in groups.values():
            mapping.update(lower_reduces(group, ids, open_ranges))
        ast = ast.substitute(mapping)
    return graph_rewrite(ast, pm_decompose, name="decompose")
