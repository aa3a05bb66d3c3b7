"""Reductions on Tensor: sum, max, min, mean, prod, var/std, any/all, argmax/argmin, logsumexp, the running
cumsum/cumprod/cummax/cummin/logcumsumexp, sort/argsort/topk (ranks by comparison), and matmul/dot/einsum (a broadcast
multiply reduced over the contracted dims)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ember.tensor.ops.args import ArgumentError, ShapeError, normalize_axis, to_dtype, torch_axis_name
from ember.uops import DType, Ops, broadcast_shape, dtypes, least_upper_dtype, prod, sum_acc_dtype

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


def _int64_acc(dt: DType) -> DType:
    # torch's accumulator for prod/cumsum/cumprod: bool and ints below 64 bits go to int64, floats keep theirs
    return dt if dtypes.is_float(dt) or dt == dtypes.uint64 else dtypes.int64


_HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


class ReduceMixin:
    """Reductions over axes: `x.sum(1, keepdim=True)`, `x.argmax(-1)`, `x.cumsum(0)`, `a @ b`. Each takes the axis as
    `axis` (tinygrad) or as the keyword `dim` (PyTorch): `x.mean(dim=-1)`."""

    __slots__ = ()

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = normalize_axis(axis, self.ndim, "reduce")
        if not self.ndim:
            return self
        out = Tensor(self.uop.reduce_axis(op, axes)) if axes else self
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @torch_axis_name()
    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DType | str | None = None, acc_dtype: DType | str | None = None) -> Tensor:
        """The sum over `axis` (all by default); bool and ints accumulate in 64 bits, as torch. `dtype`: the input is
        cast to it first and the result has it (`x.sum(dtype=dtypes.int8)` wraps); `acc_dtype` (older tinygrad's
        name) too."""
        if (dt := to_dtype(dtype if dtype is not None else acc_dtype)) is not None:
            return self.cast(dt).sum(axis, keepdim).cast(dt)
        if self.dtype in _HALF_FLOATS:  # accumulated in float32, rounded once (torch's, tinygrad's; was 16-bit steps)
            return self.cast(dtypes.float32)._reduce(Ops.ADD, axis, keepdim).cast(self.dtype)
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.ADD, axis, keepdim)

    def _nonempty(self, op: str, axis: int | Sequence[int] | None) -> None:
        """A max or min over no elements has no value: an error, as in torch (numpy raises too)."""
        for a in normalize_axis(axis, self.ndim, op):
            if self.ndim and self.shape[a] == 0:
                raise ArgumentError(f"{op}: cannot reduce over dim {a} of size 0 (shape {self.shape}); there is no "
                                    "identity for it")

    @torch_axis_name()
    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        self._nonempty("max", axis)
        return self._reduce(Ops.MAX, axis, keepdim)

    @torch_axis_name()
    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        self._nonempty("min", axis)
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if dtypes.is_int(self.dtype):  # ~x (max - x unsigned, -x - 1 signed) reverses the order and never wraps
            return ~((~self).max(axis, keepdim))
        return -((-self).max(axis, keepdim))

    @torch_axis_name()
    def amax(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The max over `axis` (torch.amax: values only, as `max` here)."""
        return self.max(axis, keepdim)

    @torch_axis_name()
    def amin(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The min over `axis` (torch.amin: values only, as `min` here)."""
        return self.min(axis, keepdim)

    @torch_axis_name()
    def aminmax(self, axis: int | None = None, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        """(min, max) over `axis` (all elements for None)."""
        return self.min(axis, keepdim), self.max(axis, keepdim)

    @torch_axis_name()
    def nansum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The sum over `axis` with NaNs counted as 0."""
        x = self.isnan().where(0, self) if dtypes.is_float(self.dtype) else self
        return x.sum(axis, keepdim)

    @torch_axis_name()
    def nanmean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The mean over `axis` of the elements that are not NaN."""
        x = self.float_()
        return x.nansum(axis, keepdim) / x.isnan().logical_not().sum(axis, keepdim).cast(x.dtype)

    @torch_axis_name()
    def count_nonzero(self, axis: int | Sequence[int] | None = None) -> Tensor:
        """The number (int64) of nonzero elements over `axis`."""
        return (self != 0).sum(axis).cast(dtypes.int64)

    @torch_axis_name()
    def median(self, axis: int | None = None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """The lower median (the smaller of the two middle values for an even count, as torch): of all elements for
        axis=None (a value), else (values, indices) along `axis`."""
        if axis is None:
            flat = self.flatten()
            if flat.shape[0] == 0:
                raise RuntimeError("median: cannot compute the median of an empty tensor")
            return flat.sort(0)[0][(flat.shape[0] - 1) // 2]
        d = normalize_axis(axis, max(self.ndim, 1), "median")[0]
        x = self.reshape(1) if self.ndim == 0 else self
        n = x.shape[d]
        if n == 0:
            raise RuntimeError(f"median: cannot take the median over dim {d} of size 0")
        values, indices = x.sort(d)
        bounds = [((n - 1) // 2, (n - 1) // 2 + 1) if j == d else None for j in range(x.ndim)]
        values, indices = values.shrink(bounds), indices.shrink(bounds)
        if not keepdim or self.ndim == 0:
            shape = tuple(s for j, s in enumerate(values.shape) if j != d) if self.ndim else ()
            values, indices = values.reshape(shape), indices.reshape(shape)
        return values, indices

    def quantile(self, q: Any, dim: int | None = None, keepdim: bool = False, interpolation: str = "linear") -> Tensor:
        """The q-th quantiles (q a float or a list/1-d tensor of them in [0, 1]; a tensor q is read: a sync) along `dim`
        (all elements for None), between the sorted values as `interpolation` says: linear, lower, higher, nearest
        (ties to even) or midpoint (torch.quantile). A list of q adds a leading dim."""
        if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
            raise ValueError(f"quantile: interpolation must be linear, lower, higher, nearest or midpoint, got "
                             f"{interpolation!r}")
        qs = q.numpy().tolist() if isinstance(q, Tensor) else q
        scalar = not isinstance(qs, (list, tuple))
        qs = [qs] if scalar else list(qs)
        if any(not 0 <= v <= 1 for v in qs):
            raise ValueError(f"quantile: q values must be in [0, 1], got {qs}")
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"quantile: the input must be a float tensor, got {self.dtype!r}")
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else normalize_axis(dim, max(self.ndim, 1), "quantile")[0]
        x = x.reshape(1) if x.ndim == 0 else x
        n = x.shape[d]
        if n == 0:
            raise RuntimeError("quantile: the input has no elements along the reduced dim")
        values = x.sort(d)[0]

        def at(i: int) -> Tensor:
            return values.shrink([(i, i + 1) if j == d else (0, s) for j, s in enumerate(values.shape)])

        outs = []
        for v in qs:
            pos = v * (n - 1)
            lo, hi = math.floor(pos), math.ceil(pos)
            if interpolation == "lower" or lo == hi:
                out = at(lo)
            elif interpolation == "higher":
                out = at(hi)
            elif interpolation == "nearest":
                out = at(round(pos))
            elif interpolation == "midpoint":
                out = (at(lo) + at(hi)) * 0.5
            else:
                out = at(lo).lerp(at(hi), pos - lo)
            if dim is None:
                out = out.reshape((1,) * self.ndim if keepdim else ())
            elif not keepdim:
                out = out.squeeze(d) if self.ndim else out.reshape(())
            outs.append(out)
        return outs[0] if scalar else Tensor.stack(*outs) if len(outs) > 1 else outs[0].unsqueeze(0)

    def sum_to_size(self, *size: Any) -> Tensor:
        """Summed over the dims `size` broadcasts to self's shape (the reverse of expand; torch's sum_to_size)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        lead = self.ndim - len(shape)
        if lead < 0 or any(s not in (1, t) for s, t in zip(shape, self.shape[lead:])):
            raise ShapeError(f"sum_to_size: size {shape} is not expandable to the tensor's shape {self.shape}")
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and self.shape[lead + i] != 1)
        return (self.sum(axes, keepdim=True) if axes else self).reshape(shape)

    def histc(self, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Tensor:  # noqa: A002 - torch's names
        """Counts of the elements in `bins` equal bins over [min, max] (both 0: the data's min and max, read: a sync);
        elements outside are not counted, max falls in the last bin (torch.histc). Float result."""
        x = self.float_().flatten()
        lo, hi = float(min), float(max)
        if lo == hi == 0 and x.numel():
            lo, hi = float(x.min().item()), float(x.max().item())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if bins <= 0 or lo > hi:
            raise ValueError(f"histc: need bins > 0 and min <= max, got bins={bins}, min={min}, max={max}")
        idx = ((x - lo) * (bins / (hi - lo))).floor().cast(dtypes.int32)
        idx = (x == hi).where(bins - 1, idx)
        inside = (x >= lo).logical_and(x <= hi)
        hits = (idx.unsqueeze(-1) == Tensor.arange(bins, device=self.device)).logical_and(inside.unsqueeze(-1))
        return hits.sum(0).cast(x.dtype)

    def norm(self, p: float | str = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The p-norm over `dim` (all elements for None): p=2 or "fro" the Euclidean norm (its gradient at 0 is 0, as
        torch), 1, inf, -inf, 0 (the count of nonzeros) or any other float."""
        x = self.float_()
        if p in (2, "fro"):
            s = (x * x).sum(dim, keepdim)
            zero = s == 0  # (the gradient of sqrt at 0 would be inf * 0)
            return zero.where(0.0, zero.where(1.0, s).sqrt())
        if p == 1:
            return x.abs().sum(dim, keepdim)
        if p == math.inf:
            return x.abs().max(dim, keepdim)
        if p == -math.inf:
            return x.abs().min(dim, keepdim)
        if p == 0:
            return (x != 0).sum(dim, keepdim).cast(x.dtype)
        if not isinstance(p, (int, float)):
            raise ArgumentError(f"norm: p must be a number or 'fro', got {p!r}")
        return x.abs().pow(float(p)).sum(dim, keepdim).pow(1 / p)

    def dist(self, other: Tensor, p: float = 2) -> Tensor:
        """The p-norm of self - other."""
        return (self - other).norm(p)

    def kron(self, other: Tensor) -> Tensor:
        """The Kronecker product: every element of self times all of other, as blocks."""
        nd = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (nd - self.ndim) + self.shape)
        b = other.reshape((1,) * (nd - other.ndim) + other.shape)
        a = a.reshape([d for s in a.shape for d in (s, 1)])
        b = b.reshape([d for s in b.shape for d in (1, s)])
        return (a * b).reshape([x * y for x, y in zip(a.shape[::2], b.shape[1::2])])

    def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
        """How often each value 0..max occurs in a 1-d tensor of non-negative ints (int64), or the sum of `weights`
        there; reads the maximum (a sync) to size the result."""
        if self.ndim != 1 or not dtypes.is_int(self.dtype):
            raise RuntimeError(f"bincount: expects a 1-d int tensor, got shape {self.shape} and {self.dtype!r}")
        if self.numel() and int(self.min().item()) < 0:
            raise RuntimeError("bincount: the input must be non-negative")
        n = max(minlength, int(self.max().item()) + 1 if self.numel() else 0)
        hit = self.cast(dtypes.int32).unsqueeze(-1) == Tensor.arange(n, device=self.device)
        if weights is None:
            return hit.sum(0).cast(dtypes.int64)
        w = weights.float_() if dtypes.is_float(weights.dtype) else weights.cast(dtypes.float64)
        return hit.where(w.unsqueeze(-1), 0).sum(0).cast(w.dtype)

    @torch_axis_name()
    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Tensor:
        """The mean over `axis` (ints as float32); `dtype`: the input is cast to it first, as torch's."""
        if (dt := to_dtype(dtype)) is not None:
            return self.cast(dt).mean(axis, keepdim)
        axes = normalize_axis(axis, self.ndim, "mean")
        if self.ndim == 0:  # (axis 0 or -1 of a 0-d tensor: itself)
            return self.float_()
        count = int(prod([self.shape[a] for a in axes]))
        x = self.float_()
        if x.dtype in _HALF_FLOATS:  # the sum divided in float32 before it rounds: a mean of 60000s is not inf (torch)
            return x.cast(dtypes.float32).mean(axis, keepdim).cast(x.dtype)
        out = x.sum(axis, keepdim)
        return out * (1 / count) if count else out * float("nan")

    @torch_axis_name()
    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Tensor:
        """The product over `axis` (all by default); bool and ints accumulate in int64, as torch. `dtype`: the input is
        cast to it first and the result has it."""
        if (dt := to_dtype(dtype)) is not None:
            return self.cast(dt).prod(axis, keepdim).cast(dt)
        return self.cast(_int64_acc(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    @torch_axis_name()
    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1, unbiased: bool | None = None) -> Tensor:
        """The variance over `axis`, divided by N - correction (correction=1: the unbiased estimate; PyTorch's older
        `unbiased=False` is correction=0)."""
        correction = correction if unbiased is None else int(unbiased)
        axes = normalize_axis(axis, self.ndim, "var")
        n = int(prod([self.shape[a] for a in axes])) if self.ndim else 1  # (a 0-d tensor's dim 0 is its one value)
        x = self.float_()
        sq = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim)
        return sq / Tensor(max(0, n - correction), self.device, dtypes.float32).cast(sq.dtype)

    @torch_axis_name()
    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1, unbiased: bool | None = None) -> Tensor:
        """The standard deviation over `axis`: sqrt(var(axis, keepdim, correction, unbiased)). Its gradient where it
        is 0 (a constant row) is NaN (torch's is 0): masking it reads the variance twice, a kernel more."""
        return self.var(axis, keepdim, correction, unbiased).sqrt()

    @torch_axis_name()
    def var_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    @torch_axis_name()
    def std_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    @torch_axis_name()
    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where any element over `axis` is nonzero."""
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    @torch_axis_name()
    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where every element over `axis` is nonzero."""
        return self.logical_not().any(axis, keepdim).logical_not()

    def _index_along(self, axis: int) -> Tensor:
        # an int ramp 0..n-1 shaped to broadcast along `axis`
        n = self.shape[axis]
        return Tensor.arange(n, device=self.device).reshape([n if i == axis else 1 for i in range(self.ndim)])

    @torch_axis_name()
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
            raise ArgumentError(f"argmax: cannot take the argmax over dim {ax} of size 0 (shape {self.shape})")
        is_max = self == self.max(ax, keepdim=True)
        if dtypes.is_float(self.dtype):  # NaN is the largest, as in torch
            is_max = is_max.logical_or(self.isnan())
        rev = (n - self._index_along(ax)).cast(dtypes.int32)
        return (n - is_max.where(rev, 0).max(ax, keepdim)).cast(dtypes.int64)

    @torch_axis_name()
    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int64) of the first smallest element over `axis`, or of the flattened tensor for axis=None."""
        if self.dtype == dtypes.bool:
            return self.logical_not().argmax(axis, keepdim)
        return (-self if dtypes.is_float(self.dtype) else ~self).argmax(axis, keepdim)

    @torch_axis_name()
    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`, computed stably around the max."""
        axes = normalize_axis(axis, self.ndim, "logsumexp")
        x = self.float_()
        # (a shift: the result does not depend on it, nor its gradient; over an empty axis -inf, as torch)
        m = x._reduce(Ops.MAX, axes, True).detach()
        m = m.isinf().where(0.0, m)
        out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @torch_axis_name()
    def cumsum(self, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
        """The running sum along `axis` (ints accumulate in int64, as torch): `Tensor([1, 2, 3]).cumsum()` ->
        [1, 3, 6]. `dtype`: the input is cast to it first and the result has it."""
        if (dt := to_dtype(dtype)) is not None:
            return self.cast(dt).cumsum(axis).cast(dt)
        if self.ndim == 0:
            normalize_axis(axis, 0, "cumsum")
        return self._cumulative(axis, "cumsum", 0, lambda t: t.sum(-1))

    @torch_axis_name()
    def cumprod(self, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
        """The running product along `axis`; `dtype` as cumsum's."""
        if (dt := to_dtype(dtype)) is not None:
            return self.cast(dt).cumprod(axis).cast(dt)
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

    @torch_axis_name()
    def cummax(self, axis: int = 0) -> tuple[Tensor, Tensor]:
        """(values, indices): the running max along `axis` and where it was found (the last position of a tie, as
        torch): `Tensor([1, 3, 2]).cummax(0)` -> ([1, 3, 3], [0, 1, 1])."""
        return self._cum_extreme(axis, "cummax")

    @torch_axis_name()
    def cummin(self, axis: int = 0) -> tuple[Tensor, Tensor]:
        """(values, indices): the running min along `axis` and where it was found (the last position of a tie)."""
        return self._cum_extreme(axis, "cummin")

    def _cum_extreme(self, axis: int, op: str) -> tuple[Tensor, Tensor]:
        if self.ndim == 0:
            normalize_axis(axis, 0, op)
            return self, Tensor(0, self.device, dtypes.int64)
        ax = normalize_axis(axis, self.ndim, op)[0]
        if self.shape[ax] == 0:
            return self, Tensor.zeros(*self.shape, dtype=dtypes.int64, device=self.device)
        source = self.transpose(ax, -1)
        x = source.detach()
        n = x.shape[-1]
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)  # [i, j]: j <= i
        if op == "cummax":
            low = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
            values = keep.where(x.unsqueeze(-2), Tensor(low, self.device, x.dtype)).max(-1)
        else:
            high = math.inf if dtypes.is_float(self.dtype) else dtypes.max(self.dtype)
            values = keep.where(x.unsqueeze(-2), Tensor(high, self.device, x.dtype)).min(-1)
        values = values.contiguous()  # (its own kernel: not recomputed for every j of the index search)
        is_value = x.unsqueeze(-2) == values.unsqueeze(-1)
        if dtypes.is_float(self.dtype):  # a NaN is the running max/min from where it appears: its index, as torch's
            is_value = is_value.logical_or(x.unsqueeze(-2).isnan())
        hit = keep.logical_and(is_value)
        indices = hit.where(ramp.reshape(1, n), -1).max(-1).cast(dtypes.int64)
        if self.requires_grad is not False:  # the values at the indices: each gradient goes to that element (torch's)
            values = source.gather(-1, indices)
        return values.transpose(ax, -1), indices.transpose(ax, -1)

    @torch_axis_name()
    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along `axis`, each prefix computed stably around its own max."""
        if self.ndim == 0:
            normalize_axis(axis, 0, "logcumsumexp")
            return self.float_()
        ax = normalize_axis(axis, self.ndim, "logcumsumexp")[0]
        x = self.float_().transpose(ax, -1)
        n = x.shape[-1]
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        return keep.where(x.unsqueeze(-2), -math.inf).logsumexp(-1).transpose(ax, -1)

    # *** sorting: the rank of each element by comparison with every other along the dim (n^2 work, one kernel) ***
    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
        """(values, indices) sorted along `dim`; ties keep their order (always stable: `stable` is accepted for torch's
        signature), NaN sorts as the largest (as torch): `Tensor([3, 1, 2]).sort()` -> ([1, 2, 3], [1, 2, 0])."""
        if self.ndim == 0:
            normalize_axis(dim, 0, "sort")
            return self, Tensor(0, self.device, dtypes.int64)
        ax = normalize_axis(dim, self.ndim, "sort")[0]
        x = self.transpose(ax, -1)
        n = x.shape[-1]
        xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]
        if self.dtype == dtypes.bool:
            xi, xj = xi.cast(dtypes.int8), xj.cast(dtypes.int8)
        first = xj > xi if descending else xj < xi
        same = xj == xi
        if dtypes.is_float(self.dtype):  # NaN above every number, and equal to itself
            ni, nj = xi.isnan(), xj.isnan()
            first = first.logical_or((nj if descending else ni).logical_and((ni if descending else nj).logical_not()))
            same = same.logical_or(ni.logical_and(nj))
        ramp = Tensor.arange(n, device=self.device)
        before = first.logical_or(same.logical_and(ramp.reshape(1, n) < ramp.reshape(n, 1)))
        # [..., i]: where element i goes; its own kernel (n^2), not recomputed inside the placing sum (n^3)
        rank = before.cast(dtypes.int32).sum(-1).cast(dtypes.int32).contiguous()
        at = rank.unsqueeze(-2) == ramp.reshape(n, 1)  # [..., r, i]: element i lands at r
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        values = at.where(x.unsqueeze(-2), zero).sum(-1).cast(self.dtype)
        indices = at.where(ramp.reshape(1, n), 0).sum(-1).cast(dtypes.int64)
        return values.transpose(ax, -1), indices.transpose(ax, -1)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
        """The indices (int64) that sort the tensor along `dim` (stable)."""
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
        """(values, indices) of the k largest (or smallest) elements along `dim`, in sorted order."""
        ax = normalize_axis(dim, self.ndim, "topk")[0] if self.ndim else normalize_axis(dim, 0, "topk")[0]
        size = self.shape[ax] if self.ndim else 1
        if not isinstance(k, int) or not 0 <= k <= size:
            raise RuntimeError(f"topk: k ({k!r}) is out of range for dim {ax} of size {size} (selected index k out of "
                               "range)")
        values, indices = self.sort(dim, descending=largest)
        if self.ndim == 0:
            return values, indices
        bounds = [(0, k) if i == ax else (0, s) for i, s in enumerate(self.shape)]
        return values.shrink(bounds), indices.shrink(bounds)

    def matmul(self, w: Tensor, reverse: bool = False, dtype: DType | str | None = None,
               acc_dtype: DType | str | None = None) -> Tensor:
        """The matrix product self @ w (w @ self when `reverse`) with numpy's rules: 1-d operands are vectors, leading
        dims broadcast. `dtype` (or older tinygrad's `acc_dtype`): the operands are cast to it first."""
        dtype = dtype if dtype is not None else acc_dtype
        if reverse:
            return (w if isinstance(w, Tensor) else Tensor(w, self.device)).matmul(self, dtype=dtype)
        if not isinstance(w, Tensor):
            w = Tensor(w, self.device)
        if (dt := to_dtype(dtype)) is not None:
            return self.cast(dt).matmul(w.cast(dt))
        if (out_dtype := least_upper_dtype(self.dtype, w.dtype)) in _HALF_FLOATS:
            # products and sums in float32, rounded once: torch's, and what the tensor cores do (float32 out)
            return self.cast(dtypes.float32).matmul(w.cast(dtypes.float32)).cast(out_dtype)
        if self.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul: both arguments to matmul need to be at least 1D, got {self.shape} and "
                             f"{w.shape}")
        x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ShapeError(f"matmul: shapes {self.shape} and {w.shape} do not align: {x.shape[-1]} != "
                             f"{y.shape[-2]} (cannot be multiplied)")
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

    def __rmatmul__(self, w: Tensor) -> Tensor:
        return self.matmul(w, reverse=True)

    def _matmul_of(self, w: Tensor, op: str, ndims: tuple[int, int]) -> Tensor:
        # matmul restricted to the operand ranks torch's mm/bmm/mv take
        if (self.ndim, getattr(w, "ndim", None)) != ndims:
            raise ShapeError(f"{op}: expects operands of {ndims[0]} and {ndims[1]} dims, got shapes {self.shape} and "
                             f"{getattr(w, 'shape', None)}")
        return self.matmul(w)

    def mm(self, w: Tensor) -> Tensor:
        """The product of two matrices."""
        return self._matmul_of(w, "mm", (2, 2))

    def bmm(self, w: Tensor) -> Tensor:
        """The product of two batches of matrices, (b, n, k) @ (b, k, m)."""
        if self.ndim == 3 and getattr(w, "ndim", None) == 3 and self.shape[0] != w.shape[0]:
            raise ShapeError(f"bmm: batch sizes differ: {self.shape} and {w.shape}")
        return self._matmul_of(w, "bmm", (3, 3))

    def mv(self, v: Tensor) -> Tensor:
        """The product of a matrix and a vector."""
        return self._matmul_of(v, "mv", (2, 1))

    def outer(self, v: Tensor) -> Tensor:
        """The outer product of two vectors: out[i, j] = self[i] * v[j]."""
        if self.ndim != 1 or getattr(v, "ndim", None) != 1:
            raise ShapeError(f"outer: expects two 1-d tensors, got shapes {self.shape} and {getattr(v, 'shape', None)}")
        return self.unsqueeze(1) * v.unsqueeze(0)

    def inner(self, w: Tensor) -> Tensor:
        """The sum over the last dims of self and w, for every pair of their other positions: shape
        self.shape[:-1] + w.shape[:-1] (scalars multiply)."""
        if self.ndim == 0 or w.ndim == 0:
            return self * w
        if self.shape[-1] != w.shape[-1]:
            raise ShapeError(f"inner: last dims differ: {self.shape} and {w.shape}")
        a = self.reshape(*self.shape[:-1], *(1,) * (w.ndim - 1), self.shape[-1])
        return (a * w).sum(-1).cast(least_upper_dtype(self.dtype, w.dtype))

    def trace(self) -> Tensor:
        """The sum of the main diagonal of a matrix."""
        if self.ndim != 2:
            raise ShapeError(f"trace: expects a 2-d tensor, got shape {self.shape}")
        return self.diagonal().sum()

    def cross(self, other: Tensor, dim: int = -1) -> Tensor:
        """The cross product of 3-vectors along `dim` (as torch.linalg.cross)."""
        a, b = self._broadcasted(other)
        d = normalize_axis(dim, a.ndim, "cross")[0]
        if a.shape[d] != 3:
            raise ShapeError(f"cross: dim {d} must have size 3, got shape {a.shape}")
        x = [a.shrink([(i, i + 1) if j == d else None for j in range(a.ndim)]) for i in range(3)]
        y = [b.shrink([(i, i + 1) if j == d else None for j in range(b.ndim)]) for i in range(3)]
        return (x[1] * y[2] - x[2] * y[1]).cat(x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0], dim=d)

    def diff(self, n: int = 1, dim: int = -1, prepend: Tensor | None = None, append: Tensor | None = None) -> Tensor:
        """The n-th forward difference along `dim` (prepend/append joined first); bools give xor, as torch."""
        d = normalize_axis(dim, self.ndim, "diff")[0]
        x = self
        if prepend is not None:
            x = prepend.cat(x, dim=d)
        if append is not None:
            x = x.cat(append, dim=d)
        for _ in range(n):
            size = x.shape[d]
            if size == 0:
                break
            hi = x.shrink([(1, size) if j == d else None for j in range(x.ndim)])
            lo = x.shrink([(0, size - 1) if j == d else None for j in range(x.ndim)])
            x = hi.logical_xor(lo) if x.dtype == dtypes.bool else hi - lo
        return x

    def msort(self) -> Tensor:
        """The values sorted along dim 0."""
        return self.sort(0)[0]

    def addmm(self, mat1: Tensor, mat2: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat1 @ mat2) (torch.addmm; beta 0 ignores self, NaN included)."""
        return _scaled_sum(self, mat1.matmul(mat2), beta, alpha)

    def addmv(self, mat: Tensor, vec: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat @ vec) (torch.addmv)."""
        return _scaled_sum(self, mat.matmul(vec), beta, alpha)

    def baddbmm(self, batch1: Tensor, batch2: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (batch1 @ batch2), batched (torch.baddbmm)."""
        if batch1.ndim != 3 or batch2.ndim != 3:
            raise ValueError(f"baddbmm: batch1 and batch2 must be 3-d, got {batch1.shape} and {batch2.shape}")
        return _scaled_sum(self, batch1.matmul(batch2), beta, alpha)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        """(values, indices) of the k-th smallest element along `dim` (k from 1), as torch.kthvalue."""
        d = normalize_axis(dim, max(self.ndim, 1), "kthvalue")[0]
        size = self.shape[d] if self.ndim else 1
        if not isinstance(k, int) or not 1 <= k <= size:
            raise IndexError(f"kthvalue: k ({k!r}) is out of range for dim {d} of size {size} (selected number k out "
                             "of range)")
        if self.ndim == 0:
            return self, Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        values, indices = self.sort(d)
        bounds = [(k - 1, k) if i == d else (0, s) for i, s in enumerate(self.shape)]
        values, indices = values.shrink(bounds), indices.shrink(bounds)
        return (values, indices) if keepdim else (values.squeeze(d), indices.squeeze(d))

    def dot(self, w: Tensor, dtype: DType | str | None = None, acc_dtype: DType | str | None = None) -> Tensor:
        """The matrix product self @ w (as tinygrad's dot; for two 1-d tensors, their inner product as torch.dot)."""
        return self.matmul(w, dtype=dtype, acc_dtype=acc_dtype)

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
        """Einstein summation: `Tensor.einsum("ij,jk->ik", a, b)` is a @ b. Repeated letters in one operand take its
        diagonal, `...` stands for broadcast dims, and without `->` the output is the letters used once, sorted."""
        ops: list[Tensor] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else list(operands)  # type: ignore[arg-type]
        formula = formula.replace(" ", "")
        lhs, arrow, out = formula.partition("->")
        inputs = lhs.split(",")
        if any(s.count("...") > 1 for s in inputs):
            raise ArgumentError(f"einsum: an operand of {formula!r} has more than one ellipsis")
        if len(inputs) != len(ops):
            raise ArgumentError(f"einsum: the formula {formula!r} has {len(inputs)} operands, {len(ops)} were given")
        letters = {c for c in formula if c.isalpha()}
        # ... is a run of fresh letters, right-aligned across operands
        free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in letters]
        ell_dims = [t.ndim - len(s.replace("...", "")) if "..." in s else 0 for s, t in zip(inputs, ops)]
        ell = "".join(free[:max(ell_dims, default=0)])
        inputs = [s.replace("...", ell[len(ell) - n:] if n else "") for s, n in zip(inputs, ell_dims)]
        if not arrow:
            counts = "".join(inputs)
            out = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in ell))
        out = out.replace("...", ell)
        sizes: dict[str, int] = {}
        prepared = []
        for i, (spec, t) in enumerate(zip(inputs, ops)):
            if not isinstance(t, Tensor):
                raise TypeError(f"einsum: operand {i} is a {type(t).__name__}, not a Tensor")
            if len(spec) != t.ndim:
                raise ArgumentError(f"einsum: operand {i} has {t.ndim} dims, its subscripts {spec!r} name {len(spec)}")
            while len(set(spec)) != len(spec):  # a letter twice: the diagonal of those dims
                c = next(c for c in spec if spec.count(c) > 1)
                a, b = spec.index(c), spec.index(c, spec.index(c) + 1)
                t = t.diagonal(0, a, b)
                spec = spec[:a] + spec[a + 1:b] + spec[b + 1:] + c
            for c, n in zip(spec, t.shape):  # (a size 1 broadcasts against any other)
                if sizes.get(c, 1) == 1:
                    sizes[c] = n
                elif n not in (1, sizes[c]):
                    raise ShapeError(f"einsum: subscript {c!r} has size {n} in operand {i} and {sizes[c]} elsewhere")
            prepared.append((spec, t))
        for c in out:
            if c not in sizes:
                raise ArgumentError(f"einsum: output subscript {c!r} does not appear in the inputs")
        order = sorted(sizes)  # every letter, one dim each: multiply the operands broadcast over all of them
        dt = to_dtype(dtype) or least_upper_dtype(*(t.dtype for t in ops))
        acc: Tensor | None = None
        for spec, t in prepared:
            t = t.cast(dt).permute(sorted(range(len(spec)), key=lambda d: spec[d]))
            t = t.reshape([t.shape[sorted(spec).index(c)] if c in spec else 1 for c in order])
            acc = t if acc is None else acc * t
        assert acc is not None
        acc = acc.expand([sizes[c] for c in order])
        summed = [i for i, c in enumerate(order) if c not in out]
        res = (acc.sum(summed) if summed else acc).cast(dt)
        kept = [c for c in order if c in out]
        return res.permute([kept.index(c) for c in out]) if kept else res


def _scaled_sum(x: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    out = product if alpha == 1 else product * alpha
    if beta == 0:  # (torch: self is ignored, its NaN and inf too; its gradient is zeros)
        return Tensor(False, device=out.device).where(x, out.expand(broadcast_shape(x.shape, out.shape)))
    return out + (x if beta == 1 else x * beta)
