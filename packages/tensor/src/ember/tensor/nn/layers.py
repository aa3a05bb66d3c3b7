"""Layers (Linear, Embedding, LayerNorm, RMSNorm) and the functional forms they use, PyTorch semantics."""

from __future__ import annotations

import math

from ember.tensor.tensor import Tensor, no_grad
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
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance, as nn.LayerNorm)."""
    mu = x.mean(axis, keepdim=True)
    d = x - mu
    return d * ((d * d).mean(axis, keepdim=True) + eps).rsqrt()


def rmsnorm(x: Tensor, axis: int = -1, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over `axis`."""
    return x * ((x * x).mean(axis, keepdim=True) + eps).rsqrt()


def embedding(idx: Tensor, weight: Tensor) -> Tensor:
    """Rows of `weight` picked by the integer tensor `idx`: shape idx.shape + (dim,)."""
    if not dtypes.is_int(idx.dtype):
        raise TypeError(f"embedding: indices must be an integer tensor, got {idx.dtype!r}")
    vocab, dim = weight.shape
    onehot = idx.reshape(*idx.shape, 1) == Tensor.arange(vocab, device=idx.device).reshape(*(1,) * idx.ndim, vocab)
    return onehot.cast(weight.dtype) @ weight


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 is_causal: bool = False, scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., heads, seq, dim). Fewer k/v heads than q heads (GQA) repeat."""
    if q.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: shapes q {q.shape}, k {k.shape}, v {v.shape} do not align")
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        if q.shape[-3] % k.shape[-3]:
            raise ValueError(f"scaled_dot_product_attention: {q.shape[-3]} query heads are not a multiple of "
                             f"{k.shape[-3]} key/value heads")
        rep = q.shape[-3] // k.shape[-3]
        k, v = (t.unsqueeze(-3).expand(*t.shape[:-2], rep, *t.shape[-2:]).reshape(*q.shape[:-2], *t.shape[-2:])
                for t in (k, v))
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = Tensor.ones(lq, lk, dtype=dtypes.bool, device=q.device).tril(lk - lq)
        scores = keep.where(scores, -math.inf)
    if attn_mask is not None:
        scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
    return scores.softmax(-1) @ v


def sparse_categorical_crossentropy(logits: Tensor, labels: Tensor, ignore_index: int = -1,
                                    label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of `logits` (..., classes) against integer `labels` (...), skipping `ignore_index`."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"sparse_categorical_crossentropy: logits {logits.shape} and labels {labels.shape} differ "
                         "in their leading dims")
    n = logits.shape[-1]
    logp = logits.log_softmax(-1)
    keep = labels != ignore_index
    onehot = (labels.reshape(*labels.shape, 1) == Tensor.arange(n, device=labels.device)).cast(logp.dtype)
    # the label's log-probability is a sum of logp * one-hot, which the scheduler turns into one gated load
    per = -(logp * onehot).sum(-1)
    if label_smoothing:  # target (1 - s) * onehot + s / n, split so the pick stays a gather
        per = per * (1 - label_smoothing) - logp.sum(-1) * (label_smoothing / n)
    count = keep.cast(logp.dtype).sum()
    return keep.where(per, 0.0).sum() / count.maximum(1.0)


def cross_entropy(logits: Tensor, target: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy with integer class targets (..., ) or class probabilities of the logits' shape."""
    if dtypes.is_int(target.dtype):
        return sparse_categorical_crossentropy(logits, target, ignore_index=-100, label_smoothing=label_smoothing)
    n = logits.shape[-1]
    target = target * (1 - label_smoothing) + label_smoothing / n
    return -(logits.log_softmax(-1) * target).sum(-1).mean()


def binary_crossentropy_logits(logits: Tensor, target: Tensor) -> Tensor:
    """Mean binary cross-entropy of sigmoid(logits), computed stably."""
    return (logits.maximum(0) - logits * target + (1 + (-logits.abs()).exp()).log()).mean()


def binary_crossentropy(p: Tensor, target: Tensor) -> Tensor:
    """Mean binary cross-entropy of probabilities p (logs clamped at -100, as PyTorch)."""
    return -(target * p.log().maximum(-100) + (1 - target) * (1 - p).log().maximum(-100)).mean()


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
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound).contiguous().realize()
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound).contiguous().realize() if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Embedding:
    """A table of `vocab_size` vectors of `dim`, initialized N(0, 1) as PyTorch does."""

    def __init__(self, vocab_size: int, dim: int):
        self.weight = Tensor.randn(vocab_size, dim).contiguous().realize()

    def __call__(self, idx: Tensor) -> Tensor:
        return embedding(idx, self.weight)


class LayerNorm:
    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True):
        self.eps = eps
        self.weight = Tensor.ones(dim).contiguous().realize() if elementwise_affine else None
        self.bias = Tensor.zeros(dim).contiguous().realize() if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        y = layernorm(x, -1, self.eps)
        return y * self.weight + self.bias if self.weight is not None else y


