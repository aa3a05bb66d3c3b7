"""Argument parsing shared by Tensor's op modules: device names, axes, and shapes given as `(2, 3)` or `2, 3`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ember.runtime import Device


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
    """`axis` (an int, ints, or None for all) as dims 0..ndim-1; a ValueError naming `op` when out of range or
    repeated."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or not -max(ndim, 1) <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of {ndim} dims")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis} repeats a dim")
    return tuple(out)


def shape_args(shape: Iterable[Any]) -> tuple[int, ...]:
    """A shape passed as `f(2, 3)` or `f((2, 3))`, as a tuple of ints."""
    shape = tuple(shape)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)
