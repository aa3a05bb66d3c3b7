"""Flash-style attention in the scheduler: the score matrix is recomputed where it is read, never stored, and the
masked part of every reduce over it is not visited.

    sink = rewrite_softmax_grad_rows(sink)                  # before realize_map: the backward's row term from o
    recomputed = recomputed_scores(nodes, users, forced)    # in realize_map: never realized
    realized |= transposed_score_operands(recomputed)       # ... and k^T copied in the order the dot product reads
    recomputed |= online_softmax_stats(recomputed, users)   # ... nor the row statistics only p @ v reads
    value = graph_rewrite(value, pm_bound_masked_reduces)   # in kernel_ast: reduce ranges cut to the unmasked part
    value = graph_rewrite(value, pm_online_softmax)         # ... and p @ v's sums joined to the row max's loop

1. A short reduce with a big output, q @ k^T (head_dim terms per element, T x T elements), whose every reader reduces
   over it (softmax's row max and row sum, p @ v; in the backward dv = p^T dO, dq = dS k, dk = dS^T q, the rows of
   dS where 4. below does not apply, and likewise dO @ v^T) is not realized: each reader's kernel recomputes it
   inside its own loop, a reduce over head_dim nested in the reduce over keys (or queries). What stays are O(T) row
   statistics and the outputs, so memory grows linearly with the sequence; the price is the head_dim-long dot product
   recomputed by each reader, which the codegen heuristic keeps to once per (query, key) pair by holding the output
   row (head_dim values) in registers (causal training attention: 3 kernels with scores, 5 head_dim-long dot products
   per (query, key) pair in all, 5. below, where flash attention does 3, against T x T memory traffic). Only from
   T >= 16 head_dim on (RECOMPUTE_MIN_BLOWUP): the tiny Llama at seq 256 keeps its stored scores.
2. A reduce over r of a value that is the reduce's identity wherever a mask on r is false (where(j <= i, s, -inf)
   under a max, exp of it under a sum, the zeros its gradient leaves) runs over the unmasked interval only: the range
   gets a size that depends on the outer ranges, `for (j = 0; j < i + 1; j++)` (a start bound: backwards from the
   end). Causal attention then does half the work, forward and backward. The mask stays in the body: a loop bound
   only skips what it masks, so codegen may widen it (a block of queries runs to the bound of its last). The check
   assumes the unmasked operands are finite, as flash attention does (0 * v is taken to be 0).
3. Where nothing but p @ v reads the row statistics (inference), the row max and the row sum are not stored either
   (`online_softmax_stats`) but computed in p @ v's kernel: causal forward is 1 kernel. `online_softmax` puts the
   row sum and p @ v over the max's range (ONLINE_ONE_LOOP), which codegen lowers as one loop, the running max
   rescaling the sums (ember.codegen.lower.lower_online: each score computed once, the accumulators rescaled once
   per iteration of the unrolled loop, 4 keys on the CPU); without ONLINE_ONE_LOOP over one range after the max's
   own loop (two passes over the scores, the values of the unfused reduces exactly). Where something else reads a
   statistic (a backward), they are stored, by p @ v's kernel too (5. below).
4. The softmax backward's row term, rowsum_j(dP[i, j] p[i, j]) with dP = dO v^T the gradient of o = p @ v (p times
   factors free of j, as the gradient of e / l leaves it), is rowsum_c(dO[i, c] o[i, c]) (`softmax_grad_rows`, a
   tensor-graph rule before realize_map): a reduce over head_dim reading o and dO, where the rows-of-dS kernel
   recomputed s and dP (2 dot products per pair). Only where the pattern is exactly there: the dP of that o, the
   same p (dropout's p or weights the loss also reads do not match), o in the graph (read back from where it is
   stored: an output or the contiguous copy a model transposes it to).
5. Readers of one score are multi-output kernels where that computes work once (the scheduler's
   `_multi_output_groups`, rangeify's `kernel_ast` of several roots): o with the row max and row sum the backward
   reads (one kernel: the online softmax's loop, storing all three, the running max and sum at its end; was 3
   kernels, a score pass each), and the independent readers of one shape: dk = dS^T q with dv = p^T dO (both sum over
   the queries for each key: one loop, and s, p and dP in it computed once; was 2 kernels, 3 score passes). Causal
   training attention is then 5 kernels (3 of them score kernels) and 5 head_dim dot products per (query, key) pair
   where it was 8: forward 1, dq 2, dk with dv 2 (the forward as two passes, 6: 1.2-1.7x its time on the CPU,
   tools/bench/RESULTS.md).
Left (issue 22), the training step:
   a. the backward reading the row log-sum-exp lse = m + log(l) in place of m and l (p = exp2((s - lse) log2e)); dq
      in dk and dv's kernel (it sums over the keys, they over the queries: flash attention's dq accumulates across
      key blocks, in a reduce whose accumulator is memory across an outer loop). Flash attention computes 3 dot
      products per pair.
   b. the recomputing kernels hold a block of rows of an operand (16 x head_dim) and the outputs' accumulators,
      more than AVX-512's 32 vector registers: the codegen unrolls each loop so that an iteration computes 64 scores
      (4 keys for a block of 16 queries; 8 keys at head_dim 128), the spilled columns and accumulators loaded once per
      iteration, not once per key (ember.codegen.heuristic; 12-23% faster kernels at head_dim 32, ~2.8x at 128, whose
      rows of accumulators are whole: tools/bench/RESULTS.md). A flash-style CPU kernel
      computes a block of scores into a small buffer and multiplies it as a matmul tile (a hand-written one for the
      forward, C with -O3: ~1.24x the forward kernel before the unroll).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ember.uops import (
    AxisType,
    GroupOp,
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    linear_terms,
    movement_index,
    prod,
)

# a reduce this short (head_dim) is recomputed by each reader rather than stored: its output costs a store and a load
# per element, its recomputation this many multiply-adds
RECOMPUTE_MAX_TERMS = 128
# ... when its output is at least this many times bigger than what it reads (a T x T score from T x head_dim q and k:
# T / (2 head_dim)): a quadratic blow-up worth not storing. At shorter sequences the stored scores stay in cache and
# one matmul is cheaper than the recomputations (tools/bench/bench_attention.py)
RECOMPUTE_MIN_BLOWUP = 8
# ... and no reader broadcasts it over more than this many elements (p @ v reads p once per column of v): the codegen
# holds that many accumulators in registers to compute each score once
RECOMPUTE_MAX_BROADCAST = 256
# row statistics that only p @ v reads are computed in its kernel (3. above); False: stored, each in a kernel of its own
# (tools/bench/bench_attention.py --unfused measures the difference)
ONLINE_SOFTMAX = True
# ... as one loop, the running max rescaling the sums (ember.codegen.lower.lower_online: with the codegen's unrolled
# key loop, once per 4 keys; the training forward at T = 1024-4096 1.2-1.7x faster than two passes on the CPU,
# tools/bench/RESULTS.md); False: two passes in that kernel, the row max's loop, then the row sum's and p @ v's
# together (no rescale, the unfused reduces' values exactly)
ONLINE_ONE_LOOP = True

_MUST_REALIZE = (Ops.SINK, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN)


def _reduce_terms(r: UOp) -> int | None:
    shape = r.src[0].shape
    if shape is None or not all(isinstance(s, int) for s in shape):
        return None
    return prod(shape[a] for a in r.arg[1])


_INPUTS = (Ops.BUFFER, Ops.BUFFER_VIEW, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN)


def _elements_in(r: UOp) -> int:
    """Elements of what the reduce reads (buffers, other reduces, stored values), before any broadcast."""
    inside = r.src[0].toposort(gate=lambda x: x.op not in _INPUTS)
    inputs = {s for x in inside for s in x.src if s.op in _INPUTS} | ({r.src[0]} if r.src[0].op in _INPUTS else set())
    return sum(prod(u.shape) for u in inputs if u.shape is not None)


def _is_score(r: UOp) -> bool:
    """A short sum with a quadratic blow-up of its inputs: q @ k^T (or dO @ v^T)."""
    if r.arg[0] is not Ops.ADD or not dtypes.is_float(r.dtype) or (terms := _reduce_terms(r)) is None:
        return False
    if terms > RECOMPUTE_MAX_TERMS or not all(isinstance(s, int) for s in r.shape):
        return False
    read = _elements_in(r)
    return read > 0 and prod(r.shape) >= RECOMPUTE_MIN_BLOWUP * read


def recomputed_scores(nodes: list[UOp], users: dict[UOp, list[UOp]], forced: set[UOp]) -> set[UOp]:
    """The score-sized nodes recomputed inside the reduces that read them (never realized): each score reduce and
    the elementwise and movement ops between it and its readers, when every path from it ends in a REDUCE_AXIS
    (no output, no contiguous, no copy reads it), and no reader broadcasts it over more than
    RECOMPUTE_MAX_BROADCAST elements. `forced`: nodes realized whatever the rules say (outputs, contiguous, ...)."""
    candidates = [u for u in nodes if u.op is Ops.REDUCE_AXIS and u not in forced and _is_score(u)]
    recomputed: set[UOp] = set()
    for score in candidates:
        region, stack, ok = {score}, [score], True
        while stack and ok:
            u = stack.pop()
            for c in users[u]:
                if c.op is Ops.REDUCE_AXIS:
                    ok = ok and prod(c.src[0].shape) <= prod(score.shape) * RECOMPUTE_MAX_BROADCAST
                elif c.op in _MUST_REALIZE or c in forced or not (c.op in GroupOp.Elementwise or
                                                                 c.op in GroupOp.Movement or c.op is Ops.DETACH):
                    ok = False
                elif c not in region:
                    region.add(c)
                    stack.append(c)
        if ok:
            recomputed |= region
    return recomputed


def _memory_stride(operand: UOp, axis: int) -> int | None:
    """How far apart in memory consecutive elements of `axis` of `operand` (a view through movement ops) lie, in the
    row-major layout of the first non-movement node below it; None if not affine."""
    if operand.shape is None or not all(isinstance(s, int) for s in operand.shape):
        return None
    idxs = tuple(UOp.range(n, i, AxisType.GLOBAL) for i, n in enumerate(operand.shape))
    x = operand
    while x.op in GroupOp.Movement or x.op is Ops.DETACH:
        if x.op is not Ops.DETACH:
            idxs = movement_index(x.op, x.arg, x.src[0].shape, idxs)[0]
        x = x.src[0]
    flat = UOp.const(dtypes.index, 0)
    for i, n in zip(idxs, x.shape):
        flat = flat * n + i
    terms, _ = linear_terms(flat.simplify())
    r = UOp.range(operand.shape[axis], axis, AxisType.GLOBAL)
    if any(b is not r and r in b.toposort() for b, _ in terms):
        return None
    return sum(m for b, m in terms if b is r)


def transposed_score_operands(recomputed: set[UOp]) -> set[UOp]:
    """Operands of the recomputed scores that the dot product would read across memory (k stored as k^T, one row of
    head_dim per key): stored once more, in the order the dot product reads them (O(T x head_dim) copies). Each key's
    head_dim values lie far apart otherwise, in as many cache lines as head_dim, aliasing in the cache when T is a
    power of two: the recomputing kernels run 3-5x slower."""
    stored: set[UOp] = set()
    for score in (u for u in recomputed if u.op is Ops.REDUCE_AXIS):
        axis = score.arg[1][-1]
        if score.src[0].op is not Ops.MUL:
            continue
        for operand in score.src[0].src:
            below, x = None, operand
            while x.op in GroupOp.Movement or x.op is Ops.DETACH:
                if x.op is Ops.EXPAND:
                    below = x.src[0]
                x = x.src[0]
            if below is not None and (stride := _memory_stride(operand, axis)) is not None and abs(stride) > 1:
                stored.add(below)
    return stored


# *** the softmax gradient's row term: rowsum(dP * p) as rowsum(dO * o) ***
def _push(u: UOp, idxs: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...]] | None:
    """(the first node below u that is no movement op nor DETACH, its indices) for u read at `idxs`; None through a
    PAD (a gate)."""
    while u.op in GroupOp.Movement or u.op is Ops.DETACH:
        if u.op is not Ops.DETACH:
            moved, valid = movement_index(u.op, u.arg, u.src[0].shape, idxs)
            if valid is not None:
                return None
            idxs = tuple(i.simplify() for i in moved)
        u = u.src[0]
    return u, idxs


def _free_of(u: UOp, idxs: tuple[UOp, ...], r: UOp) -> bool:
    """Whether the value of tensor u at `idxs` does not depend on range r (u elementwise and movement ops over nodes
    read at indices free of r)."""
    if (pushed := _push(u, idxs)) is None:
        return False
    x, at = pushed
    if x.op is Ops.CONST:
        return True
    if x.op in GroupOp.Elementwise:
        return all(_free_of(s, at, r) if s.shape else s.op is Ops.CONST for s in x.src)
    return not any(r in i.toposort() for i in at)


def _below_views(u: UOp) -> UOp:
    while u.op in GroupOp.Movement or u.op is Ops.DETACH:
        u = u.src[0]
    return u


def _is_dot(u: UOp) -> bool:
    """A sum over one axis of a product (a matmul's reduce)."""
    return u.op is Ops.REDUCE_AXIS and u.arg[0] is Ops.ADD and len(u.arg[1]) == 1 and u.src[0].op is Ops.MUL


def _pairs_with_output(dp: UOp, graph: ProductReduces) -> bool:
    """Whether tensor dp is a view (no broadcast) of a dot product (dO @ v^T) that shares an operand with another dot
    product over the same product shape and another axis (o = p @ v): the cheap part of `softmax_grad_rows`'s
    match."""
    x = _below_views(dp)
    if not _is_dot(x) or not (others := _other_dots(x, graph)):  # (shapes last: none computed for most)
        return False
    return dp.shape is not None and prod(x.shape) == prod(dp.shape) and \
        any(o.src[0].shape == x.src[0].shape for o in others)


def _other_dots(x: UOp, graph: ProductReduces) -> list[UOp]:
    """The dot products that share an operand with dot product x and sum another axis."""
    return [o for v in x.src[0].src for o in graph.by_operand.get(v, ()) if _is_dot(o) and o.arg[1] != x.arg[1]]


def _may_match(red: UOp, graph: ProductReduces) -> bool:
    """Whether `softmax_grad_rows` may rewrite red (a sum of a product): its cheap check without shapes, none
    computed and no node built (where(c, 0, x): x whatever c and the 0), so False where that check would fail."""
    if red.arg[0] is not Ops.ADD or len(red.arg[1]) != 1:
        return False
    stack = [red.src[0]]
    while stack:
        u = stack.pop()
        if u.op is Ops.MUL:
            stack.extend(u.src)
        elif u.op in (Ops.NEG, Ops.WHERE):  # (-x, where(c, 0, x): x)
            stack.append(u.src[-1])
        elif _is_dot(x := _below_views(u)) and _other_dots(x, graph):
            return True
    return False


def _tensor_factors(u: UOp) -> list[UOp]:
    """The factors of product u (a negation: a factor -1; where(c, 0, x): x and where(c, 0, 1), as x is finite)."""
    if u.op is Ops.MUL:
        return [f for s in u.src for f in _tensor_factors(s)]
    if u.op is Ops.NEG:
        return [*_tensor_factors(u.src[0]), UOp.const(u.dtype, -1.0)]
    if u.op is Ops.WHERE and dtypes.is_float(u.dtype) and u.shape and (zero := _below_views(u.src[1])).op is Ops.CONST \
            and zero.arg == 0.0:
        return [*_tensor_factors(u.src[2]), u.src[0].where(_filled(u, 0.0), _filled(u, 1.0))]
    return [u]


def _filled(u: UOp, value: float) -> UOp:
    return UOp.const(u.dtype, value, u.device).reshape((1,) * len(u.shape)).expand(u.shape)


def _at_row(u: UOp, axis: int) -> UOp:
    """Tensor u, free of `axis`, with that axis shrunk to 1 (an expand's source as it is, elementwise ops over their
    sources' rows: nothing of u's size is read)."""
    if not u.shape:
        return u
    if u.op is Ops.EXPAND and u.src[0].shape[axis] == 1 and \
            all(a == b for i, (a, b) in enumerate(zip(u.src[0].shape, u.shape)) if i != axis):
        return u.src[0]
    if u.op in GroupOp.Elementwise and all(s.shape == u.shape or not s.shape for s in u.src):
        return u.replace(src=tuple(_at_row(s, axis) for s in u.src))
    return u.shrink(tuple((0, 1) if i == axis else (0, n) for i, n in enumerate(u.shape)))


@dataclass(frozen=True)
class ProductReduces:
    """The REDUCE_AXIS nodes of a graph that sum a product, by the operands of the product (`by_operand`), and for
    those stored through their one reader (an output, a contiguous copy: `_stored_view`) their value read back from
    there (`views`)."""

    by_operand: dict[UOp, list[UOp]]
    views: dict[UOp, UOp]


def softmax_grad_rows(red: UOp, graph: ProductReduces) -> UOp | None:
    """sum over j of dP[i, j] * p[i, j] * y[i] -> sum over c of dO[i, c] * o[i, c], times y[i], where dP = dO @ v^T is
    the gradient of o = p @ v (the reduce over c of dO[i, c] * V[i, j, c], V the operand o's reduce multiplies p by)
    and y is free of j: the softmax backward's row term, read from the output instead of the scores (an O(T head_dim)
    reduce in place of an O(T^2 head_dim) one)."""
    if len(red.arg[1]) != 1 or not dtypes.is_float(red.dtype):
        return None
    (axis,) = red.arg[1]
    factors = _tensor_factors(red.src[0])
    if not any(_pairs_with_output(f, graph) for f in factors) or red.src[0].shape is None or \
            not all(isinstance(n, int) for n in red.src[0].shape) or red.src[0].shape[axis] < 2:
        return None
    # (a size-1 axis at index 0: as a reshape leaves it)
    idxs = tuple(UOp.range(n, i, AxisType.GLOBAL) if n != 1 else UOp.const(dtypes.index, 0)
                 for i, n in enumerate(red.src[0].shape))
    j = idxs[axis]
    for dp in factors:
        if not _pairs_with_output(dp, graph) or (pushed := _push(dp, idxs)) is None:
            continue
        dp_raw, at = pushed
        # dP[i, j] read at its own indices with the summed axis (size 1) put in: o's shape once that is summed too
        (c_axis,) = dp_raw.arg[1]
        if [i for n, i in enumerate(at) if n != c_axis] != list(idxs) or at[c_axis].op is not Ops.CONST or \
                [n for a, n in enumerate(dp_raw.shape) if a != c_axis] != list(red.src[0].shape):
            continue
        j_axis = at.index(j)
        c = UOp.range(dp_raw.src[0].shape[c_axis], len(at), AxisType.GLOBAL)
        at_c = tuple(c if n == c_axis else i for n, i in enumerate(at))
        for v_side in dp_raw.src[0].src:
            do_side = dp_raw.src[0].src[1] if v_side is dp_raw.src[0].src[0] else dp_raw.src[0].src[0]
            for o in graph.by_operand.get(v_side, []):
                if o.arg == (Ops.ADD, (j_axis,)) and o.src[0].shape == dp_raw.src[0].shape and \
                        (new := _row_term(red, factors, dp, o, v_side, do_side, c_axis, at_c, idxs,
                                          graph.views.get(o))) is not None:
                    return new
    return None


def _row_term(red: UOp, factors: list[UOp], dp: UOp, o: UOp, v_side: UOp, do_side: UOp, c_axis: int,
              at_c: tuple[UOp, ...], idxs: tuple[UOp, ...], o_view: UOp | None) -> UOp | None:
    """rowsum_c(dO * o) * y for `softmax_grad_rows`, if o = sum_j p * V with p the factors of the row term besides dP
    (and y those left, free of j) and dO (do_side) free of j; None otherwise. o is `o_view` if given (o read back
    from where it is stored: a second reader of the reduce itself would store it a second time)."""
    axis = red.arg[1][0]
    j, j_axis = idxs[axis], o.arg[1][0]
    p_side = o.src[0].src[1] if v_side is o.src[0].src[0] else o.src[0].src[0]
    # p_side at (..., i, j, c) is p at (..., i, j): the node the row term multiplies dP by, read where it does
    if (pushed := _push(p_side, at_c)) is None or pushed[1] != idxs or not _free_of(do_side, at_c, j):
        return None
    rest = list(factors)
    rest.remove(dp)
    for f in _tensor_factors(pushed[0]):
        if f not in rest:
            return None
        rest.remove(f)
    if not all(_free_of(f, idxs, j) if f.shape else f.op is Ops.CONST for f in rest):
        return None
    # (y in the sum, broadcast over c, as it was in the row term's: one kernel)
    term = _at_row(do_side, j_axis) * (o if o_view is None else o_view)
    summed_shape = tuple(1 if n == c_axis else s for n, s in enumerate(o.shape))
    for f in rest:
        term = term * _row_broadcast(f, axis, summed_shape, o.shape)
    return term.reduce_axis(Ops.ADD, (c_axis,)).reshape(red.shape)


def _row_broadcast(u: UOp, axis: int, row_shape: tuple[int, ...], shape: tuple[int, ...]) -> UOp:
    """Tensor u, free of `axis`, as its row (`_at_row`) viewed in `row_shape` and broadcast to `shape`, the broadcast
    put under u's elementwise ops (a costly op broadcast into a reduce would be stored)."""
    if not u.shape:
        return u
    if u.op in GroupOp.Elementwise and all(s.shape == u.shape or not s.shape for s in u.src):
        return u.replace(src=tuple(_row_broadcast(s, axis, row_shape, shape) for s in u.src))
    return _at_row(u, axis).reshape(row_shape).expand(shape)


def _stored_view(o: UOp, users: dict[UOp, list[UOp]], outputs: set[UOp]) -> UOp | None:
    """o read back from the node that stores it, when o's one reader is a chain of reshapes and permutes (each the
    one reader of the last) up to an output, a CONTIGUOUS or the value of an ASSIGN: attention's output as a model
    transposes it for the output projection, or as a jitted step assigns it to its output buffer."""
    chain: list[UOp] = []
    x = o
    while x not in outputs and x.op not in (Ops.CONTIGUOUS, Ops.ASSIGN) and len(users.get(x, [])) == 1 and \
            ((u := users[x][0]).op in (Ops.RESHAPE, Ops.PERMUTE, Ops.CONTIGUOUS) or
             (u.op is Ops.ASSIGN and u.src[1] is x)):
        x = u
        chain.append(x)
    if not chain or not (x in outputs or x.op in (Ops.CONTIGUOUS, Ops.ASSIGN)):
        return None
    for u in reversed(chain):
        if u.op is Ops.PERMUTE:
            x = x.permute(tuple(sorted(range(len(u.arg)), key=u.arg.__getitem__)))
        elif u.op is Ops.RESHAPE:
            x = x.reshape(u.src[0].shape)
    return x


def rewrite_softmax_grad_rows(sink: UOp) -> UOp:
    """The tensor graph with each softmax backward's row term rowsum(dP * p) read from the forward's output
    (`softmax_grad_rows`): the scores' reduce over keys goes, a reduce over head_dim takes its place.

    The rule only matches a sum of a product one of whose factors pairs with an output (`_pairs_with_output`): the
    graph is walked once to find those (candidates) and returned as it is without one (most schedules)."""
    order = sink.toposort()
    graph = ProductReduces({}, {})
    reduces = [u for u in order if u.op is Ops.REDUCE_AXIS and u.src[0].op is Ops.MUL]
    for u in reduces:
        for s in dict.fromkeys(u.src[0].src):
            graph.by_operand.setdefault(s, []).append(u)
    if not any(_may_match(red, graph) for red in reduces):
        return sink  # (no softmax backward: nothing to walk)
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)
    outputs = set(sink.src)
    for o in dict.fromkeys(reduces):
        if (view := _stored_view(o, users, outputs)) is not None:
            graph.views[o] = view
    return graph_rewrite(sink, pm_softmax_grad_rows, ctx=graph, name="softmax grad rows")


