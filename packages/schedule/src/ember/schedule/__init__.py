"""ember.schedule: a tensor UOp graph becomes a dependency-ordered list of kernels (rangeify, kernel split, memory
planning)."""

__version__ = "0.8.6"

from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from ember.schedule.allreduce import allreduce, allreduce_strategy  # noqa: E402
from ember.schedule.assign import (  # noqa: E402
    BUFFERS,
    assign_target,
    assign_targets,
    buffers_read,
    fix_assign_hazards,
    order_assigns,
    overlaps,
    storage,
)
from ember.schedule.attention import rewrite_softmax_grad_rows  # noqa: E402
from ember.schedule.kernel_cache import cached_item  # noqa: E402
from ember.schedule.kernel_split import ExecItem, copy_item, split_kernel  # noqa: E402
from ember.schedule.memory import memory_plan  # noqa: E402
from ember.schedule.multi import is_multi, pm_multi, shard_axis  # noqa: E402
from ember.schedule.rangeify import (  # noqa: E402
    broadcasts_to,
    buffer_of,
    is_buffer_view,
    kernel_ast,
    new_buffer,
    pm_split_reduces,
    realize_map,
    strip_detach,
)
from ember.uops import Ops, UOp, graph_rewrite, prod, settings, verify  # noqa: E402


@dataclass
class Schedule:
    """`items` in dependency order; `becomes` maps each realized tensor UOp to the buffer view holding its value."""

    items: list[ExecItem] = field(default_factory=list)
    becomes: dict[UOp, UOp] = field(default_factory=dict)


# kernels by template: a realized node's graph with what it reads replaced by numbered placeholder BUFFERs. The
# layers of a model (and each call of a training step) make the same templates over other buffers: rangeify runs once
_templates: dict[UOp, ExecItem | None] = {}
_TEMPLATES_MAX = 4096


def _kernel_item(us: tuple[UOp, ...], buffers: dict[UOp, UOp]) -> ExecItem | None:
    """The ExecItem of the realized nodes `us` (one, or the outputs of a multi-output kernel): from the template
    cache, or built (rangeify + kernel split) and cached; None for outputs that share no work (`kernel_ast`).
    The template stops where the kernel does: at BUFFERs and other realized nodes (read through their buffer's
    shape), and reads an assigned value through its target, as the kernel does."""
    order, seen, stack = [], set(), [(u, False) for u in reversed(us)]
    while stack:
        x, done = stack.pop()
        if done:
            order.append(x)
            continue
        if x in seen:
            continue
        seen.add(x)
        stack.append((x, True))
        if x.op in BUFFERS or (x not in us and x in buffers and x.op is not Ops.ASSIGN):
            continue
        kids = (x.src[0],) if x not in us and x.op is Ops.ASSIGN and x in buffers else x.src
        stack.extend((s, False) for s in reversed(kids) if s not in seen)
    new: dict[UOp, UOp] = {}
    real: dict[UOp, UOp] = {}

    def placeholder(buf: UOp) -> UOp:  # (a BUFFER_VIEW is a buffer to the kernel, a PARAM like any other)
        p = UOp(Ops.BUFFER, buf.dtype, (UOp(Ops.UNIQUE, arg=-1 - len(real)), UOp(Ops.DEVICE, arg=buf.device)),
                buf.shape[0])
        real[p] = buf
        return p

    for x in order:
        if x.op in BUFFERS:
            new[x] = placeholder(x)
        elif x not in us and x in buffers:
            new[x] = new[x.src[0]] if x.op is Ops.ASSIGN else placeholder(buffers[x]).reshape(x.shape)
        else:
            new[x] = x.replace(src=tuple(new[s] for s in x.src)) if x.src else x
    roots = tuple(new[u] for u in us)
    out = {new[u]: placeholder(buffers[u]) for u in us if u.op is not Ops.ASSIGN}
    # (a multi-output kernel's template: a SINK of its roots; a SINK is never a tensor node, so never a single root)
    template = roots[0] if len(roots) == 1 else UOp.sink(*roots)
    if template not in _templates:
        if len(_templates) >= _TEMPLATES_MAX:
            _templates.clear()
        try:
            _templates[template] = cached_item(template, real, lambda: _build_item(roots, out))
        except _NoSharedWork:  # (kept in memory only: a later process asks kernel_ast again)
            _templates[template] = None
    item = _templates[template]
    return None if item is None else ExecItem(item.ast, tuple(real[b] for b in item.bufs))


