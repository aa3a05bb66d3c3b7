"""Rangeify: decide what is realized, and turn each realized tensor into a kernel body over explicit RANGEs.

A tensor read at indices is `INDEX(x, gate, *idxs, arg="view")`; the rules below push that view through the tensor
graph: movement ops become index math (PAD a gate and a WHERE), elementwise ops read their sources at the same
indices, a REDUCE_AXIS opens new reduce ranges, and a realized tensor or an input buffer becomes a LOAD. What is
left is a kernel value with no movement ops in it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from ember.schedule.attention import (
    online_softmax_stats,
    pm_bound_masked_reduces,
    pm_online_softmax,
    recomputed_scores,
    transposed_score_operands,
)
from ember.schedule.indexing import (
    index_in_range,
    onehot_pick,
    pm_reduce_collapse,
    pm_split_reduce_ranges,
    simplify_given_valid,
)
from ember.uops import (
    AxisType,
    GroupOp,
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    dtypes,
    gate_loads,
    graph_rewrite,
    linear_terms,
    movement_index,
    prod,
    symbolic,
)


def is_buffer_view(u: UOp) -> bool:
    """A RESHAPE chain over a whole BUFFER (or BUFFER_VIEW): already realized in the row-major layout of its shape."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op in (Ops.BUFFER, Ops.BUFFER_VIEW)


def buffer_of(u: UOp) -> UOp:
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def strip_detach(u: UOp) -> UOp:
    while u.op is Ops.DETACH:
        u = u.src[0]
    return u


# a reduce of at least this many elements per output splits in two stages (block sums, stored; then their sum): the
# blocks run in parallel, and a float32 running sum over millions of elements would drift by ~1e-3 relative
SPLIT_REDUCE_MIN = 1 << 15
SPLIT_REDUCE_OUTPUTS = 64  # only reduces with few outputs: many outputs already share the work out and sum short runs
_SPLIT_BLOCKS = (4096, 2048, 1024, 512, 256)


