"""Neural-network ops as Tensor methods: convolution, transposed convolution and pooling over any number of spatial
dims, attention, interpolation, the normalizations, softmax and its kin, the losses, and the initializers.

Signatures follow tinygrad's Tensor (`x.conv2d(w, bias, groups, stride, dilation, padding)`,
`x.max_pool2d(kernel_size, stride, dilation, padding)`), and torch.nn.functional's where tinygrad has none
(`cross_entropy(weight=, ignore_index=)`, `batch_norm`, `layer_norm`, `rms_norm`, `normalize`); ember.tensor.nn wraps
them in torch.nn.functional's argument order. A window is a view of the input (movement ops only), so a convolution
or a pool is one kernel: the windows, the products and the reduce, fused."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ember.tensor.ops.args import normalize_axis, shape_args, to_dtype, torch_axis_name
from ember.tensor.ops.indexing import check_ids
from ember.uops import DType, Ops, dtypes, prod

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor

Reduction = Literal["mean", "sum", "none"]
_REDUCTIONS = ("mean", "sum", "none")
# each mode, and how many dims it resamples (0: any number)
_INTERPOLATE_MODES = {"nearest": 0, "nearest-exact": 0, "linear": 0, "bilinear": 2, "trilinear": 3, "bicubic": 2,
                      "area": 0}
# the machine epsilon of each float dtype: rms_norm's default eps, as torch.finfo(dtype).eps
_FLOAT_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


# *** argument parsing ***
def _ints(value: Any, n: int, name: str, op: str, minimum: int) -> tuple[int, ...]:
    """An int (the same for each of n dims) or n ints, each >= minimum."""
    out = (value,) * n if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if out is None or len(out) != n or any(not isinstance(v, int) or isinstance(v, bool) or v < minimum for v in out):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {n} of them (one per spatial dim), got "
                         f"{value!r}")
    return out


def _pad_pairs(padding: Any, n: int, op: str) -> list[tuple[int, int]]:
    """(before, after) per spatial dim from an int (every side), n ints (both sides of each dim, first dim first) or
    2n ints in torch.nn.functional.pad's order (left, right of the last dim, then of the one before, ...)."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        return [(padding, padding)] * n
    pads = tuple(padding) if isinstance(padding, (tuple, list)) else ()
    if not pads or any(not isinstance(p, int) or isinstance(p, bool) for p in pads) or len(pads) not in (n, 2 * n):
        raise ValueError(f"{op}: padding must be an int, {n} ints (one per spatial dim) or {2 * n} ints (before and "
                         f"after, last dim first), got {padding!r}")
    if len(pads) == n:
        return [(p, p) for p in pads]
    return [(pads[2 * i], pads[2 * i + 1]) for i in range(n)][::-1]


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _as_n(v: Any, n: int) -> Any:
    """An int as n of it (the pooling methods read an int as 2 dims), anything else as given."""
    return (v,) * n if isinstance(v, int) and not isinstance(v, bool) else v


def _check_tensor(x: Any, name: str, op: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__}")


