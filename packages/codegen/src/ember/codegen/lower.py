"""Lowering: a kernel AST with REDUCEs becomes loads and stores of accumulators, ready to linearize. `lower` is a list
of named steps: expand (UPCAST/UNROLL copies), vectorize, group reduces (GPUs: across a workgroup, gpudims.py), lower
reduces, thread ids (GPUs: gpudims.py), index terms (an address's constants outside its products and sums),
decompose (bfloat16 math in float32).

A REDUCE(value, *ranges) becomes
    acc  = DEFINE_REG(identity)                 declared once
    init = STORE(acc, identity, *outer_ranges)  before its loops, once per iteration of the ranges it lives in
    upd  = STORE(acc, LOAD(acc, init, *ranges) <op> value, *ranges)
    res  = LOAD(acc, END(upd, *ranges))         after its loops

Online softmax: a sum X over ranges R whose value reads a max M over the same RANGEs R (the scheduler makes that
form, ember.schedule.attention) is X = sum_r g(r) * exp2(a * M + b(r)) with M the whole max: a reduce that reads
the result of another reduce over its own loop. One loop computes both (`lower_online`): the running max m, and X
relative to it, rescaled whenever m grows: x = x * exp2(a * (m_new - m_old)) + g * exp2(a * m_new + b). Exact in
real arithmetic for any value that is a product of such exp2s and factors free of M.
"""

from __future__ import annotations

import functools
import itertools
import math

from ember.codegen.expand import pm_expand
from ember.codegen.gpudims import gpu_dims, lower_group_reduces
from ember.codegen.opt import online_maxes, range_order, reduce_identity
from ember.codegen.renderer import Renderer
from ember.codegen.vectorize import vectorize
from ember.uops import (
    AxisType,
    DType,
    GroupOp,
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    pm_divmod,
    symbolic_simple,
)

_NO_RANGES: frozenset[UOp] = frozenset()


def _union(sets: list[frozenset[UOp]]) -> frozenset[UOp]:
    # (most nodes add no range to their sources': their set is a source's, no new one)
    ret = sets[0] if sets else _NO_RANGES
    for x in sets[1:]:
        if x is not ret and not x <= ret:
            ret = ret | x
    return ret


class ReduceContext:
    """What lowering a REDUCE needs from the whole kernel, found in one walk before the rewrite: the reduces that share
    its loop (over the same ranges, at the same depth of reduce nesting), each one's accumulator id (innermost reduces
    first, then in the order they are met), and the ranges open around its value once the reduces inside it are
    lowered (those of its loop's other values too: they share the loop)."""

    def __init__(self, sink: UOp):
        reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
        # (what lies below a reduce's value is all that matters: the rest is never inside a reduce's loop)
        below = UOp(Ops.NOOP, dtypes.void, tuple(r.src[0] for r in reduces)).toposort()[:-1] if reduces else []
        depth: dict[UOp, int] = {}  # the reduces nested in a node, deepest chain
        for u in below:
            depth[u] = max(map(depth.__getitem__, u.src), default=0) + (u.op is Ops.REDUCE)
        for red in reduces:
            depth[red] = depth[red.src[0]] + 1  # (its other sources are ranges)
        groups: dict[tuple[int, tuple[UOp, ...]], list[UOp]] = {}
        online: dict[tuple[UOp, ...], list[UOp]] = {}  # the reduces of an online softmax, by their ranges
        maxes = any(r.arg is Ops.MAX for r in reduces)  # (no max, no online softmax: no walk of each sum's value)
        for red in reduces:
            if maxes and len(red.src) > 1 and (ms := online_maxes(red)):
                key = tuple(sorted(red.src[1:], key=range_order))
                members = online.setdefault(key, [])
                members.extend(m for m in (*ms, red) if m not in members)
        in_online = {m for g in online.values() for m in g}
        for red in sorted((r for r in reduces if len(r.src) > 1 and r not in in_online), key=depth.__getitem__):
            groups.setdefault((depth[red], tuple(sorted(red.src[1:], key=range_order))), []).append(red)
        for n, (key, members) in enumerate(online.items()):  # (keys of their own: no plain reduce joins them)
            groups[(-1 - n, key)] = sorted(members, key=depth.__getitem__)
        self.online = frozenset(in_online)
        self.group = {red: tuple(g) for g in groups.values() for red in g}
        ids = itertools.count()
        self.acc_id = {red: next(ids) for g in groups.values() for red in g}
        # the open ranges of a lowered reduce are its loop's: every node after the values of the loops below it
        open_ranges: dict[UOp, frozenset[UOp]] = {}
        for u in sorted(below, key=depth.__getitem__):
            if u.op is Ops.REDUCE:
                values = [open_ranges[r.src[0]] for r in self.group.get(u, (u,)) if r.src[0] in open_ranges]
                open_ranges[u] = frozenset().union(*values) - set(u.src[1:])
                continue
            rs = _union([open_ranges[x] for x in u.src])
            open_ranges[u] = rs | {u} if u.op is Ops.RANGE else rs - set(u.src[1:]) if u.op is Ops.END else rs
        self.outer = {red: tuple(sorted(open_ranges[red.src[0]] - set(red.src[1:]), key=range_order))
                      for red in self.group}
        for red in self.online:  # (one loop: its accumulators start outside every range any of its values has open)
            loop = frozenset().union(*(open_ranges[r.src[0]] for r in self.group[red]))
            self.outer[red] = tuple(sorted(loop - set(red.src[1:]), key=range_order))
        # the reduces unrolled whole inside another reduce's loop (a score's dot product over head_dim in the loop
        # over keys): their terms fold as a few chains, for the instruction-level parallelism one chain would not have
        self.tree = {red for red in reduces if len(red.src) == 1 and
                     any(r.arg[1] is AxisType.REDUCE for r in open_ranges.get(red.src[0], _NO_RANGES))}
        self.lowered: dict[UOp, UOp] = {}


