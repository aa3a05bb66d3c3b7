"""Activation functions as Tensor methods: relu, sigmoid, tanh, gelu, silu, softplus, elu... (softmax and its kin,
normalization, attention and the losses are in ember/tensor/ops/nn.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ember.tensor.ops.args import normalize_axis
from ember.uops import DType, Ops, dtypes

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


class ActivationMixin:
    """Activations: `x.relu()`, `x.gelu()`, `x.silu()`."""

    __slots__ = ()

    def relu(self) -> Tensor:
        """max(x, 0), with torch's gradient: 0 at x == 0 (the MAX is tagged for its gradient rule; a `where` would read
        x twice, and an expensive x would get a kernel of its own)."""
        out = self.maximum(0)
        return Tensor(out.uop.replace(tag="relu")) if out.uop.op is Ops.MAX else out

    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x)). x below -88 (float32; -11 for float16, -700 for float64) counts as -88: exp(-x) stays
        finite, so the gradient there is 0, not inf * 0 (the result is below 1e-38 either way). x is read once: it
        fuses into the kernel that makes it."""
        x = self.float_()
        return (1 + (-x.maximum(_exp_floor(x.dtype))).exp()).reciprocal()

    def tanh(self) -> Tensor:
        """2 * sigmoid(2x) - 1."""
        return 2 * (2 * self.float_()).sigmoid() - 1

    def leaky_relu(self, neg_slope: float = 0.01, negative_slope: float | None = None) -> Tensor:
        """x where x > 0, else neg_slope * x (`negative_slope=`, torch's name, too)."""
        slope = neg_slope if negative_slope is None else negative_slope
        return (self > 0).where(self, self * slope)

    def silu(self) -> Tensor:
        """x * sigmoid(x), sigmoid taken as 0 below -88 (float32): x * 0 there, and a gradient 0, not inf * 0 = NaN."""
        x = self.float_()
        low = _exp_floor(x.dtype)
        return self * (x < low).where(0.0, (1 + (-x.maximum(low)).exp()).reciprocal())

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
        # (maximum, not relu: its even split at 0 is what makes the gradient sigmoid(0) = 1/2 with abs's 0 there)
        soft = (bx.maximum(0) + (1 + (-bx.abs()).exp()).log()) * (1 / beta)
        return (bx > threshold).where(self.float_(), soft)

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val], in x's dtype (as torch); the gradient flows strictly inside the bounds."""
        if dtypes.is_unsigned(self.dtype) and min(min_val, max_val) < 0:
            raise RuntimeError("hardtanh: cannot do hardtanh on an unsigned type with negative limits")
        lo, hi = (Tensor(v, self.device, self.dtype) for v in (min_val, max_val))
        return (self <= lo).where(lo, (self >= hi).where(hi, self))

    def relu6(self) -> Tensor:
        """min(max(x, 0), 6) (hardtanh(0, 6))."""
        return self.hardtanh(0, 6)

    def hardsigmoid(self) -> Tensor:
        """relu6(x + 3) / 6."""
        return (self.float_() + 3).relu6() * (1 / 6)

    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6."""
        return self * self.hardsigmoid()

    def hardshrink(self, lambd: float = 0.5) -> Tensor:
        """x where |x| > lambd, else 0 (NaN stays NaN, as torch)."""
        return ((self >= -lambd).logical_and(self <= lambd)).where(0, self)

    def softshrink(self, lambd: float = 0.5) -> Tensor:
        """x - lambd above lambd, x + lambd below -lambd, else 0 (NaN stays NaN, as torch)."""
        if lambd < 0:
            raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
        x = self.float_()
        return (x > lambd).where(x - lambd, (x < -lambd).where(x + lambd, x.isnan().where(x, 0.0)))

    def tanhshrink(self) -> Tensor:
        """x - tanh(x)."""
        return self - self.tanh()

    def threshold(self, threshold: float, value: float) -> Tensor:
        """x where x > threshold, else value (torch.nn.functional.threshold)."""
        return (self <= threshold).where(value, self)

    def glu(self, dim: int = -1) -> Tensor:
        """a * sigmoid(b), a and b the two halves of x along `dim` (its size must be even)."""
        d = normalize_axis(dim, self.ndim, "glu")[0]
        if self.shape[d] % 2:
            raise ValueError(f"glu: dim {d} of shape {self.shape} has odd size {self.shape[d]}; it is split in halves")
        a, b = self.chunk(2, d)
        return a * b.sigmoid()

    def prelu(self, weight: Tensor) -> Tensor:
        """max(0, x) + weight * min(0, x), weight of shape (1,) or (C,) for the channel dim 1."""
        if weight.ndim != 1:
            raise ValueError(f"prelu: weight must be 1-d ((1,) or (channels,)), got shape {weight.shape}")
        channels = self.shape[1] if self.ndim >= 2 else 1  # (as torch: a 1-d input has no channel dim)
        if weight.shape[0] not in (1, channels):
            raise ValueError(f"prelu: weight has {weight.shape[0]} values, the input {channels} channels")
        w = weight.reshape([channels if i == 1 and weight.shape[0] > 1 else 1 for i in range(self.ndim)]) \
            if self.ndim else weight.reshape(())
        return (self > 0).where(self, w * self)

    def softsign(self) -> Tensor:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())

    def quick_gelu(self) -> Tensor:
        """x * sigmoid(1.702 x): the GELU approximation of CLIP."""
        return self * (self * 1.702).sigmoid()

    def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
        """gamma * elu(x, alpha), with SELU's constants (Klambauer et al. 2017, to float64 as torch) by default."""
        return gamma * self.elu(alpha)

    def celu(self, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
        x = self.float_()
        return (x > 0).where(x, alpha * ((x > 0).where(0.0, x) * (1 / alpha)).expm1())

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (exp(x) - 1) (the exp of min(x, 0): no overflow in the branch not taken)."""
        x = self.float_()
        return (x > 0).where(x, alpha * ((x > 0).where(0.0, x)).expm1())


def _exp_floor(dtype: DType) -> float:
    # the x below which exp(-x) overflows the float dtype, and 1 / (1 + exp(-x)) is 0 to it
    return -11.0 if dtype == dtypes.float16 else -700.0 if dtype == dtypes.float64 else -88.0
