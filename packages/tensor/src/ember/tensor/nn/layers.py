"""Layers (Linear, Embedding, LayerNorm, RMSNorm) and the functional forms they use, PyTorch semantics."""

from __future__ import annotations

import math

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
    target = onehot * (1 - label_smoothing) + label_smoothing / n
    per = -(logp * target).sum(-1)
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
