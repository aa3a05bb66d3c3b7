"""Layers (Linear, Embedding, LayerNorm, RMSNorm, Conv2d, BatchNorm) and the functional forms, in
torch.nn.functional's argument order: most are Tensor's methods (ember/tensor/ops/nn.py) under PyTorch's names.

A layer's parameters are lazy: their init (the random stream's draw taken when the layer is built) is computed by the
first schedule that needs them. An optimizer realizes all its parameters in one schedule, their kernels compiled side
by side, and `load_state_dict` replaces them without computing them: building a model and loading its weights runs no
init kernel (each one realized on its own was one C compile and one schedule after another). BatchNorm's running
statistics are realized at once: its forward assigns into them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember.tensor.ops.indexing import check_ids
from ember.tensor.ops.nn import Reduction
from ember.tensor.tensor import Tensor
from ember.uops import dtypes


# *** functional ***
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, weight of shape (out, in) as in PyTorch."""
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"linear: input has {x.shape[-1]} features, the weight {weight.shape} expects "
                         f"{weight.shape[-1]}")
    out = x @ weight.T
    return out + bias if bias is not None else out


def layernorm(x: Tensor, axis: int = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance, as nn.LayerNorm): `x.layernorm(axis, eps)`."""
    return x.layernorm(axis, eps)


def rmsnorm(x: Tensor, axis: int = -1, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over `axis`: `x.rmsnorm(axis, eps)`."""
    return x.rmsnorm(axis, eps)


