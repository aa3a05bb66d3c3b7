"""Opt application: each `Opt` splits, re-kinds, pads or stages a kernel's RANGEs (`apply_opt`, one function per
OptOps). Which opts a kernel gets is heuristic.py's (or BEAM's, search.py)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from ember.codegen.program import Opt, OptOps
from ember.codegen.tc import TENSOR_CORES, Layout, TensorCore
from ember.uops import AddrSpace, AxisType, DType, Ops, UOp, dtypes, gate_loads, linear_terms


class KernelOptError(ValueError):
    """An Opt that does not apply to the kernel (bad axis, amount that does not divide, wrong axis kind)."""


_KIND_ORDER = {AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOCAL: 2, AxisType.WARP: 3, AxisType.LOOP: 4,
               AxisType.UPCAST: 5, AxisType.GROUP_REDUCE: 6, AxisType.REDUCE: 7, AxisType.UNROLL: 8}
OUTPUT_KINDS = (AxisType.THREAD, AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP, AxisType.UPCAST)
REDUCE_KINDS = (AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL)


def range_order(r: UOp) -> tuple[int, int]:
    """Where a RANGE's loop nests: by kind (threads outermost, unrolls innermost), then by axis id."""
    return (_KIND_ORDER[r.arg[1]], r.arg[0])


def kernel_ranges(ast: UOp) -> list[UOp]:
    """The RANGEs of a kernel in opt-axis order: output axes first, then reduce axes, each by axis id."""
    return list(_kernel_ranges(ast))


@functools.lru_cache(maxsize=1024)  # (the heuristic asks for the ranges of the same kernel a dozen times)
def _kernel_ranges(ast: UOp) -> tuple[UOp, ...]:
    return tuple(sorted({u for u in ast.toposort() if u.op is Ops.RANGE}, key=range_order))


def range_size(r: UOp) -> int | None:
    return r.src[0].arg if r.src[0].op is Ops.CONST else None