class _NoSharedWork(Exception):
    """The roots of a would-be multi-output kernel share no work (`kernel_ast` returned None)."""


def _build_item(roots: tuple[UOp, ...], out: dict[UOp, UOp]) -> ExecItem:
    if (ast := kernel_ast(roots[0] if len(roots) == 1 else roots, out)) is None:
        raise _NoSharedWork
    return split_kernel(ast)


def _reads(u: UOp, buffers: dict[UOp, UOp], memory: bool = False) -> set[UOp]:
    """The realized nodes that the kernel of realized node u reads; with `memory`, the buffers (BUFFER or BUFFER_VIEW)
    it reads: those of the realized nodes and those its graph reads directly."""
    out: set[UOp] = set()
    seen: set[UOp] = set()
    stack = list(u.src)
    while stack:
        if (x := stack.pop()) in seen:
            continue
        seen.add(x)
        if x in buffers:
            out.add(buffers[x] if memory else x)
        elif x.op not in BUFFERS:
            stack.extend(x.src)
        elif memory:
            out.add(x)
    return out


def _multi_output_groups(order: list[UOp], score_readers: dict[UOp, list[UOp]],
                         buffers: dict[UOp, UOp]) -> dict[UOp, tuple[tuple[UOp, ...], ExecItem]]:
    """Multi-output kernels: realized nodes that recompute the same one of attention's scores (ember.schedule.attention)
    and, made one kernel, compute part of their work once (`kernel_ast` tells). {member: (the members in order, their
    kernel)}; the kernel runs at its last member's place in the order, so no node before that may read an earlier
    member, nor may an assign run there. Two kinds:
    - a reader and the row statistics it reads (o = softmax(s) @ v with the row max and row sum the backward reads,
      of o's shape but for size-1 axes, or another rank that is (`broadcast_shape`): one kernel computes the statistics
      and o, storing all three;
    - two independent readers of one shape, dtype and device (the backward's dk and dv: the scores and dP, summed
      over the same queries; o and dq where nothing makes dq wait for o).
    A member may be an assign (an output given a buffer of its own) where no other member reads the memory it writes."""
    pos = {u: i for i, u in enumerate(order)}
    readers_of: dict[UOp, set[UOp]] = {}
    for score, readers in score_readers.items():
        for r in readers:
            readers_of.setdefault(r, set()).add(score)
    groups: dict[UOp, tuple[tuple[UOp, ...], ExecItem]] = {}

    def try_group(members: list[UOp]) -> None:
        members = sorted(members, key=pos.__getitem__)
        inside = set(members)
        for x in order[pos[members[0]] + 1:pos[members[-1]]]:  # (what runs in between must not need a member)
            if x not in inside and (x.op is Ops.ASSIGN or not inside.isdisjoint(_reads(x, buffers))):
                return
        for a in members:
            if a.op is Ops.ASSIGN and any(overlaps(buffers[a], b) for m in members if m is not a
                                          for b in _reads(m, buffers, memory=True)):
                return
        # (the biggest shape first: its ranges are the kernel's)
        roots = tuple(sorted(members, key=lambda m: -prod(m.shape)))
        if (item := _kernel_item(roots, buffers)) is not None:
            for m in members:
                groups[m] = (tuple(members), item)

    cands = [u for u in order if u in readers_of and u.op is not Ops.COPY]
    for o in cands:  # a reader with the row statistics it reads
        if o in groups:
            continue
        stats = [x for x in _reads(o, buffers) if x in readers_of and x not in groups and x.op is Ops.REDUCE_AXIS and
                 x.shape != o.shape and broadcasts_to(x.shape, o.shape) and readers_of[x] & readers_of[o] and
                 (x.dtype, x.device) == (o.dtype, o.device)]
        if stats:
            try_group([*stats, o])
    for n, a in enumerate(cands):  # two independent readers of one shape
        for b in cands[n + 1:]:
            if a in groups or b in groups or (a.shape, a.dtype, a.device) != (b.shape, b.dtype, b.device) or \
                    not readers_of[a] & readers_of[b] or a in _reads(b, buffers):
                continue
            try_group([a, b])
    return groups


