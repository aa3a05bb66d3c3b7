"""Shape rules of the tensor-level ops: broadcasting, the movement ops, reductions.

Shapes are tuples of `sint` (an int, or an integer UOp for symbolic sizes). Every rule validates its argument and
raises a ValueError that names the op, what was given and what is accepted.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from ember.uops.ops import UOp

sint = Union[int, "UOp"]
Shape = tuple[sint, ...]


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def prod(xs: tuple[sint, ...] | list[sint]) -> sint:
    """Product of sizes (1 for an empty shape); symbolic when any size is."""
    return functools.reduce(operator.mul, xs, 1)


def sint_eq(a: sint, b: sint) -> bool:
    """Whether two sizes are known to be equal (hash-consing makes equal symbolic expressions identical)."""
    if is_int(a) and is_int(b):
        return a == b
    if not is_int(a) and not is_int(b):
        return a is b or a.simplify() is b.simplify()  # type: ignore[union-attr]
    return False


def _check_sizes(op: str, shape: Shape) -> None:
    for s in shape:
        if is_int(s):
            if s < 0:
                raise ValueError(f"{op}: sizes must be >= 0, got shape {shape}")
        elif not hasattr(s, "op"):
            raise TypeError(f"{op}: sizes must be ints or integer UOps, got {type(s).__name__} in {shape}")


def broadcast_shape(*shapes: Shape) -> Shape:
    """The numpy broadcast of `shapes`: dims aligned from the right, size 1 stretches."""
    ndim = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out: list[sint] = []
    for dims in zip(*padded):
        non_one = [d for d in dims if not (is_int(d) and d == 1)]
        if any(not sint_eq(d, non_one[0]) for d in non_one[1:]):
            raise ValueError(f"broadcast: shapes {' and '.join(str(tuple(s)) for s in shapes)} are not compatible")
        out.append(non_one[0] if non_one else 1)
    return tuple(out)


def reshape_shape(shape: Shape, new_shape: Shape) -> Shape:
    _check_sizes("reshape", new_shape)
    if not sint_eq(a := prod(shape), b := prod(new_shape)):
        raise ValueError(f"reshape: cannot view shape {tuple(shape)} as {tuple(new_shape)}: sizes {a} and {b} differ")
    return tuple(new_shape)


def permute_shape(shape: Shape, order: tuple[int, ...]) -> Shape:
    if sorted(order) != list(range(len(shape))):
        raise ValueError(f"permute: order {tuple(order)} is not a permutation of the {len(shape)} axes of "
                         f"{tuple(shape)}")
    return tuple(shape[i] for i in order)


def expand_shape(shape: Shape, new_shape: Shape) -> Shape:
    _check_sizes("expand", new_shape)
    if len(shape) != len(new_shape):
        raise ValueError(f"expand: shape {tuple(shape)} and {tuple(new_shape)} have different numbers of dims")
    for s, n in zip(shape, new_shape):
        if not sint_eq(s, n) and not (is_int(s) and s == 1):
            raise ValueError(f"expand: cannot expand {tuple(shape)} to {tuple(new_shape)}: only size-1 dims expand")
    return tuple(new_shape)


def pad_shape(shape: Shape, padding: tuple[tuple[sint, sint], ...]) -> Shape:
    if len(padding) != len(shape) or any(len(p) != 2 for p in padding):
        raise ValueError(f"pad: padding {padding} needs one (before, after) pair per dim of {tuple(shape)}")
    if any(is_int(x) and x < 0 for p in padding for x in p):
        raise ValueError(f"pad: padding amounts must be >= 0, got {padding}")
    return tuple(s + b + a for s, (b, a) in zip(shape, padding))


def shrink_shape(shape: Shape, bounds: tuple[tuple[sint, sint], ...]) -> Shape:
    if len(bounds) != len(shape) or any(len(p) != 2 for p in bounds):
        raise ValueError(f"shrink: bounds {bounds} need one (begin, end) pair per dim of {tuple(shape)}")
    for s, (b, e) in zip(shape, bounds):
        if all(is_int(x) for x in (s, b, e)) and not 0 <= b <= e <= s:
            raise ValueError(f"shrink: bounds {bounds} out of range for shape {tuple(shape)}: "
                             "need 0 <= begin <= end <= size")
    return tuple(e - b for b, e in bounds)


def flip_shape(shape: Shape, flips: tuple[bool, ...]) -> Shape:
    if len(flips) != len(shape) or not all(isinstance(f, bool) for f in flips):
        raise ValueError(f"flip: arg {flips} needs one bool per dim of {tuple(shape)}")
    return tuple(shape)


def shard_shape(shape: Shape, axis: int | None, n: int) -> Shape:
    """The shape of each of the n parts of a value of `shape` split evenly along `axis` (None: whole copies)."""
    return tuple(shape) if axis is None else tuple(s // n if a == axis else s for a, s in enumerate(shape))


def shard_bounds(shape: Shape, axis: int, i: int, n: int) -> tuple[tuple[sint, sint], ...]:
    """The SHRINK bounds of part i of a value of `shape` split evenly along `axis` into n parts."""
    size = shape[axis] // n
    return tuple((i * size, (i + 1) * size) if a == axis else (0, s) for a, s in enumerate(shape))


def reduce_shape(shape: Shape, axes: tuple[int, ...]) -> Shape:
    if any(not 0 <= a < len(shape) for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"reduce: axes {axes} are not distinct axes of shape {tuple(shape)} "
                         f"(0 <= axis < {len(shape)})")
    return tuple(1 if i in axes else s for i, s in enumerate(shape))