def lower_reduces(ctx: ReduceContext, reduces: tuple[UOp, ...]) -> dict[UOp, UOp]:
    """Accumulators for REDUCEs over the same ranges, updated in one shared loop: {reduce: its result}."""
    rngs = tuple(sorted(reduces[0].src[1:], key=range_order))
    updates, accs = [], []
    for red in reduces:
        acc_dt = accumulator_dtype(red)
        # a vector accumulator (vectorize) starts with the identity in every lane
        init_val = UOp.const(acc_dt.scalar(), reduce_identity(red.arg, acc_dt.scalar())).arg
        identity = UOp(Ops.CONST, acc_dt, (), init_val)
        acc = UOp(Ops.DEFINE_REG, acc_dt, (identity,), ctx.acc_id[red])
        init = UOp(Ops.STORE, dtypes.void, (acc, identity, *ctx.outer[red]))
        new = fold_terms(red, UOp(Ops.LOAD, acc_dt, (acc, init, *rngs)), acc_dt)
        updates.append(UOp(Ops.STORE, dtypes.void, (acc, new, *rngs)))
        accs.append(acc)
    body = updates[0] if len(updates) == 1 else UOp(Ops.NOOP, dtypes.void, tuple(updates))
    end = UOp(Ops.END, dtypes.void, (body, *rngs))
    return {red: UOp(Ops.LOAD, acc.dtype, (acc, end)).cast(red.dtype) for red, acc in zip(reduces, accs)}


