"""The hand-coded heuristic: the `Opt`s a kernel gets without search (`hand_coded_opts`), chosen from the strides of
its accesses and the renderer's capabilities. What each Opt does is opt.py's."""

from __future__ import annotations

from ember.codegen.gpudims import sequential
from ember.codegen.opt import (
    MAX_PANEL_BYTES,
    KernelOptError,
    apply_opt,
    apply_opts,
    bounding_ranges,
    divided_size,
    kernel_ranges,
    nested_reduce,
    online_ranges,
    range_order,
    range_size,
)
from ember.codegen.program import Opt, OptOps
from ember.codegen.renderer import Renderer
from ember.codegen.tc import TENSOR_CORES
from ember.uops import AxisType, Ops, UOp, linear_terms, settings


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


def _indexes(ast: UOp) -> tuple[list[UOp], list[UOp]]:
    """The INDEX of each buffer load and each buffer store of a kernel."""
    loads, stores = [], []
    for u in ast.toposort():
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM:
            (loads if u.op is Ops.LOAD else stores).append(u.src[0])
    return loads, stores


def _accesses(ast: UOp) -> tuple[list[dict[UOp, int | None]], list[dict[UOp, int | None]]]:
    """The strides of each buffer load and each buffer store of a kernel."""
    loads, stores = _indexes(ast)
    return [access_strides(i.src[1]) for i in loads], [access_strides(i.src[1]) for i in stores]


SAMPLED_LANES = 4  # lanes of an axis on which a non-affine index is evaluated (each sample costs a few evaluations)


def _gathers(index: UOp, strides: dict[UOp, int | None], r: UOp) -> bool:
    """Whether an access (its INDEX and `access_strides`) moves along range r by more than one element per lane, so
    that a vector of r's lanes is a gather of scalars: by its stride where the index is affine in r, else measured
    on r's first lanes where its gate holds (RoPE's pairs: `r%2` and `r/2` over the pair axis), the other ranges at
    0 (at 1 where the gate held on fewer than two of them). An index that reads memory or a variable counts as a
    gather."""
    if r not in strides:
        return False
    if (stride := strides[r]) is not None:
        return abs(stride) > 1
    parts = index.src[1:]
    nodes = {u for p in parts for u in p.toposort()}
    if any(not u.src and u.op is not Ops.CONST for u in nodes):  # (a loaded value's PARAM, a DEFINE_VAR)
        return True
    ranges = [u for u in nodes if u.op is Ops.RANGE]
    for at in (0, 1):
        vals: dict[UOp, int] = {x: min(at, (range_size(x) or 1) - 1) for x in ranges}
        seen = []
        for lane in range(min(SAMPLED_LANES, range_size(r) or 0)):
            vals[r] = lane
            if len(parts) < 2 or parts[1].evaluate(vals):
                seen.append((lane, parts[0].evaluate(vals)))
        if any(abs(a2 - a1) > k2 - k1 for (k1, a1), (k2, a2) in zip(seen, seen[1:])):
            return True
        if len(seen) >= 2:  # (else its gate held on too few of these lanes to tell)
            return False
    return False


def _vector_axis(accesses: list[tuple[UOp, dict[UOp, int | None]]], outputs: list[UOp], store_axis: UOp,
                 vec: int) -> UOp:
    """The output axis an elementwise kernel vectorizes: the store's contiguous axis, unless its loads gather along
    it (a transpose: RoPE's backward writes (B, H, D, T) from (B, T, H*D)) and another output axis a vector divides
    has fewer accesses gathering along it (counting the store, which then writes its lanes one by one): each
    gathered vector is `vec` scalar loads, each with its own index math."""
    def gathers(r: UOp) -> int:
        return sum(_gathers(index, strides, r) for index, strides in accesses)
    here = gathers(store_axis)
    if here == 0:
        return store_axis
    alts = [(n, r) for r in reversed(outputs) if r is not store_axis and (range_size(r) or 0) % vec == 0 and
            (n := gathers(r)) < here]
    return min(alts, key=lambda a: a[0])[1] if alts else store_axis


