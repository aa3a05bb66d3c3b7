"""Tensor creation: constants (full, zeros, ones, empty), ramps (arange, linspace), eye and the *_like forms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.tensor.ops.args import ArgumentError, canonical_device, shape_args, to_dtype
from ember.uops import DType, Ops, UOp, dtypes, prod, to_numpy_dtype

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


class CreationMixin:
    """Tensor's constructors other than `Tensor(data)`: `Tensor.zeros(2, 3)`, `Tensor.arange(5)`, `x.ones_like()`."""

    __slots__ = ()

    @staticmethod
    def full(shape: int | Sequence[int], value: Any, dtype: DType | str | None = None,
             device: str | None = None) -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(not isinstance(s, int) or s < 0 for s in shape):
            raise ArgumentError(f"full: shape must be non-negative ints, got {shape}")
        c = Tensor(value, device, to_dtype(dtype) or dtypes.from_py(value))
        return c.reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = to_dtype(dtype)
        return Tensor.full(shape_args(shape), 0.0 if dtype is None else 0, dtype or dtypes.float32, device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = to_dtype(dtype)
        return Tensor.full(shape_args(shape), 1.0 if dtype is None else 1, dtype or dtypes.float32, device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        shape_t = shape_args(shape)
        if any(s < 0 for s in shape_t):
            raise ArgumentError(f"empty: shape must be non-negative ints, got {shape_t}")
        dt = to_dtype(dtype) or dtypes.float32
        dev = canonical_device(device)
        if isinstance(dev, tuple):  # a buffer on each device
            return Tensor(UOp.mstack([Tensor.empty(*shape_t, dtype=dt, device=d).uop for d in dev], None))
        buf = UOp(Ops.BUFFER, dt, (UOp.unique(), UOp(Ops.DEVICE, arg=dev)), int(prod(shape_t)))
        return Tensor(buf.reshape(shape_t))

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ArgumentError("arange: step must not be 0")
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step))
        wide = ints and not all(dtypes.min(dtypes.int32) <= v <= dtypes.max(dtypes.int32) for v in (start, stop))
        dt = to_dtype(dtype) or ((dtypes.int64 if wide else dtypes.int32) if ints else dtypes.float32)
        if not ints or not (dtypes.is_int(dt) or dtypes.is_float(dt)):
            # fractional starts and steps: numpy's values (computed in float64), made on the host
            return Tensor(np.arange(start, stop, step).astype(to_numpy_dtype(dt)), device)
        # a lazy ramp (no buffer): every kernel that reads it computes start + i * step from its index
        n = len(range(start, stop, step))
        ramp = Tensor(UOp.iota(n, dt if dtypes.is_int(dt) else dtypes.int32, canonical_device(device)))
        ramp = ramp if step == 1 else ramp * step
        return (ramp if start == 0 else ramp + start).cast(dt)

    @staticmethod
    def linspace(start: int | float, end: int | float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None) -> Tensor:
        """`steps` evenly spaced values from start to end inclusive (computed from both ends, as torch)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
        dt = to_dtype(dtype) or dtypes.float32
        if dt == dtypes.bool:
            raise ArgumentError("linspace: dtype bool is not supported")
        if steps <= 1:
            return Tensor.full((steps,), float(start), dtypes.float32, device).cast(dt)
        step = (end - start) / (steps - 1)
        i = Tensor.arange(steps, device=device).float()
        out = (i < steps // 2).where(start + step * i, end - step * (steps - 1 - i))
        return out.cast(dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """The n x m identity matrix (m defaults to n)."""
        m = n if m is None else m
        for name, v in (("n", n), ("m", m)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"eye: {name} must be a non-negative int, got {v!r}")
        same = Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)
        return same.cast(to_dtype(dtype) or dtypes.float32)

    def full_like(self, value: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A tensor of this one's shape filled with `value` (this dtype and device unless given; on this one's devices,
        sharded as it is)."""
        out = Tensor.full(self.shape, value, to_dtype(dtype) or self.dtype, device or self.device)
        return out.shard_like(self) if device is None and isinstance(self.device, tuple) else out

    def new_full(self, size: Sequence[int], fill_value: Any, dtype: DType | str | None = None,
                 device: str | None = None) -> Tensor:
        """A new tensor of shape `size` filled with `fill_value`, in this tensor's dtype and device unless given."""
        return Tensor.full(tuple(size), fill_value, to_dtype(dtype) or self.dtype, device or self.device)

    def new_zeros(self, *size: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Zeros of shape `size`, in this tensor's dtype and device unless given."""
        return self.new_full(shape_args(size), 0, dtype, device)

    def new_ones(self, *size: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Ones of shape `size`, in this tensor's dtype and device unless given."""
        return self.new_full(shape_args(size), 1, dtype, device)

    def new_empty(self, *size: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """An uninitialized tensor of shape `size`, in this tensor's dtype and device unless given."""
        return Tensor.empty(*shape_args(size), dtype=to_dtype(dtype) or self.dtype, device=device or self.device)

    def empty_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """An uninitialized tensor of this tensor's shape (and dtype and device unless given)."""
        return Tensor.empty(*self.shape, dtype=to_dtype(dtype) or self.dtype, device=device or self.device)

    @staticmethod
    def logspace(start: float, end: float, steps: int, base: float = 10.0, dtype: DType | str | None = None,
                 device: str | None = None) -> Tensor:
        """`steps` values from base**start to base**end, evenly spaced in the exponent."""
        dt = to_dtype(dtype) or dtypes.float32
        exponents = Tensor.linspace(start, end, steps, dtypes.float64 if dt == dtypes.float64 else dtypes.float32,
                                    device)
        return Tensor.full(exponents.shape, float(base), exponents.dtype, device).pow(exponents).cast(dt)

    @staticmethod
    def triu_indices(row: int, col: int, offset: int = 0, dtype: DType | str | None = None,
                     device: str | None = None) -> Tensor:
        """The (2, n) row and column indices of the upper triangle (j - i >= offset) of a row x col matrix, row-major
        (int64)."""
        rows, cols = np.triu_indices(row, offset, col)
        return Tensor(np.stack([rows, cols]).astype(np.int64).reshape(2, -1), device).cast(to_dtype(dtype) or
                                                                                        dtypes.int64)

    @staticmethod
    def tril_indices(row: int, col: int, offset: int = 0, dtype: DType | str | None = None,
                     device: str | None = None) -> Tensor:
        """The (2, n) row and column indices of the lower triangle (j - i <= offset) of a row x col matrix, row-major
        (int64)."""
        rows, cols = np.tril_indices(row, offset, col)
        return Tensor(np.stack([rows, cols]).astype(np.int64).reshape(2, -1), device).cast(to_dtype(dtype) or
                                                                                        dtypes.int64)

    def zeros_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Zeros of this tensor's shape (and dtype and device unless given)."""
        return self.full_like(0, dtype, device)

    def ones_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Ones of this tensor's shape (and dtype and device unless given)."""
        return self.full_like(1, dtype, device)