def _m_part(u: UOp, maxes: frozenset[UOp], deps: dict[UOp, bool], at: dict[UOp, UOp]) -> UOp | None:
    """The part of exp2's argument u that is linear in the maxes (sum of coefficient * max), with each max replaced
    by at[max]; None if u is not linear in them."""
    if not deps[u]:
        return None
    if u in maxes:
        return at[u]
    if u.op is Ops.ADD:
        a, b = (_m_part(s, maxes, deps, at) if deps[s] else None for s in u.src)
        if (a is None and deps[u.src[0]]) or (b is None and deps[u.src[1]]):
            return None
        return a + b if a is not None and b is not None else a if a is not None else b
    if u.op is Ops.MUL and sum(deps[s] for s in u.src) == 1:
        x, c = u.src if deps[u.src[0]] else u.src[::-1]
        return None if (a := _m_part(x, maxes, deps, at)) is None else a * c
    if u.op is Ops.NEG:
        return None if (a := _m_part(u.src[0], maxes, deps, at)) is None else -a
    if u.op is Ops.GEP:
        return None if (a := _m_part(u.src[0], maxes, deps, at)) is None else UOp(Ops.GEP, u.dtype, (a,), u.arg)
    if u.op is Ops.VECTORIZE:
        lanes = [_m_part(s, maxes, deps, at) if deps[s] else UOp(Ops.CONST, s.dtype, (), 0.0) for s in u.src]
        return None if any(x is None for x in lanes) else UOp(Ops.VECTORIZE, u.dtype, tuple(lanes))  # type: ignore
    return None


def _scaled_lanes(u: UOp, maxes: frozenset[UOp], deps: dict[UOp, bool]) -> tuple[UOp, float] | None:
    """(lanes, c): u's part in the maxes is c * lanes, lanes the maxes themselves or lanes of them (GEP, VECTORIZE: a
    block of queries' max broadcast over head_dim), c a constant; None otherwise. The rescale exp2(c * delta) is then
    computed once per max lane, not once per lane of the sum (a query's head_dim accumulators share it)."""
    def is_lanes(x: UOp) -> bool:
        return x in maxes or (x.op in (Ops.GEP, Ops.VECTORIZE) and all(deps[s] and is_lanes(s) for s in x.src))
    coeff = 1.0
    while not is_lanes(u):
        dep = [s for s in u.src if deps[s]]
        if u.op is Ops.NEG:
            coeff = -coeff
        elif u.op is Ops.MUL and len(dep) == 1 and (k := u.src[1] if dep[0] is u.src[0] else u.src[0]).op is Ops.CONST:
            coeff *= k.arg
        elif u.op is not Ops.ADD or len(dep) != 1:
            return None
        u = dep[0]
    return u, coeff


def online_ratio(u: UOp, maxes: frozenset[UOp], deps: dict[UOp, bool], delta: dict[UOp, UOp]) -> UOp | None:
    """What value u (a product of factors free of the maxes and exp2s linear in them) is multiplied by when each max
    grows by delta[max]; None where u does not depend on them. AssertionError for any other use of a max."""
    if not deps[u]:
        return None
    if u.op is Ops.NOOP:
        # the copies of one term over an unrolled loop: each is checked, and each is multiplied by the same value (the
        # maxes are the loop's, no copy's own), though the vectorizer may read it from other lanes of a vector that
        # holds it twice (a block of 8 queries times 2 keys in 16 lanes): the first one's stands for all
        ratios = [r for t in u.src if (r := online_ratio(t, maxes, deps, delta)) is not None]
        return ratios[0] if ratios else None
    if u.op is Ops.EXP2:
        if (scaled := _scaled_lanes(u.src[0], maxes, deps)) is not None:  # exp2 of the maxes' lanes, then broadcast
            lanes, coeff = scaled
            return lanes.substitute({m: (delta[m] * UOp(Ops.CONST, delta[m].dtype, (), coeff)).exp2() for m in maxes})
        assert (part := _m_part(u.src[0], maxes, deps, delta)) is not None, f"online softmax: {u.src[0].op} in exp2"
        return part.exp2()
    if u.op is Ops.MUL:
        a, b = (online_ratio(s, maxes, deps, delta) for s in u.src)
        return a if b is None else b if a is None else a * b
    if u.op is Ops.WHERE and not deps[u.src[0]]:  # a mask: where(c, x, 0)
        zero = [s for s in u.src[1:] if not deps[s]]
        assert len(zero) == 1 and zero[0].op is Ops.CONST and zero[0].arg == 0.0, "online softmax: where(c, x, y)"
        return online_ratio(u.src[1] if deps[u.src[1]] else u.src[2], maxes, deps, delta)
    if u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype):
        return None if (r := online_ratio(u.src[0], maxes, deps, delta)) is None else r.cast(u.dtype)
    if u.op is Ops.GEP:
        r = online_ratio(u.src[0], maxes, deps, delta)
        return None if r is None else UOp(Ops.GEP, u.dtype, (r,), u.arg)
    if u.op is Ops.VECTORIZE:
        lanes = [online_ratio(s, maxes, deps, delta) for s in u.src]
        return UOp(Ops.VECTORIZE, u.dtype, tuple(UOp(Ops.CONST, s.dtype, (), 1.0) if r is None else r
                                                 for s, r in zip(u.src, lanes)))
    raise AssertionError(f"online softmax: the running max is read through {u.op}")