def _divisor(size: int | None, amounts: tuple[int, ...]) -> int | None:
    return next((a for a in amounts if a >= 2 and size is not None and size % a == 0 and size >= a), None)


L1_PANEL_BYTES = 64 * 1024  # a packed panel up to this size is read from L1 (or close) by each row tile


def _worth_packing(ast: UOp, ld: dict[UOp, int | None], other: UOp, j: UOp, j_amt: int, i_amt: int,
                   renderer: Renderer, min_reuse: int = 4) -> bool:
    """Whether a matmul's B load (strides `ld`) is worth packing under a j_amt x i_amt tile: the panel (the reduce
    ranges and the tile's columns) fits MAX_PANEL_BYTES, the rows reuse it at least `min_reuse` times, and the
    outermost loop left outside the rows still has 4 iterations to share across threads."""
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
    return panel * 4 <= MAX_PANEL_BYTES and reuse >= min_reuse and not (renderer.has_threads and outer and first < 4)


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
    pads, bounding = [], bounding_ranges(ast)
    for r, amt in ((j, 2 * vec), (others[-1], 8)):
        size = range_size(r) or 0
        if size % amt and (size % vec if r is j else True) and size >= 4 * amt and r not in bounding:
            pads.append(Opt(OptOps.PADTO, rngs.index(r), amt))
    return pads


class Chosen:
    """The opts a heuristic picks, each applied to the kernel as it is picked (`kernel`: the kernel so far)."""

    def __init__(self, ast: UOp):
        self.kernel = ast
        self.opts: list[Opt] = []

    def add(self, opt: Opt) -> None:
        self.kernel = apply_opt(self.kernel, opt)
        self.opts.append(opt)

    def axis(self, r: UOp) -> int:
        """The opt axis of range r in the kernel so far."""
        return kernel_ranges(self.kernel).index(r)


# a kernel with fewer outputs than this cannot fill a GPU with one thread per output: its reduce is shared out
GROUP_BELOW_OUTPUTS = 2048
WORKGROUP_THREADS = 256  # threads a GPU heuristic puts in a workgroup, at most


# a GPU kernel with at least this many outputs gets a register tile per thread (matmul-like) or a vector of outputs
# (elementwise): fewer threads, each doing more, still fill the GPU
GPU_TILE_OUTPUTS = 1 << 16
GPU_VECTOR_OUTPUTS = 1 << 18


def _gpu_register_tile(chosen: Chosen, loads: list[dict[UOp, int | None]], outputs: list[UOp], reduces: list[UOp],
                       j: UOp, vec: int, budget: int) -> int:
    """A matmul-like kernel (a load in the reduce contiguous along the store's contiguous output axis j that another
    output axis i does not move: B of A @ B) gets a vec x 4 register tile: UPCAST j by a vector (B's values as one
    16-byte load, the store one vector), UPCAST i by 4 (each B vector used 4 times, each A value `vec` times), then
    16 x 16 threads (LOCAL j, then i: a 64 x 64 tile per workgroup, its loads shared through L1). The budget left."""
    inside = [ld for ld in loads if ld.get(j) == 1 and any(r in ld for r in reduces)]
    others = [r for r in outputs if r is not j and inside and r not in inside[0]]
    if not inside or not others or budget < 256:
        return budget
    i = others[-1]
    if (range_size(j) or 0) % (vec * 16) or (range_size(i) or 0) % (4 * 16):
        return budget
    # (i's threads first: the last LOCAL is the innermost thread axis, so a warp's lanes run along j, coalesced)
    for r, op, amount in ((j, OptOps.UPCAST, vec), (i, OptOps.UPCAST, 4), (i, OptOps.LOCAL, 16), (j, OptOps.LOCAL, 16)):
        # (each split leaves the axis under its id: a new UOp of a smaller size)
        now = next(x for x in kernel_ranges(chosen.kernel) if x.arg[0] == r.arg[0] and x.arg[1] is AxisType.GLOBAL)
        chosen.add(Opt(op, chosen.axis(now), amount))
    return budget // 256


