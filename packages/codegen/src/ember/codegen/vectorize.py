"""Vectorize: the copies an UPCAST or PARTIAL expanded become vector UOps where their lanes are alike.

After expansion a kernel holds groups of scalar copies that differ only in the point of the expanded axis. Two kinds
of groups start a vector (the seeds):
- the terms of an unrolled reduce that are reduces themselves (a PARTIAL split: lane i accumulates elements i, i+n,
  ...): one vector reduce, its lanes summed once after the loop (GEP);
- stores to consecutive addresses of one buffer (an UPCAST of the output's contiguous axis): one vector store.
From a seed, `_SLP.vec` builds the vector of a tuple of lanes bottom-up: lanes that are one UOp become a broadcast,
loads of consecutive addresses a vector load, alike ALU ops and reduces the op on vectors of their sources; anything
else is built lane by lane (VECTORIZE of the scalars). A seed is only replaced when its vector is more than such a
build, so a kernel whose lanes are unalike keeps its scalar code. Which dtypes and ops have vectors is the target's
to say: `Renderer.vector_dtypes`, `vector_alu`, `mask_itemsize` and `mask_alu` (renderer.py).

The vector UOps: a value of dtype `dt.vec(n)`; `VECTORIZE(*lanes)`; `GEP(v, arg=i)` lane i; `GEP(a, b, arg=(i, ...))`
the lanes i, ... of a and b laid end to end (a shuffle); `LOAD(INDEX(buf, i0))` of a vector dtype reads n elements
from i0 on (unaligned); `STORE(INDEX(buf, i0), v)` writes them; a vector REDUCE keeps a vector accumulator.

The lanes of a vector accumulator are summed after its loop (`horizontal_sums`) by a tree of shuffles: n
accumulators of w lanes become one vector of their n sums in n - 1 pairings and log2(w / n) halvings, each two
shuffles and one op, instead of n * (w - 1) scalar ops on extracted lanes.
"""

from __future__ import annotations

import functools

from ember.codegen.renderer import Renderer
from ember.uops import (
    DType,
    GroupOp,
    Ops,
    PatternMatcher,
    RewriteLoopError,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    linear_terms,
)


@functools.lru_cache(maxsize=1 << 14)  # (each address is keyed once per lane group it is compared in: 5 times)
def _index_key(idx: UOp) -> tuple[frozenset[tuple[UOp, int]], int]:
    """An index as (its non-constant terms, its constant): lanes with equal terms differ by their constants."""
    terms, const = linear_terms(idx)
    coeffs: dict[UOp, int] = {}
    for base, m in terms:
        coeffs[base] = coeffs.get(base, 0) + m
    return frozenset((b, m) for b, m in coeffs.items() if m), const


def _consecutive(idxs: list[UOp]) -> bool:
    keys = [_index_key(i) for i in idxs]
    return all(k[0] == keys[0][0] and k[1] == keys[0][1] + n for n, k in enumerate(keys))


def _alike(lanes: tuple[UOp, ...]) -> bool:
    v0 = lanes[0]
    return all(x.op is v0.op and x.dtype == v0.dtype and x.arg == v0.arg and len(x.src) == len(v0.src)
               for x in lanes)


def shuffle(a: UOp, b: UOp, lanes: tuple[int, ...]) -> UOp:
    """The vector of lanes `lanes` of a and b laid end to end (one lane: a plain GEP)."""
    if len(lanes) == 1:
        w = a.dtype.count
        return UOp(Ops.GEP, a.dtype.scalar(), (a if lanes[0] < w else b,), lanes[0] % w)
    return UOp(Ops.GEP, a.dtype.scalar().vec(len(lanes)), (a, b), lanes)


def horizontal_sums(vs: list[UOp], op: Ops) -> UOp:
    """The vector whose lane i is `op` over the lanes of vs[i] (len(vs) a power of two, at most their width)."""
    w = vs[0].dtype.count
    seg = w  # each vector holds its rows' partial values in contiguous segments of `seg` lanes
    while len(vs) > 1:  # pair rows up: each row's segment halves, the rows of two vectors share one
        seg //= 2
        pairs = []
        for a, b in zip(vs[::2], vs[1::2]):
            rows = range(0, 2 * w, 2 * seg)
            lo = tuple(r + j for r in rows for j in range(seg))
            pairs.append(shuffle(a, b, lo).alu(op, shuffle(a, b, tuple(i + seg for i in lo))))
        vs = pairs
    v = vs[0]
    while seg > 1:  # halve the segments of the one vector left: it narrows to one lane per row
        seg //= 2
        lo = tuple(r + j for r in range(0, v.dtype.count, 2 * seg) for j in range(seg))
        v = shuffle(v, v, lo).alu(op, shuffle(v, v, tuple(i + seg for i in lo)))
    return v