def split_reduce(r: UOp) -> UOp | None:
    """REDUCE_AXIS over one long axis (or over every axis) with few outputs -> block reduces, stored, then reduced."""
    op, axes = r.arg
    x = r.src[0]
    shape = x.shape
    if shape is None or not all(isinstance(s, int) for s in shape) or prod(r.shape) > SPLIT_REDUCE_OUTPUTS:
        return None
    if len(axes) == len(shape) > 1 and prod(shape) >= SPLIT_REDUCE_MIN:  # a full reduce: over the flattened tensor
        flat = x.reshape((prod(shape),)).reduce_axis(op, (0,))
        return flat.reshape(r.shape)
    if len(axes) != 1 or (n := shape[axes[0]]) < SPLIT_REDUCE_MIN:
        return None
    a = axes[0]
    if (block := next((b for b in _SPLIT_BLOCKS if n % b == 0 and n // b >= 2), None)) is None:
        if op is not Ops.ADD:  # PAD fills with zeros: the identity of a sum only
            return None
        block = _SPLIT_BLOCKS[0]
        x = x.pad(tuple((0, -n % block) if i == a else (0, 0) for i in range(len(shape))))
        shape, n = x.shape, n + -n % block
    blocks = x.reshape(shape[:a] + (n // block, block) + shape[a + 1:]).reduce_axis(op, (a + 1,)).contiguous()
    return blocks.reduce_axis(op, (a,)).reshape(r.shape)


pm_split_reduces = PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="r"), split_reduce)])


def realize_map(sink: UOp, score_readers: dict[UOp, list[UOp]] | None = None) -> set[UOp]:
    """The tensor nodes that get their own buffer (a kernel each). `score_readers`, when given, is filled with the
    realized nodes that recompute each of attention's scores in their kernels (candidates for one kernel together).

    Realized: the outputs, CONTIGUOUS, COPY (and its source), ASSIGN; a reduce's epilogue read by several nodes; a
    REDUCE_AXIS read by more than one node or broadcast (an EXPAND between it and the kernel that reads it) - else it
    would be recomputed per element; a node with several users whose fused graph holds a reduce; and costly work
    broadcast into a reduce. Cheap elementwise work is recomputed, not stored; and so are attention's scores
    (attention.py: recomputed inside the reduces that read them).
    """
    nodes = sink.toposort(gate=lambda u: u.op not in (Ops.BUFFER, Ops.BUFFER_VIEW))
    users: dict[UOp, list[UOp]] = {u: [] for u in nodes}
    for u in nodes:
        for s in u.src:
            if s in users:
                users[s].append(u)
    realized: set[UOp] = set()
    for s in sink.src:
        s = strip_detach(s)  # a detached output is its source's value
        if not is_buffer_view(s) and s.op is not Ops.CONST:
            realized.add(s)
    for u in nodes:
        if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY):
            realized.add(u)
        if u.op is Ops.COPY and not is_buffer_view(u.src[0]):
            realized.add(u.src[0])
    # attention's scores (and what follows them up to the reduces that read them) are recomputed in those reduces'
    # kernels, never stored: the rules below leave them out (attention.py)
    recomputed = recomputed_scores(nodes, users, realized)
    realized |= transposed_score_operands(recomputed)
    # ... and so are a softmax's row statistics where only its output (p @ v) reads them: one loop in its kernel
    recomputed |= online_softmax_stats(recomputed, users)
    # 0. the epilogue of a reduce (what follows it, read by nothing else, with no broadcast in between: a matmul's
    #    scale, a residual add) read by several nodes is stored with the reduce, in its kernel; else rule 1 below
    #    would store the bare reduce (broadcast further on, through this node) and every reader would recompute the
    #    epilogue from its parts (a residual stream re-summed from all earlier layers' outputs in each layer)
    epilogue: dict[UOp, bool] = {}  # u is a reduce or its epilogue so far: one reader each, no EXPAND
    for u in nodes:
        epilogue[u] = u.op is Ops.REDUCE_AXIS or (u.op is not Ops.EXPAND and any(
            epilogue.get(s, False) and len(users[s]) == 1 and s not in realized for s in u.src))
        if len(users[u]) > 1 and epilogue[u] and u.op in GroupOp.Elementwise and u not in recomputed:
            realized.add(u)
    # 1. reduces that would be recomputed: read by several nodes, or broadcast on the way to their reader
    broadcast: dict[UOp, bool] = {}  # some path from u to the kernel that reads it has an EXPAND
    for u in reversed(nodes):
        if u.op in (Ops.SINK, Ops.BUFFER, Ops.BUFFER_VIEW, Ops.DEVICE, Ops.UNIQUE):
            continue
        broadcast[u] = any(c not in realized and (broadcast.get(c, False) or c.op is Ops.EXPAND) for c in users[u])
        if u.op is Ops.REDUCE_AXIS and (broadcast[u] or len(users[u]) > 1) and u not in recomputed:
            realized.add(u)
        if u in realized:
            broadcast[u] = False
    # 2. a node with several readers whose fused graph still holds a reduce: compute it once
    holds_reduce: dict[UOp, bool] = {}
    for u in nodes:
        holds_reduce[u] = u.op is Ops.REDUCE_AXIS or any(holds_reduce.get(s, False) and s not in realized
                                                         for s in u.src)
        if len(users[u]) > 1 and holds_reduce[u] and u.op not in (Ops.SINK, Ops.CONST) and u not in recomputed:
            realized.add(u)
    # 3. costly elementwise work broadcast into a reduce (x in a matmul's x.expand * w): it would be recomputed for
    #    every element of the broadcast axis; storing it once costs one write and one read per element. Any ALU work
    #    broadcast BROADCAST_STORE times or more counts as costly (a normalized input read by a wide projection: a
    #    register tile recomputes it once per panel of output columns)
    #    Readers first: work stored on its way to the reduce is broadcast into that store, not into the reduce.
    feeds_reduce: dict[UOp, bool] = {}
    for u in reversed(nodes):
        # (a reduce stored itself, an output or a copy's source, still reads u in its kernel)
        feeds_reduce[u] = any(c.op is Ops.REDUCE_AXIS or (c not in realized and feeds_reduce.get(c, False))
                              for c in users[u])
        if u.op is Ops.EXPAND and feeds_reduce[u]:
            src = u.src[0]
            while (src.op in GroupOp.Movement or src.op is Ops.DETACH) and src not in realized:
                src = src.src[0]
            if src in realized or src in recomputed:  # (first: the walks below are the costly part of this rule)
                continue
            wide = bool(src.shape) and prod(u.shape) >= BROADCAST_STORE * prod(src.shape) and \
                prod(src.shape) <= _elements_read(src, realized)
            if _costly(src, realized, any_alu=wide):
                realized.add(src)
    # a DETACH is its source's value: realizing it realizes the source (unless that already lives in a buffer)
    realized = {s for u in realized if not is_buffer_view(s := strip_detach(u)) and s.op is not Ops.CONST}
    if score_readers is not None:
        for score in (u for u in recomputed if u.op is Ops.REDUCE_AXIS and u not in realized):
            readers, stack, seen = [], [score], {score}
            while stack:
                for c in users[stack.pop()]:
                    if c not in seen:
                        seen.add(c)
                        (readers.append if c in realized else stack.append)(c)
            score_readers[score] = readers
    return realized


