"""Indexing Tensors: numpy's getitem (ints, slices, None, ..., int and bool tensors, nested lists and tuples), setitem,
gather, scatter/scatter_reduce, index_select, masked_select, nonzero, one_hot and masked_fill."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.tensor import realize
from ember.tensor.ops.args import ArgumentError, IndexRangeError, ShapeError, normalize_axis
from ember.uops import Ops, broadcast_shape, dtypes, settings

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


def _as_index(k: Any, device: str) -> Any:
    # one item of an index: ints (numpy ints too), slices, None, ..., or an index Tensor (from lists/arrays)
    if isinstance(k, bool) or isinstance(k, np.bool_):
        raise IndexError(f"a bool scalar is not a supported index (got {k!r}); use a bool Tensor mask")
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, (list, tuple, np.ndarray)):  # (a tuple inside the index is a list of indices, as in torch)
        arr = np.asarray(k)
        if arr.dtype == object:
            raise IndexError(f"unsupported index {k!r}: a ragged or mixed nested list")
        if arr.size == 0:
            arr = arr.astype(np.int64)
        return Tensor(arr, device)
    if isinstance(k, Tensor) and k.device != device:
        raise ValueError(f"index tensor is on {k.device}, the tensor on {device}")
    return k


def _unindex_dim(x: Tensor, dim: int, k: int | slice, size: int) -> Tensor:
    """x, the result of indexing dim `dim` (of size `size`) by k (as a size-1 dim for an int), padded with zeros back
    to where those elements came from: the inverse of the view, for setitem."""
    if isinstance(k, int):
        k %= size
        start, step, length = k, 1, 1
    else:
        start, stop, step = k.indices(size)
        length = len(range(start, stop, step))
    if length == 0:
        return Tensor(x.uop.pad(tuple((0, size) if i == dim else (0, 0) for i in range(x.ndim))))
    flip = step < 0
    if flip:
        start, step = size - 1 - start, -step
    if step > 1:  # spread the elements step apart: (L, 1) -> (L, step) -> L*step -> cut the tail
        x = x.reshape(x.shape[:dim] + (length, 1) + x.shape[dim + 1:])
        x = Tensor(x.uop.pad(tuple((0, step - 1) if i == dim + 1 else (0, 0) for i in range(x.ndim))))
        x = x.reshape(x.shape[:dim] + (length * step,) + x.shape[dim + 2:])
        x = x.shrink([(0, (length - 1) * step + 1) if i == dim else (0, s) for i, s in enumerate(x.shape)])
    span = x.shape[dim]
    x = Tensor(x.uop.pad(tuple((start, size - start - span) if i == dim else (0, 0) for i in range(x.ndim))))
    return x.flip(dim) if flip else x


def check_ids(ids: Tensor, size: int, op: str, *, low: int = 0, ignore: int | None = None,
              error: type[Exception] = IndexRangeError, what: str = "") -> None:
    """Raise `error` naming `op`, the first bad id and the valid range when the int tensor `ids` holds a value outside
    [low, size) (other than `ignore`), as PyTorch raises where Ember's one-hot kernels would give zeros.

    The ids are checked where they are known on the host (`realize.host_range`: a constant, or a view or copy of an int
    tensor made from a list or numpy array and not written since: no device work), and with CHECK_INDICES=1 also where
    they are computed on the device (a min/max reduce, realized: a sync). Otherwise they are not checked: a lazy result
    is never waited for just to check it. `what` describes the range in the message (default: "for dim size n")."""
    if not dtypes.is_int(ids.dtype) or ids.numel() == 0:
        return
    bounds = realize.host_range(ids.uop)
    if bounds is None:
        if not settings.CHECK_INDICES.value:
            return
        bounds = tuple(int(v) for v in ids.min().cast(dtypes.int64).reshape(1).cat(
            ids.max().cast(dtypes.int64).reshape(1)).numpy())
    lo, hi = bounds
    if low <= lo and hi < size:
        return
    # out of range somewhere (in a buffer this is a view of, or only the ignored id): the values decide
    values = ids.numpy().reshape(-1).astype(np.int64)
    bad = values[((values < low) | (values >= size)) & (values != ignore if ignore is not None else True)]
    if bad.size:
        raise error(f"{op}index {int(bad[0])} is out of range {what or f'for dim size {size}'} (valid: {low} to "
                    f"{size - 1}; index out of bounds)")


def _check_index_bounds(index: Tensor, size: int, dim: int, low: int | None = None, what: str = "") -> None:
    """IndexError for an int index tensor with a value outside [low, size), low = -size by default (numpy's negative
    indices; gather takes none: there it is an IndexRangeError, also the RuntimeError of torch); see check_ids for
    when the values are read."""
    check_ids(index, size, what, low=-size if low is None else low, error=IndexRangeError if what else IndexError,
              what=f"for dim {dim} of size {size}")


def _is_mask(k: Any) -> bool:
    return isinstance(k, Tensor) and k.dtype == dtypes.bool


class IndexingMixin:
    """numpy indexing: `x[1:, ::2]`, `x[idx]`, `x[x < 0] = 0`, `x.gather(1, idx)`."""

    __slots__ = ()

    def _basic_index(self, dim: int, k: Any, src_dim: int) -> tuple[Tensor, bool]:
        # one int or slice on dim `dim` (dim `src_dim` of the tensor indexed): (the result, whether the dim is gone)
        s = self.shape[dim]
        if isinstance(k, int):
            if not -s <= k < s:
                raise IndexError(f"index {k} is out of range for dim {src_dim} of size {s} (out of bounds)")
            k %= s
            bounds = [(0, n) for n in self.shape]
            bounds[dim] = (k, k + 1)
            return self.shrink(bounds), True
        start, stop, step = k.indices(s)
        if step == 0:
            raise ValueError("slice step cannot be zero")
        length = len(range(start, stop, step))
        x = self
        if step < 0:  # flip, then walk forward from the mirrored start
            x, start, step = x.flip(dim), s - 1 - start, -step
        bounds = [(0, n) for n in x.shape]
        bounds[dim] = (start, start + (length - 1) * step + 1) if length else (0, 0)
        x = x.shrink(bounds)
        if step > 1 and length > 1:
            pad = [(0, 0)] * x.ndim
            pad[dim] = (0, length * step - x.shape[dim])
            x = Tensor(x.uop.pad(tuple(pad)))
            x = x.reshape(x.shape[:dim] + (length, step) + x.shape[dim + 1:])
            bounds = [(0, n) for n in x.shape]
            bounds[dim + 1] = (0, 1)
            x = x.shrink(bounds).reshape(x.shape[:dim] + (length,) + x.shape[dim + 2:])
        return x, False

    def __getitem__(self, idx: Any) -> Tensor:
        """numpy indexing: ints, slices (any step), None, ..., int tensors/lists (advanced, via one-hot masks) and
        bool masks (realized to find the selected positions)."""
        idx = list(idx) if isinstance(idx, tuple) else [idx]
        idx = [_as_index(k, self.device) for k in idx]
        # a bool mask stands for the int index of each of its dims (which it must match, as in numpy and torch)
        used = [0 if k is None or k is Ellipsis else k.ndim if _is_mask(k) else 1 for k in idx]
        dots = next((j for j, k in enumerate(idx) if k is Ellipsis), len(idx))
        expanded: list[Any] = []
        for j, k in enumerate(idx):
            if _is_mask(k):
                d = sum(used[:j]) if j < dots else self.ndim - sum(used[j:])
                if d < 0 or k.shape != self.shape[d:d + k.ndim]:
                    raise IndexError(f"the shape of the mask {k.shape} at index {max(d, 0)} does not match the shape "
                                     f"of the indexed tensor {self.shape} at index {max(d, 0)}")
                expanded.extend(Tensor(ix.astype(np.int32), self.device) for ix in np.nonzero(k.numpy()))
            else:
                expanded.append(k)
        idx = expanded
        if sum(k is Ellipsis for k in idx) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        n_used = sum(1 for k in idx if k is not None and k is not Ellipsis)
        if n_used > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {n_used})")
        at = next((i for i, k in enumerate(idx) if k is Ellipsis), len(idx))
        idx = idx[:at] + [slice(None)] * (self.ndim - n_used) + idx[at + 1:]
        # dim: the dim of x the next index applies to; src: that dim in self (for messages); pos: dims of the result
        x, dim, src, pos = self, 0, 0, 0
        new_axes: list[int] = []
        adv: list[tuple[int, Tensor]] = []  # (position in the result, index tensor)
        for k in idx:
            if k is None:
                new_axes.append(pos)
                pos += 1
                continue
            if isinstance(k, Tensor):
                _check_index_bounds(k, x.shape[dim], src)
                adv.append((pos, k))
            elif isinstance(k, (int, slice)):
                x, gone = x._basic_index(dim, k, src)
                if gone:
                    x = x.reshape(x.shape[:dim] + x.shape[dim + 1:])
                    src += 1
                    continue
            else:
                raise IndexError(f"unsupported index {k!r}: use ints, slices, None, ..., int or bool tensors")
            dim, src, pos = dim + 1, src + 1, pos + 1
        shape = list(x.shape)
        for p in new_axes:  # positions in the result, in increasing order
            shape.insert(p, 1)
        x = x.reshape(shape)
        return x._advanced_index([p for p, _ in adv], [k for _, k in adv]) if adv else x

    def _masked_write(self, mask: Tensor, val: Tensor) -> Tensor:
        """torch's `x[mask] = val` for a mask over x's leading dims: x[mask] is (k, *rest) for the k True positions in
        order, and val broadcasts to that (its rows go to the True positions in turn, not by broadcasting against x)."""
        rest = self.shape[mask.ndim:]
        k = int(mask.sum().item())
        want = (k, *rest)
        try:
            fits = broadcast_shape(val.shape, want) == want
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"setitem: value of shape {val.shape} cannot be broadcast to the {k} masked "
                             f"positions {want} (mask of shape {mask.shape})")
        if k == 0:
            return self
        rows = val.expand(*want).reshape(k, -1)
        order = (mask.flatten().cast(dtypes.int32).cumsum() - 1).maximum(0)  # the row each True position takes
        picked = rows[order].reshape(*mask.shape, *rest)
        return mask.reshape(*mask.shape, *(1,) * len(rest)).where(picked, self)

    def __setitem__(self, idx: Any, value: Any) -> None:
        """Write `value` (broadcast) into `self[idx]`, in place, for any index getitem takes: `x[1:, ::2] = 0.0`,
        `x[x < 0] = 0`, `x[[0, 2], 1:] = v`. A view of a realized tensor writes through to it; anything else is
        realized first. The write is realized at once."""
        if isinstance(value, Tensor) and value.device != self.device:
            raise ValueError(f"setitem: value is on {value.device}, the tensor on {self.device}")
        val = value.cast(self.dtype) if isinstance(value, Tensor) else Tensor(value, self.device, self.dtype)
        if isinstance(idx, Tensor) and idx.dtype == dtypes.bool and val.numel() != 1 and \
                idx.shape == self.shape[:idx.ndim]:
            new = self._masked_write(idx, val)
        elif isinstance(idx, Tensor) and idx.dtype == dtypes.bool:
            try:
                new = idx.where(val, self)
            except ValueError:
                raise ShapeError(f"setitem: mask of shape {idx.shape} and value of shape {val.shape} do not "
                                 f"broadcast to {self.shape}") from None
            if new.shape != self.shape:
                raise ShapeError(f"setitem: mask of shape {idx.shape} does not broadcast to {self.shape}")
        else:
            new = self._scatter_basic(idx if isinstance(idx, tuple) else (idx,), val)
        if self.uop.op is Ops.ASSIGN:
            self.realize()  # a pending assign to the same tensor lands first
        base = self.uop
        while base.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP):  # a view of a buffer writes through
            base = base.src[0]
        if base.op is not Ops.BUFFER:
            self.realize()
        self.uop = self.uop.assign(new.cast(self.dtype).uop)
        self.realize()

    def _scatter_basic(self, idx: tuple[Any, ...], val: Tensor) -> Tensor:
        # self with self[idx] replaced by val: each indexed dim's view is undone by pads (and a flip for step < 0)
        items = [_as_index(k, self.device) for k in idx]
        if any(isinstance(k, Tensor) for k in items):
            return self._scatter_advanced(tuple(items), val)
        view = self[tuple(items)]
        try:
            val = val.expand(broadcast_shape(val.shape, view.shape)) if val.shape != view.shape else val
        except ValueError:
            val = None  # type: ignore[assignment]
        if val is None or val.shape != view.shape:
            raise ShapeError(f"setitem: cannot broadcast the value to the indexed shape {view.shape}")
        n_used = sum(1 for k in items if k is not None and k is not Ellipsis)
        at = next((i for i, k in enumerate(items) if k is Ellipsis), len(items))
        items = items[:at] + [slice(None)] * (self.ndim - n_used) + items[at + 1:]
        # value dims per dim of self: None dims dropped, int dims back as size 1
        shape, vi = [], 0
        for k in items:
            if k is None:
                vi += 1
            elif isinstance(k, int):
                shape.append(1)
            else:
                shape.append(val.shape[vi])
                vi += 1
        val = val.reshape(shape)
        mask = Tensor.full(val.shape, True, dtypes.bool, self.device)
        for d, k in enumerate(k for k in items if k is not None):
            val, mask = (_unindex_dim(t, d, k, self.shape[d]) for t in (val, mask))
        return mask.where(val, self)

    def _scatter_advanced(self, idx: tuple[Any, ...], val: Tensor) -> Tensor:
        # self with self[idx] replaced by val, for any index: the flat positions self[idx] reads (the same indexing on
        # a ramp), scattered into the flattened tensor (a repeated position takes the last value written, as torch)
        positions = Tensor.arange(self.numel(), device=self.device).reshape(self.shape)[idx]
        try:
            val = val.expand(broadcast_shape(val.shape, positions.shape))
        except ValueError:
            raise ShapeError(f"setitem: cannot broadcast the value of shape {val.shape} to the indexed shape "
                             f"{positions.shape}") from None
        if val.shape != positions.shape:
            raise ShapeError(f"setitem: cannot broadcast the value of shape {val.shape} to the indexed shape "
                             f"{positions.shape}")
        if not positions.numel():
            return self
        return self.flatten().scatter(0, positions.flatten(), val.flatten()).reshape(self.shape)

    def _advanced_index(self, dims: list[int], index: list[Tensor]) -> Tensor:
        # numpy rules: the broadcast index shape replaces the indexed dims where they sit if they are adjacent,
        # else it goes first. out[rest, B] = sum over the indexed dims of x * onehot(index)
        for k in index:
            if not dtypes.is_int(k.dtype):
                raise IndexError(f"tensors used as indices must be int or bool, got {k.dtype!r}")
        try:
            bshape = broadcast_shape(*(k.shape for k in index))
        except ValueError:
            raise IndexError(f"shape mismatch: index arrays of shapes {[k.shape for k in index]} cannot be "
                             "broadcast together") from None
        rest = [i for i in range(self.ndim) if i not in dims]
        x = self.permute(rest + dims)
        nb, nk = len(bshape), len(dims)
        x = x.reshape(x.shape[:len(rest)] + (1,) * nb + x.shape[len(rest):])
        mask: Tensor | None = None
        for j, (d, k) in enumerate(zip(dims, index)):
            size = self.shape[d]
            k = k.cast(dtypes.int32)
            k = (k < 0).where(k + size, k).expand(bshape)
            ramp = Tensor.arange(size, device=self.device).reshape((1,) * nb + tuple(
                size if i == j else 1 for i in range(nk)))
            hit = k.reshape(bshape + (1,) * nk) == ramp
            mask = hit if mask is None else mask.logical_and(hit)
        assert mask is not None
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        out = mask.where(x, zero).sum(tuple(range(x.ndim - nk, x.ndim))).cast(self.dtype)
        adjacent = dims == list(range(dims[0], dims[0] + nk))
        if adjacent and dims[0] > 0:
            lead = len([r for r in rest if r < dims[0]])
            order = list(range(lead)) + list(range(len(rest), len(rest) + nb)) + list(range(lead, len(rest)))
            out = out.permute(order)
        elif not adjacent or dims[0] == 0:
            out = out.permute(list(range(len(rest), len(rest) + nb)) + list(range(len(rest))))
        return out

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim` (torch.gather); index may be smaller
        than self in the other dims."""
        d = normalize_axis(dim, self.ndim, "gather")[0]
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError(f"gather: index must be an int Tensor, got {getattr(index, 'dtype', type(index))!r}")
        if self.ndim == 0 or index.ndim == 0:  # 0-d: as 1-d of one element (torch takes a 0-d self or index)
            if self.ndim > 1 or index.ndim > 1:
                raise ShapeError(f"gather: index shape {index.shape} does not fit self shape {self.shape}")
            return self.reshape(-1).gather(0, index.reshape(-1)).reshape(index.shape)
        if index.ndim != self.ndim or any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
            raise ShapeError(f"gather: index shape {index.shape} does not fit self shape {self.shape} outside dim {d}")
        size = self.shape[d]
        _check_index_bounds(index, size, d, low=0, what="gather: ")
        x = self.shrink([(0, s) if j == d else (0, i) for j, (i, s) in enumerate(zip(index.shape, self.shape))])
        # x with dim d moved last, then broadcast over the index positions along d
        x = x.permute([j for j in range(self.ndim) if j != d] + [d]).unsqueeze(d).expand(index.shape + (size,))
        hit = index.cast(dtypes.int32).unsqueeze(-1) == Tensor.arange(size, device=self.device)
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        return hit.where(x, zero).sum(-1).cast(self.dtype)

    def _scatter_check(self, op: str, dim: int, index: Tensor, src: Any) -> tuple[int, Tensor]:
        # (dim, src as a tensor of index's shape in self's dtype), with torch's checks
        d = normalize_axis(dim, max(self.ndim, 1), op)[0]
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError(f"{op}: index must be an int Tensor, got {getattr(index, 'dtype', type(index))!r}")
        if index.ndim != self.ndim or any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
            raise RuntimeError(f"{op}: index shape {index.shape} does not fit self shape {self.shape} outside dim {d}")
        if not isinstance(src, Tensor):
            src = Tensor.full(index.shape, src, self.dtype, self.device)
        elif src.dtype != self.dtype:
            raise RuntimeError(f"{op}: expected self.dtype to be equal to src.dtype, got {self.dtype!r} and "
                               f"{src.dtype!r}")
        if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
            raise RuntimeError(f"{op}: index shape {index.shape} is larger than src shape {src.shape}")
        _check_index_bounds(index, self.shape[d] if self.ndim else 1, d, low=0, what=f"{op}: ")
        return d, src.shrink([(0, i) for i in index.shape]).cast(self.dtype)

    def _scatter_hits(self, d: int, index: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        # hit[..., k]: index (along d) points at position k of self; values broadcast with a new last dim of size k
        size = self.shape[d]
        hit = index.cast(dtypes.int32).unsqueeze(-1) == Tensor.arange(size, device=self.device)
        return hit, values.unsqueeze(-1).expand(hit.shape)

    def _scatter_place(self, d: int, reduced: Tensor) -> Tensor:
        # a result over index's positions with dim d reduced away and positions k last -> self's shape (zeros outside)
        out = reduced.unsqueeze(d).transpose(d, -1).squeeze(-1)
        return out.pad([(0, s - o) for s, o in zip(self.shape, out.shape)])

    def scatter(self, dim: int, index: Tensor, src: Tensor | float | int, reduce: str | None = None) -> Tensor:
        """self with self[..., index[i], ...] = src[i] along `dim` (torch.scatter; the last of repeated indices wins).
        `src` may be a scalar; `reduce="add"` or `"multiply"` combines with self instead (scatter_reduce's sum/prod)."""
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise ArgumentError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        if self.ndim == 0:
            return self.reshape(1).scatter(0, index.reshape(-1), src if not isinstance(src, Tensor) else
                                           src.reshape(-1)).reshape(())
        d, src = self._scatter_check("scatter", dim, index, src)
        hit, vals = self._scatter_hits(d, index, src)
        ramp = Tensor.arange(index.shape[d], device=self.device).reshape(
            [index.shape[d] if i == d else 1 for i in range(index.ndim)] + [1])
        last = hit.where(ramp, -1).max(d, keepdim=True)  # the last i along d that points at k
        pick = hit.logical_and(ramp == last)
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        placed = self._scatter_place(d, pick.where(vals, zero).sum(d).cast(self.dtype))
        mask = self._scatter_place(d, hit.any(d))
        return mask.where(placed, self)

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor | float | int, reduce: str,
                       include_self: bool = True) -> Tensor:
        """self with src combined into it at `index` along `dim` by `reduce`: "sum", "prod", "mean", "amax" or "amin"
        (torch.scatter_reduce); `include_self=False` leaves self's own values out where something lands."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise RuntimeError(f"scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got "
                               f"{reduce!r}")
        if self.ndim == 0:
            return self.reshape(1).scatter_reduce(0, index.reshape(-1), src if not isinstance(src, Tensor) else
                                                  src.reshape(-1), reduce, include_self).reshape(())
        d, src = self._scatter_check("scatter_reduce", dim, index, src)
        hit, vals = self._scatter_hits(d, index, src)
        mask = self._scatter_place(d, hit.any(d))
        dt = self.dtype
        if reduce in ("sum", "mean"):
            zero = Tensor(False if dt == dtypes.bool else 0, self.device, dt)
            total = self._scatter_place(d, hit.where(vals, zero).sum(d).cast(dt))
            if reduce == "sum":
                return mask.where(total + self if include_self else total, self)
            count = self._scatter_place(d, hit.sum(d))
            count = count + 1 if include_self else count
            total = total + self if include_self else total
            mean = total / count if dtypes.is_float(dt) else total // count.maximum(1)
            return mask.where(mean.cast(dt), self)
        if reduce == "prod":
            got = self._scatter_place(d, hit.where(vals, Tensor(1, self.device, dt)).prod(d).cast(dt))
            return mask.where(got * self if include_self else got, self)
        if dtypes.is_float(dt):
            fill = -math.inf if reduce == "amax" else math.inf
        else:
            fill = dtypes.min(dt) if reduce == "amax" else dtypes.max(dt)
        picked = hit.where(vals, Tensor(fill, self.device, dt))
        got = self._scatter_place(d, picked.max(d) if reduce == "amax" else picked.min(d))
        if include_self:
            got = got.maximum(self) if reduce == "amax" else got.minimum(self)
        return mask.where(got, self)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """self with src[i] added at index[i] along `dim` (torch.scatter_add: scatter_reduce's "sum")."""
        return self.scatter_reduce(dim, index, src, "sum")

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The entries of self at `index` (a 1-d int tensor) along `dim`: `x.index_select(0, Tensor([2, 0]))`."""
        d = normalize_axis(dim, max(self.ndim, 1), "index_select")[0]
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError(f"index_select: index must be an int Tensor, got "
                            f"{getattr(index, 'dtype', type(index))!r}")
        if index.ndim > 1:
            raise IndexError(f"index_select: index must be 0-d or 1-d, got shape {index.shape}")
        if self.ndim == 0:
            return self.reshape(1).index_select(0, index).reshape(index.shape)
        _check_index_bounds(index, self.shape[d], d, low=0, what="index_select: ")
        return self[(slice(None),) * d + (index.reshape(-1),)]

    def take(self, index: Tensor) -> Tensor:
        """The elements at `index` (any shape; negative from the end) of the flattened tensor."""
        return self.flatten()[index]

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
        """gather along `dim` with self and `indices` broadcast in the other dims (dim None: the flattened tensor)."""
        if dim is None:
            return self.flatten().gather(0, indices.flatten())
        d = normalize_axis(dim, self.ndim, "take_along_dim")[0]
        if indices.ndim != self.ndim:
            raise ShapeError(f"take_along_dim: indices of shape {indices.shape} need {self.ndim} dims")
        shape = [max(s, i) for s, i in zip(self.shape, indices.shape)]
        x = self.expand([s if j == d else n for j, (s, n) in enumerate(zip(self.shape, shape))])
        idx = indices.expand([i if j == d else n for j, (i, n) in enumerate(zip(indices.shape, shape))])
        return x.gather(d, idx)

    def _index_along_as(self, d: int, index: Tensor, like: Tensor) -> Tensor:
        # a 1-d index along dim d broadcast to `like`'s shape (the scatter index of index_add/index_copy)
        if index.ndim > 1:
            raise IndexError(f"index must be 0-d or 1-d, got shape {index.shape}")
        index = index.reshape(-1)
        return index.reshape([index.shape[0] if j == d else 1 for j in range(like.ndim)]).expand(like.shape)

    def index_add(self, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
        """self with alpha * source[i] added at position index[i] of dim `dim` (repeats add up)."""
        d = normalize_axis(dim, self.ndim, "index_add")[0]
        check_ids(index, self.shape[d], "index_add: ", what=f"for dim {d} of size {self.shape[d]}")
        src = source if alpha == 1 else source * alpha
        return self.scatter_reduce(d, self._index_along_as(d, index, source), src.cast(self.dtype), "sum")

    def index_copy(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
        """self with source[i] written at position index[i] of dim `dim`."""
        d = normalize_axis(dim, self.ndim, "index_copy")[0]
        check_ids(index, self.shape[d], "index_copy: ", what=f"for dim {d} of size {self.shape[d]}")
        return self.scatter(d, self._index_along_as(d, index, source), source.cast(self.dtype))

    def index_fill(self, dim: int, index: Tensor, value: Any) -> Tensor:
        """self with `value` at the positions `index` of dim `dim`."""
        d = normalize_axis(dim, self.ndim, "index_fill")[0]
        _check_index_bounds(index, self.shape[d], d, what="index_fill: ")
        n = self.shape[d]
        idx = index.reshape(-1).cast(dtypes.int32)
        idx = (idx < 0).where(idx + n, idx)
        hit = (idx.unsqueeze(-1) == Tensor.arange(n, device=self.device)).any(0)
        mask = hit.reshape([n if j == d else 1 for j in range(self.ndim)])
        return mask.where(Tensor(value, self.device, self.dtype) if not isinstance(value, Tensor) else value.cast(
            self.dtype), self)

    def isin(self, test_elements: Any, invert: bool = False) -> Tensor:
        """True where an element of self is among `test_elements` (a tensor, list or scalar)."""
        test = test_elements if isinstance(test_elements, Tensor) else Tensor(test_elements, self.device)
        out = (self.unsqueeze(-1) == test.flatten()).any(-1) if test.numel() else self.zeros_like(dtype=dtypes.bool)
        return out.logical_not() if invert else out

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
               dim: int | None = None) -> Any:
        """The distinct values (sorted), and optionally for each element the index of its value (`return_inverse`) and
        the count of each value (`return_counts`); with `dim`, the distinct slices along it. Reads the tensor (a sync):
        the result's size depends on the values."""
        values = self.numpy() if self.dtype.name != "bfloat16" else self.float().numpy()
        axis = None if dim is None else normalize_axis(dim, self.ndim, "unique")[0]
        # (each NaN its own value, as torch.unique)
        out, inverse, counts = np.unique(values, return_inverse=True, return_counts=True, axis=axis, equal_nan=False)
        result: list[Tensor] = [Tensor(out, self.device).cast(self.dtype)]
        if return_inverse:
            result.append(Tensor(inverse.reshape(self.shape if axis is None else (-1,)).astype(np.int64), self.device))
        if return_counts:
            result.append(Tensor(counts.astype(np.int64), self.device))
        return result[0] if len(result) == 1 else tuple(result)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False,
                           dim: int | None = None) -> Any:
        """Each run of equal consecutive values (of the flattened tensor) once, with optionally the run index of each
        element and the length of each run (torch.unique_consecutive; dim=None only). Reads the tensor (a sync)."""
        if dim is not None:
            raise ArgumentError("unique_consecutive: only dim=None is supported")
        values = (self.numpy() if self.dtype.name != "bfloat16" else self.float().numpy()).reshape(-1)
        starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]])) if values.size else \
            np.zeros(0, np.int64)
        result: list[Tensor] = [Tensor(values[starts], self.device).cast(self.dtype)]
        if return_inverse:
            inverse = np.cumsum(np.isin(np.arange(values.size), starts)) - 1
            result.append(Tensor(inverse.reshape(self.shape).astype(np.int64), self.device))
        if return_counts:
            result.append(Tensor(np.diff(np.append(starts, values.size)).astype(np.int64), self.device))
        return result[0] if len(result) == 1 else tuple(result)

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements of self where `mask` (broadcast) is True, as a 1-d tensor; reads the mask (a sync)."""
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise RuntimeError(f"masked_select: expected a bool mask, got {getattr(mask, 'dtype', type(mask))!r}")
        shape = broadcast_shape(self.shape, mask.shape)
        x, m = self.expand(shape), mask.expand(shape)
        if not shape:
            x, m = x.reshape(1), m.reshape(1)
        return x[m]

    def nonzero(self, as_tuple: bool = False) -> Any:
        """The indices (int64) of the nonzero elements, one row each (shape (n, ndim)), or with `as_tuple` one 1-d
        tensor per dim; reads the tensor (a sync)."""
        values = self.numpy() if self.dtype.name != "bfloat16" else self.float().numpy()
        where = np.nonzero(np.atleast_1d(values))
        if as_tuple:
            return tuple(Tensor(w.astype(np.int64), self.device) for w in where)
        rows = np.stack(where, -1).astype(np.int64) if self.ndim else np.zeros((int(values != 0), 0), np.int64)
        return Tensor(rows.reshape(len(where[0]) if self.ndim else rows.shape[0], self.ndim), self.device)

    def argwhere(self) -> Tensor:
        """The indices of the nonzero elements, one row each (torch.argwhere: `nonzero()`); reads the tensor."""
        return self.nonzero()  # type: ignore[no-any-return]

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """int64 one-hot vectors along a new last dim (num_classes=-1: max + 1, which realizes the tensor)."""
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot: the tensor must be int, got {self.dtype!r}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ArgumentError(f"one_hot: num_classes must be a non-negative int or -1, got {num_classes!r}")
        check_ids(self, num_classes, "one_hot: class ", what=f"for num_classes {num_classes}")  # type: ignore[arg-type]
        ramp = Tensor.arange(num_classes, device=self.device)
        return (self.cast(dtypes.int32).unsqueeze(-1) == ramp).cast(dtypes.int64)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """`value` where `mask` is True, else self (mask broadcasts)."""
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask))!r}")
        if isinstance(value, Tensor):
            value = value.cast(self.dtype)
        else:
            value = Tensor(value, self.device, self.dtype)
        out = mask.where(value, self)
        return out.cast(self.dtype)