def divided_size(r: UOp, amount: int) -> UOp | None:
    """The size of range r divided by amount, where amount divides it at every point of the ranges it depends on: a
    constant, or a size linear in them whose coefficients and constant amount divides (a causal loop run to the bound
    of a block of 16 queries, 16 r + 16); None otherwise."""
    terms, const = linear_terms(r.src[0].simplify())  # (a constant size: no terms)
    if const % amount or any(m % amount for _, m in terms):
        return None
    ret = UOp.const(dtypes.index, const // amount)
    for base, m in terms:
        ret = ret + base * (m // amount)
    return ret.simplify()


def split_range(ast: UOp, r: UOp, outer: UOp, inner: UOp, amount: int) -> UOp:
    """Replace range r by outer*amount + inner everywhere; REDUCE and END list (outer, inner) in r's place."""
    value = outer * amount + inner
    new: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u is r:
            new[u] = value
            continue
        if u.op in (Ops.REDUCE, Ops.END):
            src: tuple[UOp, ...] = (new[u.src[0]],)
            for s in u.src[1:]:
                src += (outer, inner) if s is r else (new[s],)
        else:
            src = tuple(new[s] for s in u.src)
        new[u] = u if src == u.src else u.replace(src=src)
    return new[ast]


def partial_reduce(ast: UOp, r: UOp, amount: int, lane_id: int) -> UOp:
    """Each REDUCE over r becomes REDUCE(REDUCE(x, ..., outer), lane): lane i sums the elements i, i+amount, ... in its
    own accumulator (the lanes, an UNROLL range, are expanded into the terms of the outer reduce: one vector)."""
    outer = UOp.range(r.src[0].arg // amount, r.arg[0], AxisType.REDUCE)
    lane = UOp.range(amount, lane_id, AxisType.UNROLL)
    ast = split_range(ast, r, outer, lane, amount)
    nest = {u: UOp(Ops.REDUCE, u.dtype, (u.replace(src=tuple(s for s in u.src if s is not lane)), lane), u.arg)
            for u in ast.toposort() if u.op is Ops.REDUCE and lane in u.src[1:]}
    return ast.substitute(nest)


EXPANDED_KINDS = (AxisType.UPCAST, AxisType.UNROLL)
MAX_PANEL_BYTES = 512 * 1024  # a packed panel stays well inside L2 (and the stack of an OpenMP thread)
PACK_GATHER_LANES = 8  # a panel axis whose source is strided (a transposed B) is copied this many lanes at a time


def _contiguous_in(v: UOp, x: UOp) -> bool:
    """Whether every buffer load of value v moves along range x by at most one element per step (affinely): a
    vector of x's lanes is then whole vectors of memory. Along any other stride the lanes are scalar loads each."""
    for u in v.toposort():
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and x in u.src[0].src[1].toposort():
            terms, _ = linear_terms(u.src[0].src[1].simplify())
            if any(base is not x and x in base.toposort() for base, _ in terms) or \
                    abs(sum(m for base, m in terms if base is x)) > 1:
                return False
    return True


def pack_panels(ast: UOp, r: UOp) -> UOp:
    """Every value a reduce inside the loop of output range r computes without r (the panel r's iterations reuse:
    B of a matmul whose rows r walks, with whatever elementwise math was fused into it) is computed once per
    iteration of the loops outside r, into a thread-local buffer (DEFINE_LOCAL) laid out by the ranges inside r,
    upcast and unrolled ones innermost; the reduce reads the panel. A copy loop nest (fresh ranges, `LOOP` and
    `UPCAST`) fills it; the reads depend on its END, so it runs first."""
    order = range_order(r)
    deps: dict[UOp, frozenset[UOp]] = {}
    has_reduce: dict[UOp, bool] = {}
    for u in ast.toposort():
        deps[u] = frozenset({u} if u.op is Ops.RANGE else ()).union(*(deps[s] for s in u.src))
        has_reduce[u] = u.op is Ops.REDUCE or any(has_reduce[s] for s in u.src)

    def panel_of(u: UOp) -> list[UOp] | None:
        inner = [x for x in deps[u] if range_order(x) > order]
        if r in deps[u] or not inner or has_reduce[u] or u.op in (Ops.CONST, Ops.RANGE) or \
                u.dtype.count > 1 or not dtypes.is_float(u.dtype) or any(range_size(x) is None for x in inner):
            return None
        return sorted(inner, key=lambda x: (x.arg[1] in EXPANDED_KINDS, range_order(x)))

    found: dict[UOp, list[UOp]] = {}

    def visit(u: UOp, seen: set[UOp]) -> None:
        if u in seen:
            return
        seen.add(u)
        if (panel := panel_of(u)) is not None:
            found[u] = panel
        else:
            for s in u.src:
                visit(s, seen)

    seen: set[UOp] = set()
    for red in [u for u in ast.toposort() if u.op is Ops.REDUCE]:
        visit(red.src[0], seen)
    if not found:
        raise KernelOptError(f"PACK: no value a reduce inside axis {r.arg[0]}'s loop computes is independent of it")
    ids = itertools.count(max(x.arg[0] for x in kernel_ranges(ast)) + 1)
    n_locals = itertools.count(sum(1 for u in ast.toposort() if u.op is Ops.DEFINE_LOCAL))
    mapping: dict[UOp, UOp] = {}
    total = 0
    for v, panel in found.items():
        size, strides = 1, {}
        for x in reversed(panel):
            strides[x], size = size, size * range_size(x)
        total += size * v.dtype.itemsize
        if total > MAX_PANEL_BYTES:
            raise KernelOptError(f"PACK: panels of {total} bytes are over {MAX_PANEL_BYTES}")
        # declared in the loop of the innermost outer range it depends on: private to a thread that runs that loop
        outer = tuple(sorted((x for x in deps[v] if range_order(x) < order), key=range_order))
        local = UOp(Ops.DEFINE_LOCAL, v.dtype.ptr(size, AddrSpace.LOCAL), outer, next(n_locals))
        fresh: dict[UOp, UOp] = {}
        copy_ranges: list[UOp] = []
        for x in panel:
            n = range_size(x)
            assert n is not None
            kind = AxisType.UPCAST if x.arg[1] in EXPANDED_KINDS else AxisType.LOOP
            if kind is AxisType.UPCAST and n > PACK_GATHER_LANES and n % PACK_GATHER_LANES == 0 and \
                    not _contiguous_in(v, x):
                # a strided axis: its lanes are scalar loads, assembled into vectors of PACK_GATHER_LANES in a loop
                loop = UOp.range(n // PACK_GATHER_LANES, next(ids), AxisType.LOOP)
                lanes = UOp.range(PACK_GATHER_LANES, next(ids), AxisType.UPCAST)
                fresh[x] = loop * PACK_GATHER_LANES + lanes
                copy_ranges += [loop, lanes]
            else:
                fresh[x] = UOp.range(n, next(ids), kind)
                copy_ranges.append(fresh[x])
        at = functools.reduce(lambda a, b: a + b, [x * strides[x] for x in panel])
        copy = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, at.substitute(fresh))),
                                             v.substitute(fresh)))
        filled = UOp(Ops.END, dtypes.void, (copy, *sorted(copy_ranges, key=range_order)))
        mapping[v] = UOp(Ops.LOAD, v.dtype, (UOp(Ops.INDEX, local.dtype, (local, at)), filled))
    return ast.substitute(mapping)