pm_softmax_grad_rows = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.MUL),), name="red"),
     lambda ctx, red: softmax_grad_rows(red, ctx) if _may_match(red, ctx) else None),
])


# *** masked reduces: the range cut to where the value is not the identity ***
def _known(u: UOp, masked: dict[UOp, UOp], memo: dict[UOp, float | None]) -> float | None:
    """The value of float expression u when each WHERE in `masked` takes its false branch, if that makes it a known
    constant (None: unknown, assumed finite)."""
    if u in memo:
        return memo[u]
    ret: float | None = None
    if u in masked:
        ret = _known(masked[u], masked, memo)
    elif u.op is Ops.CONST and isinstance(u.arg, float):
        ret = u.arg
    elif u.op is Ops.CAST and dtypes.is_float(u.dtype) and dtypes.is_float(u.src[0].dtype):
        ret = _known(u.src[0], masked, memo)
    elif u.op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.FDIV) and dtypes.is_float(u.dtype):
        a, b = (_known(s, masked, memo) for s in u.src)
        if a is not None and b is not None:
            ret = a + b if u.op is Ops.ADD else a * b if u.op is Ops.MUL else max(a, b) if u.op is Ops.MAX else \
                (a / b if b else None)
        elif u.op is Ops.ADD and (inf := a if a is not None else b) is not None and math.isinf(inf):
            ret = inf  # +-inf plus a finite value
        elif u.op is Ops.MUL and (a == 0.0 or b == 0.0):
            ret = 0.0  # zero times a finite value
        elif u.op is Ops.MUL and (inf := a if a is not None else b) is not None and math.isinf(inf):
            ret = None  # (the sign of the other factor decides)
        elif u.op is Ops.MAX and -math.inf in (a, b):
            ret = None
        elif u.op is Ops.FDIV and a == 0.0:
            ret = 0.0
    elif u.op is Ops.NEG and (a := _known(u.src[0], masked, memo)) is not None:
        ret = -a
    elif u.op is Ops.EXP2 and (a := _known(u.src[0], masked, memo)) is not None:
        ret = 0.0 if a == -math.inf else math.inf if a == math.inf else None
    elif u.op is Ops.WHERE and dtypes.is_float(u.dtype):
        a, b = (_known(s, masked, memo) for s in u.src[1:])
        ret = a if a is not None and a == b else None
    memo[u] = ret
    return ret