def lower_online(ctx: ReduceContext, reduces: tuple[UOp, ...]) -> dict[UOp, UOp]:
    """An online softmax's maxes and sums in one loop: per max m (the identity -inf) and sum x (0), per step
        new = max(old, value_m)
        x   = x * exp2(a * (new - old)) + value_x[m := new]
    (an unrolled loop's step: the max of old and each copy's value, then one rescale and each copy's term)
    with new == old taken as no change (two -infs: no NaN), and m := 0 in the values while it is -inf: every score so
    far was -inf, its term exp2(-inf) = 0 (the unfused reduces make it exp2(-inf - -inf) = NaN: a row of -inf sums to
    0 here, NaN there; its softmax 0 / 0 is NaN in both). NaN and +inf scores give NaN as unfused. One multiply per
    accumulator and step besides the term; the rescale's exp2 is once per max lane (`_scaled_lanes`). The sums'
    updates come before the max's store: they read its old value."""
    rngs = tuple(sorted(reduces[0].src[1:], key=range_order))
    maxes = frozenset(r for r in reduces if r.arg is Ops.MAX)
    delta, ref, max_upd, updates, accs = {}, {}, {}, [], {}
    for m in maxes:
        dt = accumulator_dtype(m)
        identity = UOp(Ops.CONST, dt, (), -math.inf)
        acc = UOp(Ops.DEFINE_REG, dt, (identity,), ctx.acc_id[m])
        old = UOp(Ops.LOAD, dt, (acc, UOp(Ops.STORE, dtypes.void, (acc, identity, *ctx.outer[m])), *rngs))
        new = fold_terms(m, old, dt)
        delta[m] = new.eq(old).where(UOp(Ops.CONST, dt, (), 0.0), new - old).cast(m.dtype)
        ref[m] = new.eq(identity).where(UOp(Ops.CONST, dt, (), 0.0), new).cast(m.dtype)
        max_upd[m], accs[m] = (acc, new), acc
    for x in (r for r in reduces if r not in maxes):
        dt = accumulator_dtype(x)
        value = x.src[0]
        deps = _depends_on(value, maxes)
        ratio = online_ratio(value, maxes, deps, delta)
        identity = UOp(Ops.CONST, dt, (), 0.0)
        acc = UOp(Ops.DEFINE_REG, dt, (identity,), ctx.acc_id[x])
        old = UOp(Ops.LOAD, dt, (acc, UOp(Ops.STORE, dtypes.void, (acc, identity, *ctx.outer[x])), *rngs))
        if ratio is None:
            start = old
        else:
            ratio = ratio.cast(dt)
            start = old * ratio
        terms = x.replace(src=(value.substitute(ref), *x.src[1:]))
        updates.append(UOp(Ops.STORE, dtypes.void, (acc, fold_terms(terms, start, dt), *rngs)))
        accs[x] = acc
    # (a STORE's sources after the value order it: the max's store waits for the sums that read its old value)
    updates += [UOp(Ops.STORE, dtypes.void, (acc, new, *rngs, *updates)) for acc, new in max_upd.values()]
    end = UOp(Ops.END, dtypes.void, (UOp(Ops.NOOP, dtypes.void, tuple(updates)), *rngs))
    return {red: UOp(Ops.LOAD, acc.dtype, (acc, end)).cast(red.dtype) for red, acc in accs.items()}


def _depends_on(value: UOp, maxes: frozenset[UOp]) -> dict[UOp, bool]:
    deps: dict[UOp, bool] = {}
    for u in value.toposort():
        deps[u] = u in maxes or any(deps[s] for s in u.src)
    return deps