def _tc_register_tiles(chosen: Chosen, loads: list[dict[UOp, int | None]], outputs: list[UOp],
                       reduces: list[UOp]) -> None:
    """After TC, a big matmul's warp computes 2 x 2 instruction tiles (UPCAST by 2 of the axis only A moves and of
    the one only B moves): each A fragment serves two instructions and each B fragment two, half the fragment loads
    per instruction."""
    work = 1
    for r in outputs:
        work *= range_size(r) or 1
    operands = [ld for ld in loads if any(r in ld for r in reduces)]
    if work < GPU_TILE_OUTPUTS or len(operands) != 2:
        return
    for r in outputs:
        if (r in operands[0]) == (r in operands[1]):  # (a batch axis: both move it; no reuse to gain)
            continue
        now = [x for x in kernel_ranges(chosen.kernel) if x.arg[0] == r.arg[0] and x.arg[1] is AxisType.GLOBAL]
        if now and (range_size(now[0]) or 0) % 2 == 0 and (range_size(now[0]) or 0) >= 4:
            chosen.add(Opt(OptOps.UPCAST, chosen.axis(now[0]), 2))


def gpu_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Opts without search for a target with workgroups (`renderer.has_local`):
    - a reduce with few outputs (a full sum, a norm's statistics) runs across the threads of a workgroup: GROUP of its
      innermost axis by up to 256 (consecutive threads read consecutive elements where a load is contiguous along
      it, else GROUPTOP: a contiguous chunk per thread);
    - a matmul-like kernel with many outputs: a register tile per thread and 16 x 16 threads (`_gpu_register_tile`);
      an elementwise one: UPCAST of the store's contiguous axis by a vector (16-byte loads and stores);
    - the output axes go on the threads of the workgroup, the store's contiguous axis first (coalesced stores), up to
      256 threads in all with the group."""
    chosen = Chosen(ast)
    add, axis = chosen.add, chosen.axis

    rngs = kernel_ranges(ast)
    if sequential(rngs):  # (one thread runs it: see gpudims.sequential)
        return []
    loads, stores = _accesses(ast)
    outputs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    reduces = [r for r in rngs if r.arg[1] is AxisType.REDUCE and range_size(r) is not None]
    budget = min(WORKGROUP_THREADS, renderer.max_workgroup_threads)
    # a matmul of the inputs a tensor core takes: its tiles on the core, the tile axes then on more warps
    if len(reduces) == 1 and settings.TC.value:
        for name in renderer.tensor_cores:
            index = next(i for i, tc in enumerate(TENSOR_CORES) if tc.name == name)
            try:
                add(Opt(OptOps.TC, axis(reduces[0]), index))
            except KernelOptError:
                continue
            budget //= TENSOR_CORES[index].threads
            _tc_register_tiles(chosen, loads, outputs, reduces)
            for r in reversed([r for r in kernel_ranges(chosen.kernel) if r.arg[1] is AxisType.GLOBAL and
                               r not in bounding_ranges(chosen.kernel)]):
                amount = _divisor(range_size(r), tuple(a for a in (4, 2) if a <= budget))
                if amount is not None:
                    add(Opt(OptOps.LOCAL, axis(r), amount))
                    budget //= amount
            return chosen.opts
    out_work = 1
    for r in outputs:
        out_work *= range_size(r) or 1
    store = stores[0] if len(stores) == 1 else {}
    bounding = bounding_ranges(ast)  # (a loop's size depends on them: not split across a workgroup)
    contiguous = [r for r in reversed(outputs) if store.get(r) == 1 and r not in bounding]
    vec = max(renderer.max_vector, 1)
    if reduces and out_work >= GPU_TILE_OUTPUTS and contiguous and not nested_reduce(chosen.kernel):
        budget = _gpu_register_tile(chosen, loads, [r for r in outputs if r not in bounding], reduces,
                                    contiguous[0], vec, budget)
    elif not reduces and contiguous and vec > 1 and out_work >= GPU_VECTOR_OUTPUTS and \
            (range_size(contiguous[0]) or 0) % vec == 0:
        add(Opt(OptOps.UPCAST, axis(contiguous[0]), vec))  # one 16-byte load and store per thread and buffer
    if reduces and out_work < GROUP_BELOW_OUTPUTS and not nested_reduce(chosen.kernel):
        # the innermost reduce axis that a workgroup of 8 or more threads divides, the most threads first
        amounts = tuple(a for a in (256, 128, 64, 32, 16, 8) if a <= budget)
        found = [(a, r) for r in reversed(reduces) if (a := _divisor(range_size(r), amounts)) is not None]
        if found:
            amount, r = max(found, key=lambda f: f[0])
            coalesced = any(ld.get(r) == 1 for ld in loads)
            add(Opt(OptOps.GROUP if coalesced else OptOps.GROUPTOP, axis(r), amount))
            budget //= amount
    # (the output axes as the opts so far left them: an upcast shrinks its axis, keeping its id)
    outputs = [r for r in kernel_ranges(chosen.kernel) if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    contiguous = [r for c in contiguous for r in outputs if r.arg[0] == c.arg[0]]
    for r in [r for r in contiguous + [r for r in reversed(outputs) if r not in contiguous] if r not in bounding]:
        amount = _divisor(range_size(r), tuple(a for a in (32, 16, 8, 4, 2) if a <= budget))
        if amount is not None:
            add(Opt(OptOps.LOCAL, axis(r), amount))
            budget //= amount
    return chosen.opts


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Opts without search (GPUs: `gpu_opts`; CPUs: `_hand_coded`); on a CPU a matmul-like kernel whose sizes its
    register tile does not divide is first padded to sizes it does (PADTO: the padded rows and columns are gated off),
    when that gets it the packed microkernel."""
    if renderer.has_local:
        return gpu_opts(ast, renderer)
    if nested_reduce(ast):
        return _nested_opts(ast, renderer)
    opts = _hand_coded(ast, renderer)
    if OptOps.PACK in [o.op for o in opts] or not (pads := _remainder_pads(ast, renderer)):
        return opts
    tiled = _hand_coded(apply_opts(ast, pads), renderer)
    return pads + tiled if OptOps.PACK in [o.op for o in tiled] else opts


# a reduce nested in another's loop keeps up to this many accumulators of the outer one (an attention's output row
# over head_dim) per lane of its block, so that the inner reduce runs once per outer iteration, not once per part of
# the row: with the unrolled loops below they are loaded and stored once per iteration, so more than the registers
# hold is cheaper than a second dot product per score (head_dim 128, T = 2048: the three attention kernels 1.8x
# faster than in halves of 64, tools/bench/RESULTS.md)
NESTED_MAX_ACCUMULATORS = 128
# ... and its loops over keys (over queries for dk) unrolled so that an iteration computes this many scores (4 keys
# for a block of 16 queries) where that divides the loop's bound (a causal loop's runs to a block's): the block's
# operand columns and the outputs' accumulators, more than the registers hold, are loaded once per iteration, not once
# per key. Then a block of a whole vector is best for every output and head_dim measured (tools/bench/RESULTS.md: the
# T = 1024 kernels 12-23% faster, dk with dv in blocks of 16 keys 21% faster than of 8; head_dim 128 ~3x)
NESTED_UNROLL_SCORES = 64
# ... and by at least one key per this many lanes of an output row (head_dim 128: 8 keys an iteration): a row's
# accumulators, 8 vectors per lane of the block there, are loaded and stored once per iteration (head_dim 128, T =
# 2048: the three kernels ~1.45x faster than with 4 keys; head_dim 64 keeps 4, faster there than 8)
NESTED_ROW_LANES_PER_KEY = 16


def _score_loops(ast: UOp) -> list[int]:
    """The axis ids of the loops that recompute a score: the innermost loop of each reduce whose value holds another
    reduce (the dot product over head_dim), not a loop around it (dk's over a group's query heads)."""
    loops = {max(red.src[1:], key=range_order) for red in ast.toposort() if red.op is Ops.REDUCE and len(red.src) > 1
             and any(x.op is Ops.REDUCE for x in red.src[0].toposort())}
    return sorted(r.arg[0] for r in loops if r.arg[1] is AxisType.REDUCE)


def _nested_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Opts for a kernel with a reduce inside another's loop (attention with its scores recomputed where they are read,
    ember.schedule.attention: the reduce over head_dim in the reduce over keys):
    - the inner reduce's axis, when loads are contiguous along it, is unrolled: one dot product per score (lowering
      folds its terms as chains; the vectorizer computes the block's scores as vectors, vectorize._scalar_lanes);
    - the output axes the inner reduces do not depend on (the head_dim of o = p @ v, of dq = dS @ k) are upcast whole
      (or by their largest part that fits) up to NESTED_MAX_ACCUMULATORS lanes: each score is computed once for all;
    - an output axis whose lanes share an operand of the inner reduce (the queries of o, sharing the keys; the keys
      of dk), the one bounding the loop first, is upcast by a vector (half or a quarter of one where that does not
      divide it): a vector of scores per key, each key's row loaded once for the block (a loop bounded by that axis,
      under a causal mask, runs to the bound of the block's last lane);
    - each loop that recomputes scores is unrolled by NESTED_UNROLL_SCORES / block (or one key per
      NESTED_ROW_LANES_PER_KEY lanes of the output row, if more), or the largest half of that which divides its bound (a
      causal loop's, widened to the block's last lane, is a multiple of the block; an online softmax's loop too: its
      running max and the sums' rescale once per iteration);
    - THREAD shares an output axis that bounds no loop (heads: even shares; a causal query axis has uneven halves)."""
    chosen = Chosen(ast)
    add, axis = chosen.add, chosen.axis
    rngs = kernel_ranges(ast)
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    inner = [red for red in reduces if any(red in o.src[0].toposort() for o in reduces if o is not red)]
    inner_deps = {x for red in inner for x in red.toposort() if x.op is Ops.RANGE}
    outputs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    loads, _ = _accesses(ast)
    for r in sorted({r for red in inner for r in red.src[1:]} - online_ranges(ast), key=lambda r: r.arg[0]):
        size = range_size(r)
        if size is not None and 2 <= size <= 64 and any(ld.get(r) == 1 for ld in loads):
            add(Opt(OptOps.UNROLL, axis(r), size))
    lanes = 1
    for r in reversed([r for r in outputs if r not in inner_deps]):
        # the whole axis, or the largest part of it that fits (head_dim 256: two halves, each recomputing the scores)
        fits = [a for a in range(NESTED_MAX_ACCUMULATORS // lanes, 1, -1) if (range_size(r) or 0) % a == 0]
        if fits:
            add(Opt(OptOps.UPCAST, axis(r), fits[0]))
            lanes *= fits[0]
    # the block's lanes must share an operand of the inner reduce (the keys, for a block of queries; not the heads,
    # each with keys of its own): the axis bounding the loop first
    vec, bounding = max(renderer.max_vector, 1), bounding_ranges(ast)
    shared = [r for r in outputs if r in inner_deps and (range_size(r) or 0) >= 2 and
              any(r not in ld and any(x in ld for red in inner for x in red.src[1:]) for ld in loads)]
    block = max(shared, key=lambda r: (r in bounding, outputs.index(r)), default=None)
    amounts = tuple(a for a in (vec, vec // 2, vec // 4) if a >= 2)
    if block is not None and (amt := _divisor(range_size(block), amounts)) is not None:
        add(Opt(OptOps.UPCAST, axis(block), amt))
        unroll = max(NESTED_UNROLL_SCORES // amt, lanes // NESTED_ROW_LANES_PER_KEY)
        for axis_id in _score_loops(chosen.kernel):
            r = next(x for x in kernel_ranges(chosen.kernel) if x.arg[0] == axis_id)
            # (the amount, or the largest half of it that divides the loop's bound)
            if (u := next((u for u in (unroll >> i for i in range(unroll.bit_length())) if u >= 2 and
                           divided_size(r, u) is not None), None)) is not None:
                add(Opt(OptOps.UNROLL, axis(r), u))
    # threads share an axis no loop depends on (heads, batch): an axis bounding a causal loop has uneven halves
    rngs = kernel_ranges(chosen.kernel)
    outs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and (range_size(r) or 0) >= 2]
    even = [r for r in outs if r not in bounding_ranges(chosen.kernel) and (range_size(r) or 0) >= renderer.max_threads]
    if renderer.has_threads and renderer.max_threads > 1 and outs:
        add(Opt(OptOps.THREAD, axis((even or outs)[0]), renderer.max_threads))
    return chosen.opts


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
    chosen = Chosen(ast)
    add, axis = chosen.add, chosen.axis

    rngs = kernel_ranges(ast)
    work = 1
    for r in rngs:
        work *= range_size(r) or 1
    vec = max(renderer.max_vector, 1)
    loads, stores = _accesses(ast)
    outputs = [r for r in rngs if r.arg[1] is AxisType.GLOBAL and range_size(r) is not None]
    # (an online softmax's loop runs whole: no partial sums or unroll of it)
    reduces = [r for r in rngs if r.arg[1] is AxisType.REDUCE and range_size(r) is not None and
               r not in online_ranges(ast)]
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
            traded = other is not None and other is contiguous_out
            if traded:
                # a tile axis traded away from the store's (`_tile_axis`): the rows are the store's contiguous axis,
                # so they are the vector lanes, and at least a whole vector of them (with 16-float vectors, 8 rows
                # were half-vector FMAs: a weight gradient over 512 tokens 1.45x slower, GQA's dV = p^T dO over
                # head_dim 32 1.25x); the panel of the streamed operand is still worth packing for two row tiles
                # (unpacked, each re-reads it from memory)
                i_amts = tuple(sorted({vec, *i_amts}, reverse=True))
            i_amt = _divisor(range_size(other), i_amts) if other is not None else None
            pack = i_amt is not None and _worth_packing(chosen.kernel, ld, other, tile_axis, j_amt, i_amt, renderer,
                                                         2 if traded else 4)
            if not pack and ld[tile_axis] != 1:
                continue
            add(Opt(OptOps.UPCAST, axis(tile_axis), j_amt))
            if other is not None and i_amt is not None:
                add(Opt(OptOps.UPCAST, axis(other), i_amt))
            if pack:  # the panel's outer axes before the rows, then the panel filled before their loop
                trial, steps = chosen.kernel, []
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
                    chosen.kernel = trial
                    chosen.opts.extend(steps)
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
        vector_axis = contiguous_out
        if not reduces and contiguous_out is not None and vec > 1:
            load_indexes, store_indexes = _indexes(ast)
            vector_axis = _vector_axis(list(zip(load_indexes + store_indexes, loads + stores)), outputs,
                                       contiguous_out, vec)
        if vector_axis is not None and (amt := _divisor(range_size(vector_axis), (vec, 8, 4, 2))) is not None:
            add(Opt(OptOps.UPCAST, axis(vector_axis), amt))
        # unroll the innermost reduce axis: fully when small, else by 4 or 2
        rngs = kernel_ranges(chosen.kernel)
        red = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.REDUCE]
        if red and rngs[red[-1]] not in online_ranges(chosen.kernel) and \
                (size := range_size(rngs[red[-1]])) is not None and size >= 2:
            if (amt := size if size <= 8 else next((a for a in (4, 2) if size % a == 0), None)) is not None:
                add(Opt(OptOps.UNROLL, red[-1], amt))
    rngs = kernel_ranges(chosen.kernel)
    outs = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.GLOBAL]
    if renderer.has_threads and renderer.max_threads > 1 and outs and work >= 32768 and \
            (range_size(rngs[outs[0]]) or 0) >= 2:
        add(Opt(OptOps.THREAD, outs[0], renderer.max_threads))
    return chosen.opts