def _whole_vectors(red: UOp) -> list[UOp] | None:
    """The vectors whose every lane, in order, are the terms of a horizontal reduce; None if it is not one."""
    if red.op is not Ops.REDUCE or red.arg not in (Ops.ADD, Ops.MAX) or len(red.src) != 1 or \
            red.src[0].op is not Ops.NOOP:
        return None
    terms, vs, i = red.src[0].src, [], 0
    while i < len(terms):
        t = terms[i]
        if t.op is not Ops.GEP or len(t.src) != 1 or t.arg != 0:
            return None
        v = t.src[0]
        if i + v.dtype.count > len(terms) or any(terms[i + j].src != (v,) or terms[i + j].arg != j
                                                 for j in range(v.dtype.count)):
            return None
        vs.append(v)
        i += v.dtype.count
    return vs if vs and all(v.dtype == vs[0].dtype for v in vs) else None


def build(lanes: tuple[UOp, ...]) -> UOp:
    """A vector made of scalars, lane by lane."""
    return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(len(lanes)), lanes)


class _SLP:
    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.memo: dict[tuple[UOp, ...], UOp] = {}

    def vec(self, lanes: tuple[UOp, ...]) -> UOp:
        if (ret := self.memo.get(lanes)) is None:
            ret = self.memo[lanes] = self._vec(lanes)
        return ret

    def _vec(self, lanes: tuple[UOp, ...]) -> UOp:
        v0, n = lanes[0], len(lanes)
        if v0.op is Ops.GEP and len(v0.src) == 1 and v0.src[0].dtype.count == n and \
                all(x.op is Ops.GEP and x.src == v0.src and x.arg == k for k, x in enumerate(lanes)):
            return v0.src[0]  # (a vector's own lanes, in order: that vector)
        if all(x is v0 for x in lanes) or not _alike(lanes):
            return build(lanes)
        r = self.renderer
        if v0.dtype == dtypes.bool:  # comparisons of mask-wide values are a mask, logic on masks is bitwise
            if _vector_op(v0, r) or v0.op in r.mask_alu:
                return UOp(v0.op, v0.dtype.vec(n), tuple(self.vec(col) for col in zip(*(x.src for x in lanes))))
            return build(lanes)
        if v0.dtype not in r.vector_dtypes:
            return build(lanes)
        vdt = v0.dtype.vec(n)
        if v0.op is Ops.LOAD and v0.src[0].op is Ops.INDEX:
            idx = [x.src[0] for x in lanes]
            same_buf_mask = all(i.src[0] is idx[0].src[0] and i.src[2:] == idx[0].src[2:] for i in idx) and \
                all(x.src[1:] == v0.src[1:] for x in lanes)
            if same_buf_mask and _consecutive([i.src[1] for i in idx]):
                return UOp(Ops.LOAD, vdt, (idx[0], *v0.src[1:]))  # (a panel load keeps its fill as a source)
            return build(lanes)
        if dtypes.int32 in r.vector_alu.get(Ops.ADD, ()) and (ramp := _int_ramp(lanes)) is not None:
            return ramp
        if _vector_op(v0, r):
            return UOp(v0.op, vdt, tuple(self.vec(col) for col in zip(*(x.src for x in lanes))), v0.arg)
        if (hz := self.horizontal(lanes)) is not None:
            return hz
        if v0.op is Ops.REDUCE and v0.arg in (Ops.ADD, Ops.MAX) and v0.dtype in r.vector_alu.get(v0.arg, ()) and \
                all(x.src[1:] == v0.src[1:] for x in lanes):
            return UOp(Ops.REDUCE, vdt, (self.vec(tuple(x.src[0] for x in lanes)), *v0.src[1:]), v0.arg)
        if v0.op is Ops.NOOP and v0.src:  # the terms of unrolled reduces, lane by lane
            return UOp(Ops.NOOP, vdt, tuple(self.vec(col) for col in zip(*(x.src for x in lanes))))
        return build(lanes)

    def horizontal(self, lanes: tuple[UOp, ...]) -> UOp | None:
        """Lanes that are each the horizontal reduce of whole vectors (of one width) as one shuffle tree."""
        rows = [_whole_vectors(x) for x in lanes]
        if any(r is None for r in rows) or len(lanes) & (len(lanes) - 1):
            return None
        w, op = rows[0][0].dtype.count, lanes[0].arg
        if len(lanes) > w or any(v.dtype != rows[0][0].dtype for r in rows for v in r) or \
                rows[0][0].dtype.scalar() not in self.renderer.vector_alu.get(op, ()):
            return None
        # first the vectors of each row combined lane-wise, then one tree for all rows
        return horizontal_sums([functools.reduce(lambda a, b: a.alu(op, b), r) for r in rows], op)