def _strip_bool(c: UOp) -> tuple[UOp, bool]:
    """(comparison, negated) of a bool condition: where(c, True, False), c ^ True and double negations seen through."""
    neg = False
    while True:
        if c.op is Ops.WHERE and c.dtype == dtypes.bool and c.src[1].op is Ops.CONST and c.src[2].op is Ops.CONST \
                and c.src[1].arg != c.src[2].arg:
            neg, c = neg ^ (c.src[1].arg is False), c.src[0]
        elif c.op is Ops.XOR and c.src[1].op is Ops.CONST and c.src[1].arg is True:
            neg, c = not neg, c.src[0]
        else:
            return c, neg


def _as_index(terms: list[tuple[UOp, int]], const: int) -> UOp | None:
    """sum(base * coeff) + const as an index expression (int casts of index expressions seen through)."""
    ret = UOp.const(dtypes.index, const)
    for base, m in terms:
        if base.op is Ops.CAST and base.src[0].dtype == dtypes.index:
            base = base.src[0]
        elif base.dtype != dtypes.index:
            return None
        ret = ret + base * m
    return ret.simplify()


def range_bound(cond: UOp, r: UOp, negate: bool = False) -> tuple[UOp | None, UOp | None] | None:
    """(start, end): cond (with `negate`: not cond) holds exactly for start <= r < end (one of them None: unbounded on
    that side), when cond is a comparison linear in r with coefficient +-1 (a causal mask: cols - rows <= 0 is
    r < i + 1 for r the columns)."""
    c, neg = _strip_bool(cond)
    neg ^= negate
    if c.op is not Ops.CMPLT or not (dtypes.is_int(c.src[0].dtype) or c.src[0].dtype == dtypes.index):
        return None
    (ta, ca), (tb, cb) = linear_terms(c.src[0]), linear_terms(c.src[1])
    coeff, rest = 0, []
    for base, m in [*ta, *((b, -m) for b, m in tb)]:  # a - b < 0
        if base is r or (base.op is Ops.CAST and base.src[0] is r):
            coeff += m
        elif r in base.toposort():
            return None
        else:
            rest.append((base, m))
    if coeff not in (1, -1):
        return None
    if coeff == 1:  # r + rest < 0: r < -rest (negated: r >= -rest)
        if (end := _as_index([(b, -m) for b, m in rest], cb - ca)) is None:
            return None
        return (end, None) if neg else (None, end)
    # rest - r < 0: r >= rest + 1 (negated: r < rest + 1)
    if (start := _as_index(rest, ca - cb + 1)) is None:
        return None
    return (None, start) if neg else (start, None)


