"""The GPU half of lowering (targets with `Renderer.has_local`): reduces split across a workgroup's threads meet in
shared memory, and the output axes become thread ids.

- `pm_group_reduce`: a REDUCE over a GROUP_REDUCE range g (opts GROUP/GROUPTOP; g's iterations are threads) becomes
      partial = REDUCE(value, *its other ranges)             each thread's part
      STORE(local[lane], partial); BARRIER                   lane: the thread's slot among the workgroup's
      REDUCE(LOAD(local[base + g']), g')                     every thread adds up its group's parts
  and the stores to buffers that g does not address are made by the thread with g == 0 alone.
- `gpu_dims`: GLOBAL ranges become workgroup ids (`SPECIAL` "gidx<d>"), LOCAL, WARP and GROUP_REDUCE ranges thread
  ids in the workgroup ("lidx<d>"), the innermost range on dimension 0 (x): a WARP range, the lanes of a tensor-core
  instruction, is always innermost, so a warp is consecutive threads. More ranges than the target has dimensions share
  the outermost one (each range a `//` and `%` of it); an axis of a size known only at run time stays a loop. A kernel
  with sequential LOOP ranges (a scatter) runs on one thread (`sequential`).
"""

from __future__ import annotations

import functools
import math

from ember.codegen.opt import range_order, range_size
from ember.codegen.renderer import Renderer
from ember.uops import AddrSpace, AxisType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

THREAD_KINDS = (AxisType.LOCAL, AxisType.WARP, AxisType.GROUP_REDUCE)


class GroupContext:
    """The kernel's GROUP_REDUCE ranges, and a counter for the shared buffers and ranges the rewrite adds."""

    def __init__(self, sink: UOp):
        nodes = sink.toposort()
        self.groups = tuple(sorted({u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.GROUP_REDUCE},
                                   key=range_order))
        self.next_local = sum(1 for u in nodes if u.op is Ops.DEFINE_LOCAL)
        self.next_range = max((u.arg[0] for u in nodes if u.op is Ops.RANGE), default=-1) + 1


def _linear(rngs: list[UOp]) -> tuple[UOp | None, int]:
    """The position of a point of `rngs` (row-major, the last fastest; None for no ranges) and their number of
    points."""
    at: UOp | None = None
    size = 1
    for r in reversed(rngs):
        term = r if size == 1 else r * size
        at, size = term if at is None else at + term, size * range_size(r)
    return at, size


def group_reduce(ctx: GroupContext, red: UOp) -> UOp | None:
    groups = [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    if not groups:
        return None
    rest = tuple(r for r in red.src[1:] if r not in groups)
    partial = UOp(Ops.REDUCE, red.dtype, (red.src[0], *rest), red.arg) if rest else red.src[0]
    # one slot per thread of the workgroup that computes its own partial: its local position, then its group lane
    locals_ = sorted((u for u in partial.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOCAL),
                     key=range_order)
    base, n_local = _linear(locals_)
    lane, n_lane = _linear(sorted(groups, key=range_order))
    assert lane is not None
    buf = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(n_local * n_lane, AddrSpace.LOCAL), (), ctx.next_local)
    ctx.next_local += 1
    other = UOp.range(n_lane, ctx.next_range, AxisType.REDUCE)
    ctx.next_range += 1
    row = None if base is None else base * n_lane
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, lane if row is None else row + lane)),
                                         partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (store,))
    part = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, other if row is None else row + other)),
                                     barrier))
    return UOp(Ops.REDUCE, red.dtype, (part, other), red.arg)


def store_once(sink: UOp, groups: tuple[UOp, ...]) -> UOp:
    """Each store to a buffer address that no group lane moves is made by lane 0 alone (the others hold the same
    value): its INDEX gets `g == 0` for those lanes in its valid."""
    gated: dict[UOp, UOp] = {}
    for idx in (u.src[0] for u in sink.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX):
        if idx.src[0].op is not Ops.PARAM or idx in gated:
            continue
        address = set(idx.src[1].toposort())
        if not (lanes := [g for g in groups if g not in address]):
            continue
        first = functools.reduce(lambda a, b: a & b, [g.eq(0) for g in lanes])
        gated[idx] = idx.replace(src=(idx.src[0], idx.src[1], first if len(idx.src) == 2 else idx.src[2] & first))
    return sink.substitute(gated)


pm_group_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), group_reduce)])