def _fans(shape: tuple[int, ...], op: str) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shaped (out, in, *kernel), as torch.nn.init computes them."""
    if len(shape) < 2:
        raise ValueError(f"{op}: fan in and fan out need a shape of at least 2 dims, got {shape}")
    receptive = int(prod(shape[2:]))
    return shape[1] * receptive, shape[0] * receptive


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """The 4 taps' weights (at i-1, i, i+1, i+2) of Keys' cubic convolution with A = -0.75 (PyTorch's bicubic) for
    fractional positions t in [0, 1)."""
    a, f32 = np.float32(-0.75), np.float32

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + f32(1)), near(t), near(f32(1) - t), far(f32(2) - t)], axis=1)


def _interpolation_matrix(n_in: int, n_out: int, mode: str, align_corners: bool,
                          scale_factor: float | None) -> np.ndarray:
    """The (out, in) matrix that resamples one dim: weights (float32), or for the nearest modes which input each
    output picks (bool). Positions in float32 arithmetic as PyTorch computes them, so that ties pick alike."""
    f32 = np.float32
    dst, rows = np.arange(n_out, dtype=f32), np.arange(n_out)
    if mode == "area":  # adaptive average pooling: output o averages inputs floor(o*in/out) .. ceil((o+1)*in/out)-1
        weights = np.zeros((n_out, n_in), f32)
        for o in range(n_out):
            start, end = o * n_in // n_out, -(-(o + 1) * n_in // n_out)
            weights[o, start:end] = f32(1) / f32(end - start)
        return weights
    if mode in ("linear", "cubic") and align_corners:
        scale = f32((n_in - 1) / (n_out - 1)) if n_out > 1 else f32(0)
    elif scale_factor is not None and scale_factor > 0:
        scale = f32(1.0 / scale_factor)
    else:
        scale = f32(n_in) / f32(n_out)
    if mode in ("nearest", "nearest-exact"):
        pos = dst * scale if mode == "nearest" else (dst + f32(0.5)) * scale
        picks = np.zeros((n_out, n_in), bool)
        picks[rows, np.minimum(np.floor(pos).astype(np.int64), n_in - 1)] = True
        return picks
    src = dst * scale if align_corners else scale * (dst + f32(0.5)) - f32(0.5)
    weights = np.zeros((n_out, n_in), f32)
    if mode == "linear":
        src = np.maximum(src, f32(0))  # (linear clamps a position before the first input to it; cubic does not)
        i0 = src.astype(np.int64)
        frac = np.minimum(src - i0.astype(f32), f32(1))
        np.add.at(weights, (rows, i0), f32(1) - frac)
        np.add.at(weights, (rows, np.minimum(i0 + 1, n_in - 1)), frac)
        return weights
    i0 = np.floor(src).astype(np.int64)
    taps = _cubic_weights(src - i0.astype(f32))
    for j in range(4):  # taps beyond the edges read the edge
        np.add.at(weights, (rows, np.clip(i0 - 1 + j, 0, n_in - 1)), taps[:, j])
    return weights


class NNMixin:
    """Neural-network ops: `x.conv2d(w)`, `x.max_pool2d((3, 3))`, `q.scaled_dot_product_attention(k, v)`,
    `logits.cross_entropy(y)`, `x.layer_norm((d,), w, b)`, `Tensor.kaiming_normal(64, 32)`."""

    __slots__ = ()

    # *** windows ***
    def _windows(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                 op: str) -> Tensor:
        """(..., *spatial) -> (..., *out, *kernel): the input under each window position, over the last len(kernel)
        dims, as movement ops only (a view: it fuses into the kernel that reads it)."""
        n = len(kernel)
        lead, sizes = self.shape[:-n], self.shape[-n:]
        outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(sizes, kernel, stride, dilation)]
        if any(o <= 0 for o in outs):
            raise ValueError(f"{op}: the window (kernel {kernel}, dilation {dilation}) does not fit the input of "
                             f"spatial shape {sizes} (after padding)")
        keep = [(0, 0)] * len(lead)
        if all(d == 1 and k <= s for k, s, d in zip(kernel, stride, dilation)):
            # windows that do not overlap: each dim as (out, stride) blocks, of which the first k
            x = self.pad(keep + [(0, o * s - i) for i, o, s in zip(sizes, outs, stride)])
            x = x.reshape(*lead, *(v for o, s in zip(outs, stride) for v in (o, s)))
            x = x.shrink([None] * len(lead) + [b for o, k in zip(outs, kernel) for b in ((0, o), (0, k))])
            out_first = True
        else:
            # tile each dim so that row j of a (k, i + d) view starts at j * d: its columns 0, s, 2s, ... are window j
            x = self.repeat(*(1,) * len(lead), *(-(-k * (i + d) // i) for i, k, d in zip(sizes, kernel, dilation)))
            x = x.shrink([None] * len(lead) + [(0, k * (i + d)) for i, k, d in zip(sizes, kernel, dilation)])
            x = x.reshape(*lead, *(v for i, k, d in zip(sizes, kernel, dilation) for v in (k, i + d)))
            x = x.pad(keep + [p for i, o, s, d in zip(sizes, outs, stride, dilation)
                              for p in ((0, 0), (0, o * s - i - d))])
            x = x.reshape(*lead, *(v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s)))
            x = x.shrink([None] * len(lead) + [b for k, o in zip(kernel, outs) for b in ((0, k), (0, o), (0, 1))])
            x = x.reshape(*lead, *(v for k, o in zip(kernel, outs) for v in (k, o)))
            out_first = False
        # (..., o1, k1, o2, k2, ...) or (..., k1, o1, ...) -> (..., o1, o2, ..., k1, k2, ...)
        m, o_at = len(lead), 0 if out_first else 1
        return x.permute(*range(m), *(m + 2 * i + o_at for i in range(n)), *(m + 2 * i + 1 - o_at for i in range(n)))

    def _pool_padding(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                      padding: Any, ceil_mode: bool, op: str) -> tuple[list[tuple[int, int]], list[int]]:
        """The user's (before, after) padding per spatial dim, and what ceil_mode adds after it (negative: the tail
        that no window reaches, cut). PyTorch's rule: a last window must start inside the input or the left padding."""
        n = len(kernel)
        if self.ndim < n:
            raise ValueError(f"{op}: a {n}-d pool needs at least {n} dims, got shape {self.shape}")
        pads = _pad_pairs(padding, n, op)
        extra = []
        for (before, after), k, s, d, size in zip(pads, kernel, stride, dilation, self.shape[-n:]):
            span = d * (k - 1) + 1
            if min(before, after) < 0 or max(before, after) > span // 2:
                raise ValueError(f"{op}: padding {padding!r} must be >= 0 and at most half the (dilated) kernel size "
                                 f"{span}")
            full = size + before + after
            if full < span:
                raise ValueError(f"{op}: the window (kernel {kernel}, dilation {dilation}) does not fit the input of "
                                 f"spatial shape {self.shape[-n:]} with padding {padding!r}")
            out = (-(-(full - span) // s) if ceil_mode else (full - span) // s) + 1
            if ceil_mode and (out - 1) * s >= size + before:
                out -= 1
            extra.append((out - 1) * s + span - full)
        return pads, extra

    def _pool_args(self, kernel_size: Any, stride: Any, dilation: Any,
                   op: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        n = 2 if isinstance(kernel_size, int) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
        if n == 0:
            raise ValueError(f"{op}: kernel_size must be an int or a tuple of ints, got {kernel_size!r}")
        kernel = _ints(kernel_size, n, "kernel_size", op, 1)
        return kernel, _ints(kernel if stride is None else stride, n, "stride", op, 1), \
            _ints(dilation, n, "dilation", op, 1)

    # *** convolution ***
    def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
               dtype: DType | str | None = None) -> Tensor:
        """Convolution (cross-correlation, as PyTorch) of self (N, C, *spatial) or unbatched (C, *spatial) with weight
        (O, C/groups, *kernel), over as many spatial dims as the weight has (1-d, 2-d, 3-d, ...).

        `padding`: an int, one int per spatial dim, 2 per dim in torch.nn.functional.pad's order (last dim first;
        negative amounts cut), or 'valid' (none) / 'same' (output the input's size; stride 1). `dtype`: accumulate
        in it, and return it (the inputs' dtype by default).

            Tensor.ones(1, 3, 8, 8).conv2d(Tensor.ones(4, 3, 3, 3), padding=1).shape  # (1, 4, 8, 8)
        """
        _check_tensor(weight, "weight", "conv2d")
        n = weight.ndim - 2
        if n < 1:
            raise ValueError(f"conv2d: weight must be (out_channels, in_channels/groups, *kernel), got {weight.shape}")
        if self.ndim not in (n + 1, n + 2):
            raise ValueError(f"conv2d: input of shape {self.shape} does not match weight {weight.shape}: expected "
                             f"(N, C, *spatial) or (C, *spatial) with {n} spatial dims")
        stride_t = _ints(stride, n, "stride", "conv2d", 1)
        dilation_t = _ints(dilation, n, "dilation", "conv2d", 1)
        kernel = weight.shape[2:]
        if isinstance(padding, str):
            if padding == "valid":
                pads = [(0, 0)] * n
            elif padding == "same":
                if any(s != 1 for s in stride_t):
                    raise ValueError(f"conv2d: padding='same' is not supported for strided convolutions (stride "
                                     f"{stride!r})")
                # the odd one of an even total goes after, as PyTorch pads
                pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation_t)]
            else:
                raise ValueError(f"conv2d: padding must be 'valid', 'same' or ints, got {padding!r}")
        else:
            pads = _pad_pairs(padding, n, "conv2d")
        return self._conv(weight, bias, groups, stride_t, dilation_t, pads, to_dtype(dtype))

    def _conv(self, weight: Tensor, bias: Tensor | None, groups: int, stride: tuple[int, ...],
              dilation: tuple[int, ...], pads: list[tuple[int, int]], dtype: DType | None = None) -> Tensor:
        n = weight.ndim - 2
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        (batch, cin), (cout, cin_g), kernel = x.shape[:2], weight.shape[:2], weight.shape[2:]
        if not isinstance(groups, int) or groups < 1 or cin % groups or cout % groups or cin_g != cin // groups:
            raise ValueError(f"conv2d: {cin} input channels, weight {weight.shape} and groups={groups!r} do not match "
                             "(the weight is (out_channels, in_channels/groups, *kernel), both channel counts "
                             "multiples of groups)")
        if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (cout,)):
            raise ValueError(f"conv2d: bias must be a Tensor of shape ({cout},), got "
                             f"{getattr(bias, 'shape', type(bias).__name__)}")
        if any(pads[i] != (0, 0) for i in range(n)):
            x = x.pad(((0, 0), (0, 0), *pads))
        cols = x._windows(kernel, stride, dilation, "conv2d")  # (N, C, *out, *kernel)
        out_shape = cols.shape[2:2 + n]
        # (N, G, 1, *out, C/G, *kernel) * (1, G, O/G, *1, C/G, *kernel), summed over C/G and the kernel
        cols = cols.reshape(batch, groups, cin_g, *out_shape, *kernel)
        cols = cols.permute(0, 1, *range(3, 3 + n), 2, *range(3 + n, 3 + 2 * n)).unsqueeze(2)
        w = weight.reshape(1, groups, cout // groups, *(1,) * n, cin_g, *kernel)
        prod_ = cols * w if dtype is None else (cols * w).cast(dtype)
        out = prod_.sum(tuple(range(-1 - n, 0))).cast(prod_.dtype).reshape(batch, cout, *out_shape)
        if bias is not None:
            out = out + bias.reshape(1, cout, *(1,) * n)
        return out.reshape(out.shape[1:]) if self.ndim == n + 1 else out

    def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
        """Transposed convolution (the gradient of conv2d with respect to its input) of self (N, C, *spatial) or
        (C, *spatial) with weight (C, O/groups, *kernel), over as many spatial dims as the weight has. The output has
        (in - 1) * stride - pad_before - pad_after + dilation * (kernel - 1) + output_padding + 1 positions per dim."""
        _check_tensor(weight, "weight", "conv_transpose2d")
        n = weight.ndim - 2
        if n < 1 or self.ndim not in (n + 1, n + 2):
            raise ValueError(f"conv_transpose2d: input of shape {self.shape} does not match weight {weight.shape}: "
                             f"expected (N, C, *spatial) or (C, *spatial) and (C, O/groups, *kernel)")
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        cin, cout_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
        if not isinstance(groups, int) or groups < 1 or cin % groups or x.shape[1] != cin:
            raise ValueError(f"conv_transpose2d: {x.shape[1]} input channels, weight {weight.shape} and "
                             f"groups={groups!r} do not match (the weight is (in_channels, out_channels/groups, "
                             "*kernel))")
        stride_t = _ints(stride, n, "stride", "conv_transpose2d", 1)
        dilation_t = _ints(dilation, n, "dilation", "conv_transpose2d", 1)
        out_pad = _ints(output_padding, n, "output_padding", "conv_transpose2d", 0)
        pads = _pad_pairs(padding, n, "conv_transpose2d")
        if any(min(p) < 0 for p in pads):
            raise ValueError(f"conv_transpose2d: padding must be >= 0, got {padding!r}")
        if any(op >= max(s, d) for op, s, d in zip(out_pad, stride_t, dilation_t)):
            raise ValueError(f"conv_transpose2d: output_padding {output_padding!r} must be smaller than the stride "
                             f"or the dilation")
        # the weight as a convolution's: (G, C/G, O/G, *k) -> (G * O/G, C/G, *k), the kernel flipped
        w = weight.reshape(groups, cin // groups, cout_g, *kernel).transpose(1, 2)
        w = w.reshape(groups * cout_g, cin // groups, *kernel).flip(tuple(range(2, 2 + n)))
        for i, s in enumerate(stride_t):  # stride - 1 zeros between inputs: (m,) -> (m, 1) -> (m, s) -> m*s - (s-1)
            if s == 1:
                continue
            dim, m = 2 + i, x.shape[2 + i]
            x = x.reshape(*x.shape[:dim + 1], 1, *x.shape[dim + 1:])
            x = x.pad(tuple((0, s - 1) if j == dim + 1 else (0, 0) for j in range(x.ndim)))
            x = x.reshape(*x.shape[:dim], m * s, *x.shape[dim + 2:])
            x = x.shrink(tuple((0, m * s - (s - 1)) if j == dim else None for j in range(x.ndim)))
        conv_pads = [(d * (k - 1) - before, d * (k - 1) - after + op)
                     for k, d, (before, after), op in zip(kernel, dilation_t, pads, out_pad)]
        out = x._conv(w, bias, groups, (1,) * n, dilation_t, conv_pads)
        return out.reshape(out.shape[1:]) if self.ndim == n + 1 else out

    # *** pooling ***
    def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   return_indices: bool = False) -> Any:
        """The max over each window of the last len(kernel_size) dims (an int kernel_size: 2 dims). Padding is
        ignored (as -inf); integer tensors keep their dtype. With return_indices, also the int64 index of each max
        (the first one) in the flattened spatial dims, as PyTorch's and max_unpool2d's.

            Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d().tolist()  # [[[[5, 7], [13, 15]]]]
        """
        kernel, stride_t, dilation_t = self._pool_args(kernel_size, stride, dilation, "max_pool2d")
        n = len(kernel)
        pads, extra = self._pool_padding(kernel, stride_t, dilation_t, padding, ceil_mode, "max_pool2d")
        full = ((0, 0),) * (self.ndim - n) + tuple((b, a + e) for (b, a), e in zip(pads, extra))
        low = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        windows = self.pad(full, value=low)._windows(kernel, stride_t, dilation_t, "max_pool2d")
        axes = tuple(range(-n, 0))
        out = windows.max(axes)
        if not return_indices:
            return out
        spatial = self.shape[-n:]
        size = int(prod(spatial))
        ramp = Tensor.arange(size, device=self.device).reshape(spatial)
        positions = ramp.pad(full[-n:], value=size)._windows(kernel, stride_t, dilation_t, "max_pool2d")
        is_max = windows == out.reshape(*out.shape, *(1,) * n)
        if dtypes.is_float(self.dtype):  # a NaN is the max of its window (it propagates), and its own index
            is_max = is_max.logical_or(windows.isnan())
        return out, is_max.where(positions, size).min(axes).cast(dtypes.int64)

    def max_unpool2d(self, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2),
                     stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
        """The inverse of max_pool2d(return_indices=True): each value written at its index in the flattened spatial
        dims of an output of zeros. `output_size` (its last len(kernel_size) entries) picks among the sizes that pool
        to this one; the default is (in - 1) * stride - pad_before - pad_after + dilation * (kernel - 1) + 1."""
        kernel, stride_t, dilation_t = self._pool_args(kernel_size, stride, dilation, "max_unpool2d")
        n = len(kernel)
        _check_tensor(indices, "indices", "max_unpool2d")
        if not dtypes.is_int(indices.dtype) or indices.shape != self.shape:
            raise ValueError(f"max_unpool2d: indices must be an int tensor of the input's shape {self.shape}, got "
                             f"{indices.dtype!r} {indices.shape}")
        if self.ndim < n:
            raise ValueError(f"max_unpool2d: a {n}-d unpool needs at least {n} dims, got shape {self.shape}")
        if output_size is None:
            out_size = tuple((m - 1) * s - b - a + d * (k - 1) + 1 for m, s, (b, a), d, k in
                             zip(self.shape[-n:], stride_t, _pad_pairs(padding, n, "max_unpool2d"), dilation_t,
                                 kernel))
        else:
            out_size = tuple(output_size)[-n:]
            if len(out_size) != n or any(not isinstance(s, int) or s < 0 for s in out_size):
                raise ValueError(f"max_unpool2d: output_size must end with {n} sizes, got {output_size!r}")
        lead, size_in, size_out = self.shape[:-n], int(prod(self.shape[-n:])), int(prod(out_size))
        # where several inputs share an index the last one is written, as PyTorch's loop does: for each output, the
        # last input (1-based; 0: none) that lands there, then that input's value
        order = Tensor.arange(1, size_in + 1, device=self.device).reshape(size_in, 1)
        hit = indices.reshape(*lead, size_in, 1) == Tensor.arange(size_out, device=self.device)
        source = hit.where(order, 0).max(-2, keepdim=True)  # (..., 1, out)
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        out = (source == order).where(self.reshape(*lead, size_in, 1), zero).sum(-2).cast(self.dtype)
        return out.reshape(*lead, *out_size)

    def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
        """The mean over each window of the last len(kernel_size) dims (an int kernel_size: 2 dims), as PyTorch: the
        padded zeros count unless count_include_pad=False, the ceil_mode overhang never does; `divisor_override`
        divides every sum by that number instead."""
        kernel, stride_t, dilation_t = self._pool_args(kernel_size, stride, dilation, "avg_pool2d")
        n = len(kernel)
        pads, extra = self._pool_padding(kernel, stride_t, dilation_t, padding, ceil_mode, "avg_pool2d")
        if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override <= 0):
            raise ValueError(f"avg_pool2d: divisor_override must be a positive int, got {divisor_override!r}")
        full = tuple((b, a + e) for (b, a), e in zip(pads, extra))
        x = self.float_()
        windows = x.pad(((0, 0),) * (self.ndim - n) + full)._windows(kernel, stride_t, dilation_t, "avg_pool2d")
        axes = tuple(range(-n, 0))
        if divisor_override is not None:
            return windows.sum(axes).cast(x.dtype) * (1 / divisor_override)
        if count_include_pad and all(e <= 0 for e in extra):  # every window position is counted
            return windows.mean(axes).cast(x.dtype)
        # the divisor of each window: how many of its positions are counted (input, and padding if included)
        spatial = self.shape[-n:]
        if count_include_pad:
            counted = Tensor.ones(*(s + b + a for s, (b, a) in zip(spatial, pads)), device=self.device)
            counted = counted.pad(tuple((0, e) for e in extra))
        else:
            counted = Tensor.ones(*spatial, device=self.device).pad(full)
        count = counted._windows(kernel, stride_t, dilation_t, "avg_pool2d").sum(axes)
        return (windows.sum(axes) / count).cast(x.dtype)

    # *** attention ***
    def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                     scale: float | None = None) -> Tensor:
        """softmax(self @ key^T * scale + mask) @ value, over (..., heads, seq, dim), with self the queries.

        `attn_mask`: bool (True: attend) or float (added to the scores), broadcast to (..., q_len, k_len); a query
        masked from every key gets zeros, as PyTorch.
        `is_causal`: query i attends to keys 0..i, aligned top-left as PyTorch (with fewer queries than keys, the
        last keys are seen by no query). `enable_gqa`: fewer key/value heads than query heads, each shared by a group
        of consecutive query heads. `dropout_p`: the attention weights are dropped with that probability (and the rest
        scaled by 1/(1 - p)), from Tensor's random stream. `scale` defaults to 1/sqrt(dim)."""
        op = "scaled_dot_product_attention"
        _check_tensor(key, "key", op)
        _check_tensor(value, "value", op)
        q, k, v = self, key, value
        if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise ValueError(f"{op}: shapes query {q.shape}, key {k.shape}, value {v.shape} do not align: expected "
                             "(..., L, E), (..., S, E), (..., S, Ev) (the leading dims broadcast)")
        # (one key/value head broadcasts, as PyTorch's; with enable_gqa it is repeated like any group)
        if min(q.ndim, k.ndim) >= 3 and k.shape[-3] != q.shape[-3] and (enable_gqa or k.shape[-3] != 1):
            if not enable_gqa:
                raise ValueError(f"{op}: {q.shape[-3]} query heads and {k.shape[-3]} key/value heads differ; pass "
                                 "enable_gqa=True to share each key/value head among a group of query heads")
            if k.shape[-3] == 0 or q.shape[-3] % k.shape[-3] or v.ndim < 3 or v.shape[-3] != k.shape[-3]:
                raise ValueError(f"{op}: {q.shape[-3]} query heads are not a multiple of the key and value heads "
                                 f"(key {k.shape}, value {v.shape})")
            rep = q.shape[-3] // k.shape[-3]
            k, v = (t.unsqueeze(-3).expand(*t.shape[:-2], rep, *t.shape[-2:])
                    .reshape(*t.shape[:-3], q.shape[-3], *t.shape[-2:]) for t in (k, v))
        if is_causal and attn_mask is not None:
            raise ValueError(f"{op}: attn_mask and is_causal=True cannot both be given (put the causal mask in "
                             "attn_mask)")
        if not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
            raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p!r}")
        scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
        if is_causal:
            keep = Tensor.ones(q.shape[-2], k.shape[-2], dtype=dtypes.bool, device=q.device).tril(0)
            scores = keep.where(scores, -math.inf)
        if attn_mask is not None:
            _check_tensor(attn_mask, "attn_mask", op)
            if attn_mask.dtype == dtypes.bool:
                scores = attn_mask.where(scores, -math.inf)
            elif dtypes.is_float(attn_mask.dtype):
                scores = scores + attn_mask
            else:
                raise TypeError(f"{op}: attn_mask must be bool or float, got {attn_mask.dtype!r}")
        if attn_mask is None:
            weights = scores.softmax(-1)
        else:  # a query that may attend to no key gets zeros, as PyTorch's (not NaNs, nor NaN gradients)
            blind = (scores == -math.inf).all(-1, keepdim=True)
            weights = blind.where(0.0, blind.where(0.0, scores).softmax(-1))
        if dropout_p:
            # stored: fused into the matmul, the random bits would be recomputed for every output column
            keep_w = (Tensor.rand(*weights.shape, device=weights.device) >= dropout_p).contiguous()
            weights = keep_w.where(weights * (1 / (1 - dropout_p)), 0.0)
        return weights @ v

    # *** resampling ***
    def interpolate(self, size: int | Sequence[int] | None = None, mode: str = "linear", align_corners: bool = False,
                    scale_factor: float | Sequence[float] | None = None) -> Tensor:
        """Resample the last len(size) dims to `size` (the dims before are batch dims, any number of them).

        `mode`: 'nearest' (PyTorch's: floor(i * in / out)), 'nearest-exact' (the nearest center), 'linear' (linear
        along each dim: bilinear for 2 dims, trilinear for 3; 'bilinear'/'trilinear' also say how many), 'bicubic'
        (PyTorch's cubic convolution, A = -0.75, 2 dims), 'area' (adaptive average pooling); `align_corners` as
        PyTorch's, for the linear and cubic modes. Instead of `size`, `scale_factor` (one per dim, or one number for
        every dim after the first two: PyTorch's (N, C, ...) layout) gives size = floor(in * scale), positions mapped
        by 1 / scale as PyTorch does."""
        if mode not in _INTERPOLATE_MODES:
            raise ValueError(f"interpolate: mode must be one of {sorted(_INTERPOLATE_MODES)}, got {mode!r}")
        if align_corners and (mode.startswith("nearest") or mode == "area"):
            raise ValueError(f"interpolate: align_corners applies to the linear and cubic modes only, not {mode!r}")
        if (size is None) == (scale_factor is None):
            raise ValueError("interpolate: give exactly one of size and scale_factor")
        scales: tuple[float | None, ...]
        if size is not None:
            size_t = (size,) if isinstance(size, int) else tuple(size)
            scales = (None,) * len(size_t)
        else:
            if isinstance(scale_factor, (int, float)):
                scales = (float(scale_factor),) * max(self.ndim - 2, 1)
            else:
                scales = tuple(float(s) for s in scale_factor)  # type: ignore[union-attr]
            if any(s <= 0 for s in scales if s is not None):
                raise ValueError(f"interpolate: scale_factor must be positive, got {scale_factor!r}")
            size_t = tuple(int(math.floor(n * s)) for n, s in  # type: ignore[operator]
                           zip(self.shape[self.ndim - len(scales):], scales))
        n = len(size_t)
        if not 0 < n <= self.ndim or any(not isinstance(s, int) or s <= 0 for s in size_t):
            raise ValueError(f"interpolate: size must be 1 to {self.ndim} positive ints (the last dims), got "
                             f"{size_t}")
        if _INTERPOLATE_MODES[mode] and n != _INTERPOLATE_MODES[mode]:
            raise ValueError(f"interpolate: mode {mode!r} resamples {_INTERPOLATE_MODES[mode]} dims, got size {size_t}")
        kind = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        if not kind.startswith("nearest") and not dtypes.is_float(self.dtype):
            raise TypeError(f"interpolate: mode {mode!r} needs a float tensor, got {self.dtype!r}")
        x = self
        for i, (n_out, scale) in enumerate(zip(size_t, scales)):
            dim = self.ndim - n + i
            n_in = x.shape[dim]
            if n_in == n_out and scale is None:
                continue  # the identity map (PyTorch's positions come out exact)
            matrix = Tensor(_interpolation_matrix(n_in, n_out, kind, align_corners, scale), self.device)
            last = x.transpose(dim, -1).unsqueeze(-2)  # (..., 1, in) against the (out, in) matrix
            if kind.startswith("nearest"):  # a pick, not a product: exact for every dtype, and inf stays inf
                zero = Tensor(False if x.dtype == dtypes.bool else 0, self.device, x.dtype)
                moved = matrix.where(last, zero).sum(-1).cast(x.dtype)
            else:
                moved = (last * matrix.cast(x.dtype)).sum(-1).cast(x.dtype)
            x = moved.transpose(dim, -1)
        return x

    # *** normalization ***
    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (the biased variance), with no weight or bias (tinygrad's)."""
        mu = self.mean(axis, keepdim=True)
        d = self - mu
        return d * ((d * d).mean(axis, keepdim=True) + eps).rsqrt()

    def layer_norm(self, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                   bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
        """torch.nn.functional.layer_norm: normalize over the last dims, of `normalized_shape`, then * weight + bias
        (each of that shape, optional)."""
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or self.shape[self.ndim - len(shape):] != shape or len(shape) > self.ndim:
            raise ValueError(f"layer_norm: normalized_shape {shape} must be the last dims of the input {self.shape}")
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and (not isinstance(t, Tensor) or t.shape != shape):
                raise ValueError(f"layer_norm: {name} must have shape {shape}, got {getattr(t, 'shape', t)!r}")
        out = self.layernorm(tuple(range(-len(shape), 0)), eps)
        out = out * weight if weight is not None else out
        return out + bias if bias is not None else out

    def group_norm(self, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
                   eps: float = 1e-5) -> Tensor:
        """torch.nn.functional.group_norm: the channels of (N, C, ...) in num_groups groups, each normalized over its
        channels and the spatial dims, then * weight + bias per channel (each of shape (C,), optional)."""
        if self.ndim < 2:
            raise ValueError(f"group_norm: expected (N, C, ...), got shape {self.shape}")
        channels = self.shape[1]
        if not isinstance(num_groups, int) or num_groups < 1 or channels % num_groups:
            raise ValueError(f"group_norm: {channels} channels do not split into num_groups={num_groups!r} groups")
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and (not isinstance(t, Tensor) or t.shape != (channels,)):
                raise ValueError(f"group_norm: {name} must have shape ({channels},), got {getattr(t, 'shape', t)!r}")
        out = self.reshape(self.shape[0], num_groups, -1).layernorm(-1, eps).reshape(self.shape)
        per_channel = (channels,) + (1,) * (self.ndim - 2)
        out = out * weight.reshape(per_channel) if weight is not None else out
        return out + bias.reshape(per_channel) if bias is not None else out

    def rmsnorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-6) -> Tensor:
        """x / sqrt(mean(x^2) + eps) over `axis`, with no weight."""
        return self * ((self * self).mean(axis, keepdim=True) + eps).rsqrt()

    def rms_norm(self, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                 eps: float | None = None) -> Tensor:
        """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the last dims, of `normalized_shape`, then
        * weight (optional). eps defaults to the machine epsilon of x's float dtype, as PyTorch."""
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or self.shape[self.ndim - len(shape):] != shape or len(shape) > self.ndim:
            raise ValueError(f"rms_norm: normalized_shape {shape} must be the last dims of the input {self.shape}")
        if weight is not None and (not isinstance(weight, Tensor) or weight.shape != shape):
            raise ValueError(f"rms_norm: weight must have shape {shape}, got {getattr(weight, 'shape', weight)!r}")
        x = self.float_()
        out = x.rmsnorm(tuple(range(-len(shape), 0)), _FLOAT_EPS.get(x.dtype.name, 2.0**-23) if eps is None else eps)
        return out * weight if weight is not None else out

    def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                  axis: int | Sequence[int] = 1) -> Tensor:
        """(x - mean) * invstd * weight + bias, the statistics and parameters shaped as the `axis` dims of x
        (tinygrad's: the caller computes the statistics)."""
        axes = normalize_axis(axis, self.ndim, "batchnorm")
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        out = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return out + bias.reshape(shape) if bias is not None else out

    def batch_norm(self, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
                   bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
                   eps: float = 1e-5) -> Tensor:
        """torch.nn.functional.batch_norm over every dim but the channels (dim 1) of (N, C, ...). Training uses the
        batch's statistics (biased variance) and, where given, moves running_mean and running_var (unbiased) toward
        them by `momentum`, in place; otherwise the running statistics are used."""
        if self.ndim < 2:
            raise ValueError(f"batch_norm: expected (N, C, ...), got shape {self.shape}")
        channels = self.shape[1]
        for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                        ("bias", bias)):
            if t is not None and (not isinstance(t, Tensor) or t.shape != (channels,)):
                raise ValueError(f"batch_norm: {name} must have shape ({channels},), got {getattr(t, 'shape', t)!r}")
        axes = tuple(i for i in range(self.ndim) if i != 1)
        if training:
            count = self.numel() // max(channels, 1)
            if count <= 1:
                raise ValueError(f"batch_norm: training needs more than one value per channel, got shape {self.shape}")
            mean, var = self.mean(axes), self.var(axes, correction=0)
            if running_mean is not None:
                running_mean.assign((running_mean * (1 - momentum) + mean.detach() * momentum).cast(running_mean.dtype))
            if running_var is not None:
                unbiased = var.detach() * (momentum * count / (count - 1))
                running_var.assign((running_var * (1 - momentum) + unbiased).cast(running_var.dtype))
        else:
            if running_mean is None or running_var is None:
                raise ValueError("batch_norm: running_mean and running_var are needed when not training")
            mean, var = running_mean, running_var
        return self.batchnorm(weight, bias, mean, (var + eps).rsqrt())

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """torch.nn.functional.normalize: x / max(||x||_p, eps) along `dim` (p > 0, or inf)."""
        if not isinstance(p, (int, float)) or p <= 0:
            raise ValueError(f"normalize: p must be a positive number or inf, got {p!r}")
        d = normalize_axis(dim, self.ndim, "normalize")
        x = self.float_()
        if p == math.inf:
            norm = x.abs().max(d, keepdim=True).maximum(eps)
        elif p == 2:  # max(sqrt(s), eps) as sqrt(max(s, eps^2)): the same values, and no 0 * inf gradient at 0
            norm = x.square().sum(d, keepdim=True).maximum(eps * eps).sqrt()
        elif p == 1:
            norm = x.abs().sum(d, keepdim=True).maximum(eps)
        else:
            total = x.abs().pow(p).sum(d, keepdim=True)
            some = total > 0  # the root taken of 1 where the sum is 0: its infinite slope there would make NaNs
            norm = some.where(some.where(total, 1.0).pow(1 / p), 0.0).maximum(eps)
        return x / norm

    # *** softmax and its kin ***
    @torch_axis_name()
    def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """exp(x) / sum(exp(x)) over `axis` (stable: the max is subtracted first); 3 kernels at most. `dtype`: x is
        cast to it first."""
        ax = normalize_axis(axis, self.ndim, "softmax")
        x = (self if dtype is None else self.cast(to_dtype(dtype))).float_()
        # the max is a shift the result does not depend on: detached, the backward is p * (g - sum(p * g)) and no
        # gradient is routed through the max's argmax (exactly zero, at the price of two more reduce kernels)
        e = (x - x._reduce(Ops.MAX, ax, True).detach()).exp()  # (an empty axis gives an empty result, as torch)
        return e / e.sum(ax, keepdim=True)

    @torch_axis_name()
    def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """log(softmax(x)) over `axis`, computed stably: x - max - log(sum(exp(x - max))). `dtype`: x is cast to it
        first."""
        ax = normalize_axis(axis, self.ndim, "log_softmax")
        x = (self if dtype is None else self.cast(to_dtype(dtype))).float_()
        shifted = x - x._reduce(Ops.MAX, ax, True).detach()  # (a shift, as in softmax)
        return shifted - shifted.exp().sum(ax, keepdim=True).log()

    @torch_axis_name()
    def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """softmax(-x) over `axis`."""
        return (-(self if dtype is None else self.cast(to_dtype(dtype))).float_()).softmax(axis)

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), stable for large |x|."""
        x = self.float_()
        return x.minimum(0) - (1 + (-x.abs()).exp()).log()

    # *** losses ***
    def binary_crossentropy(self, Y: Tensor, reduction: Reduction = "mean", weight: Tensor | None = None) -> Tensor:
        """Binary cross-entropy of probabilities self against targets Y (same shape): -w (y log p + (1 - y)
        log(1 - p)), each log clamped at -100 as PyTorch."""
        _check_reduction(reduction, "binary_crossentropy")
        _check_tensor(Y, "Y", "binary_crossentropy")
        if Y.shape != self.shape:
            raise ValueError(f"binary_crossentropy: target shape {Y.shape} differs from the input shape {self.shape}")
        p = self.float_()
        loss = -(Y * p.log().maximum(-100).detach() + (1 - Y) * (1 - p).log().maximum(-100).detach())
        # d/dp is torch's (p - y) / max(p (1 - p), 1e-12), finite at a saturated p of 0 or 1 (through the clamped
        # logs it was 0 * inf = NaN): added as dp * (p - p), which is 0 forward
        dp = ((p - Y) / (p * (1 - p)).maximum(1e-12)).detach()
        loss = loss + dp * (p - p.detach())
        return _reduce_loss(loss * weight if weight is not None else loss, reduction)

    def binary_crossentropy_logits(self, Y: Tensor, reduction: Reduction = "mean", pos_weight: Tensor | None = None,
                                   weight: Tensor | None = None) -> Tensor:
        """Binary cross-entropy of sigmoid(self) against targets Y, computed stably from the logits: -w (pos_weight
        y log sigmoid(x) + (1 - y) log sigmoid(-x)). `pos_weight` scales the positive term (per class, broadcast
        along the last dim)."""
        _check_reduction(reduction, "binary_crossentropy_logits")
        _check_tensor(Y, "Y", "binary_crossentropy_logits")
        if Y.shape != self.shape:
            raise ValueError(f"binary_crossentropy_logits: target shape {Y.shape} differs from the input shape "
                             f"{self.shape}")
        if pos_weight is None:
            loss = self.maximum(0) - self * Y + (1 + (-self.abs()).exp()).log()
        else:
            log_p = self.logsigmoid()
            loss = -(pos_weight * Y * log_p + (1 - Y) * (log_p - self))
        return _reduce_loss(loss * weight if weight is not None else loss, reduction)

    def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: Reduction = "mean") -> Tensor:
        """Cross-entropy of logits self (..., classes), the classes on the LAST dim (tinygrad's), against integer
        labels Y (...); labels equal to ignore_index count for nothing (and not in the mean's count)."""
        op = "sparse_categorical_crossentropy"
        _check_reduction(reduction, op)
        _check_tensor(Y, "Y", op)
        if not dtypes.is_int(Y.dtype):
            raise TypeError(f"{op}: labels must be an int tensor, got {Y.dtype!r}")
        if self.shape[:-1] != Y.shape:
            raise ValueError(f"{op}: logits {self.shape} and labels {Y.shape} differ in their leading dims")
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
        n = self.shape[-1]
        check_ids(Y, n, f"{op}: label ", ignore=ignore_index, error=IndexError, what=f"for {n} classes")
        logp = self.log_softmax(-1)
        keep = Y != ignore_index
        onehot = Y.reshape(*Y.shape, 1) == Tensor.arange(n, device=Y.device)
        # the label's log-probability is a sum over the one-hot mask, which the scheduler turns into one gated load;
        # a where, not logp * one-hot: a masked -inf logit elsewhere in the row must not make 0 * -inf = NaN (torch's)
        per = -onehot.where(logp, 0.0).sum(-1)
        if label_smoothing:  # target (1 - s) * onehot + s / n, split so the pick stays a gather
            per = per * (1 - label_smoothing) - logp.sum(-1) * (label_smoothing / n)
        if reduction == "none":
            return keep.where(per, 0.0)
        if reduction == "sum":
            return keep.where(per, 0.0).sum()
        count = keep.cast(logp.dtype).sum()
        return keep.where(per, 0.0).sum() / count.maximum(1.0)

    def _class_dim(self, op: str) -> int:
        if self.ndim == 0:
            raise ValueError(f"{op}: the input needs a class dim (C,) or (N, C, ...), got a 0-d tensor")
        return 0 if self.ndim == 1 else 1

    def _nll(self, Y: Tensor, weight: Tensor | None, ignore_index: int, op: str) -> tuple[Tensor, Tensor, Tensor]:
        """For log-probabilities self (classes on dim 1, or 0 when 1-d) and class indices Y: (-w[y] * logp[y] per
        sample, w[y] per sample, kept), zero where y == ignore_index."""
        cdim = self._class_dim(op)
        n = self.shape[cdim]
        if not dtypes.is_int(Y.dtype):
            raise TypeError(f"{op}: class-index targets must be an int tensor, got {Y.dtype!r}")
        if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]:
            raise ValueError(f"{op}: target shape {Y.shape} does not match the input {self.shape} without its class "
                             f"dim {cdim}")
        check_ids(Y, n, f"{op}: target ", ignore=ignore_index, error=IndexError, what=f"for {n} classes")
        cshape = tuple(n if i == cdim else 1 for i in range(self.ndim))
        onehot = Y.unsqueeze(cdim) == Tensor.arange(n, device=Y.device).reshape(cshape)
        keep = Y != ignore_index
        picked = onehot.where(self, 0.0).sum(cdim)  # a where: -inf log-probabilities of other classes stay out (torch)
        if weight is None:
            return keep.where(-picked, 0.0), keep.cast(self.dtype), keep
        wy = onehot.where(weight.cast(self.dtype).reshape(cshape), 0.0).sum(cdim)
        return keep.where(-picked * wy, 0.0), keep.where(wy, 0.0), keep

    def _check_weight(self, weight: Tensor | None, op: str) -> None:
        if weight is not None:
            n = self.shape[self._class_dim(op)]
            if not isinstance(weight, Tensor) or weight.shape != (n,):
                raise ValueError(f"{op}: weight must be a Tensor of shape ({n},) (one per class), got "
                                 f"{getattr(weight, 'shape', type(weight).__name__)}")

    def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: Reduction = "mean") -> Tensor:
        """Negative log-likelihood of log-probabilities self ((N, C, ...) or (C,)) at the class indices Y; the mean is
        weighted: sum(-w[y] logp[y]) / sum(w[y]) over the targets that are not ignore_index (torch's)."""
        _check_reduction(reduction, "nll_loss")
        _check_tensor(Y, "Y", "nll_loss")
        self._check_weight(weight, "nll_loss")
        loss, w, _ = self._nll(Y, weight, ignore_index, "nll_loss")
        return loss.sum() / w.sum() if reduction == "mean" else _reduce_loss(loss, reduction)

    def cross_entropy(self, Y: Tensor, reduction: Reduction = "mean", label_smoothing: float = 0.0,
                      weight: Tensor | None = None, ignore_index: int = -100) -> Tensor:
        """torch.nn.functional.cross_entropy of logits self ((N, C, ...) or (C,), classes on dim 1) against class
        indices Y (int, the input's shape without the class dim) or class probabilities Y (float, the input's shape).
        `weight` weighs each class, `label_smoothing` mixes the target with the uniform distribution, `ignore_index`
        (index targets) drops those samples."""
        op = "cross_entropy"
        _check_reduction(reduction, op)
        _check_tensor(Y, "Y", op)
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
        self._check_weight(weight, op)
        cdim = self._class_dim(op)
        n = self.shape[cdim]
        cshape = tuple(n if i == cdim else 1 for i in range(self.ndim))
        logp = self.log_softmax(cdim)
        if dtypes.is_float(Y.dtype):  # class probabilities
            if Y.shape != self.shape:
                raise ValueError(f"{op}: probability targets must have the input's shape {self.shape}, got {Y.shape}")
            target = Y * (1 - label_smoothing) + label_smoothing / n if label_smoothing else Y
            terms = logp * target
            terms = terms * weight.reshape(cshape) if weight is not None else terms
            if reduction == "none":
                return -terms.sum(cdim)
            if reduction == "sum":
                return -terms.sum()
            return -terms.sum() * (n / self.numel()) if self.numel() else terms.sum() * math.nan  # (torch: NaN)
        loss, w, keep = logp._nll(Y, weight, ignore_index, op)
        nll = loss.sum() / w.sum() if reduction == "mean" else _reduce_loss(loss, reduction)
        if not label_smoothing:
            return nll
        spread = logp * weight.reshape(cshape) if weight is not None else logp
        smooth = keep.where(-spread.sum(cdim), 0.0)
        smooth = smooth.sum() / w.sum() if reduction == "mean" else _reduce_loss(smooth, reduction)
        return nll * (1 - label_smoothing) + smooth * (label_smoothing / n)

    # *** the other losses of torch.nn.functional, with its names and `reduction` ***
    def _pointwise_loss(self, target: Tensor, reduction: Reduction, op: str) -> Tensor:
        _check_reduction(reduction, op)
        _check_tensor(target, "target", op)
        return self - target

    def l1_loss(self, target: Tensor, reduction: Reduction = "mean") -> Tensor:
        """|self - target|, reduced (torch.nn.functional.l1_loss; shapes broadcast)."""
        return _reduce_loss(self._pointwise_loss(target, reduction, "l1_loss").abs(), reduction)

    def mse_loss(self, target: Tensor, reduction: Reduction = "mean") -> Tensor:
        """(self - target)^2, reduced (torch.nn.functional.mse_loss)."""
        return _reduce_loss(self._pointwise_loss(target, reduction, "mse_loss").square(), reduction)

    def huber_loss(self, target: Tensor, reduction: Reduction = "mean", delta: float = 1.0) -> Tensor:
        """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), d = self - target (torch's huber_loss)."""
        d = self._pointwise_loss(target, reduction, "huber_loss")
        a = d.abs()
        return _reduce_loss((a < delta).where(0.5 * d.square(), delta * (a - 0.5 * delta)), reduction)

    def smooth_l1_loss(self, target: Tensor, reduction: Reduction = "mean", beta: float = 1.0) -> Tensor:
        """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (torch's smooth_l1_loss; beta 0 is l1_loss)."""
        d = self._pointwise_loss(target, reduction, "smooth_l1_loss")
        a = d.abs()
        if beta == 0:
            return _reduce_loss(a, reduction)
        return _reduce_loss((a < beta).where(0.5 * d.square() / beta, a - 0.5 * beta), reduction)

    def kl_div(self, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
        """KL divergence of log-probabilities self from target (probabilities, or log-probabilities with
        `log_target`): target * (log target - self), 0 where target is 0 (torch.nn.functional.kl_div; reduction
        also "batchmean": the sum over the batch size)."""
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"kl_div: reduction must be 'mean', 'sum', 'none' or 'batchmean', got {reduction!r}")
        _check_tensor(target, "target", "kl_div")
        loss = target.exp() * (target - self) if log_target else target.xlogy(target) - target * self
        if reduction == "batchmean":
            return loss.sum() / (self.shape[0] if self.ndim else 1)
        return _reduce_loss(loss, reduction)

    def cosine_similarity(self, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
        """sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps)) along `dim` (inputs broadcast; torch's formula)."""
        _check_tensor(other, "other", "cosine_similarity")
        a, b = self.float_()._broadcasted(other.float_())
        d = normalize_axis(dim, a.ndim, "cosine_similarity")[0]
        # (norm's gradient is 0 at a zero vector, torch's: sqrt(sum(x^2)) made it inf * 0 = NaN there)
        na = a.norm(2, d).maximum(eps)
        nb = b.norm(2, d).maximum(eps)
        return (a * b).sum(d) / (na * nb)

    def pairwise_distance(self, other: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
        """The p-norm of self - other + eps along the last dim (torch.nn.functional.pairwise_distance)."""
        _check_tensor(other, "other", "pairwise_distance")
        d = (self - other + eps).abs()
        if p == math.inf:
            return d.max(-1, keepdim=keepdim)
        if p == 0:
            return (d != 0).float().sum(-1, keepdim=keepdim)
        return d.pow(p).sum(-1, keepdim=keepdim).pow(1 / p)

    # *** torch.nn.functional's margin and likelihood losses (torch's formulas, `reduction` as the others) ***
    def soft_margin_loss(self, target: Tensor, reduction: Reduction = "mean") -> Tensor:
        """log(1 + exp(-target * self)), targets +-1."""
        _check_reduction(reduction, "soft_margin_loss")
        _check_tensor(target, "target", "soft_margin_loss")
        return _reduce_loss((-target * self).softplus(), reduction)

    def hinge_embedding_loss(self, target: Tensor, margin: float = 1.0, reduction: Reduction = "mean") -> Tensor:
        """self where target is 1, max(0, margin - self) where it is -1 (both terms for other targets, as torch)."""
        _check_reduction(reduction, "hinge_embedding_loss")
        _check_tensor(target, "target", "hinge_embedding_loss")
        loss = (target != 1).where((margin - self).relu(), 0.0) + (target != -1).where(self, 0.0)
        return _reduce_loss(loss, reduction)

    def margin_ranking_loss(self, other: Tensor, target: Tensor, margin: float = 0.0,
                            reduction: Reduction = "mean") -> Tensor:
        """max(0, -target * (self - other) + margin)."""
        _check_reduction(reduction, "margin_ranking_loss")
        return _reduce_loss((-target * (self - other) + margin).relu(), reduction)

    def poisson_nll_loss(self, target: Tensor, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                         reduction: Reduction = "mean") -> Tensor:
        """exp(self) - target * self (log_input), else self - target * log(self + eps); `full` adds Stirling's
        target log(target) - target + log(2 pi target) / 2 where target > 1."""
        _check_reduction(reduction, "poisson_nll_loss")
        loss = self.exp() - target * self if log_input else self - target * (self + eps).log()
        if full:
            t = (target > 1).where(target, 1.0)
            loss = loss + (target > 1).where(t * t.log() - t + 0.5 * (2 * math.pi * t).log(), 0.0)
        return _reduce_loss(loss, reduction)

    def gaussian_nll_loss(self, target: Tensor, var: Tensor, full: bool = False, eps: float = 1e-6,
                          reduction: Reduction = "mean") -> Tensor:
        """(log(var) + (self - target)^2 / var) / 2, var at least eps (the clamp passes the gradient through, as
        torch's in-place no-grad clamp); `full` adds log(2 pi) / 2. var may lack the last dim, or have it 1."""
        _check_reduction(reduction, "gaussian_nll_loss")
        if var.ndim == self.ndim - 1 and var.shape == self.shape[:-1]:
            var = var.unsqueeze(-1)
        var = var + (var.maximum(eps) - var).detach()
        loss = 0.5 * (var.log() + (self - target).square() / var)
        return _reduce_loss(loss + 0.5 * math.log(2 * math.pi) if full else loss, reduction)

    def cosine_embedding_loss(self, other: Tensor, target: Tensor, margin: float = 0.0,
                              reduction: Reduction = "mean") -> Tensor:
        """1 - cos(self, other) where target is 1, max(0, cos - margin) where it is -1; cos over the last dim."""
        _check_reduction(reduction, "cosine_embedding_loss")
        d = self.ndim - 1
        cos = (self * other).sum(d) / ((self.square().sum(d) + 1e-12) * (other.square().sum(d) + 1e-12)).sqrt()
        loss = (target == 1).where(1 - cos, 0.0) + (target == -1).where((cos - margin).relu(), 0.0)
        return _reduce_loss(loss, reduction)

    def triplet_margin_loss(self, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
                            eps: float = 1e-6, swap: bool = False, reduction: Reduction = "mean") -> Tensor:
        """max(0, margin + d(self, positive) - d(self, negative)), d the pairwise p-distance; `swap` takes the smaller
        of d(self, negative) and d(positive, negative)."""
        _check_reduction(reduction, "triplet_margin_loss")
        d_pos = self.pairwise_distance(positive, p, eps)
        d_neg = self.pairwise_distance(negative, p, eps)
        if swap:
            d_neg = d_neg.minimum(positive.pairwise_distance(negative, p, eps))
        return _reduce_loss((margin + d_pos - d_neg).relu(), reduction)

    def multi_margin_loss(self, target: Tensor, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                          reduction: Reduction = "mean") -> Tensor:
        """Per sample: sum over classes i != y of max(0, margin - x[y] + x[i])^p / C (times weight[y])."""
        _check_reduction(reduction, "multi_margin_loss")
        if p not in (1, 2):
            raise ValueError(f"multi_margin_loss: p must be 1 or 2, got {p!r}")
        cdim = self._class_dim("multi_margin_loss")
        n = self.shape[cdim]
        onehot = target.unsqueeze(cdim) == Tensor.arange(n, device=self.device)
        picked = onehot.where(self, 0.0).sum(cdim, keepdim=True)
        terms = (margin - picked + self).relu()
        terms = terms if p == 1 else terms.square()
        if weight is not None:
            terms = terms * onehot.where(weight.cast(self.dtype), 0.0).sum(cdim, keepdim=True)
        return _reduce_loss(onehot.where(0.0, terms).sum(cdim) / n, reduction)

    def multilabel_soft_margin_loss(self, target: Tensor, weight: Tensor | None = None,
                                    reduction: Reduction = "mean") -> Tensor:
        """-(y log sigmoid(x) + (1 - y) log sigmoid(-x)), times weight, averaged over the classes (the last dim)."""
        _check_reduction(reduction, "multilabel_soft_margin_loss")
        loss = -(target * self.logsigmoid() + (1 - target) * (-self).logsigmoid())
        loss = loss * weight if weight is not None else loss
        return _reduce_loss(loss.mean(-1), reduction)

    def binary_cross_entropy(self, target: Tensor, weight: Tensor | None = None,
                             reduction: Reduction = "mean") -> Tensor:
        """torch.nn.functional.binary_cross_entropy's argument order: `binary_crossentropy`."""
        return self.binary_crossentropy(target, reduction, weight)

    def binary_cross_entropy_with_logits(self, target: Tensor, weight: Tensor | None = None,
                                         reduction: Reduction = "mean", pos_weight: Tensor | None = None) -> Tensor:
        """torch.nn.functional.binary_cross_entropy_with_logits's argument order: `binary_crossentropy_logits`."""
        return self.binary_crossentropy_logits(target, reduction, pos_weight, weight)

    # *** N-d forms under their 1-d and 3-d names ***
    def conv1d(self, *args: Any, **kwargs: Any) -> Tensor:
        """`conv2d` (which takes any number of spatial dims) for (N, C, L) inputs."""
        return self.conv2d(*args, **kwargs)

    def conv3d(self, *args: Any, **kwargs: Any) -> Tensor:
        """`conv2d` (which takes any number of spatial dims) for (N, C, D, H, W) inputs."""
        return self.conv2d(*args, **kwargs)

    def conv_transpose1d(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(*args, **kwargs)

    def conv_transpose3d(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(*args, **kwargs)

    def max_pool1d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Any:
        """max_pool2d over the last dim (torch.nn.functional.max_pool1d's argument order)."""
        return self.max_pool2d(_as_n(kernel_size, 1), _as_n(stride, 1), dilation, padding, ceil_mode, return_indices)

    def max_pool3d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Any:
        """max_pool2d over the last 3 dims (torch.nn.functional.max_pool3d's argument order)."""
        return self.max_pool2d(_as_n(kernel_size, 3), _as_n(stride, 3), dilation, padding, ceil_mode, return_indices)

    def max_unpool1d(self, indices: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
        """max_unpool2d over the last dim (torch.nn.functional.max_unpool1d's argument order)."""
        return self.max_unpool2d(indices, _as_n(kernel_size, 1), _as_n(stride, 1), 1, padding, output_size)

    def max_unpool3d(self, indices: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
        """max_unpool2d over the last 3 dims (torch.nn.functional.max_unpool3d's argument order)."""
        return self.max_unpool2d(indices, _as_n(kernel_size, 3), _as_n(stride, 3), 1, padding, output_size)

    def avg_pool1d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
        """avg_pool2d over the last dim (torch.nn.functional.avg_pool1d's argument order)."""
        return self.avg_pool2d(_as_n(kernel_size, 1), _as_n(stride, 1), 1, padding, ceil_mode, count_include_pad)

    def avg_pool3d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> Tensor:
        """avg_pool2d over the last 3 dims (torch.nn.functional.avg_pool3d's argument order)."""
        return self.avg_pool2d(_as_n(kernel_size, 3), _as_n(stride, 3), 1, padding, ceil_mode, count_include_pad,
                               divisor_override)

    def _adaptive_pool(self, output_size: Any, n: int, op: str, use_max: bool) -> Tensor:
        """Each of the last n dims pooled to its output size with torch's windows: output i of a dim of size L into O
        reads [floor(i L / O), ceil((i + 1) L / O)); one dim after the other (a window is a product of ranges)."""
        sizes = (output_size,) * n if isinstance(output_size, int) or output_size is None else tuple(output_size)
        if len(sizes) != n or self.ndim < n + 1:
            raise ValueError(f"{op}: output_size {output_size!r} needs {n} sizes for an input of {n + 1} or {n + 2} "
                             f"dims, got shape {self.shape}")
        x = self if use_max else self.float_()
        for j, out in enumerate(sizes):
            d = self.ndim - n + j
            size = self.shape[d]
            out = size if out is None else out
            if not isinstance(out, int) or out <= 0 or size == 0:
                raise ValueError(f"{op}: output size {out!r} of dim {d} (size {size}) must be a positive int")
            rows = Tensor.arange(out, device=self.device).reshape(out, 1)
            cols = Tensor.arange(size, device=self.device).reshape(1, size)
            # (integer arithmetic: start = floor(i L / O), end = ceil((i + 1) L / O))
            inside = (cols >= (rows * size) // out).logical_and(cols < ((rows + 1) * size + out - 1) // out)
            xt = x.transpose(d, -1).unsqueeze(-2)  # (..., 1, L) against the (O, L) windows
            if use_max:
                low = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
                x = inside.where(xt, Tensor(low, self.device, x.dtype)).max(-1).transpose(d, -1)
            else:
                count = inside.sum(-1, keepdim=True).cast(x.dtype)
                x = (inside.where(xt, 0.0).sum(-1) / count.squeeze(-1)).transpose(d, -1)
        return x

    def adaptive_avg_pool1d(self, output_size: Any) -> Tensor:
        """The mean over torch's adaptive windows of the last dim (torch.nn.functional.adaptive_avg_pool1d)."""
        return self._adaptive_pool(output_size, 1, "adaptive_avg_pool1d", False)

    def adaptive_avg_pool2d(self, output_size: Any) -> Tensor:
        """The mean over torch's adaptive windows of the last 2 dims (an int: square; None keeps a dim)."""
        return self._adaptive_pool(output_size, 2, "adaptive_avg_pool2d", False)

    def adaptive_avg_pool3d(self, output_size: Any) -> Tensor:
        return self._adaptive_pool(output_size, 3, "adaptive_avg_pool3d", False)

    def adaptive_max_pool1d(self, output_size: Any) -> Tensor:
        """The max over torch's adaptive windows of the last dim (values; no return_indices)."""
        return self._adaptive_pool(output_size, 1, "adaptive_max_pool1d", True)

    def adaptive_max_pool2d(self, output_size: Any) -> Tensor:
        """The max over torch's adaptive windows of the last 2 dims (values; no return_indices)."""
        return self._adaptive_pool(output_size, 2, "adaptive_max_pool2d", True)

    def adaptive_max_pool3d(self, output_size: Any) -> Tensor:
        return self._adaptive_pool(output_size, 3, "adaptive_max_pool3d", True)

    def pixel_shuffle(self, upscale_factor: int) -> Tensor:
        """(..., C*r*r, H, W) -> (..., C, H*r, W*r) (torch.nn.functional.pixel_shuffle)."""
        r = upscale_factor
        if self.ndim < 3 or self.shape[-3] % (r * r):
            raise ValueError(f"pixel_shuffle: input of shape {self.shape} needs >= 3 dims and channels divisible by "
                             f"upscale_factor^2 = {r * r}")
        *lead, c, h, w = self.shape
        n = len(lead)
        x = self.reshape(*lead, c // (r * r), r, r, h, w)
        x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return x.reshape(*lead, c // (r * r), h * r, w * r)

    def pixel_unshuffle(self, downscale_factor: int) -> Tensor:
        """(..., C, H*r, W*r) -> (..., C*r*r, H, W) (torch.nn.functional.pixel_unshuffle)."""
        r = downscale_factor
        if self.ndim < 3 or self.shape[-2] % r or self.shape[-1] % r:
            raise ValueError(f"pixel_unshuffle: input of shape {self.shape} needs >= 3 dims and H, W divisible by "
                             f"downscale_factor = {r}")
        *lead, c, h, w = self.shape
        n = len(lead)
        x = self.reshape(*lead, c, h // r, r, w // r, r)
        x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
        return x.reshape(*lead, c * r * r, h // r, w // r)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """tinygrad's `x.linear(weight, bias)`: x @ weight (+ bias) with weight of shape (in, out), or x * weight for a
        1-d weight. (torch.nn.functional.linear's (out, in) weight: `ember.tensor.nn.linear`.)"""
        _check_tensor(weight, "weight", "linear")
        x = self * weight if weight.ndim == 1 else self.matmul(weight)
        return x + bias if bias is not None else x

    def dropout(self, p: float = 0.5, training: bool = True) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout: p must be in [0, 1], got {p}")
        if not training or p == 0:
            return self
        if p == 1:
            return self * 0
        keep = Tensor.rand(*self.shape, device=self.device) >= p
        return keep.where(self * (1 / (1 - p)), 0.0)

    # *** initializers (torch.nn.init's, as tensors) ***
    @staticmethod
    def kaiming_normal(*shape: Any, a: float = 0.01, dtype: DType | str | None = None,
                       device: str | None = None) -> Tensor:
        """He-normal init: N(0, std^2) with std = sqrt(2 / (1 + a^2)) / sqrt(fan_in), fan_in = prod(shape[1:])."""
        shape_t = shape_args(shape)
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(1, int(prod(shape_t[1:]))))
        return Tensor.normal(*shape_t, mean=0.0, std=std, dtype=dtype, device=device)

    @staticmethod
    def scaled_uniform(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """U(-1, 1) / sqrt(prod(shape))."""
        shape_t = shape_args(shape)
        bound = max(1, int(prod(shape_t))) ** -0.5
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def xavier_uniform(*shape: Any, gain: float = 1.0, dtype: DType | str | None = None,
                       device: str | None = None) -> Tensor:
        """torch.nn.init.xavier_uniform_: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) for a weight shaped
        (out, in, *kernel)."""
        shape_t = shape_args(shape)
        fan_in, fan_out = _fans(shape_t, "xavier_uniform")
        bound = gain * math.sqrt(6.0 / max(1, fan_in + fan_out))
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def xavier_normal(*shape: Any, gain: float = 1.0, dtype: DType | str | None = None,
                      device: str | None = None) -> Tensor:
        """torch.nn.init.xavier_normal_: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)) for a weight shaped
        (out, in, *kernel)."""
        shape_t = shape_args(shape)
        fan_in, fan_out = _fans(shape_t, "xavier_normal")
        std = gain * math.sqrt(2.0 / max(1, fan_in + fan_out))
        return Tensor.normal(*shape_t, mean=0.0, std=std, dtype=dtype, device=device)