def bound_masked_reduce(red: UOp) -> UOp | None:
    """REDUCE over r of a value that is the identity where a mask on r is false -> the REDUCE over a range that covers
    the unmasked interval [start, end) of r only: r < end as a range of size end, r >= start as r = N - 1 - r' with r'
    in a range of size N - start (backwards: every r' is in bounds for any start in [0, N]). The mask stays in the
    body, so that a larger size is as correct: codegen may widen a bound to the largest over the lanes of an upcast
    (ember.codegen.opt.widen_loop_bounds)."""
    identity = 0.0 if red.arg is Ops.ADD else -math.inf if red.arg is Ops.MAX else None
    if identity is None or not dtypes.is_float(red.dtype):
        return None
    wheres = [u for u in red.src[0].toposort() if u.op is Ops.WHERE and dtypes.is_float(u.dtype)]
    for r in red.src[1:]:
        if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST:
            continue
        size = r.src[0].arg
        for cond, masked_if in ((c, when) for c in dict.fromkeys(w.src[0] for w in wheres if r in w.src[0].toposort())
                                for when in (False, True)):
            # the value where cond is `masked_if`: each WHERE on cond takes that branch
            masked = {w: w.src[1] if masked_if else w.src[2] for w in wheres if w.src[0] is cond}
            if _known(red.src[0], masked, {}) != identity or (bound := range_bound(cond, r, masked_if)) is None:
                continue
            start, end = bound
            if end is not None and end.op is not Ops.CONST and end.vmin >= 0 and end.vmax <= size:
                new_r = UOp.range(end, r.arg[0], r.arg[1])
                value = new_r
            elif start is not None and start.op is not Ops.CONST and start.vmin >= 0 and start.vmax <= size:
                new_r = UOp.range((size - start).simplify(), r.arg[0], r.arg[1])
                value = (size - 1) - new_r
            else:  # (the interval may leave the range: a mask that clipping would need; or nothing to gain)
                continue
            rngs = tuple(new_r if s is r else s for s in red.src[1:])
            return UOp(Ops.REDUCE, red.dtype, (red.src[0].substitute({r: value}), *rngs), red.arg)
    return None