def _int_ramp(lanes: tuple[UOp, ...]) -> UOp | None:
    """Lanes (int)(i + c_k) of one index expression i and constants c_k (an upcast axis as an int32: a causal mask's
    column, an arange) as broadcast((int)(i + c_0)) + (0, c_1 - c_0, ...): the index math itself has no vector form
    (64-bit), so lane by lane it would be n scalar casts and inserts. Equal as int32 arithmetic wraps."""
    v0 = lanes[0]
    if v0.op is not Ops.CAST or v0.dtype != dtypes.int32 or v0.src[0].dtype != dtypes.index:
        return None
    keys = [_index_key(x.src[0]) for x in lanes]
    if any(k[0] != keys[0][0] for k in keys):
        return None
    offsets = tuple(UOp.const(dtypes.int32, k[1] - keys[0][1]) for k in keys)
    return UOp(Ops.ADD, v0.dtype.vec(len(lanes)), (build((v0,) * len(lanes)), build(offsets)))


def _vector_op(v0: UOp, renderer: Renderer) -> bool:
    """Whether the target computes this ALU op on vectors of its dtype (casts and comparisons: of their source's).
    A cast keeps the lane width; a comparison's mask and a select's are as wide as the values."""
    dts = renderer.vector_alu.get(v0.op, ())
    if v0.op is Ops.CAST:
        return v0.src[0].dtype in dts and v0.src[0].dtype.itemsize == v0.dtype.itemsize
    if v0.op in GroupOp.Comparison:
        return v0.src[0].dtype in dts and v0.src[0].dtype.itemsize == renderer.mask_itemsize
    if v0.op is Ops.WHERE and v0.dtype.itemsize != renderer.mask_itemsize:
        return False
    return v0.dtype in dts


def _chunks(n: int, lanes: int) -> list[tuple[int, int]]:
    """(start, width) pieces of n items: vectors of `lanes`, then smaller powers of two >= 4, the rest scalar."""
    out, i = [], 0
    while i < n:
        w = lanes
        while w >= 4 and i + w > n:
            w //= 2
        if w < 4:
            break
        out.append((i, w))
        i += w
    return out


