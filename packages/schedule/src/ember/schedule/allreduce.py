"""Allreduce: one value per device in, their elementwise fold (ADD, MUL or MAX) on every device out, as a tensor graph.

The result is ordinary COPY and ALU nodes, so the scheduler turns it into copies and kernels that overlap and fuse with
the work around them. Two strategies, both with a fixed fold order (every device gets the same bits):

- naive: each part is copied to every other device and folded there in device order: n*(n-1) copies, n kernels.
- ring: the flattened value is cut into n chunks (boundaries at multiples of 256 bytes, so each chunk starts aligned;
  the last is short); chunk c is folded on its way around the ring from device c to device c-1 (reduce-scatter), then
  copied on around the ring to every other device (all-gather); each device puts its chunks side by side.
  n*(n-1) fold kernels + n reassembly kernels, 2*n*(n-1) copies (fewer with empty chunks: fewer elements than units).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.uops import GroupOp, Ops, UOp, dtypes, prod, settings

STRATEGIES = ("naive", "ring")
CHUNK_ALIGN_BYTES = 256  # ring chunks start at multiples of this: vector loads and DMA engines want aligned starts


def allreduce_strategy(nbytes: int, ndev: int) -> str:
    """The strategy of an automatic allreduce of `nbytes` per device over `ndev` devices: `MULTI_ALLREDUCE` if set,
    else ring from 3 devices and `RING_ALLREDUCE_THRESHOLD` bytes (ring moves 2(n-1)/n of the bytes naive moves per
    device, in 2(n-1) dependent steps instead of one: with 2 devices it moves as much, and for small buffers the
    steps' latency dominates), else naive.

        allreduce_strategy(64 << 20, 8) == "ring";  allreduce_strategy(4096, 8) == "naive"
    """
    if forced := settings.MULTI_ALLREDUCE.value:
        return forced
    return "ring" if ndev > 2 and nbytes >= settings.RING_ALLREDUCE_THRESHOLD.value else "naive"


def allreduce(op: Ops, parts: Sequence[UOp], strategy: str | None = None) -> list[UOp]:
    """The fold with `op` (ADD, MUL or MAX) of `parts` (one tensor UOp per device, one shape and dtype), on each part's
    device: result i is on `parts[i].device`. `strategy` is "naive", "ring" or None (`allreduce_strategy` decides).

        a, b = Tensor(x, device="CPU:0").uop, Tensor(y, device="CPU:1").uop
        ra, rb = allreduce(Ops.ADD, [a, b])   # x + y, on CPU:0 and on CPU:1
    """
    if op not in GroupOp.Reduce:
        raise ValueError(f"allreduce: op must be one of {sorted(o.name for o in GroupOp.Reduce)}, got "
                         f"{op.name if isinstance(op, Ops) else repr(op)}")
    if not parts:
        raise ValueError("allreduce: no parts given (expected one tensor per device)")
    shape, dtype = parts[0].shape, parts[0].dtype
    if shape is None:
        raise ValueError(f"allreduce: parts must be tensors, got a {parts[0].op.name}")
    if any(p.shape != shape or p.dtype != dtype for p in parts):
        raise ValueError(f"allreduce: parts must share one shape and dtype, got {[(p.shape, p.dtype) for p in parts]}")
    devices = [p.device for p in parts]
    if not all(isinstance(d, str) for d in devices):
        raise ValueError(f"allreduce: each part must be on one device, got devices {devices}")
    if len(set(devices)) != len(devices):
        raise ValueError(f"allreduce: parts must be on distinct devices, got {devices}")
    if strategy is None:
        strategy = allreduce_strategy(prod(shape) * dtype.itemsize, len(parts))
    if strategy not in STRATEGIES:
        raise ValueError(f"allreduce: strategy must be one of {', '.join(STRATEGIES)} or None, got {strategy!r}")
    return _naive(op, list(parts)) if strategy == "naive" or len(parts) == 1 else _ring(op, list(parts))


def _fold(op: Ops, values: list[UOp]) -> UOp:
    out = values[0]
    for v in values[1:]:
        out = out.alu(op, v)
    return out


def _naive(op: Ops, parts: list[UOp]) -> list[UOp]:
    return [_fold(op, [p if p.device == here.device else p.copy_to_device(here.device) for p in parts])
            for here in parts]


def _chunk_bounds(numel: int, ndev: int, itemsize: int) -> list[tuple[int, int]]:
    """The ring's [start, end) of each device's chunk: whole units of CHUNK_ALIGN_BYTES, as even as they go, the last
    chunk short by what the last unit overhangs (chunks are empty when there are fewer units than devices)."""
    unit = max(1, CHUNK_ALIGN_BYTES // itemsize)
    per, extra = divmod(-(-numel // unit), ndev)
    edges = [min(numel, unit * (c * per + min(c, extra))) for c in range(ndev + 1)]
    return list(zip(edges, edges[1:]))


def _chunk(part: UOp, start: int, end: int) -> UOp:
    """Elements [start, end) of the flattened part (all of them: the part as it is). Of a realized part, a BUFFER_VIEW:
    a copy reads it in place (a copy of a SHRINK would first be stored by a kernel of its own)."""
    if (start, end) == (0, prod(part.shape)):
        return part
    base = part
    while base.op is Ops.RESHAPE:
        base = base.src[0]
    if base.op is Ops.BUFFER:
        return UOp(Ops.BUFFER_VIEW, part.dtype, (base,), (end - start, start))
    if base.op is Ops.BUFFER_VIEW:
        return UOp(Ops.BUFFER_VIEW, part.dtype, base.src, (end - start, base.arg[1] + start))
    return part.reshape((prod(part.shape),)).shrink(((start, end),))


def _ring(op: Ops, parts: list[UOp]) -> list[UOp]:
    n, shape, numel = len(parts), parts[0].shape, prod(parts[0].shape)
    held: list[list[tuple[int, UOp]]] = [[] for _ in parts]  # per device: (start, whole chunk) of each chunk it holds
    for c, (start, end) in enumerate(_chunk_bounds(numel, n, parts[0].dtype.itemsize)):
        if start == end:
            continue
        acc = _chunk(parts[c], start, end)
        for k in range(1, n):  # reduce-scatter: chunk c folded on each hop, fully folded on device c-1
            here = parts[(c + k) % n]
            acc = acc.copy_to_device(here.device).alu(op, _chunk(here, start, end))
        held[(c - 1) % n].append((start, acc))
        for k in range(n - 1):  # all-gather: on around the ring from device c-1
            acc = acc.copy_to_device(parts[(c + k) % n].device)
            held[(c + k) % n].append((start, acc))
    # (one chunk: the whole part, in its shape)
    return [side_by_side([x for _, x in sorted(chunks)], 0).reshape(shape) for chunks in held]


def side_by_side(values: list[UOp], axis: int) -> UOp:
    """`values` (one device, one shape but along `axis`) concatenated along `axis`: each padded into place, then summed
    (disjoint, so the sum is exact; OR for bool)."""
    if len(values) == 1:
        return values[0]
    total, start, placed = sum(v.shape[axis] for v in values), 0, []
    for v in values:
        placed.append(v.pad(tuple((start, total - start - v.shape[axis]) if a == axis else (0, 0)
                                  for a in range(v.ndim))))
        start += v.shape[axis]
    return _fold(Ops.OR if values[0].dtype == dtypes.bool else Ops.ADD, placed)