def reduce_loop(ctx: ReduceContext, red: UOp) -> UOp:
    if red not in ctx.lowered:  # (its loop's other reduces get theirs now: one loop, built once)
        lower = lower_online if red in ctx.online else lower_reduces
        ctx.lowered.update(lower(ctx, ctx.group[red]))
    return ctx.lowered[red]


def fold_empty(ctx: ReduceContext, red: UOp) -> UOp | None:
    """A reduce over a range of size 0 is its identity: no loop, and nothing of its value is computed (a load from an
    empty buffer hoisted out of the empty loop trapped)."""
    if not any(r.op is Ops.RANGE and r.src[0].op is Ops.CONST and r.src[0].arg == 0 for r in red.src[1:]):
        return None
    identity = UOp.const(red.dtype.scalar(), reduce_identity(red.arg, red.dtype.scalar())).arg
    return UOp(Ops.CONST, red.dtype, (), identity)


def fold_unrolled(ctx: ReduceContext, red: UOp) -> UOp:
    if red in ctx.tree:
        return fold_tree(red, accumulator_dtype(red)).cast(red.dtype)
    return fold_terms(red, None, accumulator_dtype(red)).cast(red.dtype)


# chains a reduce unrolled inside another's loop folds its terms into: enough independent multiply-adds in flight for
# the FMA units' latency, each term after a chain's first one multiply-add (a tree of n terms is n/2 multiplies, n/2
# multiply-adds and n/2 - 1 adds: ~1.5x the operations)
FOLD_CHAINS = 8


def fold_tree(red: UOp, dtype: DType) -> UOp:
    """FOLD_CHAINS interleaved chains over the terms of a reduce unrolled whole, (t0 <op> t8 <op> t16 ...) for the
    first, then the chains' results as a tree: n / FOLD_CHAINS + log2(FOLD_CHAINS) deep, not n."""
    terms = [t.cast(dtype) for t in (red.src[0].src if red.src[0].op is Ops.NOOP else (red.src[0],))]
    op = Ops.OR if red.arg is Ops.ADD and dtype == dtypes.bool else red.arg
    chains = terms[:FOLD_CHAINS]
    for i, t in enumerate(terms[FOLD_CHAINS:]):
        chains[i % FOLD_CHAINS] = chains[i % FOLD_CHAINS].alu(op, t)
    while len(chains) > 1:
        chains = [chains[i].alu(op, chains[i + 1]) if i + 1 < len(chains) else chains[i]
                  for i in range(0, len(chains), 2)]
    return chains[0]


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
    # bfloat16 (float16) math runs in float32: cast the sources up, compute, round the result back
    if x.op in GroupOp.Comparison:
        return x.replace(src=tuple(s.cast(dtypes.float32) for s in x.src))
    src = tuple(s.cast(dtypes.float32) if s.dtype == x.dtype else s for s in x.src)
    return x.replace(dtype=dtypes.float32, src=src).cast(x.dtype)


@functools.cache  # (one table per set of dtypes, built once)
def pm_decompose(via_float32: tuple[DType, ...] = (dtypes.bfloat16,)) -> PatternMatcher:
    """Math of the dtypes a target stores but does not compute in (bfloat16; float16 on the CPU and some GPUs) runs in
    float32."""
    return PatternMatcher([
        (UPat(GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}, dtype=via_float32, name="x"), _via_float),
        (UPat(GroupOp.Comparison, src=(UPat.var(dtype=via_float32), UPat.var()), name="x"), _via_float),
    ])

pm_sort_ends = PatternMatcher([
    (UPat(Ops.END, src=(UPat(Ops.STORE, src=(UPat(Ops.INDEX), UPat.var()), allow_any_len=True),),
          allow_any_len=True, name="e"), sort_end_ranges),
])