# (applied to a kernel's value after rangeify: its reduces are complete then)
pm_bound_masked_reduces = PatternMatcher([(UPat(Ops.REDUCE, name="red"), bound_masked_reduce)])


# *** online softmax: the row max, the row sum of exp and p @ v in one loop ***
def online_softmax_stats(recomputed: set[UOp], users: dict[UOp, list[UOp]]) -> set[UOp]:
    """The row statistics of a softmax over recomputed scores (its max and its sum of exp, and the movement and
    elementwise ops that lead them back into the scores) when the scores feed one reduce besides them (softmax(s) @ v
    with no backward reading the statistics): not stored, but computed in that reduce's kernel, where kernel_ast
    makes them one loop (`pm_online_softmax`)."""
    if not ONLINE_SOFTMAX:
        return set()
    readers = {c for u in recomputed for c in users[u] if c.op is Ops.REDUCE_AXIS and c not in recomputed}
    chains: dict[UOp, set[UOp]] = {}
    for r in readers:  # a statistic: a reader whose value only goes back into the scores
        chain, stack, ok = {r}, [r], True
        while stack and ok:
            for c in users[stack.pop()]:
                if c in recomputed or c in chain:
                    continue
                if not (c.op in GroupOp.Elementwise or c.op in GroupOp.Movement or c.op is Ops.DETACH):
                    ok = False
                    break
                chain.add(c)
                stack.append(c)
        if ok:
            chains[r] = chain
    stats: set[UOp] = set()
    for chain in chains.values():
        seen, stack, reached = set(chain), list(chain), set()
        while stack:
            for c in users[stack.pop()]:
                if c.op is Ops.REDUCE_AXIS and c not in recomputed:
                    reached.add(c)
                elif c in recomputed and c not in seen:
                    seen.add(c)
                    stack.append(c)
        if len(others := reached - chains.keys()) == 1 and _reduces_rows(others.pop(), chain, recomputed):
            stats |= chain
    return stats


