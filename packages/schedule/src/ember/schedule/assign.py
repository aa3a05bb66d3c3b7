"""Writes to shared storage: which memory a graph reads and an ASSIGN writes, copies that make an assign safe, and the
order of kernels around the writes.

Storage is a `BUFFER`; a `BUFFER_VIEW(BUFFER, arg=(size, offset))` is elements [offset, offset + size) of it (flat
optimizer storage and the parameters that are its slices). Two accesses conflict when their element ranges of one
root BUFFER intersect, whatever names (views, reshapes) they go through.
"""

from __future__ import annotations

import heapq

from ember.uops import GroupOp, Ops, UOp

BUFFERS = (Ops.BUFFER, Ops.BUFFER_VIEW)


def storage(buf: UOp) -> tuple[UOp, int, int]:
    """(root BUFFER, first element, end element) of the memory a BUFFER or BUFFER_VIEW names."""
    if buf.op is Ops.BUFFER_VIEW:
        size, offset = buf.arg
        return buf.src[0], offset, offset + size
    assert buf.op is Ops.BUFFER, f"storage: {buf.op} is not a buffer"
    return buf, 0, buf.arg


def overlaps(a: UOp, b: UOp) -> bool:
    """Whether two buffers (BUFFER or BUFFER_VIEW) share any element of memory."""
    (ra, sa, ea), (rb, sb, eb) = storage(a), storage(b)
    return ra is rb and sa < eb and sb < ea


def buffers_read(nodes: list[UOp]) -> set[UOp]:
    """The buffers the graph `nodes` reads: BUFFERs and BUFFER_VIEWs used as data (not a view's root)."""
    return {s for x in nodes if x.op is not Ops.BUFFER_VIEW for s in x.src if s.op in BUFFERS}


def assign_target(a: UOp) -> UOp:
    """The buffer (BUFFER or BUFFER_VIEW) an ASSIGN writes (its target may be a movement view of it)."""
    return _written(a.src[0])


def _under_views(t: UOp) -> UOp:
    while t.op in GroupOp.Movement:
        t = t.src[0]
    return t


def _written(t: UOp) -> UOp:
    t = _under_views(t)
    if t.op not in BUFFERS:
        raise ValueError(f"assign: the target must be a realized buffer (or a view of one), got {t.op}")
    return t


def assign_targets(a: UOp) -> list[UOp]:
    """The buffers an ASSIGN writes: its target's, or each device's part of a multi-device target (an MSTACK, or a
    view of one)."""
    t = _under_views(a.src[0])
    return [_written(p) for p in t.src] if t.op is Ops.MSTACK else [_written(t)]


# *** an assign whose value reads the memory it overwrites elsewhere than at the written element ***
_BOUNDARY = (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN)  # computed into a buffer of their own before the assign runs
_ELEMENTWISE_READ = GroupOp.ALU | {Ops.CAST, Ops.DETACH}  # read element i at element i (a BITCAST: if same size)


class _Readers:
    """The users of each node of a graph, and its buffers by root: which nodes read some memory is then a walk up from
    the buffers over it, not down the whole graph once per assign (the tiny Llama's backward: 48 gradient assigns,
    each value the same large graph, was 12% of its schedule)."""

    def __init__(self, root: UOp):
        self.users: dict[UOp, list[UOp]] = {}
        self.buffers: dict[UOp, list[UOp]] = {}  # root BUFFER -> the BUFFERs and BUFFER_VIEWs of it in the graph
        for x in root.toposort():
            if x.op in BUFFERS:
                self.buffers.setdefault(storage(x)[0], []).append(x)
            for s in x.src:
                self.users.setdefault(s, []).append(x)

    def reading(self, target: UOp) -> set[UOp]:
        """The nodes that read target's memory: the buffers that overlap it, and the nodes over them up to (not into)
        nodes computed into buffers of their own."""
        stack = [b for b in self.buffers.get(storage(target)[0], []) if overlaps(b, target)]
        found: set[UOp] = set()
        while stack:
            if (x := stack.pop()) in found:
                continue
            found.add(x)
            stack.extend(u for u in self.users.get(x, ()) if u.op not in _BOUNDARY and u.op not in BUFFERS)
        return found