def _lanes_of(dt: DType, vector_bytes: int) -> int:
    return max(vector_bytes // dt.itemsize, 1)


def _has_nested_reduce(ast: UOp, nodes: list[UOp] | None = None) -> bool:
    """Whether a REDUCE's value reads another REDUCE, in one walk (a toposort per reduce was quadratic in the
    hundreds of partial-sum reduces of an upcast matmul); `nodes`: ast's toposort, where the caller has it."""
    above: set[UOp] = set()  # the nodes that are a REDUCE or read one
    for u in ast.toposort() if nodes is None else nodes:  # sources first
        if u.op is Ops.REDUCE:
            if u.src[0] in above:
                return True
            above.add(u)
        elif not above.isdisjoint(u.src):  # (in C: this loop runs over every node of the expanded kernel)
            above.add(u)
    return False


def vectorize(ast: UOp, renderer: Renderer) -> UOp:
    """The kernel with its partial-sum reduces and consecutive stores vectorized for `renderer`'s vector capabilities
    (see the module doc)."""
    if (vector_bytes := renderer.vector_bytes) <= 0:
        return ast
    slp = _SLP(renderer)

    def worth(v: UOp) -> bool:
        return v.op is not Ops.VECTORIZE

    def horizontal(red: UOp) -> UOp | None:
        terms = red.src[0].src
        if red.arg not in (Ops.ADD, Ops.MAX) or red.dtype not in renderer.vector_alu.get(red.arg, ()) or \
                not all(t.op is Ops.REDUCE for t in terms):
            return None
        new: list[UOp] = []
        for start, w in _chunks(len(terms), _lanes_of(red.dtype, vector_bytes)):
            v = slp.vec(terms[start:start + w])
            if not worth(v):
                return None
            new.extend(UOp(Ops.GEP, red.dtype, (v,), i) for i in range(w))
        new.extend(terms[len(new):])
        return red.replace(src=(UOp(Ops.NOOP, red.dtype, tuple(new)), *red.src[1:]))

    def stores(group: UOp) -> UOp | None:
        runs: dict[tuple, list[tuple[int, UOp]]] = {}  # (buffer, index terms) -> [(index constant, store)]
        for st in group.src:
            idx = st.src[0]
            if st.op is not Ops.STORE or idx.op is not Ops.INDEX or st.src[1].dtype not in renderer.vector_dtypes:
                return None
            terms, const = _index_key(idx.src[1])
            runs.setdefault((idx.src[0], terms), []).append((const, st))
        out: list[UOp] = []
        changed = False
        for run in runs.values():
            run.sort(key=lambda cs: cs[0])
            i = 0
            while i < len(run):
                # the longest stretch of consecutive addresses from run[i]
                j = i + 1
                while j < len(run) and run[j][0] == run[j - 1][0] + 1:
                    j += 1
                stretch = [st for _, st in run[i:j]]
                done = 0
                for start, w in _chunks(len(stretch), _lanes_of(stretch[0].src[1].dtype, vector_bytes)):
                    part = stretch[start:start + w]
                    v = slp.vec(tuple(s.src[1] for s in part))
                    if not worth(v):
                        out.extend(part)
                    elif all(s.src[0].src[2:] == part[0].src[0].src[2:] for s in part):
                        out.append(UOp(Ops.STORE, dtypes.void, (part[0].src[0], v)))
                        changed = True
                    else:  # lanes gated apart (a padded tile's edge): computed as one vector, stored lane by lane
                        out.extend(UOp(Ops.STORE, dtypes.void, (s.src[0], UOp(Ops.GEP, v.dtype.scalar(), (v,), k)))
                                   for k, s in enumerate(part))
                        changed = True
                    done = start + w
                out.extend(stretch[done:])
                i = j
        return UOp(Ops.NOOP, dtypes.void, tuple(out)) if changed else None

    # seeds bottom-up: the partial-sum reduces first (their vectors run along the reduce axis), then the stores
    mapping: dict[UOp, UOp] = {}
    nodes = ast.toposort()  # (walked again only after a phase changed the graph: it is the whole expanded kernel)
    nested = _has_nested_reduce(ast, nodes)
    for u in nodes:
        if u.op is Ops.REDUCE and u.src[0].op is Ops.NOOP and u.src[0].dtype != dtypes.void:
            if (h := horizontal(u)) is not None:
                mapping[u] = h
    if mapping:
        nodes = (ast := ast.substitute(mapping)).toposort()
    mapping = {}
    for u in nodes:
        if u.op is Ops.NOOP and u.dtype == dtypes.void and u.src and all(s.op is Ops.STORE for s in u.src):
            # a group may read what an earlier one stores (a packed panel): it sees that one vectorized
            cur = u.substitute(mapping) if mapping else u
            if (s := stores(cur)) is not None or cur is not u:
                mapping[u] = s if s is not None else cur
    if mapping:
        nodes = (ast := ast.substitute(mapping)).toposort()
    if (shared := _share_reduce_lanes(ast, nodes, slp)) is not ast:
        nodes = (ast := shared).toposort()
    if nested:
        nodes = (ast := _scalar_lanes(ast, slp, vector_bytes)).toposort()
    # the horizontal reduces no vector store took in: one tree each
    mapping = {u: hz for u in nodes if u.op is Ops.REDUCE and (hz := slp.horizontal((u,))) is not None}
    return ast.substitute(mapping) if mapping else ast


# a scalar reduce that is a lane of a vector reduce (ctx: {scalar: (vector, lane)}) read from that vector
pm_reduce_lanes = PatternMatcher([
    (UPat(Ops.REDUCE, name="x"), lambda ctx, x: UOp(Ops.GEP, x.dtype, (ctx[x][0],), ctx[x][1]) if x in ctx else None),
])


def _share_reduce_lanes(ast: UOp, nodes: list[UOp], slp: _SLP) -> UOp:
    """The kernel with each scalar reduce it still reads that is also a lane of a vector reduce the stores made (a
    multi-output kernel's row statistic: stored as a vector, read lane by lane by the other outputs) read from that
    vector: one accumulator, not both. The vectors are rewritten too (one may read another's lanes)."""
    lane_of = {x: (v, k) for lanes, v in slp.memo.items()
               if v.op is Ops.REDUCE and v.dtype.count == len(lanes) for k, x in enumerate(lanes) if x.op is Ops.REDUCE}
    if not lane_of or lane_of.keys().isdisjoint(nodes):
        return ast
    try:  # (each node rewritten or rebuilt once: more is a vector reading its own lane, with nothing to share)
        return graph_rewrite(ast, pm_reduce_lanes, ctx=lane_of, bottom_up=True, limit=2 * len(nodes) + len(lane_of),
                             name="share reduce lanes")
    except RewriteLoopError:
        return ast


_TRANSCENDENTAL = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)