def reduce_identity(op: Ops, dtype: DType) -> int | float | bool:
    """The value a reduce starts from (and that padding adds)."""
    if op is Ops.ADD:
        return False if dtype == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dtype == dtypes.bool else 1
    if op is Ops.MAX:
        return -float("inf") if dtypes.is_float(dtype) else dtypes.min(dtype)
    raise NotImplementedError(f"reduce_identity: no identity for {op}")


def pad_range(ast: UOp, r: UOp, amount: int) -> UOp:
    """Range r of size n runs to the next multiple of `amount` (a tile then divides it: the remainder is the padded
    tile, no second loop): every address r moves is gated by r < n (a load there reads 0, a store is skipped), and
    a reduce over r adds its identity in the padded iterations."""
    n = range_size(r)
    assert n is not None
    new = UOp.range(-(-n // amount) * amount, r.arg[0], r.arg[1])
    valid = new < n
    ast = gate_loads(ast.substitute({r: new}), new, valid)
    return ast.substitute({u: u.replace(src=(valid.where(u.src[0], UOp.const(u.dtype, reduce_identity(u.arg, u.dtype))),
                                             *u.src[1:]))
                           for u in ast.toposort() if u.op is Ops.REDUCE and new in u.src[1:]})


def _thread(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    if r.arg[1] is not AxisType.GLOBAL or opt.amount < 1:
        raise KernelOptError(f"{opt}: THREAD needs a GLOBAL axis and amount >= 1, axis {opt.axis} is {r.arg[1]}")
    # the whole range is shared out across `amount` threads (the renderer splits it, remainders included)
    return ast.substitute({r: UOp.range(r.src[0], r.arg[0], AxisType.THREAD)})


def _swap(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    kind = r.arg[1]
    if not 0 <= opt.amount < len(rngs) or kind not in (AxisType.GLOBAL, AxisType.LOOP) or \
            rngs[opt.amount].arg[1] is not kind or opt.amount == opt.axis:
        raise KernelOptError(f"{opt}: SWAP needs two different output axes of one kind")
    o = rngs[opt.amount]  # their ids set the loop order: exchange them
    return ast.substitute({r: UOp.range(r.src[0], o.arg[0], kind), o: UOp.range(o.src[0], r.arg[0], kind)})


def _pack(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    if r.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD):
        raise KernelOptError(f"{opt}: PACK needs an output axis, axis {opt.axis} is {r.arg[1]}")
    return pack_panels(ast, r)


def _padto(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    size = range_size(r)
    if r.arg[1] not in (AxisType.GLOBAL, AxisType.REDUCE) or size is None or opt.amount < 2 or size % opt.amount == 0:
        raise KernelOptError(f"{opt}: PADTO needs a GLOBAL or REDUCE axis whose size {size} the amount does not "
                             "divide")
    return pad_range(ast, r, opt.amount)


def _partial(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    size = range_size(r)
    if r.arg[1] is not AxisType.REDUCE or size is None or opt.amount < 2 or size % opt.amount:
        raise KernelOptError(f"{opt}: PARTIAL needs a REDUCE axis whose size {size} the amount divides")
    return partial_reduce(ast, r, opt.amount, max(x.arg[0] for x in rngs) + 1)


def _upcast_or_unroll(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    size, kind = range_size(r), r.arg[1]
    want = (AxisType.GLOBAL, AxisType.LOOP) if opt.op is OptOps.UPCAST else (AxisType.REDUCE,)
    if kind not in want:
        raise KernelOptError(f"{opt}: {opt.op.name} needs an axis of kind {[k.name for k in want]}, got {kind.name}")
    # (a loop whose size depends on other ranges unrolls where the amount divides it at every point of them)
    if opt.amount < 2 or (size is None and opt.op is OptOps.UPCAST) or divided_size(r, opt.amount) is None:
        raise KernelOptError(f"{opt}: amount {opt.amount} must be >= 2 and divide the axis size "
                             f"{'(a loop bound)' if size is None else size}")
    bounds = r in bounding_ranges(ast)
    ast = split_off(ast, r, rngs, opt.amount, AxisType.UPCAST if opt.op is OptOps.UPCAST else AxisType.UNROLL)
    if bounds:
        lane = next(x for x in kernel_ranges(ast) if x.arg[1] in EXPANDED_KINDS and x.arg[0] not in
                    {y.arg[0] for y in rngs if y.arg[1] in EXPANDED_KINDS})
        ast = widen_loop_bounds(ast, lane)
    return ast


def widen_loop_bounds(ast: UOp, lane: UOp) -> UOp:
    """Each loop whose size depends on the lanes of an upcast (or unroll) gets the largest of its sizes over them: one
    loop for all lanes. Correct because such a loop's body masks the iterations past its bound
    (ember.schedule.attention: the causal mask stays under the bounded reduce); the size must be linear in the lane."""
    new: dict[UOp, UOp] = {}
    for x in kernel_ranges(ast):
        if x.src[0].op is Ops.CONST or lane not in (size := x.src[0]).toposort():
            continue
        terms, _ = linear_terms(size.simplify())
        if any(b is not lane and lane in b.toposort() for b, _ in terms):
            raise KernelOptError(f"the size of loop {x.arg[0]} is not linear in the lanes of axis {lane.arg[0]}")
        coeff = sum(m for b, m in terms if b is lane)
        at = UOp.const(dtypes.index, lane.src[0].arg - 1 if coeff > 0 else 0)
        new[x] = x.replace(src=(size.substitute({lane: at}).simplify(),))
    return ast.substitute(new) if new else ast


def split_off(ast: UOp, r: UOp, rngs: list[UOp], amount: int, kind: AxisType) -> UOp:
    """The inner `amount` iterations of range r (amount divides its size, `divided_size`) as a new range of `kind`,
    the outer ones keep r's id and kind; the whole axis (amount == size) only changes kind."""
    size, outer_size = range_size(r), divided_size(r, amount)
    assert outer_size is not None, f"split_off: {amount} does not divide the size of axis {r.arg[0]}"
    if amount == size:
        return ast.substitute({r: UOp.range(size, r.arg[0], kind)})
    outer = UOp(Ops.RANGE, dtypes.index, (outer_size,), r.arg)
    return split_range(ast, r, outer, UOp.range(amount, max(x.arg[0] for x in rngs) + 1, kind), amount)


def _local(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    size = range_size(r)
    if r.arg[1] is not AxisType.GLOBAL or size is None or opt.amount < 2 or size % opt.amount:
        raise KernelOptError(f"{opt}: LOCAL needs a GLOBAL axis whose size {size} the amount (>= 2) divides, axis "
                             f"{opt.axis} is {r.arg[1].name}")
    # the inner part on the threads: neighbouring threads take neighbouring elements (coalesced accesses)
    return split_off(ast, r, rngs, opt.amount, AxisType.LOCAL)


def nested_reduce(ast: UOp) -> bool:
    """Whether a REDUCE sits in the loop of another (its value uses the outer one's ranges): its shared-memory partial
    sums would be rewritten while other threads still read them."""
    for red in (u for u in ast.toposort() if u.op is Ops.REDUCE):
        outer = set(red.src[1:])
        if any(u.op is Ops.REDUCE and u is not red and outer & set(u.toposort()) for u in red.src[0].toposort()):
            return True
    return False


def _group(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    size = range_size(r)
    if r.arg[1] is not AxisType.REDUCE or size is None or opt.amount < 2 or size % opt.amount:
        raise KernelOptError(f"{opt}: {opt.op.name} needs a REDUCE axis whose size {size} the amount (>= 2) divides, "
                             f"axis {opt.axis} is {r.arg[1].name}")
    if nested_reduce(ast):
        raise KernelOptError(f"{opt}: {opt.op.name} does not apply to a kernel with a reduce inside another's loop")
    if opt.op is OptOps.GROUP or opt.amount == size:
        # element loop * amount + thread: each step reads one contiguous run across the threads
        return split_off(ast, r, rngs, opt.amount, AxisType.GROUP_REDUCE)
    # thread * chunk + element: one contiguous chunk per thread
    threads = UOp.range(opt.amount, max(x.arg[0] for x in rngs) + 1, AxisType.GROUP_REDUCE)
    return split_range(ast, r, threads, UOp.range(size // opt.amount, r.arg[0], AxisType.REDUCE), size // opt.amount)


def _tc_source(v: UOp, tc: TensorCore) -> UOp | None:
    """The dtype_in value a matmul operand is (itself, or what a CAST of it widens), else None."""
    if v.dtype == tc.dtype_in:
        return v
    return v.src[0] if v.op is Ops.CAST and v.src[0].dtype == tc.dtype_in else None


def _tc(ast: UOp, opt: Opt, rngs: list[UOp], r: UOp) -> UOp:
    """The matmul over reduce axis r on a tensor core: out[m, n] = sum_k x[m, k] * y[k, n] (x, y of the core's input
    dtype, or casts of such) becomes tiles: m = m' * tm + ., n = n' * tn + ., k = k' * tk + ., and per tile one WMMA of
    the lanes (a WARP range) over the fragments each lane loads by the core's layout, summed over k' in a vector
    accumulator; each lane stores its elements of the D tile."""
    if not 0 <= opt.amount < len(TENSOR_CORES):
        raise KernelOptError(f"{opt}: TC amount picks a tensor core 0..{len(TENSOR_CORES) - 1}")
    tc = TENSOR_CORES[opt.amount]
    tm, tn, tk = tc.dims
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].src[1:] != (r,) or reduces[0].arg is not Ops.ADD or \
            reduces[0].src[0].op is not Ops.MUL:
        raise KernelOptError(f"{opt}: TC needs a kernel whose one reduce is a sum over axis {opt.axis} of products")
    red = reduces[0]
    x, y = (_tc_source(v, tc) for v in red.src[0].src)
    if x is None or y is None:
        raise KernelOptError(f"{opt}: TC {tc.name} multiplies {tc.dtype_in.name} values, the products are of "
                             f"{[v.dtype.name for v in red.src[0].src]}")
    if red.dtype not in (tc.dtype_out, tc.dtype_in):
        raise KernelOptError(f"{opt}: TC {tc.name} sums in {tc.dtype_out.name}, the reduce is {red.dtype.name}")
    in_x, in_y = set(x.toposort()), set(y.toposort())
    outputs = [o for o in rngs if o.arg[1] is AxisType.GLOBAL and range_size(o) is not None]
    ms = [o for o in outputs if o in in_x and o not in in_y and range_size(o) % tm == 0]
    ns = [o for o in outputs if o in in_y and o not in in_x and range_size(o) % tn == 0]
    if not ms or not ns or (range_size(r) or 0) % tk or r.arg[1] is not AxisType.REDUCE:
        raise KernelOptError(f"{opt}: TC {tc.name} needs output axes of the two operands divisible by {tm} and {tn} "
                             f"and a reduce axis divisible by {tk}")
    m, n = ms[-1], ns[-1]
    mo = UOp.range(range_size(m) // tm, m.arg[0], AxisType.GLOBAL)
    no = UOp.range(range_size(n) // tn, n.arg[0], AxisType.GLOBAL)
    ko = UOp.range(range_size(r) // tk, r.arg[0], AxisType.REDUCE)
    lane = UOp.range(tc.threads, max(u.arg[0] for u in rngs) + 1, AxisType.WARP)

    def fragment(v: UOp, at: Layout, count: int, rows: tuple[UOp, UOp, int], cols: tuple[UOp, UOp, int]) -> UOp:
        parts = []
        for e in range(count):
            i, j = at(lane, e)
            parts.append(v.substitute({rows[0]: rows[1] * rows[2] + i, cols[0]: cols[1] * cols[2] + j}))
        return UOp(Ops.VECTORIZE, tc.dtype_in.vec(count), tuple(parts))

    acc = tc.dtype_out.vec(tc.elements[2])
    a = fragment(x, tc.a_at, tc.elements[0], (m, mo, tm), (r, ko, tk))
    b = fragment(y, tc.b_at, tc.elements[1], (r, ko, tk), (n, no, tn))
    wmma = UOp(Ops.WMMA, acc, (a, b, UOp(Ops.CONST, acc, (), 0.0)), tc.name)
    tile = UOp(Ops.REDUCE, acc, (wmma, ko), Ops.ADD)
    ends = {}
    for end in (u for u in ast.toposort() if u.op is Ops.END and red in u.src[0].toposort()):
        stores = []
        for e in range(tc.elements[2]):
            i, j = tc.c_at(lane, e)
            value = UOp(Ops.GEP, tc.dtype_out, (tile,), e)
            stores.append(end.src[0].substitute({red: value if red.dtype == tc.dtype_out else value.cast(red.dtype),
                                                 m: mo * tm + i, n: no * tn + j}))
        kept = tuple(mo if s is m else no if s is n else s for s in end.src[1:])
        ends[end] = UOp(Ops.END, dtypes.void, (UOp(Ops.NOOP, dtypes.void, tuple(stores)), *kept, lane))
    return ast.substitute(ends)


# the opts that only a target with workgroups (Renderer.has_local) can run
GPU_OPTS = frozenset({OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC})

# each OptOps' application: (kernel, opt, the kernel's ranges, the opt's range) -> the new kernel
APPLY_OPT: dict[OptOps, Callable[[UOp, Opt, list[UOp], UOp], UOp]] = {
    OptOps.UPCAST: _upcast_or_unroll, OptOps.UNROLL: _upcast_or_unroll, OptOps.PARTIAL: _partial,
    OptOps.THREAD: _thread, OptOps.PADTO: _padto, OptOps.SWAP: _swap, OptOps.PACK: _pack, OptOps.LOCAL: _local,
    OptOps.GROUP: _group, OptOps.GROUPTOP: _group, OptOps.TC: _tc}


# opts that split an axis into workgroup threads or pad it: no loop's bound may depend on it (UPCAST and UNROLL may:
# the loop is widened to the bound of the last lane, widen_loop_bounds)
LANE_OPTS = frozenset({OptOps.PADTO, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC, OptOps.PARTIAL})


def bounding_ranges(ast: UOp) -> frozenset[UOp]:
    """The ranges that another range's size depends on (a causal reduce over keys j < i + 1: the query range i)."""
    return frozenset(x for r in kernel_ranges(ast) if r.src[0].op is not Ops.CONST
                     for x in r.src[0].toposort() if x.op is Ops.RANGE)


def online_maxes(red: UOp) -> list[UOp]:
    """The float maxes over exactly the ranges of sum `red` that its value reads: an online softmax's running max."""
    if red.arg is not Ops.ADD or not dtypes.is_float(red.dtype):
        return []
    rngs = set(red.src[1:])
    return [u for u in red.src[0].toposort() if u.op is Ops.REDUCE and u.arg is Ops.MAX and set(u.src[1:]) == rngs]


@functools.lru_cache(maxsize=256)  # (asked once per opt the heuristic tries)
def online_ranges(ast: UOp) -> frozenset[UOp]:
    """The ranges of online softmaxes (lower.py): one loop for the running max and the sums, never split in lanes."""
    return frozenset(r for u in ast.toposort() if u.op is Ops.REDUCE and online_maxes(u) for r in u.src[1:])


# opts that make several partial reduces of one range: an online softmax's running max and sums cannot be split (an
# UNROLL can: its copies fold into one running max per iteration, then the sums rescale once and add them, lower.py)
SPLIT_REDUCE_OPTS = frozenset({OptOps.PARTIAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC})


def apply_opt(ast: UOp, opt: Opt) -> UOp:
    """The kernel with one Opt applied (KernelOptError if it does not apply)."""
    rngs = kernel_ranges(ast)
    if not 0 <= opt.axis < len(rngs):
        raise KernelOptError(f"{opt}: axis {opt.axis} out of range, the kernel has {len(rngs)} axes")
    if (apply := APPLY_OPT.get(opt.op)) is None:
        raise KernelOptError(f"{opt}: {opt.op.name} is not supported on this target")
    if opt.op in LANE_OPTS and rngs[opt.axis] in bounding_ranges(ast):
        raise KernelOptError(f"{opt}: the size of another loop depends on axis {opt.axis}: it cannot be split into "
                             "lanes or padded")
    if opt.op in SPLIT_REDUCE_OPTS and rngs[opt.axis] in online_ranges(ast):
        raise KernelOptError(f"{opt}: axis {opt.axis} is the loop of an online softmax: it runs whole")
    return apply(ast, opt, rngs, rngs[opt.axis])


def apply_opts(ast: UOp, opts: list[Opt]) -> UOp:
    for opt in opts:
        ast = apply_opt(ast, opt)
    return ast
