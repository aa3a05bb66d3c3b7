"""Optimizations on a kernel AST: `Opt`s split and re-kind its RANGEs; `hand_coded_opts` picks them without search."""

from __future__ import annotations

import functools
import itertools

from ember.codegen.program import Opt, OptOps
from ember.codegen.renderer import Renderer
from ember.uops import AddrSpace, AxisType, DType, Ops, UOp, dtypes, gate_loads, linear_terms


class KernelOptError(ValueError):
    """An Opt that does not apply to the kernel (bad axis, amount that does not divide, wrong axis kind)."""


_KIND_ORDER = {AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOCAL: 2, AxisType.LOOP: 3, AxisType.UPCAST: 4,
               AxisType.GROUP_REDUCE: 5, AxisType.REDUCE: 6, AxisType.UNROLL: 7}
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
        fresh = {x: UOp.range(range_size(x), next(ids), AxisType.UPCAST if x.arg[1] in EXPANDED_KINDS else
                              AxisType.LOOP) for x in panel}
        at = functools.reduce(lambda a, b: a + b, [x * strides[x] for x in panel])
        copy = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, at.substitute(fresh))),
                                             v.substitute(fresh)))
        filled = UOp(Ops.END, dtypes.void, (copy, *sorted(fresh.values(), key=range_order)))
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


