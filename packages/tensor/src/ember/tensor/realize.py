"""Realization state of the tensor layer, with one owner: the live tensors, their program order, which lazy tensors
must be computed together, and the flat storage that optimizers share with their parameters.

Memory shared under several names is in the graph (`BUFFER_VIEW`s of a root `BUFFER`), so the scheduler orders every
read and write within a schedule. What only the tensor layer knows is program order (the user's assign is eager in
meaning, lazy in execution), and it decides what goes into one schedule with it:
- a pending write made before a tensor is read lands first, in an earlier schedule (read-after-write);
- a lazy tensor made before a write, that reads the memory written, joins the write's schedule, and the scheduler
  runs it before the write (write-after-read);
- a lazy loss that backward() was called on joins the schedule of its gradients (its forward runs there anyway).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ember.schedule import assign_targets, buffers_read, overlaps, storage
from ember.tensor import engine
from ember.uops import Ops, UOp, dtypes, prod, shard_shape

if TYPE_CHECKING:
    from ember.tensor.tensor import Tensor


class LiveTensors:
    """Every Tensor alive (weakly held), iterated in the order they were made. Program order, not a WeakSet's address
    order: which of two equal lazy tensors keeps the buffer, and so a schedule's kernel order and buffers, must not
    differ between processes."""

    def __init__(self) -> None:
        self._made = itertools.count()
        self._by_order: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()

    def add(self, t: Tensor) -> None:
        self._by_order[next(self._made)] = t

    def __iter__(self) -> Iterator[Tensor]:
        return iter(list(self._by_order.values()))


live = LiveTensors()  # a realize rewrites them all to read its buffers
_program_order = itertools.count()
# a realized tensor on a gradient path -> the graph that computed it (lives as long as the realized view)
_graph_of: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
# an int buffer filled from host data (Tensor(list or numpy)) -> the (min, max) of that data, until it is written
_host_range: weakref.WeakKeyDictionary[UOp, tuple[int, int]] = weakref.WeakKeyDictionary()


def next_seq() -> int:
    """The next point in program order (a tensor's `seq`: when it was made, or for an assign, when it was written)."""
    return next(_program_order)


def is_realized(u: UOp) -> bool:
    """Whether u lives in buffers: a (reshaped) buffer, or a multi-device value of such parts, or such a value detached
    (the same memory, read with no gradient path)."""
    while u.op is Ops.DETACH:
        u = u.src[0]
    if u.op is Ops.MSTACK:
        return all(engine.buffer_base(p) is not None for p in u.src)
    return engine.buffer_base(u) is not None


def realize_all(tensors: Sequence[Tensor]) -> None:
    """Compute `tensors` into buffers in one schedule (with the lazy tensors program order puts beside them, and the
    losses whose gradients they are), then make every live tensor read the buffers."""
    tensors = [*tensors, *_losses_beside(tensors)]
    if first := _writes_before(tensors):
        realize_all(first)  # earlier writes to memory these tensors touch land first, in their own schedule
    todo = [t for t in tensors if not is_realized(t.uop)]
    if not todo:
        return
    writes = _Writes(todo)
    todo += [t for t in list(live) if not is_realized(t.uop) and writes.read_by(t, before=True)]
    todo = list({id(t): t for t in todo}.values())  # by identity: Tensor == is elementwise
    todo += _distinct_storage(todo)
    becomes = engine.realize_uops(list(dict.fromkeys(t.uop for t in todo)), frozenset(t.uop for t in live))
    leaves = {t.uop for t in live if t.requires_grad}
    done = {old: new for old, new in becomes.items() if new is not old}
    for old in done:  # memory written by an assign no longer holds the host data it was filled with
        if old.op is Ops.ASSIGN:
            for target in assign_targets(old):
                _host_range.pop(target, None)
                _host_range.pop(storage(target)[0], None)
    # a leaf realized here is a leaf still (its realized buffer, not the graph that initialized it)
    leaf_done = {old: new for old, new in done.items() if old in leaves}
    for old, new in done.items():
        if leaves and old not in leaves and old.op is not Ops.ASSIGN and _reaches(old, leaves):
            _graph_of[new] = old.substitute(leaf_done) if leaf_done else old  # backward looks through the buffer
    # a value with no gradient path (a detached twin) that got the buffer of one with a gradient path reads it through
    # a DETACH: backward looks through the twin's buffer into its graph, and stops at the DETACH
    for old, new in done.items():
        if new in _graph_of and _graph_of[new] is not old and not _reaches(old, leaves):
            done[old] = new.detach()
    # every live tensor now reads the buffers: a realized value (or an assign) is never computed again. Not a tensor
    # made after a write that reads the memory written: its (hash-consed) graph may equal one computed before it
    for t in list(live):
        if (new := done.get(t.uop)) is not None:
            if not writes.read_by(t, before=False):
                t.uop = new
        elif done and not is_realized(t.uop) and not writes.read_by(t, before=False):
            t.uop = t.uop.substitute(done)


# a lazy tensor backward() was called on (a loss): computed in the schedule that computes its gradients, where its
# forward runs anyway. PyTorch has the loss from the forward; left lazy, reading it after `opt.step()` would run the
# whole forward a second time (in the step's schedule, before the parameters are overwritten)
_backward_roots: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()  # by id


def note_backward_root(t: Tensor) -> None:
    """Record that backward() was called on lazy tensor t: it is realized with its gradients (`realize_all`)."""
    if not is_realized(t.uop):
        _backward_roots[id(t)] = t


def _losses_beside(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The lazy losses (backward roots) that share a reduction with the graphs of `tensors`: their gradients, or
    whatever else computes their forward."""
    for key, t in list(_backward_roots.items()):
        if is_realized(t.uop):
            del _backward_roots[key]
    ids = {id(t) for t in tensors}
    if not (roots := [t for key, t in list(_backward_roots.items()) if key not in ids]):
        return []
    shared = {x for x in _graph_nodes(tensors) if x.op is Ops.REDUCE_AXIS}
    return [t for t in roots if any(x in shared for x in t.uop.toposort() if x.op is Ops.REDUCE_AXIS)] if shared else []


def _graph_nodes(tensors: Sequence[Tensor]) -> list[UOp]:
    return UOp.sink(*(t.uop for t in tensors)).toposort()


def _writes_before(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Pending assigns (not part of `tensors`' graphs) made before one of `tensors` is read, to memory they read or
    write: a realized tensor is read now, a lazy one when it was made."""
    pending = [t for t in list(live) if t.uop.op is Ops.ASSIGN]
    if not pending or not tensors:
        return []
    graph = _graph_nodes(tensors)
    nodes = set(graph)
    touched = buffers_read(graph) | {b for x in graph if x.op is Ops.ASSIGN for b in assign_targets(x)}
    newest = max(next_seq() if is_realized(t.uop) else t.seq for t in tensors)
    return [t for t in pending if t.uop not in nodes and t.seq < newest and
            any(overlaps(a, b) for a in assign_targets(t.uop) for b in touched)]


class _Writes:
    """The assigns in the graphs of the tensors being realized (an assign no tensor holds counts as made now), and
    which tensors read the memory they overwrite (its old value), made before or after them."""

    def __init__(self, todo: list[Tensor]):
        self.writes: list[tuple[UOp, int, int, int, UOp]] = []  # (root, start, end, when, the ASSIGN)
        self._hits: dict[UOp, frozenset[int]] = {}  # node -> the writes whose memory its graph reads
        if not (assigns := [x for x in _graph_nodes(todo) if x.op is Ops.ASSIGN]):
            return
        written_at = {t.uop: t.seq for t in list(live) if t.uop.op is Ops.ASSIGN}
        self.writes = [(*storage(a), written_at.get(w, next_seq()), w) for w in assigns for a in assign_targets(w)]
        self.first, self.last = min(w[3] for w in self.writes), max(w[3] for w in self.writes)

    def _hit(self, u: UOp) -> frozenset[int]:
        for x in u.toposort(gate=lambda x: x not in self._hits):  # memoized: the tensors' graphs overlap
            if x.op is Ops.ASSIGN:  # its value, computed before the write, is what a reader of it reads
                hits: frozenset[int] = frozenset()
            elif x.op in (Ops.BUFFER, Ops.BUFFER_VIEW):
                root, start, end = storage(x)
                hits = frozenset(i for i, (r, w_start, w_end, _, _) in enumerate(self.writes)
                                 if r is root and start < w_end and w_start < end)
            else:
                hits = frozenset().union(*(self._hits[s] for s in x.src))
            self._hits[x] = hits
        return self._hits[u]

    def read_by(self, t: Tensor, before: bool) -> bool:
        """Whether t reads memory one of the writes overwrites (its old value) and was made before (or after) it."""
        if not self.writes or (t.seq >= self.last if before else t.seq <= self.first):
            return False
        hits = self._hit(t.uop.src[1]) if t.uop.op is Ops.ASSIGN else self._hit(t.uop)
        return any((t.seq < self.writes[i][3]) == before and t.uop is not self.writes[i][4] for i in hits)


def _distinct_storage(todo: list[Tensor]) -> list[Tensor]:
    """Distinct Tensors with one and the same lazy value (UOps are hash-consed: `Tensor.ones(3).contiguous()` twice
    is one UOp) would get one buffer, and an assign to one would change the others. All but the first get a buffer of
    their own, filled in the same schedule; returns those to realize too."""
    from ember.tensor.tensor import Tensor

    being_realized = {t.uop for t in todo}
    first: dict[UOp, int] = {}
    extra = []
    for t in list(live):
        if t.uop not in being_realized or t.uop.op is Ops.ASSIGN:
            continue
        if first.setdefault(t.uop, id(t)) != id(t):
            t.uop = Tensor.empty(*t.shape, dtype=t.dtype, device=t.device).uop.assign(t.uop)
            extra.append(t)
    ids = {id(t) for t in todo}
    return [t for t in extra if id(t) not in ids]


# *** index values known on the host ***
def note_host_range(buf: UOp, lo: int, hi: int) -> None:
    """Record that BUFFER `buf` was just filled from host data whose values span [lo, hi] (an int tensor made from a
    list or numpy array): index checks read it without touching the device."""
    _host_range[buf] = (lo, hi)


_VALUE_PRESERVING = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.EXPAND, Ops.FLIP, Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY)


def host_range(u: UOp) -> tuple[int, int] | None:
    """Bounds (min, max) of the values of u known on the host without running or waiting for anything: u is a
    constant, or a view (or copy) of int buffers filled from host data and not written since. None when unknown (a
    value computed on the device, lazy or realized). The bounds hold for the whole buffer under a view: a superset."""
    while u.op in _VALUE_PRESERVING:
        u = u.src[0]
    if u.op is Ops.CONST and isinstance(u.arg, int):
        return (u.arg, u.arg)
    if u.op is Ops.CAST and dtypes.is_int(u.dtype) and (r := host_range(u.src[0])) is not None:
        # (an int cast keeps the values when the new dtype holds them all: `ids.int()` of int64 ids)
        return r if dtypes.min(u.dtype) <= r[0] and r[1] <= dtypes.max(u.dtype) else None
    if u.op is Ops.MSTACK:
        parts = [host_range(p) for p in u.src]
        if any(p is None for p in parts):
            return None
        return min(p[0] for p in parts if p), max(p[1] for p in parts if p)
    return _host_range.get(u) if u.op is Ops.BUFFER else None


# *** autograd through realized tensors ***
def _reaches(u: UOp, leaves: set[UOp]) -> bool:
    return any(x in leaves for x in u.toposort(gate=lambda x: x.op is not Ops.DETACH))


def unrealize(u: UOp, keep: set[UOp]) -> UOp:
    """u with every realized tensor on a gradient path replaced by the graph that computed it (not those in keep)."""
    while mapping := {x: g for x in u.toposort() if x not in keep and (g := _graph_of.get(x)) is not None}:
        u = u.substitute(mapping)
    return u


# *** flat storage ***
def _parts(u: UOp) -> tuple[UOp, ...]:
    return u.src if u.op is Ops.MSTACK else (u,)


def share_storage(tensors: Sequence[Tensor], multiple: int = 1) -> Tensor:
    """Move `tensors` (one device and dtype) into one new flat buffer and make each a view of its slice (a
    `BUFFER_VIEW`), so that one kernel can update them all (the fused optimizers). Returns the flat tensor. Live
    tensors that read the old buffers read the views instead; a tensor keeps its identity, shape and values.

        flat = share_storage([w1, w2])   # flat.shape == (w1.numel() + w2.numel(),)

    Tensors on several devices get a flat buffer on each device holding their parts there: replicated tensors a
    replicated flat, sharded ones (along any axes) a flat sharded along its only axis. `multiple`: the flat buffer's
    length (on each device) is rounded up to a multiple of it, the tail after the views unused."""
    from ember.tensor.tensor import Tensor

    if not tensors:
        raise ValueError("share_storage: got no tensors")
    if len({id(t) for t in tensors}) != len(tensors):
        raise ValueError("share_storage: a tensor appears twice")
    kinds = {(t.device, t.dtype) for t in tensors}
    if len(kinds) != 1:
        raise ValueError(f"share_storage: tensors must share one device and dtype, got {sorted(map(str, kinds))}")
    (device, dtype), = kinds
    realize_all(tensors)
    axes = [t.uop.arg if t.uop.op is Ops.MSTACK else None for t in tensors]
    if len({a is None for a in axes}) > 1:
        raise ValueError("share_storage: a mix of replicated and sharded tensors (a flat buffer is one or the "
                         "other; keep them in separate groups)")
    devices = device if isinstance(device, tuple) else (device,)
    size = sum(int(prod(shard_shape(t.shape, a, len(devices)))) for t, a in zip(tensors, axes))  # on each device
    flats = [Tensor.empty(-(-size // multiple) * multiple, dtype=dtype, device=d).uop for d in devices]
    flat = Tensor(UOp.mstack(flats, None if axes[0] is None else 0) if isinstance(device, tuple) else flats[0])
    mapping: dict[UOp, UOp] = {}
    for t, view in zip(tensors, storage_views(flat, [t.shape for t in tensors], axes)):
        if t.numel() == 0:
            continue
        for part, new in zip(_parts(t.uop), _parts(view.uop)):
            old = engine.buffer_base(part)  # a whole realized buffer: every reader of it reads the view now
            if old is not None:  # its bytes copied into the slice (one kernel that concatenated them all cost seconds)
                if old in mapping:
                    raise ValueError("share_storage: two of the tensors are views of one buffer")
                new_base = engine.buffer_base(new)
                assert new_base is not None
                engine.buffer_for(new_base).copyin(memoryview(engine.copyout_bytes(part)))
                mapping[old] = new_base
            else:  # (a view of a buffer: a kernel reads it into place)
                Tensor(new).assign(Tensor(part)).realize()
                mapping[part] = new
        t.uop = view.uop
    for t in list(live):
        if any(x in mapping for x in t.uop.toposort()):
            t.uop = t.uop.substitute(mapping)
    return flat


def storage_views(flat: Tensor, shapes: Sequence[tuple[int, ...]],
                  axes: Sequence[int | None] | None = None) -> list[Tensor]:
    """Realized tensors of the given shapes that are consecutive slices (`BUFFER_VIEW`s) of the memory of `flat` (a
    realized 1-D tensor): writes to either side are seen by the other, in program order. Of a flat on several devices:
    multi-device views, sharded along `axes` (None: replicated; all replicated by default), each device's parts
    consecutive in its own flat buffer."""
    from ember.tensor.tensor import Tensor

    parts = _parts(flat.uop)
    bases = [engine.buffer_base(p) for p in parts]
    if any(b is None for b in bases) or flat.ndim != 1:
        raise ValueError("storage_views: `flat` must be a realized 1-D tensor")
    n = len(parts) if flat.uop.op is Ops.MSTACK else 1
    axes = list(axes) if axes is not None else [None] * len(shapes)
    if len(axes) != len(shapes):
        raise ValueError(f"storage_views: {len(shapes)} shapes but {len(axes)} axes")
    local = [shard_shape(shape, a, n) for shape, a in zip(shapes, axes)]
    if (need := sum(int(prod(s)) for s in local)) > parts[0].shape[0]:
        raise ValueError(f"storage_views: the shapes need {need} elements, `flat` has {parts[0].shape[0]}")
    places = [(b.src[0], b.arg[1]) if b.op is Ops.BUFFER_VIEW else (b, 0) for b in bases]  # type: ignore[union-attr]
    out = []
    for shape, a, here in zip(shapes, axes, local):
        k = int(prod(here))
        if k == 0:
            out.append(Tensor.zeros(*shape, dtype=flat.dtype, device=flat.device))
            continue
        views = [UOp(Ops.BUFFER_VIEW, flat.dtype, (root,), (k, offset)).reshape(here) for root, offset in places]
        out.append(Tensor(UOp.mstack(views, a) if flat.uop.op is Ops.MSTACK else views[0]))
        places = [(root, offset + k) for root, offset in places]
    return out