def _reduces_rows(reader: UOp, chain: set[UOp], recomputed: set[UOp]) -> bool:
    """Whether `reader` sums the scores over the axis the statistics reduce (p @ v sums over keys as the row max;
    dk = dS^T q sums over queries: its kernel would recompute a row max for every query)."""
    stat_axes = {a for u in chain if u.op is Ops.REDUCE_AXIS for a in u.arg[1]}
    scores_shape = next(u.src[0].shape for u in chain if u.op is Ops.REDUCE_AXIS)
    rngs = tuple(UOp.range(n, i, AxisType.GLOBAL) for i, n in enumerate(reader.src[0].shape))
    stack = [(reader.src[0], rngs)]
    while stack:
        x, idxs = stack.pop()
        if x in recomputed and x.op not in GroupOp.Movement and x.shape == scores_shape:  # (the scores)
            summed = {rngs[a] for a in reader.arg[1]}
            return len(stat_axes) == 1 and [i for i in idxs if i in summed] == [idxs[next(iter(stat_axes))]]
        if x.op in GroupOp.Movement:
            moved = movement_index(x.op, x.arg, x.src[0].shape, idxs)[0]
            stack.append((x.src[0], tuple(i.simplify() for i in moved)))
        elif x.op in GroupOp.Elementwise or x.op is Ops.DETACH:
            stack.extend((s, idxs) for s in x.src if s.shape == x.shape)
    return False