# recomputing more than this many ALU ops (or any transcendental) per broadcast element costs more than a store+load
_COSTLY_ALU = 6
BROADCAST_STORE = 64  # ... and any ALU work broadcast this many times into a reduce
_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.POW})


def _elements_read(u: UOp, realized: set[UOp]) -> int:
    """How many elements the fused graph of u reads from buffers and realized nodes (storing u is no bigger than
    its inputs unless it is itself a broadcast, like a one-hot made of indices and an arange)."""
    inside = u.toposort(gate=lambda x: x is u or (x not in realized and x.op not in (Ops.BUFFER, Ops.BUFFER_VIEW)))
    edge = {s for x in inside for s in x.src if s.op in (Ops.BUFFER, Ops.BUFFER_VIEW) or (s in realized and s is not u)}
    return sum(prod(s.shape) for s in edge)


def _costly(u: UOp, realized: set[UOp], any_alu: bool = False) -> bool:
    """Whether the fused elementwise graph of u (down to realized nodes and buffers) is expensive to recompute (with
    `any_alu`: whether it does any ALU work at all)."""
    if u.op not in GroupOp.Elementwise:
        return False
    alu = 0
    for x in u.toposort(gate=lambda x: x is u or (x not in realized and x.op not in (Ops.BUFFER, Ops.BUFFER_VIEW))):
        if x is not u and x in realized:
            continue
        if x.op in _TRANSCENDENTAL:
            return True
        alu += x.op in GroupOp.ALU
    return alu > (0 if any_alu else _COSTLY_ALU)


@dataclass
class IndexCtx:
    """State of one kernel's rangeify: where each realized tensor lives, the kernel's roots (the tensors it stores),
    and the next range id. In a kernel of several roots, the reduces right under them (`shared`) read at the same
    depth over ranges of the same sizes get the same ranges: one loop, and what their values have in common (the
    recomputed scores of dK and dV) computed once in it. (Two reduces over one range are two accumulators in one
    loop, whatever they sum; only a reduce inside another's value must not reuse its range: a deeper one.)"""

    buffers: dict[UOp, UOp]  # realized tensor -> its BUFFER
    roots: frozenset[UOp]
    range_ids: itertools.count = field(default_factory=itertools.count)
    shared: dict[UOp, int] = field(default_factory=dict)  # reduce -> its depth under the roots (`top_reduces`)
    shared_ranges: dict[tuple[int, tuple], list[UOp]] = field(default_factory=dict)
    multi: bool = False  # several roots: a reduce read at equal indices is rangeified once (`reduce_reads`)
    reduce_reads: dict[tuple[UOp, tuple[UOp, ...]], UOp] = field(default_factory=dict)


def view(x: UOp, gate: UOp, idxs: tuple[UOp, ...]) -> UOp:
    return UOp(Ops.INDEX, x.dtype, (x, gate, *idxs), "view")


def _true() -> UOp:
    return UOp.const(dtypes.bool, True)


def flat_index(idxs: tuple[UOp, ...], shape: tuple) -> UOp:
    flat = UOp.const(dtypes.index, 0)
    for n, (i, s) in enumerate(zip(idxs, shape)):
        flat = i if n == 0 else flat * s + i
    return flat


def load_buffer(ctx: IndexCtx, i: UOp, x: UOp) -> UOp | None:
    if x in ctx.roots or (x.op not in (Ops.BUFFER, Ops.BUFFER_VIEW) and x not in ctx.buffers):
        return None
    if x.op is Ops.ASSIGN:  # read the assigned value back through the target view
        return view(x.src[0], i.src[1], i.src[2:])
    buf = x if x.op in (Ops.BUFFER, Ops.BUFFER_VIEW) else ctx.buffers[x]
    gate, idxs = i.src[1].simplify(), i.src[2:]
    if gate.op is Ops.CONST and gate.arg is False:
        return UOp.const(x.dtype, 0)
    flat = simplify_given_valid(flat_index(idxs, x.shape), None if gate.op is Ops.CONST else gate)
    return buf.index(flat, valid=None if gate.op is Ops.CONST else gate).load()


