"""ember.schedule: a tensor UOp graph becomes a dependency-ordered list of kernels (rangeify, kernel split, memory
planning)."""

__version__ = "0.1.0"

import itertools  # noqa: E402
import os  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from ember.schedule.kernel_split import ExecItem, copy_item, split_kernel  # noqa: E402
from ember.schedule.memory import memory_plan  # noqa: E402
from ember.schedule.rangeify import buffer_of, is_buffer_view, kernel_ast, new_buffer, realize_map  # noqa: E402
from ember.uops import Ops, UOp, prod, verify  # noqa: E402

_unique = itertools.count(1 << 40)  # UNIQUE ids of scheduler-made buffers (the tensor layer counts from 0)


@dataclass
class Schedule:
    """`items` in dependency order; `becomes` maps each realized tensor UOp to the buffer view holding its value."""

    items: list[ExecItem] = field(default_factory=list)
    becomes: dict[UOp, UOp] = field(default_factory=dict)


def schedule(sink: UOp, hold: frozenset[UOp] = frozenset()) -> Schedule:
    """Schedule the tensors in `sink` (a SINK of tensor UOps). Tensors in `hold` (still referenced by the user) keep
    their buffers; other intermediates may share storage."""
    if sink.op is not Ops.SINK:
        raise ValueError(f"schedule: expected a SINK of tensors, got {sink.op}")
    if os.environ.get("SPEC"):
        verify(sink, "tensor")
    realized = realize_map(sink)
    order = [u for u in sink.toposort(gate=lambda u: u.op is not Ops.BUFFER) if u in realized]
    buffers: dict[UOp, UOp] = {}
    for u in order:
        buffers[u] = buffer_of(u.src[0]) if u.op is Ops.ASSIGN else new_buffer(u, next(_unique))
    items: list[ExecItem] = []
    for u in order:
        if prod(u.shape) == 0:
            continue
        if u.op is Ops.COPY:
            src = u.src[0]
            items.append(copy_item(buffers[u], buffer_of(src) if is_buffer_view(src) else buffers[src]))
        else:
            items.append(split_kernel(kernel_ast(u, buffers)))
    # what the caller can see: outputs, held tensors and assigns keep their buffers; the rest may be reused
    becomes = {u: (u.src[0] if u.op is Ops.ASSIGN else buffers[u].reshape(u.shape))
               for u in order if u in sink.src or u in hold or u.op is Ops.ASSIGN}
    for s in sink.src:
        if s not in becomes:
            becomes[s] = s  # already a buffer (or a constant): nothing to compute
    keep = {buffer_of(v) for v in becomes.values()} | {b for it in items for b in it.bufs if b not in buffers.values()}
    return Schedule(memory_plan(items, keep), becomes)


__all__ = ["ExecItem", "Schedule", "schedule", "realize_map", "memory_plan"]
