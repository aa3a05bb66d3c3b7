"""ember.schedule: a tensor UOp graph becomes a dependency-ordered list of kernels (rangeify, kernel split, memory
planning)."""

__version__ = "0.2.1"

import heapq  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from ember.schedule.kernel_split import ExecItem, copy_item, split_kernel  # noqa: E402
from ember.schedule.memory import memory_plan  # noqa: E402
from ember.schedule.rangeify import (  # noqa: E402
    buffer_of,
    is_buffer_view,
    kernel_ast,
    new_buffer,
    pm_split_reduces,
    realize_map,
    strip_detach,
)
from ember.uops import GroupOp, Ops, UOp, graph_rewrite, prod, verify  # noqa: E402

_unique = itertools.count(1 << 40)  # UNIQUE ids of scheduler-made buffers (the tensor layer counts from 0)


@dataclass
class Schedule:
    """`items` in dependency order; `becomes` maps each realized tensor UOp to the buffer view holding its value."""

    items: list[ExecItem] = field(default_factory=list)
    becomes: dict[UOp, UOp] = field(default_factory=dict)


def assign_target(a: UOp) -> UOp:
    """The BUFFER an ASSIGN writes (its target may be a view of it)."""
    t = a.src[0]
    while t.op in GroupOp.Movement:
        t = t.src[0]
    if t.op is not Ops.BUFFER:
        raise ValueError(f"assign: the target must be a realized buffer (or a view of one), got {t.op}")
    return t


def order_assigns(order: list[UOp], buffers: dict[UOp, UOp]) -> list[UOp]:
    """Realized nodes in an order that respects assigns: a kernel that reads a buffer's old value runs before the
    assign that overwrites it (write-after-read); one that reads the assigned value runs after it."""
    deps: dict[UOp, set[UOp]] = {}
    reads: dict[UOp, set[UOp]] = {}
    for u in order:
        graph = u.toposort(gate=lambda x, u=u: x is u or x not in buffers)  # stop at other realized nodes
        deps[u] = {x for x in graph if x in buffers and x is not u}
        reads[u] = {x for x in graph if x.op is Ops.BUFFER}
    for a in (u for u in order if u.op is Ops.ASSIGN):
        for r in order:
            if r is not a and buffers[a] in reads[r] and a not in deps[r] and r not in deps[a] and \
                    a not in _closure(deps, r):
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


# kernels by template: a realized node's graph with what it reads replaced by numbered placeholder BUFFERs. The
# layers of a model (and each call of a training step) make the same templates over other buffers: rangeify runs once
_templates: dict[UOp, ExecItem] = {}
_TEMPLATES_MAX = 4096


def _kernel_item(u: UOp, buffers: dict[UOp, UOp]) -> ExecItem:
    """The ExecItem of realized node u: from the template cache, or built (rangeify + kernel split) and cached.
    The template stops where the kernel does: at BUFFERs and other realized nodes (read through their buffer's
    shape), and reads an assigned value through its target, as the kernel does."""
    order, seen, stack = [], set(), [(u, False)]
    while stack:
        x, done = stack.pop()
        if done:
            order.append(x)
            continue
        if x in seen:
            continue
        seen.add(x)
        stack.append((x, True))
        if x.op is Ops.BUFFER or (x is not u and x in buffers and x.op is not Ops.ASSIGN):
            continue
        kids = (x.src[0],) if x is not u and x.op is Ops.ASSIGN and x in buffers else x.src
        stack.extend((s, False) for s in reversed(kids) if s not in seen)
    new: dict[UOp, UOp] = {}
    real: dict[UOp, UOp] = {}

    def placeholder(buf: UOp) -> UOp:
        p = UOp(Ops.BUFFER, buf.dtype, (UOp(Ops.UNIQUE, arg=-1 - len(real)), buf.src[1]), buf.arg)
        real[p] = buf
        return p

    for x in order:
        if x.op is Ops.BUFFER:
            new[x] = placeholder(x)
        elif x is not u and x in buffers:
            new[x] = new[x.src[0]] if x.op is Ops.ASSIGN else placeholder(buffers[x]).reshape(x.shape)
        else:
            new[x] = x.replace(src=tuple(new[s] for s in x.src)) if x.src else x
    template = new[u]
    out = {} if u.op is Ops.ASSIGN else {template: placeholder(buffers[u])}
    if (item := _templates.get(template)) is None:
        if len(_templates) >= _TEMPLATES_MAX:
            _templates.clear()
        item = _templates[template] = split_kernel(kernel_ast(template, out))
    return ExecItem(item.ast, tuple(real[b] for b in item.bufs))


def schedule(sink: UOp, hold: frozenset[UOp] = frozenset()) -> Schedule:
    """Schedule the tensors in `sink` (a SINK of tensor UOps). Tensors in `hold` (still referenced by the user) keep
    their buffers; other intermediates may share storage."""
    if sink.op is not Ops.SINK:
        raise ValueError(f"schedule: expected a SINK of tensors, got {sink.op}")
    if os.environ.get("SPEC"):
        verify(sink, "tensor")
    given = sink
    sink = graph_rewrite(sink, pm_split_reduces, name="split reduces")
    realized = realize_map(sink)
    order = [u for u in sink.toposort(gate=lambda u: u.op is not Ops.BUFFER) if u in realized]
    buffers: dict[UOp, UOp] = {}
    for u in order:
        buffers[u] = assign_target(u) if u.op is Ops.ASSIGN else new_buffer(u, next(_unique))
    if any(u.op is Ops.ASSIGN for u in order):
        order = order_assigns(order, buffers)
    items: list[ExecItem] = []
    for u in order:
        if prod(u.shape) == 0:
            continue
        if u.op is Ops.COPY:
            src = u.src[0]
            items.append(copy_item(buffers[u], buffer_of(src) if is_buffer_view(src) else buffers[src]))
        else:
            items.append(_kernel_item(u, buffers))
    # what the caller can see: outputs, held tensors and assigns keep their buffers; the rest may be reused
    outputs = {strip_detach(s) for s in sink.src}
    becomes = {u: (u.src[0] if u.op is Ops.ASSIGN else buffers[u].reshape(u.shape))
               for u in order if u in outputs or u in hold or u.op is Ops.ASSIGN}
    for s in sink.src:
        if s not in becomes:  # already a buffer or a constant (nothing to compute), or a detached output
            becomes[s] = becomes.get(strip_detach(s), s)
    for orig, new in zip(given.src, sink.src):  # outputs a rewrite (split reduces) replaced: keyed as given
        if orig is not new:
            becomes[orig] = becomes[new]
    keep = {buffer_of(v) for v in becomes.values()} | {b for it in items for b in it.bufs if b not in buffers.values()}
    return Schedule(memory_plan(items, keep), becomes)


__all__ = ["ExecItem", "Schedule", "schedule", "realize_map", "memory_plan"]