# (a model's kernels read the same views at the same ranges, each kernel numbering its ranges from 0: the tiny
# Llama's first step makes 1638 calls of 571 kinds)
_movement_index = functools.lru_cache(maxsize=8192)(movement_index)


def push_movement(ctx: IndexCtx, i: UOp, x: UOp) -> UOp:
    idxs, valid = _movement_index(x.op, x.arg, x.src[0].shape, i.src[2:])
    inner = view(x.src[0], i.src[1] if valid is None else i.src[1] & valid, idxs)
    return valid.where(inner, UOp.const(x.dtype, 0)) if valid is not None else inner


def push_elementwise(i: UOp, x: UOp) -> UOp:
    return x.replace(src=tuple(view(s, i.src[1], i.src[2:]) if s.shape is not None else s for s in x.src))


def push_reduce(ctx: IndexCtx, i: UOp, x: UOp) -> UOp:
    if ctx.multi:  # (a multi-output kernel: a reduce read at equal indices by two roots is computed once)
        at = tuple(u.simplify() for u in i.src[1:])
        if (done := ctx.reduce_reads.get((x, at))) is None:
            done = ctx.reduce_reads[(x, at)] = _push_reduce(ctx, i.replace(src=(x, *at)), x)
        return done
    return _push_reduce(ctx, i, x)


def _push_reduce(ctx: IndexCtx, i: UOp, x: UOp) -> UOp:
    op, axes = x.arg
    src = x.src[0]
    idxs, rngs = list(i.src[2:]), []
    key = shared = None
    if x in ctx.shared:  # (a multi-output kernel's reduce right under its roots: the ranges of its depth and sizes)
        key = (ctx.shared[x], tuple(n for a in axes if not (isinstance(n := src.shape[a], int) and n == 1)))
        shared = ctx.shared_ranges.get(key)
    for a in axes:
        if isinstance(size := src.shape[a], int) and size == 1:
            idxs[a] = UOp.const(dtypes.index, 0)
        else:
            idxs[a] = shared[len(rngs)] if shared else UOp.range(size, next(ctx.range_ids), AxisType.REDUCE)
            rngs.append(idxs[a])
    if key is not None and shared is None:
        ctx.shared_ranges[key] = rngs
    inner = view(src, i.src[1], tuple(idxs))
    return UOp(Ops.REDUCE, x.dtype, (inner, *rngs), op) if rngs else inner


def unsupported(i: UOp, x: UOp) -> UOp:
    raise NotImplementedError(f"rangeify: reading {x.op} inside a kernel is not supported yet")


_view = dict(arg="view", allow_any_len=True, name="i")
pm_rangeify = PatternMatcher([
    (UPat(Ops.INDEX, src=(UPat(name="x"),), **_view), load_buffer),
    (UPat(Ops.INDEX, src=(UPat(GroupOp.Movement, name="x"),), **_view), push_movement),
    (UPat(Ops.INDEX, src=(UPat(GroupOp.Elementwise, name="x"),), **_view), push_elementwise),
    (UPat(Ops.INDEX, src=(UPat(Ops.REDUCE_AXIS, name="x"),), **_view), push_reduce),
    (UPat(Ops.INDEX, src=(UPat(Ops.CONST, name="x"),), **_view), lambda i, x: UOp.const(x.dtype, x.arg)),
    (UPat(Ops.INDEX, src=(UPat(Ops.IOTA, name="x"),), **_view), lambda i, x: i.src[2].cast(x.dtype)),
    (UPat(Ops.INDEX, src=(UPat((Ops.DETACH, Ops.CONTIGUOUS), name="x"),), **_view),
     lambda i, x: view(x.src[0], i.src[1], i.src[2:])),
    (UPat(Ops.INDEX, src=(UPat(Ops.ASSIGN, name="x"),), **_view), lambda i, x: view(x.src[1], i.src[1], i.src[2:])),
    (UPat(Ops.INDEX, src=(UPat(name="x"),), **_view), unsupported),
])

pm_kernel_value = pm_rangeify + symbolic + pm_reduce_collapse