def _lane_key(u: UOp, memo: dict[UOp, object]) -> object:
    """u's structure with the constants left out (the copies an upcast made of one node differ in constants only)."""
    if (k := memo.get(u)) is None:
        if u.op is Ops.CONST:
            k = ("const", u.dtype)
        elif u.op is Ops.GEP and len(u.src) == 1 and isinstance(u.arg, int):  # (lane k of one vector: alike)
            k = ("gep", _lane_key(u.src[0], memo))
        elif u.op in (Ops.RANGE, Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
            k = u
        elif dtypes.is_int(u.dtype) and u.dtype.count == 1 and u.op in (Ops.ADD, Ops.MUL):  # (lane 0's index: no "+ 0")
            k = ("linear", u.dtype, frozenset((_lane_key(b, memo), m) for b, m in linear_terms(u)[0]))
        else:
            k = (u.op, u.dtype, u.arg, tuple(_lane_key(s, memo) for s in u.src))
        memo[u] = k
    return k


def _term_points(nodes: list[UOp]) -> dict[UOp, int]:
    """For each node that only the terms at one position of unrolled reduces read (the reduces that keep a loop: an
    UNROLL of their axis made the terms), that position: the point of the unrolled axis it was copied for. Nodes
    read at several positions (a block's operands, shared by every key) get -1. One walk, users before sources."""
    point: dict[UOp, int] = {}

    def mark(x: UOp, p: int) -> None:
        point[x] = p if point.get(x, p) == p else -1
    for u in reversed(nodes):
        if u.op is Ops.REDUCE and len(u.src) > 1 and u.src[0].op is Ops.NOOP:
            for i, t in enumerate(u.src[0].src):
                mark(t, i)
        elif (p := point.get(u)) is not None:
            for s in u.src:
                mark(s, p)
    return point


def _scalar_lanes(ast: UOp, slp: _SLP, vector_bytes: int) -> UOp:
    """The scalar copies that an upcast made of one node (alike but for constants) and that the stores left scalar,
    when each is broadcast into vector math or is an exp2/log2/sin/sqrt (a libm call per lane): computed as vectors,
    each copy a lane. In a nested reduce (attention with recomputed scores) these are the scores of a block of
    queries, each broadcast over the head_dim lanes of the output row that its stores vectorized. The copies of one
    point of an unrolled loop share vectors (a block's scores for one key, not (query, key) pairs: `_term_points`)."""
    memo: dict[UOp, object] = {}
    groups: dict[object, list[UOp]] = {}
    nodes = ast.toposort()
    broadcast = {u.src[0] for u in nodes if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src)}
    for u in nodes:
        # (not an index cast to int: each unrolled key's own, broadcast into its mask; as lanes of one vector they
        # would be substituted under the scores' vectors built from the scalar, leaving two copies of the row max)
        if (u.op in _TRANSCENDENTAL or u in broadcast) and u.dtype.count == 1 and \
                u.dtype in slp.renderer.vector_dtypes and u.op not in (Ops.CONST, Ops.LOAD, Ops.GEP) and \
                not (u.op is Ops.CAST and u.src[0].dtype == dtypes.index):
            groups.setdefault(_lane_key(u, memo), []).append(u)
    mapping: dict[UOp, UOp] = {}
    point = _term_points(nodes) if groups else {}
    for lanes in groups.values():
        lanes.sort(key=lambda x: point.get(x, -1))  # (stable: the upcast's lanes keep their order)
        for start, w in _chunks(len(lanes), _lanes_of(lanes[0].dtype, vector_bytes)):
            part = tuple(lanes[start:start + w])
            if (v := slp.vec(part)).op is not Ops.VECTORIZE:
                mapping.update({x: UOp(Ops.GEP, x.dtype, (v,), k) for k, x in enumerate(part)})
    return ast.substitute(mapping) if mapping else ast
