"""Linearize: order a lowered kernel graph into a flat program with properly nested loops.

Every UOp is placed in the innermost loop among the ranges it depends on (so loop-invariant work is hoisted out of
inner loops). Each loop's body is then ordered by dependencies, a nested loop being one item of its parent's body.
"""

from __future__ import annotations

import heapq

from ember.uops import Ops, UOp, dtypes

_STRUCTURAL = (Ops.SINK, Ops.END)  # kept in the graph for ordering, not emitted as such
_NO_RANGES: frozenset[UOp] = frozenset()


def open_range_sets(nodes: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each node (sources first), the RANGEs it depends on that no END below it has closed."""
    rs: dict[UOp, frozenset[UOp]] = {}
    for n in nodes:
        s = rs[n.src[0]] if n.src else _NO_RANGES
        for x in n.src[1:]:  # (most nodes open no range their first source has not: its set, no new one)
            if (t := rs[x]) is not s and not t <= s:
                s = s | t
        if n.op is Ops.RANGE:
            s = s | {n}
        elif n.op is Ops.END:
            s = s - set(n.src[1:])
        rs[n] = s
    return rs


def linearize(sink: UOp) -> tuple[UOp, ...]:
    """The program of `sink` as a tuple of UOps in execution order, loops as RANGE ... END(range)."""
    nodes = sink.toposort()
    position = {u: i for i, u in enumerate(nodes)}
    rs = open_range_sets(nodes)

    # the loop tree: the ranges an END closes nest in the order listed, inside the loop the END itself sits in
    parent: dict[UOp, UOp | None] = {}
    depth: dict[UOp | None, int] = {None: -1}

    def deepest(ranges: frozenset[UOp]) -> UOp | None:
        return max(ranges, key=depth.__getitem__, default=None)

    for e in reversed([n for n in nodes if n.op is Ops.END]):
        outer = deepest(rs[e])
        for r in e.src[1:]:
            if r in parent:
                raise AssertionError(f"linearize: range {r.arg} is closed by more than one END")
            parent[r], depth[r] = outer, depth[outer] + 1
            outer = r
    if missing := [n for n in nodes if n.op is Ops.RANGE and n not in parent]:
        raise AssertionError(f"linearize: ranges {[r.arg for r in missing]} are never closed by an END")
    place: dict[UOp, UOp | None] = {}
    innermost: dict[frozenset[UOp], UOp | None] = {}  # (nodes share their sets: each one's deepest range once)
    for n in nodes:
        if n.op is Ops.RANGE:
            place[n] = n
        elif (r := rs[n]) in innermost:
            place[n] = innermost[r]
        else:
            place[n] = innermost[r] = deepest(r)

    # each edge n -> s orders two items of one loop body: those that hold n and s in the innermost loop holding both
    # (one climb of the loop tree per edge; below that loop s is outside, above it both are in one item)
    item_deps: dict[UOp, set[UOp]] = {}
    for n in nodes:
        for s in n.src:
            a, x = (parent[n] if n.op is Ops.RANGE else place[n]), n
            b, y = (parent[s] if s.op is Ops.RANGE else place[s]), s
            while a is not b:
                da, db = depth[a], depth[b]
                if da >= db:
                    x, a = a, parent[a]  # type: ignore[index]
                if db >= da:
                    y, b = b, parent[b]  # type: ignore[index]
            if x is not y:
                item_deps.setdefault(x, set()).add(y)

    members: dict[UOp | None, list[UOp]] = {}
    for n in nodes:
        if n.op is not Ops.RANGE:
            members.setdefault(place[n], []).append(n)
    children: dict[UOp | None, list[UOp]] = {}
    for r, p in parent.items():
        children.setdefault(p, []).append(r)

    out: list[UOp] = []

    def emit(scope: UOp | None) -> None:
        items: list[UOp] = members.get(scope, []) + children.get(scope, [])
        deps: dict[UOp, set[UOp]] = {it: item_deps.get(it, set()) for it in items}
        # Kahn's algorithm, preferring the order of the original toposort
        users: dict[UOp, list[UOp]] = {it: [] for it in items}
        for it, ds in deps.items():
            for d in ds:
                users[d].append(it)
        remaining = {it: len(ds) for it, ds in deps.items()}
        heap = [(position[it], it) for it, c in remaining.items() if c == 0]  # (positions are unique)
        heapq.heapify(heap)
        done = 0
        while heap:
            *_, it = heapq.heappop(heap)
            done += 1
            if it.op is Ops.RANGE and it in parent and parent[it] is scope:
                out.append(it)
                emit(it)
                out.append(UOp(Ops.END, dtypes.void, (it,)))
            elif it.op not in _STRUCTURAL:
                out.append(it)
            for u in users[it]:
                remaining[u] -= 1
                if remaining[u] == 0:
                    heapq.heappush(heap, (position[u], u))
        if done != len(items):
            raise AssertionError("linearize: the loop body has a dependency cycle")

    emit(None)
    return tuple(out)