def store_index(target: UOp, idxs: tuple[UOp, ...]) -> tuple[UOp, UOp]:
    """(buffer, flat index) that element `idxs` of a realized tensor is stored to (ASSIGN targets may be views)."""
    from ember.uops import view_index

    base, base_idxs, valid = view_index(target, idxs)
    if base.op not in (Ops.BUFFER, Ops.BUFFER_VIEW) or valid is not None:
        raise NotImplementedError(f"assign: the target must be a (non-padded) view of a buffer, got {base.op}")
    return base, base_idxs[0].simplify()


def scatter_ast(ctx: IndexCtx, value: UOp, idxs: tuple[UOp, ...],
                address: Callable[[tuple[UOp, ...]], UOp]) -> UOp | None:
    """A sum whose terms a one-hot on an output axis v picks, out[v, j] = base[v, j] + sum_t (y(t) == v) * x(t, j)
    (the gradient of an embedding lookup, maybe accumulated into a gradient buffer), as a scatter: store the base
    (zeros; nothing when it is the stored value itself), then out[y(t), j] += x(t, j) for each t and j, dropping the
    updates whose y is out of bounds: N_t * N_j updates instead of N_v times as many terms. The updates' ranges are
    LOOP: sequential loops that no opt splits, vectorizes or threads (two updates of one row must not race).
    `address(idxs)` is the INDEX an element is stored to."""
    if not dtypes.is_float(value.dtype):
        return None
    base, red = value.const_like(0), value
    if value.op is Ops.ADD:
        base, red = value.src if value.src[1].op is Ops.REDUCE else value.src[::-1]
    if red.op is not Ops.REDUCE or red.arg is not Ops.ADD or base.op is Ops.REDUCE:
        return None
    for v in (i for i in idxs if i.op is Ops.RANGE):
        if (hit := onehot_pick(red.src[0], v)) is None:
            continue
        y, term = hit
        loops = {r: UOp.range(r.src[0], next(ctx.range_ids), AxisType.LOOP) for r in (*red.src[1:], *idxs)
                 if r.op is Ops.RANGE and r is not v}
        yi, valid = index_in_range(y.substitute(loops), v.src[0].arg)
        out = address(idxs)
        deps: tuple[UOp, ...] = ()
        if not (base.op is Ops.LOAD and base.src[0] is out):  # (+= into the buffer itself: its values are the base)
            deps = (out.store(base).end(*(i for i in idxs if i.op is Ops.RANGE)),)
        at = address(tuple(yi if i is v else loops.get(i, i) for i in idxs))
        at = at.replace(src=(*at.src[:2], valid))
        store = at.store(at.load(*deps) + gate_loads(term.substitute({v: yi, **loops}), yi, valid))
        return UOp.sink(store.end(*sorted(loops.values(), key=lambda r: r.arg[0])))
    return None


def top_reduces(roots: tuple[UOp, ...], buffers: dict[UOp, UOp]) -> dict[UOp, int]:
    """The REDUCE_AXIS nodes right under the roots of a kernel, each with its depth: reached through elementwise and
    movement ops (depth 0), and from one of them through movement ops only (a sum of a sum: one deeper); not the
    reduces inside another reduce's value."""
    found: dict[UOp, int] = {}
    stack = [(r.src[1] if r.op is Ops.ASSIGN else r, -1) for r in roots]
    seen: set[tuple[UOp, int]] = set()
    while stack:
        u, above = stack.pop()  # (above: the depth of the reduce u is under, -1 for none)
        if (u, above) in seen or (u not in roots and u in buffers) or u.op in (Ops.BUFFER, Ops.BUFFER_VIEW):
            continue
        seen.add((u, above))
        if u.op is Ops.REDUCE_AXIS:
            found[u] = max(found.get(u, 0), above + 1)
            stack.append((u.src[0], above + 1))
        elif u.op in GroupOp.Movement or u.op in (Ops.DETACH, Ops.CONTIGUOUS) or \
                (above < 0 and u.op in GroupOp.Elementwise):
            stack.extend((s, above) for s in u.src)
    return found


