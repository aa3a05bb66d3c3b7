"""`ElementwiseMixin`: the operator algebra written once, for `UOp` and ember.tensor's `Tensor`: Python's arithmetic,
comparison and bitwise operators and the named elementwise ops, in terms of a few primitives each class implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from ember.uops.dtype import DType, dtypes
from ember.uops.opcodes import Ops


class ElementwiseMixin:
    """The operators and named elementwise ops of `UOp` and `Tensor`. A class implements the primitives:

    - `alu(op, *srcs)`: the IR op `op` on this value and `srcs` (operands already of one dtype, and one shape);
    - `const_like(value)`: `value` as a constant of this value's dtype;
    - `_scalar(value)`: `value`, a Python scalar, as a constant of its own dtype (where both branches are scalars);

    and overrides `_broadcasted(x, reverse)`, which makes the two operands of a binary op, where it needs more than
    the default (a Python scalar becomes `const_like`; no broadcasting, no promotion: the IR's rule). Each named op
    has the IR's semantics (`/` is FDIV, `//` and `%` round like C); a class with other numerics (Tensor: Python's
    rounding, true division of ints) overrides that op, and every operator follows.

        class UOp(ElementwiseMixin): ...   # x + 1, x < y, (x < 3).where(x, 0), x.maximum(0), ~x, x ** 2
    """

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def dtype(self) -> DType: ...

    # *** primitives ***
    def alu(self, op: Ops, *srcs: Self) -> Self:
        raise NotImplementedError(f"{type(self).__name__} must implement alu")

    def const_like(self, value: Any) -> Self:
        raise NotImplementedError(f"{type(self).__name__} must implement const_like")

    def _scalar(self, value: Any) -> Self:
        raise NotImplementedError(f"{type(self).__name__} must implement _scalar")

    def _broadcasted(self, x: Any, reverse: bool = False) -> tuple[Self, Self]:
        """(self, x) as the operands of a binary op ((x, self) when `reverse`)."""
        y = x if isinstance(x, type(self)) else self.const_like(x)
        return (y, self) if reverse else (self, y)

    def _binop(self, op: Ops, x: Any, reverse: bool = False) -> Self:
        a, b = self._broadcasted(x, reverse)
        return a.alu(op, b)

    # *** arithmetic ***
    def add(self, x: Any, reverse: bool = False) -> Self:
        """self + x (x + self when `reverse`)."""
        return self._binop(Ops.ADD, x, reverse)

    def mul(self, x: Any, reverse: bool = False) -> Self:
        """self * x (x * self when `reverse`)."""
        return self._binop(Ops.MUL, x, reverse)

    def sub(self, x: Any, reverse: bool = False) -> Self:
        """self - x (x - self when `reverse`): an add of the negation."""
        if reverse:
            neg = -self  # negated in its own dtype, before x is seen
            return self._broadcasted(x, True)[0] + neg
        return self + (-self._broadcasted(x)[1])

    def neg(self) -> Self:
        """-x (`logical_not` on bool)."""
        return self.logical_not() if self.dtype == dtypes.bool else self * -1

    def div(self, x: Any, reverse: bool = False) -> Self:
        """self / x (x / self when `reverse`): FDIV."""
        return self._binop(Ops.FDIV, x, reverse)

    def _floordiv(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.IDIV, x, reverse)  # C's: toward zero

    def _mod(self, x: Any, reverse: bool = False) -> Self:
        return self._binop(Ops.MOD, x, reverse)  # C's: the sign of the dividend

    def pow(self, exponent: Any) -> Self:
        """self ** exponent."""
        return self._binop(Ops.POW, exponent)

    def maximum(self, x: Any) -> Self:
        """The larger of self and x, elementwise."""
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Any) -> Self:
        """The smaller of self and x, elementwise: -max(-a, -b), or a select where negation wraps (bool, unsigned)."""
        a, b = self._broadcasted(x)
        if a.dtype == dtypes.bool or dtypes.is_unsigned(a.dtype):
            return (b < a).where(b, a)
        return -((-a).maximum(-b))

    def where(self, x: Any, y: Any) -> Self:
        """x where self is true, else y. A scalar branch takes the other branch's dtype (its own when both are)."""
        if isinstance(x, type(self)):
            a, b = x._broadcasted(y)
        elif isinstance(y, type(self)):
            b, a = y._broadcasted(x)
        else:
            a, b = self._scalar(x)._broadcasted(y)
        return self.alu(Ops.WHERE, a, b)

    # *** comparisons (== and != stay identity on UOp, which is hash-consed: eq/ne build the op) ***
    def eq(self, x: Any) -> Self:
        return self._binop(Ops.CMPEQ, x)

    def ne(self, x: Any) -> Self:
        return self._binop(Ops.CMPNE, x)

    def logical_not(self) -> Self:
        return self.alu(Ops.XOR, self.const_like(True))

    # *** bits: every bitwise op and shift goes through _bitwise, where a class checks its operands ***
    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Self:
        return self._binop(op, x, reverse)

    def bitwise_and(self, x: Any) -> Self:
        """Elementwise `&` of int or bool values."""
        return self._bitwise(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Self:
        """Elementwise `|` of int or bool values."""
        return self._bitwise(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Self:
        """Elementwise `^` of int or bool values."""
        return self._bitwise(Ops.XOR, x)

    def bitwise_not(self) -> Self:
        """Elementwise `~`: logical not on bool, all bits flipped on ints."""
        if dtypes.is_float(self.dtype):
            raise TypeError(f"bitwise_not: the tensor must be int or bool, got {self.dtype!r}")
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self ^ (dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)

    def lshift(self, x: Any) -> Self:
        """x << bits, on ints."""
        return self._bitwise(Ops.SHL, x)

    def rshift(self, x: Any) -> Self:
        """x >> bits (arithmetic on signed ints)."""
        return self._bitwise(Ops.SHR, x)

    # *** unary ***
    def exp2(self) -> Self:
        return self.alu(Ops.EXP2)

    def log2(self) -> Self:
        return self.alu(Ops.LOG2)

    def sin(self) -> Self:
        return self.alu(Ops.SIN)

    def sqrt(self) -> Self:
        return self.alu(Ops.SQRT)

    def reciprocal(self) -> Self:
        return self.alu(Ops.RECIPROCAL)

    def trunc(self) -> Self:
        return self.alu(Ops.TRUNC)

    # *** the operators ***
    def __add__(self, x: Any) -> Self: return self._binop(Ops.ADD, x)
    def __radd__(self, x: Any) -> Self: return self._binop(Ops.ADD, x, True)
    def __mul__(self, x: Any) -> Self: return self._binop(Ops.MUL, x)
    def __rmul__(self, x: Any) -> Self: return self._binop(Ops.MUL, x, True)
    def __sub__(self, x: Any) -> Self: return self.sub(x)
    def __rsub__(self, x: Any) -> Self: return self.sub(x, True)
    def __neg__(self) -> Self: return self.neg()
    def __truediv__(self, x: Any) -> Self: return self.div(x)
    def __rtruediv__(self, x: Any) -> Self: return self.div(x, True)
    def __floordiv__(self, x: Any) -> Self: return self._floordiv(x)
    def __rfloordiv__(self, x: Any) -> Self: return self._floordiv(x, True)
    def __mod__(self, x: Any) -> Self: return self._mod(x)
    def __rmod__(self, x: Any) -> Self: return self._mod(x, True)
    def __pow__(self, x: Any) -> Self: return self.pow(x)
    def __rpow__(self, x: Any) -> Self: return self._broadcasted(x, True)[0].pow(self)
    def __lt__(self, x: Any) -> Self: return self._binop(Ops.CMPLT, x)
    def __gt__(self, x: Any) -> Self: return self._binop(Ops.CMPLT, x, True)
    def __ge__(self, x: Any) -> Self: return self._not_less(x)
    def __le__(self, x: Any) -> Self: return self._not_less(x, True)

    def _not_less(self, x: Any, reverse: bool = False) -> Self:
        """a >= b (b >= a when `reverse`): not (a < b), but a NaN compares False as in IEEE, numpy and PyTorch, so on
        floats it is (a > b) or (a == b)."""
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return (b < a).alu(Ops.OR, a.eq(b))
        return (a < b).logical_not()
    def __and__(self, x: Any) -> Self: return self._bitwise(Ops.AND, x)
    def __rand__(self, x: Any) -> Self: return self._bitwise(Ops.AND, x, True)
    def __or__(self, x: Any) -> Self: return self._bitwise(Ops.OR, x)
    def __ror__(self, x: Any) -> Self: return self._bitwise(Ops.OR, x, True)
    def __xor__(self, x: Any) -> Self: return self._bitwise(Ops.XOR, x)
    def __rxor__(self, x: Any) -> Self: return self._bitwise(Ops.XOR, x, True)
    def __invert__(self) -> Self: return self.bitwise_not()
    def __lshift__(self, x: Any) -> Self: return self._bitwise(Ops.SHL, x)
    def __rlshift__(self, x: Any) -> Self: return self._bitwise(Ops.SHL, x, True)
    def __rshift__(self, x: Any) -> Self: return self._bitwise(Ops.SHR, x)
    def __rrshift__(self, x: Any) -> Self: return self._bitwise(Ops.SHR, x, True)
