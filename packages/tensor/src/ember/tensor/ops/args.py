"""Argument parsing shared by Tensor's op modules: device names, axes, dtypes given as names, and shapes given as
`(2, 3)` or `2, 3`."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ember.runtime import Device
from ember.uops import DType, dtypes


class AxisError(IndexError, ValueError):
    """An axis out of range or repeated: an IndexError as in PyTorch, and a ValueError (as numpy's AxisError is both)
    for code written against either."""


class ArgumentError(ValueError, RuntimeError):
    """A bad argument value where PyTorch raises a RuntimeError (an unknown rounding mode, a repeated dim, a bad
    permutation): a ValueError and that RuntimeError, for code written against either."""


class ShapeError(ArgumentError):
    """Shapes that do not fit together (broadcast, reshape, matmul): a ValueError, and the RuntimeError PyTorch raises
    for them."""


class DTypeError(TypeError, RuntimeError):
    """An op on a dtype it does not take (a bitwise op on floats): a TypeError, and the RuntimeError PyTorch raises."""


class ModeError(ValueError, NotImplementedError):
    """An unknown mode string (pad's): a ValueError, and the NotImplementedError PyTorch raises."""


class DTypeNameError(ValueError, AttributeError):
    """An unknown dtype name: a ValueError, and the AttributeError of tinygrad's `getattr(dtypes, name)`."""


class IndexRangeError(IndexError, RuntimeError):
    """An index tensor's value out of range in gather/scatter/index_select: an IndexError, and the RuntimeError PyTorch
    raises for it."""


F = TypeVar("F", bound=Callable[..., Any])


def torch_axis_name(name: str = "dim") -> Callable[[F], F]:
    """A method with an `axis` parameter (tinygrad's name) that takes PyTorch's name for it too, as a keyword:
    `x.sum(dim=1)`, `x.flip(dims=(0,))`."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if name in kwargs:
                if args or "axis" in kwargs:
                    raise TypeError(f"{fn.__name__}: got both axis and {name} (they are one argument)")
                kwargs["axis"] = kwargs.pop(name)
            return fn(self, *args, **kwargs)
        return method  # type: ignore[return-value]
    return decorate


def to_dtype(dtype: DType | str | None) -> DType | None:
    """`dtype` as a DType: a DType, a name (`"int32"`, `'half'`, `"torch.float32"`), or None (kept)."""
    if dtype is None or isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        try:
            return dtypes.from_name(dtype.removeprefix("torch.").removeprefix("dtypes."))
        except ValueError as e:
            raise DTypeNameError(str(e)) from None
    raise TypeError(f"dtype: expected a DType or its name like 'int32', got {type(dtype).__name__} {dtype!r}")


def is_dtype_name(name: str) -> bool:
    """Whether `name` names a dtype (`"float16"`, `'half'`, `"torch.int32"`); no device has such a name."""
    try:
        to_dtype(name)
    except ValueError:
        return False
    return True


def canonical_device(device: str | Sequence[str] | None) -> Any:
    """The registered name of `device` (`Device.DEFAULT` for None), or of each device of a tuple or list of them (a
    multi-device tensor's); an unknown device raises, listing the known. Returns a str, or a tuple of str."""
    if isinstance(device, (tuple, list)):
        names = tuple(canonical_device(d) for d in device)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"device: a multi-device tensor needs distinct devices, got {tuple(device)}")
        return names
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device: expected a device name like 'CPU:1' or a tuple of them, got {device!r}")
    name = Device.canonicalize(device if device is not None else Device.DEFAULT)
    Device[name]  # noqa: B018 - an unknown device fails here, with the list of registered ones
    return name


def normalize_axis(axis: int | Sequence[int] | None, ndim: int, op: str) -> tuple[int, ...]:
    """`axis` (an int, ints, or None for all) as dims 0..ndim-1; an AxisError (an IndexError and a ValueError) naming
    `op` when out of range or repeated. A 0-d tensor takes axis 0 and -1, as in PyTorch."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or not -max(ndim, 1) <= a < max(ndim, 1):
            raise AxisError(f"{op}: axis {a} is out of range for a tensor of {ndim} dims (dimension out of range: "
                            f"expected one in [{-max(ndim, 1)}, {max(ndim, 1) - 1}])")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ArgumentError(f"{op}: axis {axis} repeats a dim (a dim appears multiple times in the list of dims)")
    return tuple(out)


def shape_args(shape: Iterable[Any]) -> tuple[int, ...]:
    """A shape passed as `f(2, 3)` or `f((2, 3))`, as a tuple of ints."""
    shape = tuple(shape)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = []
    for s in shape:
        try:  # ints and numpy ints; not floats (int() would cut 2.5 to 2) nor NaN (int() raised its own ValueError)
            out.append(operator.index(s))
        except TypeError:
            raise TypeError(f"shape must be ints, got {type(s).__name__} {s!r} in {shape}") from None
    return tuple(out)
