"""Activation functions as Tensor methods: relu, sigmoid, tanh, gelu, silu, softplus, elu... and softmax/log_softmax.
The layers and losses built on them (linear, layernorm, attention, cross-entropy) are in ember.tensor.nn."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ember.tensor.ops.args import normalize_axis

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


class ActivationMixin:
    """Activations: `x.relu()`, `x.gelu()`, `x.softmax(-1)`."""

    __slots__ = ()

    def relu(self) -> Tensor: return self.maximum(0)
    def sigmoid(self) -> Tensor: return (1 + (-self.float_()).exp()).reciprocal()
    def tanh(self) -> Tensor: return 2 * (2 * self.float_()).sigmoid() - 1

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x where x > 0, else neg_slope * x."""
        return (self > 0).where(self, self * neg_slope)

    def silu(self) -> Tensor:
        """x * sigmoid(x)."""
        return self * self.sigmoid()

    swish = silu

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU: x * Phi(x) exactly through erf (`approximate="none"`) or by the tanh formula (`"tanh"`)."""
        if approximate == "tanh":
            x = self.float_()
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return 0.5 * self * (1 + (self.float_() * (1 / math.sqrt(2))).erf())

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as torch)."""
        bx = self.float_() * beta
        soft = (bx.relu() + (1 + (-bx.abs()).exp()).log()) * (1 / beta)
        return (bx > threshold).where(self.float_(), soft)

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val]."""
        return self.clip(min_val, max_val)

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (exp(x) - 1)."""
        return (self > 0).where(self.float_(), alpha * (self.exp() - 1))

    def softmax(self, axis: int = -1) -> Tensor:
        """exp(x) / sum(exp(x)) over `axis` (stable: the max is subtracted first); 3 kernels at most."""
        ax = normalize_axis(axis, self.ndim, "softmax")
        x = self.float_()
        # the max is a shift the result does not depend on: detached, the backward is p * (g - sum(p * g)) and no
        # gradient is routed through the max's argmax (exactly zero, at the price of two more reduce kernels)
        e = (x - x.max(ax, keepdim=True).detach()).exp()
        return e / e.sum(ax, keepdim=True)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """log(softmax(x)) over `axis`, computed stably: x - max - log(sum(exp(x - max)))."""
        ax = normalize_axis(axis, self.ndim, "log_softmax")
        x = self.float_()
        shifted = x - x.max(ax, keepdim=True).detach()  # (a shift, as in softmax)
        return shifted - shifted.exp().sum(ax, keepdim=True).log()