def lower_group_reduces(sink: UOp) -> UOp:
    ctx = GroupContext(sink)
    if not ctx.groups:
        return sink
    sink = store_once(sink, ctx.groups)
    # (bottom up: the partial REDUCE a rewrite makes is not rewritten again, its group range is gone)
    return graph_rewrite(sink, pm_group_reduce, ctx=ctx, bottom_up=True, name="group reduces")


def _dims(rngs: list[UOp], maxes: tuple[int, ...], prefix: str) -> dict[UOp, UOp]:
    """Each range's value in the thread ids `<prefix><d>`: one dimension per range, the innermost on dimension 0,
    the outermost ranges sharing the last dimension when there are more ranges than dimensions; all of them in
    dimension 0 when a dimension would be over its limit."""
    inner_first = list(reversed(rngs))
    n = len(maxes)
    dims = [[r] for r in inner_first[:n - 1]] + ([inner_first[n - 1:]] if len(inner_first) >= n else [])
    if any(math.prod(range_size(r) for r in d) > m for d, m in zip(dims, maxes)):
        dims = [inner_first]
        if math.prod(range_size(r) for r in inner_first) > maxes[0]:
            raise ValueError(f"gpu_dims: {prefix} sizes {[range_size(r) for r in rngs]} are over the target's "
                             f"limits {maxes}")
    ret: dict[UOp, UOp] = {}
    for d, members in enumerate(dims):
        total = math.prod(range_size(r) for r in members)
        special = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, total),), f"{prefix}{d}")
        stride = 1
        for r in members:  # innermost first: the fastest-moving part of the shared id
            size = range_size(r)
            part = special if stride == 1 else special // stride
            ret[r] = part % size if stride * size < total else part
            stride *= size
    return ret


def gpu_dims(sink: UOp, renderer: Renderer) -> UOp:
    """The kernel with its GLOBAL ranges on workgroup ids and its LOCAL/GROUP_REDUCE ranges on thread ids."""
    nodes = sink.toposort()
    rngs = sorted({u for u in nodes if u.op is Ops.RANGE}, key=range_order)
    if sequential(rngs):  # (its updates must not race: atomics, or one thread runs the whole kernel)
        return parallel_scatter(sink, renderer) if renderer.has_atomic_add else sink
    known = [r for r in rngs if range_size(r) is not None]
    # (a WARP range innermost: a tensor core's lanes are consecutive threads)
    locals_ = sorted((r for r in known if r.arg[1] in THREAD_KINDS), key=lambda r: (r.arg[1] is AxisType.WARP,
                                                                                    range_order(r)))
    if math.prod(range_size(r) for r in locals_) > renderer.max_workgroup_threads:
        raise ValueError(f"gpu_dims: {math.prod(range_size(r) for r in locals_)} threads in a workgroup, the target "
                         f"runs at most {renderer.max_workgroup_threads}")
    shared = sum(u.dtype.size * u.dtype.base.itemsize for u in nodes if u.op is Ops.DEFINE_LOCAL)
    if shared > renderer.shared_max:
        raise ValueError(f"gpu_dims: the kernel's shared buffers take {shared} bytes, the target has "
                         f"{renderer.shared_max} per workgroup")
    mapping = {**_dims([r for r in known if r.arg[1] is AxisType.GLOBAL], renderer.global_max, "gidx"),
               **_dims(locals_, renderer.local_max, "lidx")}
    if not mapping:
        return sink
    # the mapped ranges leave the ENDs that closed their loops (an END left with none is its statement)
    ends = {}
    for u in nodes:
        if u.op is Ops.END and any(r in mapping for r in u.src[1:]):
            kept = tuple(r for r in u.src[1:] if r not in mapping)
            ends[u] = u.replace(src=(u.src[0], *kept)) if kept else u.src[0]
    return sink.substitute(ends).substitute(mapping)


def sequential(rngs: list[UOp]) -> bool:
    """Whether a kernel has LOOP ranges: updates in order that no thread may race (the scheduler's scatter of an
    embedding gradient, out[y(t)] += x(t) after a fill of out). A GPU runs such a kernel on one thread, fill
    included: the fill must be done before the first update, and workgroups cannot wait for each other."""
    return any(r.arg[1] is AxisType.LOOP for r in rngs)


ATOMIC_ADD = "atomic add"  # a STORE's arg: add src[1] to the memory at src[0] atomically (src[2:]: order only)
SCATTER_THREADS = 1024  # the one workgroup of a scatter run with atomics