def hazards(a: UOp, readers: _Readers | None = None) -> list[UOp]:
    """The nodes of an ASSIGN's value that read its target's memory at other elements than the one being written
    (through a permute, flip, shrink, expand, reduce, or another overlapping view): they must be copied out first,
    or the kernel would read elements it has already overwritten. Reading the target itself elementwise is safe.
    `readers`: of a graph that holds the assign's value (else made for it)."""
    target, buf = a.src[0], assign_target(a)
    reads = (readers or _Readers(a.src[1])).reading(buf)
    found, seen, stack = [], set(), [a.src[1]]
    while stack:
        if (x := stack.pop()) in seen or x is target or x.op in _BOUNDARY:
            continue
        seen.add(x)
        if x.op in _ELEMENTWISE_READ or (x.op is Ops.BITCAST and x.dtype.itemsize == x.src[0].dtype.itemsize):
            stack.extend(x.src)
            continue
        inner = x
        while inner.op in GroupOp.Movement:
            inner = inner.src[0]
        # over a buffer, the moved read itself is copied; over computed values (a broadcast row sum), what they are
        copy = x if inner.op in BUFFERS else inner
        if copy in reads:  # (a node computed into its own buffer is not in `reads`)
            found.append(copy)
    return found


def fix_assign_hazards(sink: UOp) -> tuple[UOp, dict[UOp, UOp]]:
    """`sink` with every hazardous read of an assign's value (see `hazards`) made CONTIGUOUS, so it is computed into
    a buffer of its own before the assign's kernel; returns the new sink and each replaced ASSIGN's replacement."""
    replaced: dict[UOp, UOp] = {}
    readers = _Readers(sink)
    for a in sink.toposort(gate=lambda u: u.op not in BUFFERS):
        if a.op is not Ops.ASSIGN:
            continue
        new = a.substitute(replaced) if replaced else a
        if found := hazards(new, readers if new is a else None):
            new = new.replace(src=(new.src[0], new.src[1].substitute({x: x.contiguous() for x in found})))
        if new is not a:
            replaced[a] = new
    return (sink.substitute(replaced) if replaced else sink), replaced


# *** kernel order ***
def order_assigns(order: list[UOp], buffers: dict[UOp, UOp]) -> list[UOp]:
    """Realized nodes in an order that respects assigns: a kernel that reads memory an assign overwrites (through any
    view) runs before it (write-after-read), one that reads the assigned value runs after it. `buffers` maps each
    realized node to the buffer it writes."""
    deps: dict[UOp, set[UOp]] = {}
    reads: dict[UOp, set[UOp]] = {}
    readers: dict[UOp, dict[UOp, None]] = {}  # root BUFFER -> the nodes that read some of its memory, in order
    for u in order:
        graph = u.toposort(gate=lambda x, u=u: x is u or x not in buffers)  # stop at other realized nodes
        deps[u] = {x for x in graph if x in buffers and x is not u}
        reads[u] = buffers_read(graph)
        for b in reads[u]:
            readers.setdefault(storage(b)[0], {})[u] = None
    for a in (u for u in order if u.op is Ops.ASSIGN):
        # (only a reader of the assigned root's memory can overlap it: 48 assigns x 226 kernels in the tiny Llama)
        for r in readers.get(storage(buffers[a])[0], ()):
            if r is not a and any(overlaps(buffers[a], b) for b in reads[r]) and a not in deps[r] and \
                    r not in deps[a] and a not in _closure(deps, r):
                deps[a].add(r)
    # Kahn's algorithm, the ready node first in the given order each time
    position = {u: i for i, u in enumerate(order)}
    waiting = {u: len(deps[u]) for u in order}
    users: dict[UOp, list[UOp]] = {u: [] for u in order}
    for u in order:
        for d in deps[u]:
            users[d].append(u)
    ready = [position[u] for u in order if not waiting[u]]
    heapq.heapify(ready)
    ret = []
    while ready:
        ret.append(u := order[heapq.heappop(ready)])
        for v in users[u]:
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, position[v])
    if len(ret) != len(order):
        raise RuntimeError("schedule: the assigns form a cycle (a value is read both before and after it is assigned)")
    return ret


def _closure(deps: dict[UOp, set[UOp]], u: UOp) -> set[UOp]:
    seen, stack = set(), list(deps[u])
    while stack:
        if (x := stack.pop()) not in seen:
            seen.add(x)
            stack.extend(deps[x])
    return seen
