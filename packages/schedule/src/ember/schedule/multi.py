"""The multi stage: a tensor graph over device tuples becomes one graph per device.

A value on several devices is `MSTACK(part_0, ..., part_n-1, arg=axis)`: part i lives on device i and holds shard i of
`axis` (with `axis=None`, the whole value: replicated). The tensor layer builds ordinary ops over such values, with
their whole (logical) shapes; `pm_multi` moves every MSTACK up through the ops above it until the graph is MSTACKs of
single-device graphs, which the rest of the scheduler handles like any other:

- an elementwise op runs per shard, its operands resharded to one axis first (a sharded operand sets it: a replicated
  one shrinks to it in place, a differently sharded one is gathered with copies);
- a reduce over the shard axis reduces each shard, then allreduces the partial results; over other axes it stays
  sharded;
- movement ops keep or move the shard axis, or raise when they would move items between shards;
- COPY to one device gathers, to a device tuple replicates; ASSIGN writes each part; MSELECT picks a part.
"""

from __future__ import annotations

from ember.schedule.allreduce import allreduce, side_by_side
from ember.schedule.rangeify import is_buffer_view
from ember.uops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite, prod, shard_bounds, shard_shape


def is_multi(sink: UOp) -> bool:
    """Whether the graph under `sink` holds a value on several devices."""
    return any(u.op is Ops.MSTACK or u.op is Ops.DEVICE and isinstance(u.arg, tuple) for u in sink.toposort())


def gather(m: UOp, device: str) -> UOp:
    """The whole value of MSTACK `m` on one device: its parts copied there and put side by side."""
    parts = [p if p.device == device else p.copy_to_device(device) for p in m.src]
    if m.arg is None:
        return parts[m.device.index(device)] if device in m.device else parts[0]
    return side_by_side(parts, m.arg)


def reshard(m: UOp, axis: int | None) -> list[UOp]:
    """The parts of MSTACK `m` sharded along `axis` (None: each a whole copy)."""
    if m.arg == axis:
        return list(m.src)
    n = len(m.src)
    if m.arg is None:  # each device already has the whole value: it keeps its shard
        return [_keep_shard(p, axis, i, n) for i, p in enumerate(m.src)]  # type: ignore[arg-type]
    whole = [gather(m, d) for d in m.device]  # type: ignore[union-attr]
    return whole if axis is None else [w.shrink(shard_bounds(w.shape, axis, i, n)) for i, w in enumerate(whole)]


def _keep_shard(p: UOp, axis: int, i: int, n: int) -> UOp:
    """Shard i of a whole value p. A value broadcast along the axis (a replicated weight expanded over a sharded
    batch) is the same broadcast, smaller: no shrink over an expand, so the kernels fuse as on one device."""
    if p.op is Ops.EXPAND and p.src[0].shape[axis] == 1:
        return p.src[0].expand(shard_shape(p.shape, axis, n))
    return p.shrink(shard_bounds(p.shape, axis, i, n))


def _moves_items(what: str, m: UOp) -> ValueError:
    return ValueError(f"{what} moves items between shards (the value is sharded along axis {m.arg} over "
                      f"{len(m.src)} devices); reshard it first with .shard(devices, axis=...) or gather it with "
                      ".to(device)")


# *** rules: each takes a node whose multi-device sources are MSTACKs, and returns an MSTACK (or a one-device value) ***
def _replicate_leaf(u: UOp) -> UOp | None:
    dev = u.src[0]
    if not isinstance(dev.arg, tuple):
        return None
    return UOp.mstack([u.replace(src=(UOp(Ops.DEVICE, arg=d), *u.src[1:])) for d in dev.arg], None)


def _elementwise(u: UOp) -> UOp | None:
    stacks = [s for s in u.src if s.op is Ops.MSTACK]
    if not stacks:
        return None
    if len({s.device for s in stacks}) != 1:
        devices = " and ".join(str(s.device) for s in stacks)
        raise ValueError(f"{u.op.name}: operands on different device sets: {devices}")
    axis = next((s.arg for s in stacks if s.arg is not None), None)
    n = len(stacks[0].src)
    srcs = [reshard(s, axis) if s.op is Ops.MSTACK else [s] * n for s in u.src]
    return UOp.mstack([u.replace(src=tuple(s[i] for s in srcs)) for i in range(n)], axis)


def _reduce(u: UOp, m: UOp) -> UOp:
    op, axes = u.arg
    parts = [p.reduce_axis(op, axes) for p in m.src]
    if m.arg is None or m.arg not in axes:
        return UOp.mstack(parts, m.arg)
    return UOp.mstack(allreduce(op, parts), None)