def _atomic_update(st: UOp) -> UOp | None:
    """STORE(idx, LOAD(idx, *order) + v) as STORE(idx, v, BARRIER(*order), arg=ATOMIC_ADD) (no order: no barrier);
    None when the store is not such an update, or v reads the buffer it updates (a racing read)."""
    idx, val = st.src[0], st.src[1]
    if val.op is not Ops.ADD or val.dtype not in (dtypes.float32, dtypes.int32):
        return None
    loads = [s for s in val.src if s.op is Ops.LOAD and s.src[0] is idx]
    if not loads:
        return None
    inc = val.src[1] if val.src[0] is loads[0] else val.src[0]
    if any(u.op is Ops.INDEX and u.src[0] is idx.src[0] for u in inc.toposort()):
        return None
    order = loads[0].src[1:]
    barrier = (UOp(Ops.BARRIER, dtypes.void, order),) if order else ()
    return UOp(Ops.STORE, dtypes.void, (idx, inc, *barrier), ATOMIC_ADD)


def _spread(rngs: list[UOp], thread: UOp, next_id: int) -> tuple[UOp, dict[UOp, UOp], UOp | None]:
    """The points of `rngs` spread over the workgroup's threads: flat = loop * threads + thread walks them row-major.
    Returns the loop, each range's value in it, and the gate flat < points (None when the threads divide them)."""
    threads, total = thread.src[0].arg, math.prod(range_size(r) for r in rngs)
    loop = UOp.range(-(-total // threads), next_id, AxisType.LOOP)
    flat = loop * threads + thread
    values, stride = {}, 1
    for r in reversed(rngs):  # (the innermost range fastest: consecutive threads, consecutive addresses)
        size = range_size(r)
        part = flat if stride == 1 else flat // stride
        values[r] = part % size if stride * size < total else part
        stride *= size
    return loop, values, (flat < total if total % threads else None)


def parallel_scatter(sink: UOp, renderer: Renderer) -> UOp:
    """A scatter kernel (LOOP ranges: out[y(t)] += x(t), after a fill of out over its GLOBAL ranges) on one
    workgroup of threads, where every update is such an add (float32, int32): the fill's points spread over the
    threads, a BARRIER, then the updates' points spread over them too, each an atomic add (STORE arg ATOMIC_ADD). The
    sum's order is the threads' (as any GPU's index_add). Other scatter kernels stay on one thread."""
    nodes = sink.toposort()
    rngs = sorted({u for u in nodes if u.op is Ops.RANGE}, key=range_order)
    if any(range_size(r) is None for r in rngs):
        return sink
    loops = [r for r in rngs if r.arg[1] is AxisType.LOOP]
    fill = [r for r in rngs if r.arg[1] is not AxisType.LOOP]
    stores = [u for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
    if any(_atomic_update(st) is None for st in stores if any(u in loops for u in st.toposort())):
        return sink
    threads = min(SCATTER_THREADS, renderer.max_workgroup_threads)
    thread = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, threads),), "lidx0")
    next_id = max(r.arg[0] for r in rngs) + 1
    phases = [(is_update, *_spread(phase, thread, next_id + i))
              for i, (is_update, phase) in enumerate(((False, fill), (True, loops))) if phase]
    # each END closes its phase's loop; the fill's first (the updates' barriers then wait for its new END)
    for is_update, loop, values, _ in phases:
        ends = {}
        for u in sink.toposort():
            if u.op is Ops.END and u.src[1] in values:
                st = _atomic_update(u.src[0]) if is_update else u.src[0]
                assert st is not None, "parallel_scatter: an update changed under the fill's rewrite"
                ends[u] = UOp(Ops.END, dtypes.void, (st, loop))
        sink = sink.substitute(ends)
    # (bottom up: an index that loads the address of another is rebuilt on the gated load)
    new: dict[UOp, UOp] = {}
    for u in sink.toposort():
        src = tuple(new[x] for x in u.src)
        if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM:
            deps = set(u.toposort())
            if extra := [gate for _, _, values, gate in phases if gate is not None and deps & set(values)]:
                src = (src[0], src[1], functools.reduce(lambda a, b: a & b, [*src[2:], *extra]))
        new[u] = u if src == u.src else u.replace(src=src)
    sink = new[sink]
    return sink.substitute({r: v for _, _, values, _ in phases for r, v in values.items()})


def launch_dims(uops: tuple[UOp, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(global_size in workgroups, local_size in threads) of a linear program, from its SPECIALs."""
    size = {"gidx": [1, 1, 1], "lidx": [1, 1, 1]}
    for u in uops:
        if u.op is Ops.SPECIAL:
            prefix, dim = u.arg[:4], int(u.arg[4:])
            size[prefix][dim] = u.src[0].arg
    return tuple(size["gidx"]), tuple(size["lidx"])