def distribute_const_mul(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    return None if x.op is Ops.CONST else x * c2.arg + c1.arg * c2.arg


def const_out_of_sum(x: UOp, c: UOp, y: UOp) -> UOp | None:
    return None if y.op is Ops.CONST else (x + y) + c.arg


def _index_op(op: Ops, a: UPat, b: UPat) -> UPat:  # (index math only: the float math around it is never tried)
    return UPat(op, dtypes.index, [a, b])


# the copies of an upcast address differ in a constant inside a product, ((r*32 + 1)*256 + i, (r*32 + 2)*256 + i, ...):
# with the constants outside, they share one base (r*8192 + i) + 256*k, and the C compiler sees one pointer and its
# offsets, not a base per copy (the tiny Llama's step: a fifth less compile time; its kernels as fast)
_iv = UPat.var("x", dtype=dtypes.index)
pm_index_terms = PatternMatcher([
    (_index_op(Ops.MUL, _index_op(Ops.ADD, _iv, UPat.cvar("c1")), UPat.cvar("c2")), distribute_const_mul),
    (_index_op(Ops.ADD, _index_op(Ops.ADD, _iv, UPat.cvar("c")), UPat.var("y")), const_out_of_sum),
    (_index_op(Ops.ADD, _index_op(Ops.ADD, _iv, UPat.cvar("c1")), UPat.cvar("c2")),
     lambda x, c1, c2: x + (c1.arg + c2.arg)),
    (_index_op(Ops.MUL, _index_op(Ops.MUL, _iv, UPat.cvar("c1")), UPat.cvar("c2")),
     lambda x, c1, c2: x * (c1.arg * c2.arg)),
])


@functools.cache
def pm_index_terms_decompose(via_float32: tuple[DType, ...]) -> PatternMatcher:
    """Index terms and decompose in one walk of the lowered kernel: their rules rewrite index math and the math of
    `via_float32` dtypes, apart (neither makes a node the other rewrites), so one walk gives what the two gave."""
    return pm_index_terms + pm_decompose(via_float32)


# the copies an expansion makes differ in constants: folding those and the divisions they feed is all they need
# (the kernel had the whole symbolic pass before; over all the copies its term rules cost twice the expansion)
pm_lower_expand = pm_sort_ends + pm_expand + symbolic_simple + pm_divmod


# a tensor core adds its product to the accumulator itself: acc + WMMA(a, b, 0) is WMMA(a, b, acc)
pm_wmma_accumulate = PatternMatcher([
    (UPat(Ops.ADD, src=(UPat.var("acc"), UPat(Ops.WMMA, src=(UPat.var("a"), UPat.var("b"), UPat(Ops.CONST, arg=0.0)),
                                              name="w"))),
     lambda acc, a, b, w: w.replace(src=(a, b, acc))),
])

# top-down (bottom_up=True): a reduce is lowered as the kernel first had it, the graph ReduceContext walked; the reduces
# inside its loop's values are lowered after it
pm_lower_reduce = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), fold_empty),
    (UPat(Ops.REDUCE, src=(UPat(),), name="red"), fold_unrolled),  # every range unrolled: the terms folded, no loop
    (UPat(Ops.REDUCE, name="red"), reduce_loop),
])


def lower(ast: UOp, renderer: Renderer | None = None) -> UOp:
    """The kernel with UPCAST/UNROLL ranges expanded (and vectorized as `renderer` allows), every REDUCE turned into
    accumulator loads and stores, and bfloat16 math done in float32.
    Reduces over the same ranges at the same depth (the copies an upcast made) share one loop."""
    renderer = renderer if renderer is not None else Renderer()
    sink = graph_rewrite(ast, pm_lower_expand, name="expand")
    sink = vectorize(sink, renderer)  # (one imperative step: see its doc)
    if renderer.has_local:
        sink = lower_group_reduces(sink)
    sink = graph_rewrite(sink, pm_lower_reduce, ctx=ReduceContext(sink), bottom_up=True, name="lower reduces")
    if renderer.has_local:
        sink = graph_rewrite(sink, pm_wmma_accumulate, name="wmma accumulate")
        sink = gpu_dims(sink, renderer)
    sink = graph_rewrite(sink, pm_index_terms_decompose(renderer.compute_via_float32), name="index terms, decompose")
    return sink