def _depends(u: UOp, x: UOp) -> bool:
    return x in u.toposort()


def _factors(u: UOp, r: UOp) -> tuple[list[UOp], list[UOp]]:
    """(the factors of product u that depend on r, those that do not); a factor under where(c, 0, x) with c free of
    r moves out of it (where(c, 0, x * y) = where(c, 0, x) * y for finite y)."""
    if u.op is Ops.MUL:
        (a, b), (c, d) = (_factors(s, r) for s in u.src)
        return a + c, b + d
    if u.op is Ops.WHERE and not _depends(u.src[0], r) and u.src[1].op is Ops.CONST and u.src[1].arg == 0.0:
        inner, free = _factors(u.src[2], r)
        if inner and free:
            return [u.replace(src=(u.src[0], u.src[1], _product(inner)))], free
    return ([u], []) if _depends(u, r) else ([], [u])


def _product(xs: list[UOp]) -> UOp:
    ret = xs[0]
    for x in xs[1:]:
        ret = ret * x
    return ret


def _exp_of_shifted(u: UOp, m: UOp) -> bool:
    """Whether u is a product of factors free of max m and exp2((s - m) * c), s the values m is the max of (masks:
    where(c, 0, x)): a term of a softmax that running maxes can rescale."""
    if m not in u.toposort():
        return True
    if u.op is Ops.MUL:
        return all(_exp_of_shifted(s, m) for s in u.src)
    if u.op is Ops.WHERE and m not in u.src[0].toposort() and UOp.const(u.dtype, 0.0) in u.src[1:]:
        return all(_exp_of_shifted(s, m) for s in u.src[1:])
    if u.op is Ops.EXP2:  # (s - m) * c with s as m is the max of it: zero, up to the order of the terms
        terms = _linear(u.src[0].substitute({m: m.src[0]}))
        return terms is not None and all(c == 0.0 for c in terms.values())
    return False


def _linear(u: UOp) -> dict[UOp, float] | None:
    """Float expression u as sum(coeff * term) over sums, negations and products by constants (terms by node)."""
    if u.op is Ops.ADD:
        a, b = (_linear(s) for s in u.src)
        if a is None or b is None:
            return None
        return {t: a.get(t, 0.0) + b.get(t, 0.0) for t in {**a, **b}}
    if u.op is Ops.NEG:
        return None if (a := _linear(u.src[0])) is None else {t: -c for t, c in a.items()}
    if u.op is Ops.MUL and (k := next((s for s in u.src if s.op is Ops.CONST), None)) is not None:
        x = u.src[1] if k is u.src[0] else u.src[0]
        return None if (a := _linear(x)) is None else {t: c * k.arg for t, c in a.items()}
    return {u: 1.0}