def apply_opt(ast: UOp, opt: Opt) -> UOp:
    """The kernel with one Opt applied (KernelOptError if it does not apply)."""
    rngs = kernel_ranges(ast)
    if not 0 <= opt.axis < len(rngs):
        raise KernelOptError(f"{opt}: axis {opt.axis} out of range, the kernel has {len(rngs)} axes")
    r = rngs[opt.axis]
    size, kind = range_size(r), r.arg[1]
    if opt.op is OptOps.THREAD:
        if kind is not AxisType.GLOBAL or opt.amount < 1:
            raise KernelOptError(f"{opt}: THREAD needs a GLOBAL axis and amount >= 1, axis {opt.axis} is {kind}")
        # the whole range is shared out across `amount` threads (the renderer splits it, remainders included)
        return ast.substitute({r: UOp.range(r.src[0], r.arg[0], AxisType.THREAD)})
    if opt.op is OptOps.SWAP:
        if not 0 <= opt.amount < len(rngs) or kind not in (AxisType.GLOBAL, AxisType.LOOP) or \
                rngs[opt.amount].arg[1] is not kind or opt.amount == opt.axis:
            raise KernelOptError(f"{opt}: SWAP needs two different output axes of one kind")
        o = rngs[opt.amount]  # their ids set the loop order: exchange them
        return ast.substitute({r: UOp.range(r.src[0], o.arg[0], kind), o: UOp.range(o.src[0], r.arg[0], kind)})
    if opt.op is OptOps.PACK:
        if kind not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD):
            raise KernelOptError(f"{opt}: PACK needs an output axis, axis {opt.axis} is {kind}")
        return pack_panels(ast, r)
    if opt.op is OptOps.PADTO:
        if kind not in (AxisType.GLOBAL, AxisType.REDUCE) or size is None or opt.amount < 2 or size % opt.amount == 0:
            raise KernelOptError(f"{opt}: PADTO needs a GLOBAL or REDUCE axis whose size {size} the amount does not "
                                 "divide")
        return pad_range(ast, r, opt.amount)
    if opt.op is OptOps.PARTIAL:
        if kind is not AxisType.REDUCE or size is None or opt.amount < 2 or size % opt.amount:
            raise KernelOptError(f"{opt}: PARTIAL needs a REDUCE axis whose size {size} the amount divides")
        return partial_reduce(ast, r, opt.amount, max(x.arg[0] for x in rngs) + 1)
    if opt.op not in (OptOps.UPCAST, OptOps.UNROLL):
        raise KernelOptError(f"{opt}: {opt.op.name} is not supported on this target")
    want = (AxisType.GLOBAL, AxisType.LOOP) if opt.op is OptOps.UPCAST else (AxisType.REDUCE,)
    if kind not in want:
        raise KernelOptError(f"{opt}: {opt.op.name} needs an axis of kind {[k.name for k in want]}, got {kind.name}")
    if size is None or opt.amount < 2 or size % opt.amount:
        raise KernelOptError(f"{opt}: amount {opt.amount} must be >= 2 and divide the axis size {size}")
    new_kind = AxisType.UPCAST if opt.op is OptOps.UPCAST else AxisType.UNROLL
    if opt.amount == size:  # the whole axis: no split, only the kind changes
        return ast.substitute({r: UOp.range(size, r.arg[0], new_kind)})
    outer = UOp.range(size // opt.amount, r.arg[0], kind)
    inner = UOp.range(opt.amount, max(x.arg[0] for x in rngs) + 1, new_kind)
    return split_range(ast, r, outer, inner, opt.amount)


def apply_opts(ast: UOp, opts: list[Opt]) -> UOp:
    for opt in opts:
        ast = apply_opt(ast, opt)
    return ast


def access_strides(idx: UOp) -> dict[UOp, int | None]:
    """The RANGEs an index depends on: each one's coefficient where the index is affine in it, else None."""
    terms, _ = linear_terms(idx.simplify())
    ret: dict[UOp, int | None] = {}
    for base, m in terms:
        if base.op is Ops.RANGE:
            ret[base] = (ret.get(base) or 0) + m if ret.get(base, 0) is not None else None
        else:
            for r in base.toposort():
                if r.op is Ops.RANGE:
                    ret[r] = None
    return ret


def _accesses(ast: UOp) -> tuple[list[dict[UOp, int | None]], list[dict[UOp, int | None]]]:
    """The strides of each buffer load and each buffer store of a kernel."""
    loads, stores = [], []
    for u in ast.toposort():
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM:
            (loads if u.op is Ops.LOAD else stores).append(access_strides(u.src[0].src[1]))
    return loads, stores


def _divisor(size: int | None, amounts: tuple[int, ...]) -> int | None:
    return next((a for a in amounts if a >= 2 and size is not None and size % a == 0 and size >= a), None)


L1_PANEL_BYTES = 64 * 1024  # a packed panel up to this size is read from L1 (or close) by each row tile


def _worth_packing(ast: UOp, ld: dict[UOp, int | None], other: UOp, j: UOp, j_amt: int, i_amt: int,
                   renderer: Renderer) -> bool:
    """Whether a matmul's B load (strides `ld`) is worth packing under a j_amt x i_amt tile: the panel (the reduce
    ranges and the tile's columns) fits MAX_PANEL_BYTES, the rows reuse it at least 4 times, and the outermost loop
    left outside the rows still has 4 iterations to share across threads."""
    size_of = {r: range_size(r) for r in kernel_ranges(ast)}
    panel = j_amt
    for r in ld:
        if r.arg[1] is AxisType.REDUCE:
            if size_of.get(r) is None:
                return False
            panel *= size_of[r]
    reuse = (size_of[other] or 0) // i_amt
    outer = [r for r in kernel_ranges(ast) if r.arg[1] is AxisType.GLOBAL and r is not other]
    first = (size_of[outer[0]] or 0) // (j_amt if outer[0] is j else 1) if outer else 0
    # (the same choice for any thread count: results must not depend on it)
    return panel * 4 <= MAX_PANEL_BYTES and reuse >= 4 and not (renderer.has_threads and outer and first < 4)


# a matmul operand re-read once per column panel, row by row far apart (x^T's columns, an attention's p^T), should
# be small: past this, streaming it once into panels wins (the strided rows defeat the prefetcher)
REREAD_BYTES = 1 << 18


def _tile_axis(loads: list[dict[UOp, int | None]], outputs: list[UOp], reduces: list[UOp], store_axis: UOp,
               vec: int) -> UOp:
    """The output axis of a matmul-like kernel that its register tile vectorizes: the store's contiguous axis, unless
    the operand re-read for each of its panels (the load the other output axis moves) is over REREAD_BYTES and another
    output axis, contiguous in some load, leaves a smaller one to re-read (a weight gradient dW = x^T g with g much
    wider than x: g is streamed once into panels and x re-read from cache; GQA's dV = p^T dO: p streamed; the stores
    go lane by lane)."""
    def reread(j: UOp) -> int | None:
        """Bytes per outer iteration of what the rows re-read when j is the tile axis (None: j is no tile axis)."""
        best = None
        for ld in loads:
            if ld.get(j) != 1 or not any(r in ld for r in reduces) or (range_size(j) or 0) % vec:
                continue
            others = [r for r in outputs if r is not j and r not in ld]
            if not others:
                continue
            total = 0
            for other in [ld2 for ld2 in loads if others[-1] in ld2 and any(r in ld2 for r in reduces)]:
                n = 4
                for r in other:
                    n *= (range_size(r) or 1) if r in reduces or r is others[-1] else 1
                total = max(total, n)
            best = total if best is None else min(best, total)
        return best

    here = reread(store_axis)
    if here is None or here <= REREAD_BYTES:
        return store_axis
    alts = [(n, r) for r in outputs if r is not store_axis and (n := reread(r)) is not None and n < here]
    return min(alts, key=lambda a: a[0])[1] if alts else store_axis


def _remainder_pads(ast: UOp, renderer: Renderer) -> list[Opt]:
    """PADTO for a matmul-like kernel whose sizes the register tile does not divide (1000 x 1000): the store's
    contiguous axis to a multiple of two vectors, the rows to a multiple of 8, where that wastes at most a quarter."""
    vec = max(renderer.max_vector, 1)
    rngs = kernel_ranges(ast)
    loads, stores = _accesses(ast)
    outputs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    reduces = [r for r in rngs if r.arg[1] is AxisType.REDUCE]
    if vec < 2 or not reduces or len(stores) != 1:
        return []
    j = next((r for r in reversed(outputs) if stores[0].get(r) == 1), None)
    inside = [ld for ld in loads if j in ld and any(r in ld for r in reduces)]
    others = [r for r in outputs if r is not j and any(r not in ld for ld in inside)]
    if j is None or not inside or not others:
        return []
    pads = []
    for r, amt in ((j, 2 * vec), (others[-1], 8)):
        size = range_size(r) or 0
        if size % amt and (size % vec if r is j else True) and size >= 4 * amt:
            pads.append(Opt(OptOps.PADTO, rngs.index(r), amt))
    return pads


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Opts without search (see `_hand_coded`); a matmul-like kernel whose sizes its register tile does not divide
    is first padded to sizes it does (PADTO: the padded rows and columns are gated off), when that gets it the
    packed microkernel."""
    opts = _hand_coded(ast, renderer)
    if OptOps.PACK in [o.op for o in opts] or not (pads := _remainder_pads(ast, renderer)):
        return opts
    tiled = _hand_coded(apply_opts(ast, pads), renderer)
    return pads + tiled if OptOps.PACK in [o.op for o in tiled] else opts


def _hand_coded(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Opts without search, for a CPU with vectors of `renderer.max_vector` floats:
    - matmul-like (an output axis contiguous in the store and in a load that another output axis does not move):
      a register tile, UPCAST of that axis by two vectors and of the other axis by 8, one vector FMA per pair;
    - reduces over a contiguous axis (x @ W.T, row sums): PARTIAL sums one vector wide, and UPCAST by 4 of up to two
      output axes that a load of the reduce does not move (x @ W.T: rows and columns), so that several vector
      accumulators share their loads;
    - otherwise: UPCAST the contiguous output axis by a vector, UNROLL a small innermost reduce.
    Then THREAD shares the outermost output axis across the cores when the kernel is big enough to pay for it.
    Amounts always divide the axis sizes; a size they cannot divide gets a smaller tile or none (or PADTO first)."""
    opts: list[Opt] = []

    def add(opt: Opt) -> None:
        nonlocal ast
        ast = apply_opt(ast, opt)
        opts.append(opt)

    def axis(r: UOp) -> int:
        return kernel_ranges(ast).index(r)

    rngs = kernel_ranges(ast)
    work = 1
    for r in rngs:
        work *= range_size(r) or 1
    vec = max(renderer.max_vector, 1)
    loads, stores = _accesses(ast)
    outputs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    reduces = [r for r in rngs if r.arg[1] is AxisType.REDUCE and range_size(r) is not None]
    store = stores[0] if len(stores) == 1 else {}
    contiguous_out = next((r for r in reversed(outputs) if store.get(r) == 1), None)
    tiled = False
    # only a product of two loads may trade its tile axis: an operand with math fused in would be recomputed per panel
    plain = all(u.src[0].op is Ops.MUL and all(s.op is Ops.LOAD for s in u.src[0].src)
                for u in ast.toposort() if u.op is Ops.REDUCE)
    tile_axis = contiguous_out if contiguous_out is None or not plain else \
        _tile_axis(loads, outputs, reduces, contiguous_out, vec)
    if reduces and tile_axis is not None and vec > 1:
        # matmul-like: a load inside the reduce that the contiguous output axis moves and another output axis does
        # not (B of a matmul, reused across the rows of A): a register tile of that axis by two vectors and the other
        # by 8, and the load packed into a panel (contiguous along the tile) when it fits; a load that is not
        # contiguous along the axis (x @ W.T, or not even affine in it: RoPE's pairs) is only tiled so, packed
        inside = [ld for ld in loads if any(r in ld for r in reduces) and tile_axis in ld]
        j_amt = _divisor(range_size(tile_axis), (2 * vec, vec))
        for ld in sorted(inside, key=lambda ld: (ld[tile_axis] != 1, all(r in ld for r in outputs))) \
                if j_amt is not None else []:
            others = [r for r in outputs if r is not tile_axis and r not in ld]
            other = others[-1] if others else None
            # 16 rows when their A values are consecutive in memory (a weight gradient's x[t, i:i+16]: one cache line
            # per reduce step) and the panel is past L1 (half the passes over it from L2); else 8
            rows_a = [a for a in loads if other is not None and other in a and any(r in a for r in reduces)]
            k = 1
            for r in (r for r in reduces if r in ld):
                k *= range_size(r) or 1
            wide_rows = rows_a and all(a[other] == 1 for a in rows_a) and k * j_amt * 4 > L1_PANEL_BYTES
            i_amts = (16, 8, 4, 2) if wide_rows else (8, 4, 2)
            i_amt = _divisor(range_size(other), i_amts) if other is not None else None
            pack = i_amt is not None and _worth_packing(ast, ld, other, tile_axis, j_amt, i_amt, renderer)
            if not pack and ld[tile_axis] != 1:
                continue
            add(Opt(OptOps.UPCAST, axis(tile_axis), j_amt))
            if other is not None and i_amt is not None:
                add(Opt(OptOps.UPCAST, axis(other), i_amt))
            if pack:  # the panel's outer axes before the rows, then the panel filled before their loop
                trial, steps = ast, []
                o = next(r for r in kernel_ranges(trial) if r.arg[0] == other.arg[0])
                for g in [r for r in kernel_ranges(trial) if r.arg[1] is AxisType.GLOBAL and r.arg[0] > o.arg[0]]:
                    rs = kernel_ranges(trial)
                    steps.append(Opt(OptOps.SWAP, rs.index(o), rs.index(g)))
                    trial = apply_opt(trial, steps[-1])
                    o = next(r for r in kernel_ranges(trial) if r.arg[0] == g.arg[0])
                steps.append(Opt(OptOps.PACK, kernel_ranges(trial).index(o), 0))
                try:
                    trial = apply_opt(trial, steps[-1])
                except KernelOptError:  # (its panels do not fit: keep the tile as it is)
                    pass
                else:
                    ast = trial
                    opts.extend(steps)
            tiled = True
            break
    if not tiled and reduces and vec > 1:
        k = reduces[-1]
        if all(ld.get(k, 0) in (0, 1) for ld in loads) and any(ld.get(k) == 1 for ld in loads) and \
                (range_size(k) or 0) >= 2 * vec and (range_size(k) or 0) % vec == 0:
            # a reduce along contiguous memory: one vector of partial sums; up to two output axes by 4 for more of them
            add(Opt(OptOps.PARTIAL, axis(k), vec))
            inside = [ld for ld in loads if k in ld]
            for r in [r for r in reversed(outputs) if any(r not in ld for ld in inside)][:2]:
                # only axes some load of the reduce does not move: its vector is loaded once for the whole tile
                if (amt := _divisor(range_size(r), (4, 2))) is not None:
                    add(Opt(OptOps.UPCAST, axis(r), amt))
            tiled = True
    if not tiled:
        if contiguous_out is not None and (amt := _divisor(range_size(contiguous_out), (vec, 8, 4, 2))) is not None:
            add(Opt(OptOps.UPCAST, axis(contiguous_out), amt))
        # unroll the innermost reduce axis: fully when small, else by 4 or 2
        rngs = kernel_ranges(ast)
        red = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.REDUCE]
        if red and (size := range_size(rngs[red[-1]])) is not None and size >= 2:
            if (amt := size if size <= 8 else next((a for a in (4, 2) if size % a == 0), None)) is not None:
                add(Opt(OptOps.UNROLL, red[-1], amt))
    rngs = kernel_ranges(ast)
    outs = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.GLOBAL]
    if renderer.has_threads and renderer.max_threads > 1 and outs and work >= 32768 and \
            (range_size(rngs[outs[0]]) or 0) >= 2:
        add(Opt(OptOps.THREAD, outs[0], renderer.max_threads))
    return opts
