"""Elementwise ops on Tensor: its side of the operator algebra shared with UOp (`ember.uops.ElementwiseMixin`:
broadcasting, dtype promotion, Python scalars as tensors, Python's rounding) and the math built on it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.tensor.ops.args import ArgumentError, DTypeError, ShapeError, to_dtype
from ember.uops import DType, ElementwiseMixin, Ops, broadcast_shape, dtypes, least_upper_dtype

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor

_FLOAT_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})  # an int tensor is made float first
_BITWISE_NAMES = {Ops.AND: "bitwise_and", Ops.OR: "bitwise_or", Ops.XOR: "bitwise_xor", Ops.SHL: "left_shift",
                  Ops.SHR: "right_shift"}


class TensorElementwiseMixin(ElementwiseMixin):
    """`a + b`, `a < 1`, `x.maximum(0)`, `mask.where(x, 0.0)`, `x.exp()`, `x.round()`: numpy's broadcasting and dtype
    rules (a Python scalar takes the tensor's dtype, unless a float meets an int tensor), Python's `//` and `%`."""

    __slots__ = ()

    # *** the primitives of ElementwiseMixin ***
    def _broadcasted(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x, y = self, other
        if not isinstance(y, Tensor):
            if not isinstance(y, (bool, int, float)):
                raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
            # a Python scalar is weak: it takes the tensor's dtype unless it is a float meeting an int tensor
            dt = self.dtype if not (isinstance(y, float) and not dtypes.is_float(self.dtype)) else dtypes.float32
            if isinstance(y, int) and not isinstance(y, bool) and self.dtype == dtypes.bool:
                dt = dtypes.int32
            y = Tensor(y, self.device, dt)
        if x.device != y.device:
            raise ArgumentError(f"tensors are on different devices: {x.device} and {y.device}")
        out_dt = least_upper_dtype(x.dtype, y.dtype)
        x, y = x.cast(out_dt), y.cast(out_dt)
        try:
            shape = broadcast_shape(x.shape, y.shape)
        except ValueError:
            raise ShapeError(f"cannot broadcast shapes {x.shape} and {y.shape}: the size of tensor a must match the "
                             "size of tensor b at each non-singleton dimension") from None
        # (an operand already of the shape is used as it is: most are, and a new view of it would be the same UOp)
        x, y = x if x.shape == shape else x.expand(shape), y if y.shape == shape else y.expand(shape)
        return (y, x) if reverse else (x, y)

    def alu(self, op: Ops, *srcs: Tensor) -> Tensor:
        """The IR op `op` on this tensor and `srcs` (from `_broadcasted`: one dtype and shape), under numpy's rules:
        + and * on bools are or and and; the float ops make an int tensor float; WHERE's condition is a truth value,
        broadcast against its branches."""
        x = self
        if op in (Ops.ADD, Ops.MUL, Ops.MAX) and x.dtype == dtypes.bool:
            op = Ops.AND if op is Ops.MUL else Ops.OR
        elif op in _FLOAT_OPS and not dtypes.is_float(x.dtype):
            x = x.float()
        elif op is Ops.WHERE:
            x = x.cast(dtypes.bool)
            shape = broadcast_shape(x.shape, srcs[0].shape)
            x, srcs = x.expand(shape), tuple(s.expand(shape) for s in srcs)
        return Tensor(x.uop.alu(op, *(s.uop for s in srcs)))

    def const_like(self, value: Any) -> Tensor:
        """`value` in this tensor's shape, dtype and device."""
        return self.full_like(value)

    def _scalar(self, value: Any) -> Tensor:
        return Tensor(value, self.device)

    # *** where Tensor's numbers differ from the IR's ***
    def neg(self) -> Tensor:
        """-x."""
        if self.dtype == dtypes.bool:
            raise TypeError("neg: negation of a bool tensor is not allowed (use logical_not)")
        return self * -1

    def add(self, x: Any, reverse: bool = False, alpha: Any = None) -> Tensor:  # type: ignore[override]
        """self + alpha * x (x + self when `reverse`), as torch.add: `a.add(b, alpha=2)`."""
        return self._binop(Ops.ADD, x if alpha is None else x * alpha, reverse)

    def sub(self, x: Any, reverse: bool = False, alpha: Any = None) -> Tensor:  # type: ignore[override]
        """self - alpha * x (x - self when `reverse`), as torch.sub: `a.sub(b, alpha=2)`."""
        return super().sub(x if alpha is None else x * alpha, reverse)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:  # type: ignore[override]
        """True division (`/`): ints are divided as floats, as x * (1 / y). `rounding_mode="trunc"` rounds the quotient
        toward zero, `"floor"` toward -inf (as `//`); with either, ints stay ints."""
        if rounding_mode == "floor":
            return self._floordiv(x, reverse)
        if rounding_mode == "trunc":
            a, b = self._broadcasted(x, reverse)
            if dtypes.is_float(a.dtype):
                return a._math_out(a._math_in().alu(Ops.FDIV, b._math_in()).trunc())  # (IEEE division, as torch)
            if a.dtype == dtypes.bool:
                raise TypeError("div: bool tensors cannot be divided with a rounding mode")
            return a._int_divmod_trunc(b)[0]
        if rounding_mode is not None:
            raise ArgumentError(f"div: expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                                f"{rounding_mode!r}")
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        return a * b.reciprocal()

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division rounded toward zero, as C (tinygrad's idiv; `div(x, rounding_mode="trunc")`)."""
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"idiv: operands must be ints, got {a.dtype!r}")
        return a._int_divmod_trunc(b)[0]

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """a % b with the sign of b, as Python and torch.remainder (`%`)."""
        return self._mod(x, reverse)

    def fmod(self, x: Any) -> Tensor:
        """The remainder of a / b rounded toward zero: the sign of a, as C's fmod and torch.fmod."""
        a, b = self._broadcasted(x)
        if dtypes.is_float(a.dtype):
            return a._math_out(a._math_in().alu(Ops.MOD, b._math_in()))  # (C's fmod: exact)
        if a.dtype == dtypes.bool:
            raise TypeError("fmod: bool tensors have no remainder")
        return a._int_divmod_trunc(b)[1]

    def _int_divmod_trunc(self, b: Tensor) -> tuple[Tensor, Tensor]:
        # C's truncating (quotient, remainder) of two int tensors of one dtype and shape, with the trapping divisors
        # (0, and -1 under MIN) given numpy's results as in _int_divmod
        a, signed = self, not dtypes.is_unsigned(self.dtype)
        zero = b == 0
        trap = zero.logical_or(b == -1) if signed else zero
        d = trap.where(1, b)
        q, r = a.alu(Ops.IDIV, d), a.alu(Ops.MOD, d)
        if signed:
            q = (b == -1).where((a == dtypes.min(a.dtype)).where(a, a * -1), q)
        return zero.where(0, q), zero.where(0, r)

    def _int_divmod(self, x: Any, reverse: bool) -> tuple[Tensor, Tensor]:
        # C's division truncates: step the quotient down (and the remainder over) where the signs differ.
        # A zero divisor, and MIN // -1 (its quotient overflows), trap in hardware (SIGFPE on x86): the results are
        # numpy's instead, on every device: x // 0 == x % 0 == 0, MIN // -1 == MIN (wrapped), MIN % -1 == 0. (PyTorch
        # raises for a zero divisor, which needs the divisor on the host; a kernel cannot raise.) A Python int divisor
        # that cannot trap costs nothing extra.
        a, b = self._broadcasted(x, reverse)
        signed = not dtypes.is_unsigned(a.dtype)
        safe = not reverse and isinstance(x, int) and x != 0 and not (signed and x == -1)
        if safe:
            q, r = a.alu(Ops.IDIV, b), a.alu(Ops.MOD, b)
        else:
            zero = b == 0
            trap = zero.logical_or(b == -1) if signed else zero
            d = trap.where(1, b)  # a divisor that cannot trap; the trapping lanes are set below
            q, r = a.alu(Ops.IDIV, d), a.alu(Ops.MOD, d)  # (b == -1: q = a, r = 0)
            if signed:  # a // -1 == -a, and MIN stays MIN (two's complement wraps) without computing -MIN
                q = (b == -1).where((a == dtypes.min(a.dtype)).where(a, a * -1), q)
            q, r = zero.where(0, q), zero.where(0, r)
        fix = (r != 0).logical_and((r < 0) != (b < 0))
        return fix.where(q - 1, q), fix.where(r + b, r)

    def _float_divmod(self, b: Tensor) -> tuple[Tensor, Tensor]:
        # torch's floor division and remainder of floats (Python's too), from C's exact fmod: a - r is an exact
        # multiple of b, so (a - r) / b rounds to the integer quotient (1 // 0.1 is 9, not floor(1 / 0.1) = 10)
        a, b = self._math_in(), b._math_in()
        r = a.alu(Ops.MOD, b)
        fix = (r != 0).logical_and((b < 0) != (r < 0))  # the remainder takes the divisor's sign
        rem = fix.where(r + b, r)
        div = (a - r).alu(Ops.FDIV, b)
        div = fix.where(div - 1, div)
        fl = div.floor()
        fl = (div - fl > 0.5).where(fl + 1, fl)
        quotient = a.alu(Ops.FDIV, b)
        # (x / 0 is +-inf or NaN, which trunc keeps: through it no gradient, torch's 0, rather than inf)
        q = (b == 0).where(quotient.trunc(), (div == 0).where(quotient._sign_bit().where(-0.0, 0.0), fl))
        return self._math_out(q), self._math_out(rem)

    def _floordiv(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a._float_divmod(b)[0]
        if a.dtype == dtypes.bool:
            raise TypeError("floor_divide: bool tensors cannot be divided")
        return a._int_divmod(b, False)[0]

    def _mod(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a._float_divmod(b)[1]
        if a.dtype == dtypes.bool:
            raise TypeError("remainder: bool tensors have no remainder")
        return a._int_divmod(b, False)[1]

    def floor_divide(self, x: Any) -> Tensor:
        """a // b rounded toward -inf, as Python and torch (`//`)."""
        return self._floordiv(x, False)

    def remainder(self, x: Any) -> Tensor:
        """a % b with the sign of b, as Python and torch (`%`)."""
        return self._mod(x, False)

    def pow(self, exponent: Any) -> Tensor:
        """x ** exponent, elementwise; an int tensor to a non-negative int scalar stays int (exact), like torch.

        `Tensor([-2.0, 3.0]).pow(3)` -> [-8, 27]; a negative base to a non-integer exponent is NaN."""
        if isinstance(exponent, bool) or not isinstance(exponent, (int, float, Tensor)):
            raise TypeError(f"pow: exponent must be a Tensor, int or float, got {type(exponent).__name__}")
        if isinstance(exponent, int) and not dtypes.is_float(self.dtype):
            if exponent < 0:
                raise ArgumentError(f"pow: integers to negative integer powers are not allowed (exponent {exponent})")
            return self._int_pow(exponent)
        if isinstance(exponent, float) and exponent == 0.5 and dtypes.is_float(self.dtype):
            return self.sqrt()  # (as torch: sqrt(-0.0) is -0.0, sqrt(-inf) NaN, where C's pow gives 0.0 and inf)
        x, y = self._broadcasted(exponent)
        if not dtypes.is_float(x.dtype):
            return x._int_pow_tensor(y)
        return x.alu(Ops.POW, y)

    def _int_pow_tensor(self, e: Tensor) -> Tensor:
        # int ** int tensor, square-and-multiply over every bit of the exponent's dtype: wraps like torch. A negative
        # exponent gives torch's 0, except for bases 1 (1) and -1 (+-1 by the exponent's parity)
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        e = e.cast(x.dtype)
        out, base, rest = Tensor.full(x.shape, 1, x.dtype, x.device), x, e
        for _ in range(x.dtype.bitsize - (0 if dtypes.is_unsigned(x.dtype) else 1)):
            out = ((rest & 1) != 0).where(out * base, out)
            base, rest = base * base, rest >> 1
        if dtypes.is_unsigned(x.dtype):
            return out
        odd = (e & 1) != 0
        negative = (x == 1).where(1, (x == -1).where(odd.where(-1, 1), 0)).cast(x.dtype)
        return (e < 0).where(negative, out)

    def _int_pow(self, n: int) -> Tensor:
        # square-and-multiply on the tensor's own dtype: wraps like torch's integer pow
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        out, base = Tensor.full(x.shape, 1, x.dtype, x.device), x
        while n:
            if n & 1:
                out = out * base
            base, n = base * base, n >> 1
        return out

    def logical_not(self) -> Tensor:
        return Tensor(self.cast(dtypes.bool).uop.logical_not())

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        # ints and bools only (shifts: ints only), checked before promotion so that the message names what was given
        name = _BITWISE_NAMES[op]
        for v in (self, x):
            if op in (Ops.SHL, Ops.SHR):
                if (isinstance(v, Tensor) and not dtypes.is_int(v.dtype)) or isinstance(v, (float, bool)):
                    raise DTypeError(f"{name}: operands must be ints, got {v.dtype if isinstance(v, Tensor) else v!r}")
            elif (isinstance(v, Tensor) and dtypes.is_float(v.dtype)) or isinstance(v, float):
                got = v.dtype if isinstance(v, Tensor) else v
                raise DTypeError(f"{name}: operands must be int or bool, got {got!r}")
        return self._binop(op, x, reverse)

    def bitwise_not(self) -> Tensor:
        """Elementwise `~`: logical not on bool, all bits flipped on ints (floats: a DTypeError, as torch's)."""
        if dtypes.is_float(self.dtype):
            raise DTypeError(f"bitwise_not: the tensor must be int or bool, got {self.dtype!r}")
        return super().bitwise_not()

    # *** more of PyTorch's elementwise math ***
    def atan2(self, x: Any) -> Tensor:
        """The angle of the point (x, self) in (-pi, pi], as torch.atan2(self, x) (the signs of zeros count)."""
        y0, x0 = self._broadcasted(x)
        y, x = (y0._math_in(), x0._math_in()) if dtypes.is_float(y0.dtype) else (y0.float(), x0.float())
        # atan of the smaller magnitude over the larger, in [0, 1], reflected into the octant: no y / 0 (whose inf
        # lost the sign of a -0.0 x and made NaN gradients at x == 0), the signs of zeros counted by their sign bits
        x_neg, sign_y = x._sign_bit(), y._sign_bit().where(-1.0, 1.0).cast(y.dtype)
        ay, ax = y * sign_y, x * x_neg.where(-1.0, 1.0).cast(x.dtype)  # |y|, |x| with gradients +-1
        steep = ay > ax
        num, den = steep.where(ax, ay), steep.where(ay, ax)
        both_inf = ax.isinf().logical_and(ay.isinf())
        flat = (num == 0).logical_and(den == 0).logical_or(both_inf)  # atan2(+-0, +-0), atan2(+-inf, +-inf): 0 or 1
        r = flat.where(both_inf.where(1.0, 0.0), num / flat.where(1.0, den))
        ang = steep.where(math.pi / 2 - r.atan(), r.atan())
        return y0._math_out(x_neg.where(math.pi - ang, ang) * sign_y)

    def hypot(self, x: Any) -> Tensor:
        """sqrt(self^2 + x^2), scaled by the larger magnitude so that it does not overflow; inf with anything is inf."""
        a, b = self._broadcasted(x)
        a, b = a.abs(), b.abs()
        # scaled by the larger magnitude k taken as a constant: the gradient is a / hypot, as torch's (through
        # big * sqrt(1 + (small / big)^2) a tie split it, tiny and huge values under/overflowed it)
        any_inf = a.isinf().logical_or(b.isinf())
        a, b = any_inf.where(0.0, a), any_inf.where(0.0, b)  # (an inf out of the formula: no inf * 0 gradients)
        k = a.maximum(b).detach()
        tiny = {dtypes.float16: 6.103515625e-05, dtypes.float64: 2.2250738585072014e-308}.get(k.dtype,
                                                                                          1.1754943508222875e-38)
        k = (k < tiny).logical_or(k.isnan()).where(1.0, k)  # (0 and subnormals, which the CPU may flush: no 0 / 0)
        out = k * ((a / k).square() + (b / k).square()).sqrt()
        return any_inf.where(math.inf, out)  # (inf with anything, NaN too, is inf)

    def deg2rad(self) -> Tensor: return self.float_() * (math.pi / 180)
    def rad2deg(self) -> Tensor: return self.float_() * (180 / math.pi)

    def frac(self) -> Tensor:
        """The fractional part, x - trunc(x), with x's sign."""
        return self - self.trunc()

    def sgn(self) -> Tensor:
        """The sign of x (torch.sgn: sign for real tensors)."""
        return self.sign()

    def signbit(self) -> Tensor:
        """True where the sign bit is set (-0.0 and negative NaNs too)."""
        if dtypes.is_float(self.dtype):
            return self._sign_bit()
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self.zeros_like(dtype=dtypes.bool)
        return self < 0

    def logit(self, eps: float | None = None) -> Tensor:
        """log(x / (1 - x)), with x clamped to [eps, 1 - eps] when eps is given."""
        x = self.float_()
        x = x if eps is None else x.clip(eps, 1 - eps)
        return x.log() - (-x).log1p()  # (not log(x / (1 - x)): its gradient at 0 and 1 is inf, as torch's, not NaN)

    def xlogy(self, y: Any) -> Tensor:
        """self * log(y), and 0 where self is 0 (unless y is NaN)."""
        a, b = self._broadcasted(y)
        a, b = a.float_(), b.float_()
        return (a == 0).logical_and(b.isnan().logical_not()).where(0.0, a * b.log())

    def fmax(self, x: Any) -> Tensor:
        """The larger of self and x, ignoring a NaN on either side (NaN only where both are)."""
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            return a.maximum(b)
        return a.isnan().where(b, b.isnan().where(a, a.maximum(b)))

    def fmin(self, x: Any) -> Tensor:
        """The smaller of self and x, ignoring a NaN on either side (NaN only where both are)."""
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            return a.minimum(b)
        return a.isnan().where(b, b.isnan().where(a, a.minimum(b)))

    def clamp_min(self, min_: Any) -> Tensor: return self.clip(min_, None)
    def clamp_max(self, max_: Any) -> Tensor: return self.clip(None, max_)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
        """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default the dtype's largest and smallest)."""
        if not dtypes.is_float(self.dtype):
            return self
        hi = dtypes.max(self.dtype) if posinf is None else posinf
        lo = dtypes.min(self.dtype) if neginf is None else neginf
        return self.isnan().where(nan, (self == math.inf).where(hi, (self == -math.inf).where(lo, self)))

    def heaviside(self, values: Any) -> Tensor:
        """0 where x < 0, 1 where x > 0, and `values` where x == 0."""
        a, v = self._broadcasted(values)
        return (a == 0).where(v, (a > 0).cast(a.dtype))

    def logaddexp2(self, x: Any) -> Tensor:
        """log2(2^self + 2^x), stably."""
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        m = a.maximum(b)
        out = m + (-(a - b).abs()).exp2().log1p() * (1 / math.log(2))
        return (m.isinf().logical_and(a == b)).where(m, out)

    def isposinf(self) -> Tensor: return self.isinf(detect_positive=True, detect_negative=False)
    def isneginf(self) -> Tensor: return self.isinf(detect_positive=False, detect_negative=True)

    def addcmul(self, tensor1: Any, tensor2: Any, value: float = 1.0) -> Tensor:
        """self + value * tensor1 * tensor2."""
        return self + (tensor1 * tensor2) * value

    def addcdiv(self, tensor1: Any, tensor2: Any, value: float = 1.0) -> Tensor:
        """self + value * tensor1 / tensor2."""
        return self + (tensor1 / tensor2) * value

    def float_power(self, exponent: Any) -> Tensor:
        """self ** exponent in float64 (as torch.float_power)."""
        e = exponent.cast(dtypes.float64) if isinstance(exponent, Tensor) else float(exponent)
        return self.cast(dtypes.float64).pow(e)

    def sinc(self) -> Tensor:
        """sin(pi x) / (pi x), and 1 at 0: its series where |pi x| < 0.5, so that the gradient near 0 does not cancel
        (cos(pi x) / x - sin(pi x) / (pi x^2) was -0.32 at x = 1e-8, torch's 0)."""
        x = self._math_in()
        px = x * math.pi
        near = px.abs() < 0.5
        s = near.where(px, 0.0).square()
        series = 1 - s / 6 * (1 - s / 20 * (1 - s / 42 * (1 - s / 72)))  # (error below (pi x)^10 / 11!: 3e-11)
        far = near.where(1.0, px)  # (no 0 / 0 in the branch that is not taken)
        return self._math_out(near.where(series, far.sin() / far))

    def erfc(self) -> Tensor:
        """1 - erf(x)."""
        return 1 - self.erf()

    # *** comparisons, division and casts by their PyTorch method names ***
    def lt(self, x: Any) -> Tensor: return self < x
    def gt(self, x: Any) -> Tensor: return self > x
    def le(self, x: Any) -> Tensor: return self <= x
    def ge(self, x: Any) -> Tensor: return self >= x

    def true_divide(self, x: Any) -> Tensor:
        """True division: self / x."""
        return self.div(x)

    def type(self, dtype: DType | str | None = None) -> Any:
        """This tensor cast to `dtype` (as torch.Tensor.type); without one, the dtype's name."""
        if dtype is None:
            return self.dtype.name
        dt = to_dtype(dtype)
        assert dt is not None
        return self.cast(dt)

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor cast to `other`'s dtype."""
        return self.cast(other.dtype)

    # *** PyTorch's other names for the same ops ***
    def absolute(self) -> Tensor: return self.abs()
    def arccos(self) -> Tensor: return self.acos()
    def arccosh(self) -> Tensor: return self.acosh()
    def arcsin(self) -> Tensor: return self.asin()
    def arcsinh(self) -> Tensor: return self.asinh()
    def arctan(self) -> Tensor: return self.atan()
    def arctanh(self) -> Tensor: return self.atanh()
    def arctan2(self, x: Any) -> Tensor: return self.atan2(x)
    def negative(self) -> Tensor: return self.neg()

    def positive(self) -> Tensor:
        """self (torch.positive; not on bool, as torch)."""
        if self.dtype == dtypes.bool:
            raise TypeError("positive: the positive operator does not support bool tensors")
        return self
    def fix(self) -> Tensor: return self.trunc()
    def multiply(self, x: Any) -> Tensor: return self * x
    def divide(self, x: Any, rounding_mode: str | None = None) -> Tensor:
        return self.div(x, rounding_mode=rounding_mode)

    def subtract(self, x: Any, alpha: Any = None) -> Tensor: return self.sub(x, alpha=alpha)
    def greater(self, x: Any) -> Tensor: return self > x
    def greater_equal(self, x: Any) -> Tensor: return self >= x
    def less(self, x: Any) -> Tensor: return self < x
    def less_equal(self, x: Any) -> Tensor: return self <= x
    def not_equal(self, x: Any) -> Tensor: return self.ne(x)
    def bitwise_left_shift(self, x: Any) -> Tensor: return self << x
    def bitwise_right_shift(self, x: Any) -> Tensor: return self >> x
    def xor(self, x: Any) -> Tensor: return self.bitwise_xor(x)  # (tinygrad's name)

    def ldexp(self, other: Any) -> Tensor:
        """self * 2 ** other (a float result)."""
        return self.float_() * (2.0 ** (other if not isinstance(other, Tensor) else other.float()))

    def isreal(self) -> Tensor:
        """True everywhere (Ember has no complex dtypes)."""
        return self.full_like(True, dtype=dtypes.bool)

    def angle(self) -> Tensor:
        """The argument of a real number: 0 for x >= 0, pi for x < 0, NaN for NaN (float result, as torch)."""
        x = self.float_()
        return x.isnan().where(x, (x < 0).where(math.pi, 0.0))

    # *** == is elementwise on tensors ***
    def __eq__(self, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
    def __ne__(self, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
    __hash__ = object.__hash__

    # bool(), float() and int() of a one-element tensor read its value, as torch's and numpy's (a sync)
    def __bool__(self) -> bool:
        if self.numel() != 1:  # type: ignore[attr-defined]
            raise RuntimeError(f"bool() of a Tensor of shape {self.shape} is ambiguous (== is elementwise): only a "
                               "tensor of one element has a truth value; use .any() or .all()")
        return bool(self.item())  # type: ignore[attr-defined]

    def __float__(self) -> float:
        return float(self._one_value("float"))

    def __int__(self) -> int:
        return int(self._one_value("int"))

    def _one_value(self, op: str) -> Any:
        if self.numel() != 1:  # type: ignore[attr-defined]
            raise ValueError(f"{op}(): only a tensor of one element can be converted, this one has shape {self.shape}")
        return self.item()  # type: ignore[attr-defined]

    # *** math ***
    def exp(self) -> Tensor: return (self.float_() * (1 / math.log(2))).exp2()
    def log(self) -> Tensor: return self.log2() * math.log(2)

    def abs(self) -> Tensor:
        return self if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype) else self.maximum(-self)

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x)."""
        return self.sqrt().reciprocal()

    def cos(self) -> Tensor:
        """cos(x) = sin(pi/2 - x)."""
        return (math.pi / 2 - self.float_()).sin()

    def tan(self) -> Tensor:
        """sin(x) / cos(x)."""
        return self.sin() / self.cos()

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of x, in x's dtype (NaN gives 0, as torch)."""
        if self.dtype == dtypes.bool:
            return self
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def square(self) -> Tensor:
        """x * x (bools as int64, as torch)."""
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        return x * x

    # *** the inverse trig and hyperbolic functions, log10, log1p, expm1 (16-bit floats computed in float32) ***
    def _math_in(self) -> Tensor:
        return self if self.dtype in (dtypes.float32, dtypes.float64) else self.float()

    def _math_out(self, out: Tensor) -> Tensor:
        return out.cast(self.dtype) if dtypes.is_float(self.dtype) else out

    def _odd(self, magnitude_fn: Callable[[Tensor], Tensor]) -> Tensor:
        # f(x) = s * f(s * x) for an odd f, s = -1 or 1 by x's sign bit (a constant to autograd): the gradient is
        # f'(|x|) everywhere, 0 included (through abs or sign it would be 0 there), and f(-0.0) is -0.0 as torch's
        s = self._sign_bit().where(-1.0, 1.0).cast(self.dtype)
        return magnitude_fn(self * s) * s

    def asin(self) -> Tensor:
        """arcsin(x) in [-pi/2, pi/2] (NaN outside [-1, 1]), odd: on t = |x|, an odd polynomial (Cephes' asinf) up to
        0.5, and pi/2 - 2 asin(sqrt((1 - t) / 2)) above."""
        return self._math_out(self._math_in()._odd(_asin_magnitude))

    def acos(self) -> Tensor:
        """arccos(x) in [0, pi] (NaN outside [-1, 1]): pi/2 - asin(x)."""
        return self._math_out(math.pi / 2 - self._math_in().asin())

    def atan(self) -> Tensor:
        """arctan(x) in (-pi/2, pi/2), odd: on t = |x| reduced to r in [-0.42, 0.42] (t, (t - 1) / (t + 1) + pi/4 or
        -1/t + pi/2), then an odd polynomial (Cephes' atanf)."""
        return self._math_out(self._math_in()._odd(_atan_magnitude))

    def sinh(self) -> Tensor:
        """(e^x - e^-x) / 2: through expm1 for |x| < 1, so that small x keeps its precision."""
        x = self._math_in()
        near = x.abs() < 1
        s = near.where(x, 0.0)  # (no overflow in the branch that is not taken)
        return self._math_out(near.where((s.expm1() - (-s).expm1()) * 0.5, x._half_exp() - (-x)._half_exp()))

    def cosh(self) -> Tensor:
        """(e^x + e^-x) / 2."""
        x = self._math_in()
        return self._math_out(x._half_exp() + (-x)._half_exp())

    def _half_exp(self) -> Tensor:
        # e^x / 2, finite where e^x alone overflows (a float32 x in (88.7, 89.4]): e^(x - ln 2) there
        big = self > 88.0
        return big.where((self - math.log(2)).exp(), big.where(0.0, self).exp() * 0.5)

    def asinh(self) -> Tensor:
        """log(x + sqrt(x^2 + 1)), odd: on |x| as log1p(t + t^2 / (1 + sqrt(1 + t^2))), and log(2t) for huge t."""
        return self._math_out(self._math_in()._odd(_asinh_magnitude))

    def acosh(self) -> Tensor:
        """log(x + sqrt(x^2 - 1)) for x >= 1 (NaN below): log1p(t + sqrt(2t + t^2)) on t = x - 1, and log(2x) for huge
        x."""
        x = self._math_in()
        huge = x > 1e9
        t = huge.where(0.0, x - 1)
        # (sqrt(t) sqrt(t + 2), not sqrt(2t + t^2): at x = 1 the gradient is inf, as torch's, not inf * 0 via t * t)
        small = (t + t.sqrt() * (t + 2).sqrt()).log1p()
        out = huge.where(x.maximum(1).log() + math.log(2), small)
        return self._math_out((x < 1).where(math.nan, out))

    def atanh(self) -> Tensor:
        """0.5 * log((1 + x) / (1 - x)) on (-1, 1): 0.5 * (log1p(x) - log1p(-x)); +-inf at +-1, NaN outside. (Not
        log1p(2x / (1 - x)): its gradient at +-1 and +-inf was inf * 0 = NaN, torch's is inf and 0.)"""
        x = self._math_in()
        return self._math_out(0.5 * (x.log1p() - (-x).log1p()))

    def log10(self) -> Tensor:
        """The base-10 logarithm: log2(x) * log10(2)."""
        return self._math_out(self._math_in().log2() * math.log10(2))

    def log1p(self) -> Tensor:
        """log(1 + x), precise for small x: 2 atanh(s) on s = x / (2 + x) as a series where |x| < 0.5, else log."""
        x = self._math_in()
        near = x.abs() < 0.5
        s = near.where(x, 0.0)
        s = s / (2 + s)
        s2, series = s * s, 0.0
        for k in (13, 11, 9, 7, 5, 3):
            series = (series + 1 / k) * s2
        far = near.where(1.0, 1 + x).log()  # (no log of 0 or less in the branch that is not taken)
        return self._math_out(near.where(2 * s * (1 + series), far))

    def expm1(self) -> Tensor:
        """exp(x) - 1, precise for small x: the Taylor series where |x| < 0.5, else exp(x) - 1."""
        x = self._math_in()
        near = x.abs() < 0.5
        s = near.where(x, 0.0)
        series = 0.0
        for k in range(10, 1, -1):  # x (1 + x/2 (1 + x/3 (...)))
            series = s * (1 / k) * (1 + series)
        return self._math_out(near.where(s * (1 + series), near.where(0.0, x).exp() - 1))

    def copysign(self, x: Any) -> Tensor:
        """|self| with the sign of x (its sign bit: -0.0 and -NaN count as negative); floats (ints made float32)."""
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        mag = a.abs()
        return b._sign_bit().where(-mag, mag)

    def _sign_bit(self) -> Tensor:
        # the sign bit of a float, through the signed int of its size
        signed = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
        return self.bitcast(signed) < 0

    def logaddexp(self, x: Any) -> Tensor:
        """log(exp(self) + exp(x)), stably: max + log1p(exp(-|self - x|)) (floats; ints made float32)."""
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        m = a.maximum(b)
        out = m + (-(a - b).abs()).exp().log1p()
        return (m.isinf().logical_and(a == b)).where(m, out)  # (inf - inf is NaN: equal infinities are themselves)

    # *** conversions ***
    def bool(self) -> Tensor: return self.cast(dtypes.bool)
    def half(self) -> Tensor: return self.cast(dtypes.float16)
    def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
    def double(self) -> Tensor: return self.cast(dtypes.float64)
    def long(self) -> Tensor: return self.cast(dtypes.int64)
    def short(self) -> Tensor: return self.cast(dtypes.int16)
    def char(self) -> Tensor: return self.cast(dtypes.int8)
    def byte(self) -> Tensor: return self.cast(dtypes.uint8)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bits read as `dtype` (`Tensor([1.0]).bitcast(dtypes.int32)` -> [1065353216]). A dtype of another
        size regroups the last dim, little-endian, as torch's `view(dtype)`: uint8 of shape (..., 4n) read as int32 has
        shape (..., n), and back."""
        dt = to_dtype(dtype)
        assert dt is not None
        if dt == self.dtype:
            return self
        if dt.itemsize == self.dtype.itemsize:
            return Tensor(self.uop.bitcast(dt))
        return self._bitcast_resize(dt)

    def _bitcast_resize(self, dt: DType) -> Tensor:
        # little-endian: the narrow words of a wide one are its low bits first. Through unsigned ints of each size
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        src_size, dst_size = self.dtype.itemsize, dt.itemsize
        if self.ndim == 0:
            raise ArgumentError(f"bitcast: a 0-d tensor cannot change its item size ({self.dtype!r} to {dt!r})")
        x = self if self.dtype == unsigned[src_size] else self.bitcast(unsigned[src_size])
        if dst_size > src_size:
            k = dst_size // src_size
            if x.shape[-1] % k:
                raise ArgumentError(f"bitcast: the last dim ({x.shape[-1]}) must be a multiple of {k} to read "
                                    f"{self.dtype!r} as {dt!r}")
            parts = x.reshape(*x.shape[:-1], x.shape[-1] // k, k).cast(unsigned[dst_size])
            shifts = Tensor([8 * src_size * i for i in range(k)], x.device, unsigned[dst_size])
            wide = (parts << shifts).sum(-1).cast(unsigned[dst_size])  # (disjoint bits: the sum is an or)
        else:
            k = src_size // dst_size
            shifts = Tensor([8 * dst_size * i for i in range(k)], x.device, unsigned[src_size])
            narrow = ((x.unsqueeze(-1) >> shifts) & dtypes.max(unsigned[dst_size])).cast(unsigned[dst_size])
            wide = narrow.reshape(*x.shape[:-1], x.shape[-1] * k)
        return wide if dt == wide.dtype else wide.bitcast(dt)

    def erf(self) -> Tensor:
        """The error function, by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
        return self.float_()._odd(_erf_magnitude)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self)."""
        return self + (end - self) * weight

    def clip(self, min_: Any = None, max_: Any = None, **bounds: Any) -> Tensor:
        """x limited to [min_, max_] (either may be None; NaN stays NaN). `Tensor([-2, 5]).clip(0, 3)` -> [0, 3];
        PyTorch's keywords work too: `x.clamp(min=0)`. The gradient flows where min_ <= x <= max_, bounds included, as
        torch.clamp."""
        if set(bounds) - {"min", "max"}:
            raise TypeError(f"clip: unexpected keyword arguments {sorted(set(bounds) - {'min', 'max'})}")
        min_ = bounds.get("min", min_)
        max_ = bounds.get("max", max_)
        if min_ is None and max_ is None:
            raise ArgumentError("clip: at least one of min_ and max_ must be given")
        out = self if min_ is None else (self < min_).logical_or(_is_nan(min_)).where(min_, self)
        return out if max_ is None else (out > max_).logical_or(_is_nan(max_)).where(max_, out)

    clamp = clip

    # *** rounding ***
    def trunc(self) -> Tensor:
        """x rounded toward zero (ints unchanged)."""
        return self.alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Tensor:
        """The largest integer <= x (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return t - (self < t).cast(self.dtype)

    def ceil(self) -> Tensor:
        """The smallest integer >= x (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return t + (self > t).cast(self.dtype)

    def round(self) -> Tensor:
        """x rounded to the nearest integer, halves to even (as torch.round): `Tensor([0.5, 1.5, -2.5]).round()` ->
        [0, 2, -2]."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        frac = (self - t).abs()  # exact: t and self share the exponent range
        odd = (t - (t * 0.5).trunc() * 2) != 0
        up = (frac > 0.5).logical_or((frac == 0.5).logical_and(odd))
        return t + up.where(self.sign(), 0.0).cast(self.dtype)

    # *** predicates and logic ***
    def isnan(self) -> Tensor:
        """True where x is NaN."""
        return self != self if dtypes.is_float(self.dtype) else Tensor.full(self.shape, False, dtypes.bool, self.device)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where x is +inf (if detect_positive) or -inf (if detect_negative)."""
        if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative):
            return Tensor.full(self.shape, False, dtypes.bool, self.device)
        if not detect_negative:
            return self == math.inf
        if not detect_positive:
            return self == -math.inf
        return (self == math.inf).logical_or(self == -math.inf)

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
        """True where |self - other| <= atol + rtol * |other| (as torch.isclose): equal values (infinities too) are
        close, NaN is close to NaN only with `equal_nan`."""
        a, b = self._broadcasted(other)
        same = a == b
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        near = (a - b).abs() <= atol + rtol * b.abs()
        out = same.logical_or(near.logical_and(a.isfinite()).logical_and(b.isfinite()))
        return out.logical_or(a.isnan().logical_and(b.isnan())) if equal_nan else out

    def isfinite(self) -> Tensor:
        """True where x is neither NaN nor infinite."""
        return self.isnan().logical_or(self.isinf()).logical_not()

    def logical_and(self, x: Any) -> Tensor:
        """Elementwise `and` of the truth values."""
        a, b = self._broadcasted(x)
        return a.cast(dtypes.bool).alu(Ops.AND, b.cast(dtypes.bool))

    def logical_or(self, x: Any) -> Tensor:
        """Elementwise `or` of the truth values."""
        a, b = self._broadcasted(x)
        return a.cast(dtypes.bool).alu(Ops.OR, b.cast(dtypes.bool))

    def logical_xor(self, x: Any) -> Tensor:
        """Elementwise `xor` of the truth values."""
        a, b = self._broadcasted(x)
        return a.cast(dtypes.bool).alu(Ops.XOR, b.cast(dtypes.bool))


# *** odd functions on t = |x| >= 0 (Tensor._odd gives them their sign) ***
def _asin_magnitude(t: Tensor) -> Tensor:
    big = t > 0.5
    half = big.where(0.5 * (1 - t), 1.0)  # (the branch not taken stays in sqrt's domain: no NaN gradient)
    s = big.where(half.sqrt(), t)
    z = big.where(half, t * t)
    p: Any = 0.0
    for c in (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1):
        p = p * z + c
    a = p * z * s + s
    return big.where(math.pi / 2 - 2 * a, a)


def _atan_magnitude(t: Tensor) -> Tensor:
    big, mid = t > 2.414213562373095, t > 0.41421356237309503
    m = big.where(1.0, t)  # (no inf / inf in the branch not taken: a NaN gradient at +-inf)
    r = big.where(-t.maximum(1).reciprocal(), mid.where((m - 1) / (m + 1), t))  # (maximum: no 1/0 untaken)
    z = r * r
    p: Any = 0.0
    for c in (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1):
        p = p * z + c
    return big.where(math.pi / 2, mid.where(math.pi / 4, 0.0)) + (p * z * r + r)


def _asinh_magnitude(t: Tensor) -> Tensor:
    huge = t > 1e9
    s = huge.where(0.0, t)  # (no t^2 overflow in the branch that is not taken)
    small = (s + s * s / (1 + (s * s + 1).sqrt())).log1p()
    return huge.where(t.maximum(1).log() + math.log(2), small)


def _erf_magnitude(x: Tensor) -> Tensor:
    # Abramowitz & Stegun 7.1.26; erf is 1 in float64 from 6 on: t is held there so that the gradient is 0 at inf
    t = x.minimum(6.0)
    u = 1 / (1 + 0.3275911 * t)
    poly = u * (0.254829592 + u * (-0.284496736 + u * (1.421413741 + u * (-1.453152027 + u * 1.061405429))))
    return 1 - poly * (-t * t).exp()


def _is_nan(bound: Any) -> Any:
    # a NaN bound makes the clip NaN, as torch.clamp (x < NaN is False: x came through unchanged)
    if isinstance(bound, float):
        return math.isnan(bound)
    return bound.isnan() if hasattr(bound, "isnan") and dtypes.is_float(bound.dtype) else False