def embedding(idx: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` picked by the integer tensor `idx`: shape idx.shape + (dim,). An id outside [0, vocab) is an
    IndexError where the ids are known on the host or under CHECK_INDICES=1 (see `check_ids`); else its row is zeros.
    `padding_idx` (negative counts from the end): that row is looked up as the others but gets no gradient (torch's)."""
    if not dtypes.is_int(idx.dtype):
        raise TypeError(f"embedding: indices must be an integer tensor, got {idx.dtype!r}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-d (vocab, dim), got shape {weight.shape}")
    vocab, dim = weight.shape
    check_ids(idx, vocab, "embedding: ", what=f"for a vocabulary of {vocab}")
    onehot = idx.reshape(*idx.shape, 1) == Tensor.arange(vocab, device=idx.device).reshape(*(1,) * idx.ndim, vocab)
    out = onehot.cast(weight.dtype) @ weight
    if padding_idx is None:
        return out
    if not isinstance(padding_idx, int) or not -vocab <= padding_idx < vocab:
        raise ValueError(f"embedding: padding_idx must be an int in [-{vocab}, {vocab}), got {padding_idx!r}")
    pad = idx.reshape(*idx.shape, 1) == padding_idx % vocab
    return pad.where(out.detach(), out)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = True) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., heads, seq, dim): `q.scaled_dot_product_attention(...)`. Fewer
    k/v heads than q heads (GQA) are shared by groups of query heads unless enable_gqa=False."""
    return q.scaled_dot_product_attention(k, v, attn_mask, dropout_p, is_causal, enable_gqa, scale)


def sparse_categorical_crossentropy(logits: Tensor, labels: Tensor, ignore_index: int = -1,
                                    label_smoothing: float = 0.0, reduction: Reduction = "mean") -> Tensor:
    """Cross-entropy of `logits` (..., classes) against integer `labels` (...), skipping `ignore_index`."""
    return logits.sparse_categorical_crossentropy(labels, ignore_index, label_smoothing, reduction)


def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: Reduction = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy: logits (N, C, ...) or (C,), integer class targets or class probabilities."""
    return logits.cross_entropy(target, reduction, label_smoothing, weight, ignore_index)


def nll_loss(logp: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: Reduction = "mean") -> Tensor:
    """torch.nn.functional.nll_loss of log-probabilities (N, C, ...) or (C,) at integer class targets."""
    return logp.nll_loss(target, weight, ignore_index, reduction)


def binary_crossentropy_logits(logits: Tensor, target: Tensor, weight: Tensor | None = None,
                               reduction: Reduction = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of sigmoid(logits), computed stably (torch's binary_cross_entropy_with_logits)."""
    return logits.binary_crossentropy_logits(target, reduction, pos_weight, weight)


def binary_crossentropy(p: Tensor, target: Tensor, weight: Tensor | None = None,
                        reduction: Reduction = "mean") -> Tensor:
    """Binary cross-entropy of probabilities p (logs clamped at -100, as PyTorch)."""
    return p.binary_crossentropy(target, reduction, weight)


def mse(x: Tensor, y: Tensor) -> Tensor:
    return ((x - y) * (x - y)).mean()


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    if not training or p == 0:
        return x
    keep = Tensor.rand(*x.shape, device=x.device) >= p
    return keep.where(x * (1 / (1 - p)), 0.0)


# *** layers ***
class Linear:
    """y = x @ W.T + b, with PyTorch's init: U(-1/sqrt(in), 1/sqrt(in)) for both."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound).contiguous()
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound).contiguous() if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Embedding:
    """A table of `vocab_size` vectors of `dim`, initialized N(0, 1) as PyTorch does; the row `padding_idx` (if given)
    starts at zeros and gets no gradient, as torch.nn.Embedding's."""

    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None):
        weight = Tensor.randn(vocab_size, dim)
        if padding_idx is not None:
            if not isinstance(padding_idx, int) or not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"Embedding: padding_idx must be an int in [-{vocab_size}, {vocab_size}), got "
                                 f"{padding_idx!r}")
            padding_idx %= vocab_size
            weight = (Tensor.arange(vocab_size).reshape(vocab_size, 1) == padding_idx).where(0.0, weight)
        self.padding_idx = padding_idx
        self.weight = weight.contiguous()

    def __call__(self, idx: Tensor) -> Tensor:
        return embedding(idx, self.weight, self.padding_idx)


class LayerNorm:
    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
        self.eps = eps
        self.weight = Tensor.ones(dim).contiguous() if elementwise_affine else None
        self.bias = Tensor.zeros(dim).contiguous() if elementwise_affine and bias else None

    def __call__(self, x: Tensor) -> Tensor:
        y = layernorm(x, -1, self.eps)
        y = y * self.weight if self.weight is not None else y
        return y + self.bias if self.bias is not None else y


class RMSNorm:
    def __init__(self, dim: int, eps: float = 1e-6):
        self.eps = eps
        self.weight = Tensor.ones(dim).contiguous()

    def __call__(self, x: Tensor) -> Tensor:
        return rmsnorm(x, -1, self.eps) * self.weight


# *** convolution, pooling and resampling, in torch.nn.functional's argument order ***
def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """Convolution (cross-correlation, as PyTorch) of x (N, C, *spatial) with weight (O, C/groups, *kernel), 1-d to
    n-d: `x.conv2d(weight, bias, groups, stride, dilation, padding)`."""
    return x.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                     dilation: int | Sequence[int] = 1) -> Tensor:
    """Transposed convolution of x (N, C, *spatial) with weight (C, O/groups, *kernel), 1-d to n-d."""
    return x.conv_transpose2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding,
                              output_padding=output_padding)


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Any:
    """The max over each window of the last len(kernel_size) dims (2 for an int): `x.max_pool2d(...)`."""
    return x.max_pool2d(kernel_size, stride, dilation, padding, ceil_mode, return_indices)


def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Average over each window; padded zeros count unless count_include_pad=False, as PyTorch."""
    return x.avg_pool2d(kernel_size, stride, 1, padding, ceil_mode, count_include_pad, divisor_override)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv1d (the N-d `conv2d`)."""
    return conv2d(x, weight, bias, stride, padding, dilation, groups)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv3d (the N-d `conv2d`)."""
    return conv2d(x, weight, bias, stride, padding, dilation, groups)


def max_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Any:
    """torch.nn.functional.max_pool1d: `x.max_pool1d(...)`."""
    return x.max_pool1d(kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Any:
    """torch.nn.functional.max_pool3d: `x.max_pool3d(...)`."""
    return x.max_pool3d(kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """torch.nn.functional.avg_pool1d: `x.avg_pool1d(...)`."""
    return x.avg_pool1d(kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool3d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """torch.nn.functional.avg_pool3d: `x.avg_pool3d(...)`."""
    return x.avg_pool3d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool1d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_avg_pool1d(output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_avg_pool2d(output_size)


def adaptive_avg_pool3d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_avg_pool3d(output_size)


def adaptive_max_pool1d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_max_pool1d(output_size)


def adaptive_max_pool2d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_max_pool2d(output_size)


def adaptive_max_pool3d(x: Tensor, output_size: Any) -> Tensor:
    return x.adaptive_max_pool3d(output_size)


def l1_loss(x: Tensor, target: Tensor, reduction: Reduction = "mean") -> Tensor:
    return x.l1_loss(target, reduction)


def mse_loss(x: Tensor, target: Tensor, reduction: Reduction = "mean") -> Tensor:
    return x.mse_loss(target, reduction)


def huber_loss(x: Tensor, target: Tensor, reduction: Reduction = "mean", delta: float = 1.0) -> Tensor:
    return x.huber_loss(target, reduction, delta)


def smooth_l1_loss(x: Tensor, target: Tensor, reduction: Reduction = "mean", beta: float = 1.0) -> Tensor:
    return x.smooth_l1_loss(target, reduction, beta)


def kl_div(x: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    return x.kl_div(target, reduction, log_target)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    return x1.cosine_similarity(x2, dim, eps)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    return x1.pairwise_distance(x2, p, eps, keepdim)


def binary_cross_entropy(x: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: Reduction = "mean") -> Tensor:
    return x.binary_cross_entropy(target, weight, reduction)


def binary_cross_entropy_with_logits(x: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: Reduction = "mean", pos_weight: Tensor | None = None) -> Tensor:
    return x.binary_cross_entropy_with_logits(target, weight, reduction, pos_weight)


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    return x.pixel_shuffle(upscale_factor)


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    return x.pixel_unshuffle(downscale_factor)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    return x.glu(dim)


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    return x.hardshrink(lambd)


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    return x.softshrink(lambd)


def tanhshrink(x: Tensor) -> Tensor:
    return x.tanhshrink()


def threshold(x: Tensor, threshold: float, value: float) -> Tensor:
    return x.threshold(threshold, value)


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    return x.prelu(weight)


def max_unpool2d(x: Tensor, indices: Tensor, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
    """The inverse of max_pool2d(return_indices=True): values written at their indices, zeros elsewhere."""
    return x.max_unpool2d(indices, kernel_size, stride, 1, padding, output_size)


def interpolate(x: Tensor, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """torch.nn.functional.interpolate of x (N, C, *spatial): every spatial dim resampled (mode 'nearest' by
    default, as PyTorch; `x.interpolate` defaults to 'linear', as tinygrad). `recompute_scale_factor=True`: the
    output size floor(in * scale_factor) alone sets the sampling, as if given as `size`."""
    if x.ndim < 3:
        raise ValueError(f"interpolate: expected (N, C, *spatial), got shape {x.shape}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported (downsampling filters); resample "
                                  "without it or blur first")
    if isinstance(size, int):
        size = (size,) * (x.ndim - 2)
    if recompute_scale_factor and scale_factor is not None and size is None:
        factors = scale_factor if isinstance(scale_factor, Sequence) else (scale_factor,) * (x.ndim - 2)
        size, scale_factor = tuple(math.floor(n * float(f)) for n, f in zip(x.shape[2:], factors)), None
    return x.interpolate(size, mode, bool(align_corners), scale_factor)


class Conv2d:
    """A 2-d convolution layer with PyTorch's init (uniform in +-1/sqrt(fan_in))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = Tensor.uniform(out_channels, in_channels // groups, kh, kw, low=-bound, high=bound).contiguous()
        self.bias = Tensor.uniform(out_channels, low=-bound, high=bound).contiguous() if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def __call__(self, x: Tensor) -> Tensor:
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class BatchNorm:
    """Batch normalization over every axis but the channel axis 1 (BatchNorm1d/2d alike), PyTorch semantics:
    training normalizes with the batch statistics (biased variance) and updates the running mean and the unbiased
    running variance with `momentum`; eval uses the running statistics."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True):
        self.eps, self.momentum, self.training = eps, momentum, True
        self.weight = Tensor.ones(num_features).contiguous() if affine else None
        self.bias = Tensor.zeros(num_features).contiguous() if affine else None
        self.running_mean = Tensor.zeros(num_features).contiguous().realize() if track_running_stats else None
        self.running_var = Tensor.ones(num_features).contiguous().realize() if track_running_stats else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ValueError(f"BatchNorm: expected (N, C, ...), got shape {x.shape}")
        return x.batch_norm(self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or self.running_mean is None, self.momentum, self.eps)


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm  # (torch's names; tinygrad's BatchNorm2d)