def _reshape(u: UOp, m: UOp) -> UOp:
    new, axis, n = u.arg, m.arg, len(m.src)
    if axis is None:
        return UOp.mstack([p.reshape(new) for p in m.src], None)
    # shard i is the block i of every row of prod(old[axis:]) elements: an axis of the new shape with as many
    # elements before it, and a size that divides by n, cuts the same blocks (an empty value moves nothing: any axis
    # that divides will do)
    before = prod(u.src[0].shape[:axis])
    fits = [b for b, size in enumerate(new) if size % n == 0]
    b = next((b for b in fits if prod(new[:b]) == before), fits[0] if fits and prod(new) == 0 else None)
    if b is None:
        raise _moves_items(f"reshape {u.src[0].shape} -> {new}", m)
    return UOp.mstack([p.reshape((*new[:b], new[b] // n, *new[b + 1:])) for p in m.src], b)


def _permute(u: UOp, m: UOp) -> UOp:
    return UOp.mstack([p.permute(u.arg) for p in m.src], None if m.arg is None else u.arg.index(m.arg))


def _expand(u: UOp, m: UOp) -> UOp:
    return UOp.mstack([p.expand(shard_shape(u.arg, m.arg, len(m.src))) for p in m.src], m.arg)


def _pad(u: UOp, m: UOp) -> UOp:
    if m.arg is not None and u.arg[m.arg] != (0, 0):
        raise _moves_items(f"pad {u.arg} of axis {m.arg}", m)
    return UOp.mstack([p.pad(u.arg) for p in m.src], m.arg)


def _shrink(u: UOp, m: UOp) -> UOp:
    bounds = list(u.arg)
    if m.arg is not None:
        if bounds[m.arg] != (0, u.src[0].shape[m.arg]):
            raise _moves_items(f"shrink {u.arg} of axis {m.arg}", m)
        bounds[m.arg] = (0, m.src[0].shape[m.arg])
    return UOp.mstack([p.shrink(tuple(bounds)) for p in m.src], m.arg)


def _flip(u: UOp, m: UOp) -> UOp:
    parts = [p.flip(u.arg) for p in m.src]
    if m.arg is None or not u.arg[m.arg]:
        return UOp.mstack(parts, m.arg)
    # shard i of the flipped value is the flip of shard n-1-i: it moves to device i
    devices = m.device
    return UOp.mstack([p if p.device == d else p.copy_to_device(d) for p, d in zip(reversed(parts), devices)], m.arg)


def _placed(x: UOp, device: str) -> UOp:
    # a part of a new value is memory of its own: a buffer already there is copied too (as a name for the source's
    # memory, a write to either would change that part alone)
    return x if x.device == device and not is_buffer_view(x) else x.copy_to_device(device)


def _copy(u: UOp, x: UOp, dev: UOp) -> UOp | None:
    target = dev.arg
    if x.op is not Ops.MSTACK:
        if not isinstance(target, tuple):
            return None
        return UOp.mstack([_placed(x, d) for d in target], None)
    if isinstance(target, str):
        return gather(x, target)
    if target == x.device:
        return x
    if len(target) == len(x.src):
        return UOp.mstack([_placed(p, d) for p, d in zip(x.src, target)], x.arg)
    whole = gather(x, target[0])
    return UOp.mstack([_placed(whole, d) for d in target], None)


def _assign(u: UOp, t: UOp, v: UOp) -> UOp:
    if v.op is not Ops.MSTACK or v.device != t.device:
        raise ValueError(f"assign: the value is on {v.device}, the target on {t.device}")
    return UOp.mstack([a.assign(b) for a, b in zip(t.src, reshard(v, t.arg))], t.arg)


MS = UPat(Ops.MSTACK, name="m")
pm_multi = PatternMatcher([
    (UPat((Ops.CONST, Ops.IOTA), src=(UPat(Ops.DEVICE),), name="u"), _replicate_leaf),
    (UPat(GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.DETACH}, name="u"), _elementwise),
    (UPat(Ops.REDUCE_AXIS, src=(MS,), name="u"), _reduce),
    (UPat(Ops.RESHAPE, src=(MS,), name="u"), _reshape),
    (UPat(Ops.PERMUTE, src=(MS,), name="u"), _permute),
    (UPat(Ops.EXPAND, src=(MS,), name="u"), _expand),
    (UPat(Ops.PAD, src=(MS,), name="u"), _pad),
    (UPat(Ops.SHRINK, src=(MS,), name="u"), _shrink),
    (UPat(Ops.FLIP, src=(MS,), name="u"), _flip),
    (UPat(Ops.COPY, src=(UPat.var("x"), UPat(Ops.DEVICE, name="dev")), name="u"), _copy),
    (UPat(Ops.ASSIGN, src=(UPat(Ops.MSTACK, name="t"), UPat.var("v")), name="u"), _assign),
    (UPat(Ops.MSELECT, src=(MS,), name="u"), lambda u, m: reshard(m, u.arg[1])[u.arg[0]]),
])


def shard_axis(u: UOp) -> int | None:
    """The axis a multi-device value is sharded along (None: replicated), as the multi stage places it."""
    m = u if u.op is Ops.MSTACK else graph_rewrite(u, pm_multi, name="multi")
    if m.op is not Ops.MSTACK:
        raise ValueError(f"shard_axis: the value is on one device ({m.device}), not several")
    return m.arg  # type: ignore[no-any-return]