def broadcast_shape(small: tuple, big: tuple) -> tuple | None:
    """`small` as a shape of `big`'s rank that is `big` but for size-1 axes (a row statistic beside its rows), by size-1
    axes put in or taken out: its other axes matched in order to `big`'s of equal size, the first that fits (a row max
    (b, h, t, 1) beside o = p @ v of (b, h, t, 1, d), the reduce's axis kept where the matmul had it). None where its
    axes do not fit in order. The element order is small's: a reshape of it. A shape of big's rank is kept as it is."""
    if len(small) == len(big) and all(a in (1, b) for a, b in zip(small, big)):
        return tuple(small)
    if not all(isinstance(n, int) for n in (*small, *big)):
        return None
    out: list = []
    rest = [n for n in small if n != 1]
    for n in big:
        out.append(rest.pop(0) if rest and rest[0] == n else 1)
    return None if rest else tuple(out)


def broadcasts_to(small: tuple, big: tuple) -> bool:
    """Whether shape `small`, but for size-1 axes, is `big` but for size-1 axes (`broadcast_shape`)."""
    return broadcast_shape(small, big) is not None


def kernel_ast(x: UOp | tuple[UOp, ...], buffers: dict[UOp, UOp]) -> UOp | None:
    """The kernel that computes realized tensor x into its buffer: SINK(END(STORE(INDEX(buf, idx), value), *ranges)).
    Given several tensors (a multi-output kernel), one kernel that stores them all over the first one's output
    ranges, SINK(END(NOOP(STORE, ...), *ranges)); the others have its shape, or size 1 where they broadcast to it (a
    row statistic beside its rows: stored at index 0 of those axes). A reduce read at equal indices is rangeified
    once; where no tensor reads another, the reduces right under them share their ranges (one loop); where one does
    (o and the row statistics it reads), it recomputes them rather than load them. None when the values then share
    no reduce (nothing would be computed once for all) or a reduce reads one over its own range."""
    xs = x if isinstance(x, tuple) else (x,)
    shape = xs[0].shape
    assert shape is not None, f"rangeify: {xs[0].op} has no shape"
    # each root in the kernel's rank (a statistic of another rank: a reshape of it, so the same element order)
    aligned = {r: broadcast_shape(r.shape, shape) for r in xs}
    assert all(a is not None for a in aligned.values()), \
        "rangeify: the outputs of one kernel have the first one's shape, or size 1 where they broadcast to it"
    assert all(r.op is not Ops.ASSIGN or aligned[r] == r.shape for r in xs), "rangeify: an assign of another rank"
    # (roots that read one another: the statistics p @ v reads, recomputed where it reads them; their ranges are
    # their own, the online softmax joins them)
    independent = len(xs) > 1 and not any(r2 in r.toposort() for r in xs for r2 in xs if r2 is not r)
    ctx = IndexCtx(buffers, frozenset(xs), shared=top_reduces(xs, buffers) if independent else {},
                   multi=len(xs) > 1)
    idxs = []
    for s in shape:
        idxs.append(UOp.const(dtypes.index, 0) if isinstance(s, int) and s == 1 else
                    UOp.range(s, next(ctx.range_ids), AxisType.GLOBAL))

    def at(r: UOp) -> tuple[UOp, ...]:  # root r's indices (0 where it broadcasts)
        return tuple(UOp.const(dtypes.index, 0) if n == 1 else i for i, n in zip(idxs, aligned[r]))

    views = [view(r.src[1] if r.op is Ops.ASSIGN else r if aligned[r] == r.shape else r.reshape(aligned[r]), _true(),
                  at(r)) for r in xs]
    values = graph_rewrite(UOp.sink(*views), pm_kernel_value, ctx=ctx, bottom_up=True, name="rangeify")
    values = graph_rewrite(values, pm_bound_masked_reduces, name="bound masked reduces")
    values = graph_rewrite(values, pm_online_softmax, name="online softmax")
    values = graph_rewrite(values, pm_split_reduce_ranges, ctx=ctx.range_ids, name="split reduce ranges")
    if len(xs) > 1 and not _share_a_reduce(values.src):
        return None

    def address(r: UOp, point: tuple[UOp, ...]) -> UOp:  # the element of output r that index `point` is stored to
        if r.op is Ops.ASSIGN:
            buf, idx = store_index(r.src[0], point)
            return buf.index(idx)
        return buffers[r].index(flat_index(point, aligned[r]).simplify())

    if len(xs) == 1 and (scatter := scatter_ast(ctx, values.src[0], tuple(idxs),
                                                functools.partial(address, xs[0]))) is not None:
        return scatter
    stores = [address(r, at(r)).store(v) for r, v in zip(xs, values.src)]
    store = stores[0] if len(stores) == 1 else UOp(Ops.NOOP, dtypes.void, tuple(stores))
    rngs = [i for i in idxs if i.op is Ops.RANGE]
    if not rngs:
        return UOp.sink(store)
    store, rngs = merge_ranges(store, rngs)
    return UOp.sink(store.end(*rngs))


