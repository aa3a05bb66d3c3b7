"""Memory planning: intermediate buffers whose lifetimes do not overlap share storage."""

from __future__ import annotations

from ember.schedule.kernel_split import ExecItem
from ember.uops import Ops, UOp


def memory_plan(items: list[ExecItem], keep: set[UOp]) -> list[ExecItem]:
    """Reuse the BUFFER of a dead intermediate for a later one of the same device, dtype and size. `keep` holds the
    buffers that must survive the schedule (inputs, outputs, anything a live tensor still reads)."""
    last_use: dict[UOp, int] = {}
    first_use: dict[UOp, int] = {}
    for i, it in enumerate(items):
        for b in it.bufs:
            first_use.setdefault(b, i)
            last_use[b] = i
    free: dict[tuple, list[UOp]] = {}
    assigned: dict[UOp, UOp] = {}
    for i, it in enumerate(items):
        for b in it.bufs:
            if b in keep or first_use[b] != i or b in assigned:
                continue
            key = (b.src[1].arg, b.dtype, b.arg)
            if free.get(key):
                assigned[b] = free[key].pop()
        for b in it.bufs:
            if b not in keep and last_use[b] == i:
                free.setdefault((b.src[1].arg, b.dtype, b.arg), []).append(assigned.get(b, b))
    if not assigned:
        return items
    return [ExecItem(it.ast, tuple(assigned.get(b, b) for b in it.bufs)) for it in items]


__all__ = ["memory_plan", "Ops"]
