"""Movement ops as index math: the input index expression (and a validity mask) of each output index.

`movement_index(op, arg, in_shape, idxs)` maps the output indices of one movement op to its input's indices;
`view_index(u, idxs)` walks a chain of movement ops down to the first non-movement source.
"""

from __future__ import annotations

from typing import Any

from ember.uops.dtype import dtypes
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.ops import UOp
from ember.uops.shape import Shape, is_int, sint

Valid = UOp | None  # None: always valid


def _idx(x: sint) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)


def _and(a: Valid, b: Valid) -> Valid:
    return b if a is None else a if b is None else a & b


def movement_index(op: Ops, arg: Any, in_shape: Shape, idxs: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], Valid]:
    """The input indices of movement op `op(arg)` applied to a tensor of `in_shape`, at output indices `idxs`."""
    if op is Ops.RESHAPE:
        # flatten the output index row-major, then unflatten it in the input shape
        flat: UOp = _idx(0)
        for n, (i, size) in enumerate(zip(idxs, arg)):
            flat = i if n == 0 else flat * size + i
        out: list[UOp] = []
        for size in reversed(in_shape):
            out.append(flat % size)
            flat = flat // size
        return tuple(reversed(out)), None
    if op is Ops.PERMUTE:
        ret: list[UOp | None] = [None] * len(idxs)
        for out_axis, in_axis in enumerate(arg):
            ret[in_axis] = idxs[out_axis]
        return tuple(r for r in ret if r is not None), None
    if op is Ops.EXPAND:
        return tuple(_idx(0) if is_int(s) and s == 1 and not (is_int(n) and n == 1) else i
                     for i, s, n in zip(idxs, in_shape, arg)), None
    if op is Ops.PAD:
        valid: Valid = None
        ret_pad = []
        for i, s, (before, after) in zip(idxs, in_shape, arg):
            if not (is_int(before) and before == 0):
                valid = _and(valid, i >= before)
            if not (is_int(after) and after == 0):
                valid = _and(valid, i < (_idx(s) if is_int(before) and before == 0 else _idx(s) + before))
            ret_pad.append(i if is_int(before) and before == 0 else i - before)
        return tuple(ret_pad), valid
    if op is Ops.SHRINK:
        return tuple(i + b for i, (b, _) in zip(idxs, arg)), None
    if op is Ops.FLIP:
        return tuple((_idx(s) - 1) - i if f else i for i, s, f in zip(idxs, in_shape, arg)), None
    raise ValueError(f"movement_index: {op} is not a movement op")


def view_index(u: UOp, idxs: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...], Valid]:
    """Follow the movement ops from `u` down to its base: (base, index expressions into the base, validity)."""
    if u.shape is None or len(idxs) != len(u.shape):
        raise ValueError(f"view_index: need one index per dim of {u.shape}, got {len(idxs)}")
    valid: Valid = None
    while u.op in GroupOp.Movement:
        idxs, v = movement_index(u.op, u.arg, u.src[0].shape, idxs)  # type: ignore[arg-type]
        valid = _and(valid, v)
        u = u.src[0]
    return u, idxs, valid
