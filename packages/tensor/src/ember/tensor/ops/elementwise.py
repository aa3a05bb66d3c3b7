"""Elementwise ops on Tensor: its side of the operator algebra shared with UOp (`ember.uops.ElementwiseMixin`:
broadcasting, dtype promotion, Python scalars as tensors, Python's rounding) and the math built on it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ember.uops import ElementwiseMixin, Ops, broadcast_shape, dtypes, least_upper_dtype

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
            raise ValueError(f"tensors are on different devices: {x.device} and {y.device}")
        out_dt = least_upper_dtype(x.dtype, y.dtype)
        x, y = x.cast(out_dt), y.cast(out_dt)
        try:
            shape = broadcast_shape(x.shape, y.shape)
        except ValueError:
            raise ValueError(f"cannot broadcast shapes {x.shape} and {y.shape}") from None
        x, y = x.expand(shape), y.expand(shape)
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

    def div(self, x: Any, reverse: bool = False) -> Tensor:
        """True division (`/`): ints are divided as floats, as x * (1 / y)."""
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        return a * b.reciprocal()

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

    def _floordiv(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return (a / b).floor()
        if a.dtype == dtypes.bool:
            raise TypeError("floor_divide: bool tensors cannot be divided")
        return a._int_divmod(b, False)[0]

    def _mod(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a - (a / b).floor() * b
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
                raise ValueError(f"pow: integers to negative integer powers are not allowed (exponent {exponent})")
            return self._int_pow(exponent)
        x, y = self._broadcasted(exponent)
        if not dtypes.is_float(x.dtype):  # int ** int tensor: through float64, exact below 2**53
            return x.cast(dtypes.float64).alu(Ops.POW, y.cast(dtypes.float64)).cast(x.dtype)
        return x.alu(Ops.POW, y)

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
                    raise TypeError(f"{name}: operands must be ints, got {v.dtype if isinstance(v, Tensor) else v!r}")
            elif (isinstance(v, Tensor) and dtypes.is_float(v.dtype)) or isinstance(v, float):
                got = v.dtype if isinstance(v, Tensor) else v
                raise TypeError(f"{name}: operands must be int or bool, got {got!r}")
        return self._binop(op, x, reverse)

    # *** == is elementwise on tensors ***
    def __eq__(self, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
    def __ne__(self, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("bool() of a Tensor is ambiguous (== is elementwise); use .item(), .any() or .all()")

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
        """x * x."""
        return self * self

    def erf(self) -> Tensor:
        """The error function, by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
        x = self.float_()
        t = 1 / (1 + 0.3275911 * x.abs())
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return x.sign() * (1 - poly * (-x * x).exp())

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self)."""
        return self + (end - self) * weight

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        """x limited to [min_, max_] (either may be None). `Tensor([-2, 5]).clip(0, 3)` -> [0, 3]."""
        if min_ is None and max_ is None:
            raise ValueError("clip: at least one of min_ and max_ must be given")
        out = self if min_ is None else self.maximum(min_)
        return out if max_ is None else out.minimum(max_)

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

    def isinf(self) -> Tensor:
        """True where x is +inf or -inf."""
        if not dtypes.is_float(self.dtype):
            return Tensor.full(self.shape, False, dtypes.bool, self.device)
        return (self == math.inf).logical_or(self == -math.inf)

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