def _share_a_reduce(values: tuple[UOp, ...]) -> bool:
    """Whether every value reads a REDUCE that another one reads too (its loop's work done once for both), and no
    REDUCE reads, inside its value, one over a range of its own (shared ranges must only join sibling loops) but for
    an online softmax's float sum reading its running max over the same ranges (`attention.online_softmax`; the form
    the codegen lowers as one loop, its `opt.online_maxes`)."""
    reduces = [{u for u in v.toposort() if u.op is Ops.REDUCE} for v in values]
    for red in set().union(*reduces):
        own = set(red.src[1:])
        online = red.arg is Ops.ADD and dtypes.is_float(red.dtype)
        if any(u is not red and u.op is Ops.REDUCE and not own.isdisjoint(u.src[1:]) and
               not (online and u.arg is Ops.MAX and set(u.src[1:]) == own) for u in red.src[0].toposort()):
            return False
    return all(any(rs & other for other in reduces if other is not rs) for rs in reduces)


def _address_terms(store: UOp) -> list[list[tuple[UOp, int, set[UOp]]]]:
    """For each address (INDEX) of the kernel, its linear terms (base, coefficient, the nodes under base): what
    `_mergeable` reads, the same for every pair of ranges until a merge changes the kernel."""
    under: dict[UOp, set[UOp]] = {}
    return [[(base, m, under[base] if base in under else under.setdefault(base, set(base.toposort())))
             for base, m in linear_terms(idx.src[1])[0]] for idx in store.toposort() if idx.op is Ops.INDEX]


def _mergeable(addresses: list[list[tuple[UOp, int, set[UOp]]]], a: UOp, b: UOp) -> bool:
    """Whether every address of the kernel reads output ranges a (outer) and b as one: a * size(b) + b times a stride,
    or neither of them (the cheap test; the merge itself is checked by what it simplifies to)."""
    size_b = b.src[0].arg
    for terms in addresses:
        coeff = {a: 0, b: 0}
        for base, m, below in terms:
            if base in coeff:
                coeff[base] += m
            elif a in below or b in below:  # inside a division, a comparison, ...
                return False
        if coeff[a] != size_b * coeff[b]:
            return False
    return True


def _divides(root: UOp, r: UOp) -> bool:
    """Whether a division or remainder in root's graph reads range r (one walk, sources before users)."""
    reads: dict[UOp, bool] = {}
    for u in root.toposort():
        if (reads_r := u is r or any(reads[s] for s in u.src)) and u.op in (Ops.IDIV, Ops.MOD) and reads[u.src[0]]:
            return True
        reads[u] = reads_r
    return False


def merge_ranges(store: UOp, rngs: list[UOp]) -> tuple[UOp, list[UOp]]:
    """The kernel with adjacent output ranges that every address reads as one merged into one range: a projection
    stored in the (batch, seq, heads, pairs, 2) shape RoPE reads is a (batch * seq, dim) matmul to codegen, an
    elementwise kernel one flat loop. A merge is kept only if no division or remainder of the new range is left."""
    i, rngs = 0, list(rngs)
    addresses = _address_terms(store)
    while i + 1 < len(rngs):
        a, b = rngs[i], rngs[i + 1]
        if not (a.src[0].op is b.src[0].op is Ops.CONST and _mergeable(addresses, a, b)):
            i += 1
            continue
        size_b = b.src[0].arg
        m = UOp.range(a.src[0].arg * size_b, a.arg[0], AxisType.GLOBAL)
        merged = graph_rewrite(store.substitute({a: m // size_b, b: m % size_b}), symbolic, name="merge ranges")
        if _divides(merged, m):
            i += 1
            continue
        store, rngs[i:i + 2] = merged, [m]
        addresses = _address_terms(store)
    return store, rngs


def new_buffer(x: UOp, unique: int) -> UOp:
    device = x.device
    assert device is not None, f"rangeify: cannot tell the device of {x.op}"
    return UOp(Ops.BUFFER, x.dtype, (UOp(Ops.UNIQUE, arg=unique), UOp(Ops.DEVICE, arg=device)), int(prod(x.shape)))