def schedule(sink: UOp, hold: frozenset[UOp] = frozenset(),
             on_item: Callable[[ExecItem], None] | None = None) -> Schedule:
    """Schedule the tensors in `sink` (a SINK of tensor UOps). Tensors in `hold` (still referenced by the user) keep
    their buffers; other intermediates may share storage. A value on several devices (MSTACK) becomes an MSTACK of
    the buffers of its parts. `on_item` is called with each kernel's ExecItem as soon as it is made (before the
    memory plan: its ast is final, its buffers are not), so that a caller can build programs while the rest is
    scheduled."""
    if sink.op is not Ops.SINK:
        raise ValueError(f"schedule: expected a SINK of tensors, got {sink.op}")
    if settings.SPEC.value:
        verify(sink, "tensor")
    if not is_multi(sink):
        return _schedule(sink, hold, on_item)
    # the multi stage: one graph per device; what each given (or held) value became is the MSTACK of its parts'
    multi: dict[UOp, UOp] = {}
    per_device = graph_rewrite(sink, pm_multi, memo=multi, name="multi")
    parts = [p for s in per_device.src for p in (s.src if s.op is Ops.MSTACK else (s,))]
    held = hold | {p for h in hold if (m := multi.get(h)) is not None and m.op is Ops.MSTACK for p in m.src}
    sched = _schedule(UOp.sink(*parts), frozenset(held), on_item)
    for orig in (*sink.src, *hold):
        if (new := multi.get(orig)) is None or orig in sched.becomes:
            continue
        if new.op is Ops.MSTACK and all(p in sched.becomes for p in new.src):  # (a detached buffer: the buffer)
            sched.becomes[orig] = UOp.mstack([strip_detach(sched.becomes[p]) for p in new.src], new.arg)
        elif new in sched.becomes:
            sched.becomes[orig] = sched.becomes[new]
    return sched


def _schedule(sink: UOp, hold: frozenset[UOp], on_item: Callable[[ExecItem], None] | None = None) -> Schedule:
    given = sink
    sink, fixed = fix_assign_hazards(sink)
    sink = rewrite_softmax_grad_rows(sink)  # (attention.py: the backward reads the forward's output)
    sink = graph_rewrite(sink, pm_split_reduces, name="split reduces")
    score_readers: dict[UOp, list[UOp]] = {}
    realized = realize_map(sink, score_readers)
    order = [u for u in sink.toposort(gate=lambda u: u.op not in BUFFERS) if u in realized]
    buffers: dict[UOp, UOp] = {}
    for u in order:
        buffers[u] = assign_target(u) if u.op is Ops.ASSIGN else new_buffer(u, UOp.unique().arg)
    if any(u.op is Ops.ASSIGN for u in order):
        order = order_assigns(order, buffers)
    groups = _multi_output_groups(order, score_readers, buffers) if score_readers else {}
    items: list[ExecItem] = []
    for u in order:
        if prod(u.shape) == 0:
            continue
        if u.op is Ops.COPY:
            src = strip_detach(u.src[0])
            items.append(copy_item(buffers[u], buffer_of(src) if is_buffer_view(src) else buffers[src]))
            continue
        if (group := groups.get(u)) is not None and u is not group[0][-1]:
            continue  # (made with the other members, at the last one's place in the order)
        item = group[1] if group is not None else _kernel_item((u,), buffers)
        assert item is not None
        items.append(item)
        if on_item is not None:
            on_item(item)
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
    for orig, new in fixed.items():  # assigns that copy a hazardous read first: live tensors hold the original
        if new in becomes:
            becomes[orig] = becomes[new]
    # (an assign's own buffer too: its target may be a permuted or shrunk view, which buffer_of does not see through)
    made = set(buffers.values())  # (a set: `in buffers.values()` was a scan of them per buffer of every item)
    keep = {buffer_of(v) for v in becomes.values()} | {buffers[u] for u in order if u.op is Ops.ASSIGN} | \
        {b for it in items for b in it.bufs if b not in made}
    return Schedule(memory_plan(items, keep), becomes)


__all__ = ["ExecItem", "Schedule", "schedule", "realize_map", "memory_plan", "assign_target", "assign_targets",
           "buffers_read", "overlaps", "storage", "shard_axis", "allreduce", "allreduce_strategy"]
