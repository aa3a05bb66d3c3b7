"""Reductions on Tensor: sum, max, min, mean, prod, var/std, any/all, argmax/argmin, logsumexp, the running
cumsum/cumprod/cummax, and matmul (a broadcast multiply reduced over k)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ember.tensor.ops.args import normalize_axis
from ember.uops import DType, Ops, dtypes, prod, sum_acc_dtype

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


def _int64_acc(dt: DType) -> DType:
    # torch's accumulator for prod/cumsum/cumprod: bool and ints below 64 bits go to int64, floats keep theirs
    return dt if dtypes.is_float(dt) or dt == dtypes.uint64 else dtypes.int64


class ReduceMixin:
    """Reductions over axes: `x.sum(1, keepdim=True)`, `x.argmax(-1)`, `x.cumsum(0)`, `a @ b`."""

    __slots__ = ()

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = normalize_axis(axis, self.ndim, "reduce")
        if not self.ndim:
            return self
        out = Tensor(self.uop.reduce_axis(op, axes)) if axes else self
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.ADD, axis, keepdim)

    def _nonempty(self, op: str, axis: int | Sequence[int] | None) -> None:
        """A max or min over no elements has no value: an error, as in torch (numpy raises too)."""
        for a in normalize_axis(axis, self.ndim, op):
            if self.ndim and self.shape[a] == 0:
                raise ValueError(f"{op}: cannot reduce over dim {a} of size 0 (shape {self.shape}); there is no "
                                 "identity for it")

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        self._nonempty("max", axis)
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        self._nonempty("min", axis)
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if dtypes.is_unsigned(self.dtype):
            top = dtypes.max(self.dtype)
            return (top - (top - self).max(axis, keepdim)).cast(self.dtype)
        return -((-self).max(axis, keepdim))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        axes = normalize_axis(axis, self.ndim, "mean")
        count = int(prod([self.shape[a] for a in axes]))
        out = self.float_().sum(axis, keepdim)
        return out * (1 / count) if count else out * float("nan")

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The product over `axis` (all by default); bool and ints accumulate in int64, as torch."""
        return self.cast(_int64_acc(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1) -> Tensor:
        """The variance over `axis`, divided by N - correction (correction=1: the unbiased estimate)."""
        axes = normalize_axis(axis, self.ndim, "var")
        n = int(prod([self.shape[a] for a in axes]))
        x = self.float_()
        sq = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim)
        return sq / Tensor(max(0, n - correction), self.device, dtypes.float32).cast(sq.dtype)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1) -> Tensor:
        """The standard deviation over `axis`: sqrt(var(axis, keepdim, correction))."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where any element over `axis` is nonzero."""
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where every element over `axis` is nonzero."""
        return self.logical_not().any(axis, keepdim).logical_not()

    def _index_along(self, axis: int) -> Tensor:
        # an int ramp 0..n-1 shaped to broadcast along `axis`
        n = self.shape[axis]
        return Tensor.arange(n, device=self.device).reshape([n if i == axis else 1 for i in range(self.ndim)])

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int64) of the first largest element over `axis`, or of the flattened tensor for axis=None."""
        if axis is None:
            return self.flatten().argmax(0) if self.ndim else Tensor(0, self.device, dtypes.int64)
        if self.ndim == 0:
            normalize_axis(axis, 0, "argmax")
            return Tensor(0, self.device, dtypes.int64)
        ax = normalize_axis(axis, self.ndim, "argmax")[0]
        n = self.shape[ax]
        if n == 0:
            raise ValueError(f"argmax: cannot take the argmax over dim {ax} of size 0 (shape {self.shape})")
        is_max = self == self.max(ax, keepdim=True)
        if dtypes.is_float(self.dtype):  # NaN is the largest, as in torch
            is_max = is_max.logical_or(self.isnan())
        rev = (n - self._index_along(ax)).cast(dtypes.int32)
        return (n - is_max.where(rev, 0).max(ax, keepdim)).cast(dtypes.int64)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int64) of the first smallest element over `axis`, or of the flattened tensor for axis=None."""
        if self.dtype == dtypes.bool:
            return self.logical_not().argmax(axis, keepdim)
        return (-self if dtypes.is_float(self.dtype) else ~self).argmax(axis, keepdim)

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`, computed stably around the max."""
        axes = normalize_axis(axis, self.ndim, "logsumexp")
        x = self.float_()
        m = x.max(axes, keepdim=True).detach()  # (a shift: the result does not depend on it, nor its gradient)
        m = m.isinf().where(0.0, m)
        out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def cumsum(self, axis: int = 0) -> Tensor:
        """The running sum along `axis` (ints accumulate in int64, as torch): `Tensor([1, 2, 3]).cumsum()` ->
        [1, 3, 6]."""
        if self.ndim == 0:
            normalize_axis(axis, 0, "cumsum")
        return self._cumulative(axis, "cumsum", 0, lambda t: t.sum(-1))

    def cumprod(self, axis: int = 0) -> Tensor:
        """The running product along `axis`."""
        return self._cumulative(axis, "cumprod", 1, lambda t: t.prod(-1))

    def _cumulative(self, axis: int, op: str, identity: int, reduce: Callable[[Tensor], Tensor]) -> Tensor:
        if self.ndim == 0:
            return self.cast(_int64_acc(self.dtype))
        ax = normalize_axis(axis, self.ndim, op)[0]
        x = self.cast(_int64_acc(self.dtype)).transpose(ax, -1)
        n = x.shape[-1]
        # out[..., i] = reduce_j x[..., j] if j <= i: one reduction over a lower-triangular mask
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        out = reduce(keep.where(x.unsqueeze(-2), Tensor(identity, self.device, x.dtype))).cast(x.dtype)
        return out.transpose(ax, -1)

    def cummax(self, axis: int = 0) -> Tensor:
        """The running max along `axis` (values only)."""
        if self.ndim == 0:
            return self
        ax = normalize_axis(axis, self.ndim, "cummax")[0]
        x = self.transpose(ax, -1)
        n = x.shape[-1]
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        low = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        return keep.where(x.unsqueeze(-2), Tensor(low, self.device, x.dtype)).max(-1).transpose(ax, -1)

    def matmul(self, w: Tensor) -> Tensor:
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul: both operands need at least 1 dim, got {self.shape} and {w.shape}")
        x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ValueError(f"matmul: shapes {self.shape} and {w.shape} do not align: {x.shape[-1]} != {y.shape[-2]}")
        # (..., n, k) x (..., k, m): broadcast-multiply over (..., n, m, k) and reduce the last axis
        prod_ = x.reshape(*x.shape[:-1], 1, x.shape[-1]) * y.transpose(-1, -2).reshape(
            *y.shape[:-2], 1, y.shape[-1], y.shape[-2])
        out = prod_.sum(-1).cast(prod_.dtype)  # ints accumulate in 64 bits, the result keeps the operands' dtype
        if self.ndim == 1:
            out = out.reshape(*out.shape[:-2], out.shape[-1])
        if w.ndim == 1:
            out = out.reshape(*out.shape[:-1])
        return out

    def __matmul__(self, w: Tensor) -> Tensor:
        return self.matmul(w)