def _canonical(u: UOp) -> UOp:
    """u with the ranges its reduces run over renumbered in order: equal for two reduces that differ only in those."""
    bound = dict.fromkeys(r for x in u.toposort() if x.op is Ops.REDUCE for r in x.src[1:])
    return u.substitute({r: UOp.range(r.src[0], -1 - i, r.arg[1]) for i, r in enumerate(bound)})


def online_softmax(red: UOp) -> UOp | None:
    """sum over r of f(r) * exp2((s(r) - M) * c) * y, M the max of s over r' (a range of r's size), y free of r ->
    sum over r' of f(r') * exp2((s(r') - M) * c), times y: the sum reads its max over its own loop, the form codegen
    lowers as an online softmax (ember.codegen.lower: one loop, the running max rescaling the sums). Every sum of
    exp2(s - M) (the row sum, p @ v) joins the max's loop: the scores are computed once per (query, key). Unless
    ONLINE_ONE_LOOP, the sums join one loop after the max's instead (`_two_pass_softmax`)."""
    if red.arg is not Ops.ADD or len(red.src) != 2 or not dtypes.is_float(red.dtype):
        return None
    r = red.src[1]
    maxes = [u for u in red.src[0].toposort() if u.op is Ops.REDUCE and u.arg is Ops.MAX and len(u.src) == 2 and
             u.src[1] is not r and u.src[1].src[0] is r.src[0] and u.src[1].arg[1] == r.arg[1] and
             r not in u.toposort()]
    if not maxes:
        return None
    if not ONLINE_ONE_LOOP:
        return _two_pass_softmax(red, maxes)
    # the max in the loop of a sum already rewritten (the row sum, read by p @ v), else the first; the same max over
    # another range (rangeify made one per path to it) is the same value
    loops = {u.src[1] for u in red.src[0].toposort() if u.op is Ops.REDUCE and u.arg is Ops.ADD and len(u.src) == 2}
    m = next((u for u in maxes if u.src[1] in loops), maxes[0])
    if any(_canonical(u) is not _canonical(m) for u in maxes):
        return None
    inner, free = _factors(red.src[0], r)
    value = _product(inner).substitute({r: m.src[1], **{u: m for u in maxes if u is not m}})
    # the dot products of the scores as the max computes them (rangeify gave each its own range): computed once
    dots = {_canonical(u): u for u in m.src[0].toposort() if u.op is Ops.REDUCE}
    value = value.substitute({u: dots[c] for u in value.toposort() if u.op is Ops.REDUCE and u is not m and
                              (c := _canonical(u)) in dots and dots[c] is not u})
    # (other reduces only inside the loop, the dot products of the scores: a sum over the loop would be read in it)
    if any(u.op is Ops.REDUCE and u is not m and (m.src[1] in u.src[1:] or m.src[1] not in u.toposort())
           for u in value.toposort()) or \
            not _exp_of_shifted(value, m):
        return None
    ret = UOp(Ops.REDUCE, red.dtype, (value, m.src[1]), Ops.ADD)
    return ret * _product(free) if free else ret


def _two_pass_softmax(red: UOp, maxes: list[UOp]) -> UOp | None:
    """sum over r of f(r) * g(M) * y (y free of r) -> sum over R of f(R) * g(M), times y, R the range of the row sum
    that red reads (red is p @ v): every sum of the softmax runs over one range, its max over its own before it. Two
    passes over the scores in one kernel (the max's loop, then one loop for the row sum and p @ v), the values of the
    unfused reduces exactly (no rescale)."""
    r = red.src[1]
    sums = [u for u in red.src[0].toposort() if u.op is Ops.REDUCE and u.arg is Ops.ADD and len(u.src) == 2 and
            u.src[1].src[0] is r.src[0] and u.src[1].arg[1] == r.arg[1] and any(m in u.toposort() for m in maxes)]
    if not sums:  # (the row sum itself, or a sum that reads none: left as it is)
        return None
    loop = sums[0]
    m = next((u for u in maxes if u in loop.toposort()), maxes[0])
    if any(_canonical(u) is not _canonical(m) for u in maxes):
        return None
    R = loop.src[1]
    inner, free = _factors(red.src[0], r)
    value = _product(inner).substitute({r: R, **{u: m for u in maxes if u is not m}})
    # the dot products of the scores as the row sum computes them: computed once per key
    dots = {_canonical(u): u for u in loop.src[0].toposort() if u.op is Ops.REDUCE and u not in m.toposort()}
    value = value.substitute({u: dots[c] for u in value.toposort() if u.op is Ops.REDUCE and u is not m and
                              (c := _canonical(u)) in dots and dots[c] is not u})
    in_max = set(m.toposort())
    # (other reduces only inside the loop, the dot products of the scores: a sum over the loop would be read in it)
    if any(u.op is Ops.REDUCE and u not in in_max and (R in u.src[1:] or R not in u.toposort())
           for u in value.toposort()):
        return None
    ret = UOp(Ops.REDUCE, red.dtype, (value, R), Ops.ADD)
    ret = ret * _product(free) if free else ret
    return None if ret is red else ret


# (applied to a kernel's value after its reduces are bounded: the max and the sums have the same bounded ranges)
pm_online_softmax = PatternMatcher([(UPat(Ops.REDUCE, name="red"), online_softmax)])