class RMSNorm:
    def __init__(self, dim: int, eps: float = 1e-6):
        self.eps = eps
        self.weight = Tensor.ones(dim).contiguous().realize()

    def __call__(self, x: Tensor) -> Tensor:
        return rmsnorm(x, -1, self.eps) * self.weight


# *** convolution and pooling (windows as shifted, strided views: everything fuses into the reading kernel) ***
def _pair(v: int | tuple[int, int], name: str) -> tuple[int, int]:
    out = (v, v) if isinstance(v, int) else tuple(v)
    if len(out) != 2 or any(not isinstance(a, int) or a < 0 for a in out):
        raise ValueError(f"{name} must be an int or a pair of ints >= 0, got {v!r}")
    return out  # type: ignore[return-value]


def _windows(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> Tensor:
    """(N, C, H, W) -> (N, C, kh*kw, OH, OW): the input under each kernel position."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    h, w = x.shape[-2:]
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"conv/pool: the {kh}x{kw} window (dilation {dilation}) does not fit the {h}x{w} input")
    views = [x[..., i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
             for i in range(kh) for j in range(kw)]
    return views[0].stack(*views[1:], dim=2)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | tuple[int, int] = 1,
           padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
    """2-d convolution (cross-correlation, as PyTorch) of x (N, C, H, W) with weight (O, C/groups, kh, kw)."""
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"conv2d: expected x (N, C, H, W) and weight (O, C/groups, kh, kw), got {x.shape}, "
                         f"{weight.shape}")
    n, c = x.shape[:2]
    o, cg, kh, kw = weight.shape
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        raise ValueError(f"conv2d: {c} input channels, weight {weight.shape} and groups={groups} do not match")
    ph, pw = _pair(padding, "conv2d: padding")
    x = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    cols = _windows(x, (kh, kw), _pair(stride, "conv2d: stride"), _pair(dilation, "conv2d: dilation"))
    oh, ow = cols.shape[-2:]
    # (N, G, 1, C/G * K, OH, OW) * (1, G, O/G, C/G * K, 1, 1), summed over the window axis
    cols = cols.reshape(n, groups, 1, cg * kh * kw, oh, ow)
    w = weight.reshape(1, groups, o // groups, cg * kh * kw, 1, 1)
    out = (cols * w).sum(3).reshape(n, o, oh, ow)
    return out + bias.reshape(1, o, 1, 1) if bias is not None else out


def max_pool2d(x: Tensor, kernel_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None,
               padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1) -> Tensor:
    k = _pair(kernel_size, "max_pool2d: kernel_size")
    ph, pw = _pair(padding, "max_pool2d: padding")
    x = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)), value=-math.inf) if ph or pw else x
    return _windows(x, k, _pair(stride if stride is not None else k, "max_pool2d: stride"),
                    _pair(dilation, "max_pool2d: dilation")).max(2)


def avg_pool2d(x: Tensor, kernel_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None,
               padding: int | tuple[int, int] = 0) -> Tensor:
    """Average over each window; padded zeros count, as PyTorch's default count_include_pad=True."""
    k = _pair(kernel_size, "avg_pool2d: kernel_size")
    ph, pw = _pair(padding, "avg_pool2d: padding")
    x = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    return _windows(x, k, _pair(stride if stride is not None else k, "avg_pool2d: stride"), (1, 1)).mean(2)


class Conv2d:
    """A 2-d convolution layer with PyTorch's init (uniform in +-1/sqrt(fan_in))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        kh, kw = _pair(kernel_size, "Conv2d: kernel_size")
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = Tensor.uniform(out_channels, in_channels // groups, kh, kw, low=-bound, high=bound) \
            .contiguous().realize()
        self.bias = Tensor.uniform(out_channels, low=-bound, high=bound).contiguous().realize() if bias else None
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
        self.weight = Tensor.ones(num_features).contiguous().realize() if affine else None
        self.bias = Tensor.zeros(num_features).contiguous().realize() if affine else None
        self.running_mean = Tensor.zeros(num_features).contiguous().realize() if track_running_stats else None
        self.running_var = Tensor.ones(num_features).contiguous().realize() if track_running_stats else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ValueError(f"BatchNorm: expected (N, C, ...), got shape {x.shape}")
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        if self.training or self.running_mean is None:
            mean, var = x.mean(axes), x.var(axes, correction=0)
            if self.training and self.running_mean is not None and self.running_var is not None:
                n = x.numel() // x.shape[1]
                with no_grad():
                    self.running_mean.assign(self.running_mean * (1 - self.momentum) + mean.detach() * self.momentum)
                    self.running_var.assign(self.running_var * (1 - self.momentum) +
                                            var.detach() * (self.momentum * n / max(n - 1, 1)))
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
        if self.weight is not None and self.bias is not None:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y
