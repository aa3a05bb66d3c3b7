"""ElementwiseMixin: the operators built from a class's primitives, on UOp and on a minimal class of Python values."""

from __future__ import annotations

import operator
from typing import Any

import pytest

from ember.uops import DType, ElementwiseMixin, Ops, UOp, dtypes, exec_alu


class Val(ElementwiseMixin):
    """A Python value and its dtype: only the primitives, every operator from the mixin."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: Any, dtype: DType):
        self.value, self.dtype = value, dtype

    def alu(self, op: Ops, *srcs: Val) -> Val:
        out = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else srcs[-1].dtype if op is Ops.WHERE else \
            self.dtype
        return Val(exec_alu(op, out, (self.value, *(s.value for s in srcs))), out)

    def const_like(self, value: Any) -> Val:
        return Val(value, self.dtype)

    def _scalar(self, value: Any) -> Val:
        return Val(value, dtypes.from_py(value))


@pytest.mark.parametrize("fn, a, b, expected", [
    (operator.add, 7, 2, 9), (operator.sub, 7, 2, 5), (operator.mul, 7, 2, 14),
    (operator.floordiv, -7, 2, -3), (operator.mod, -7, 2, -1),  # the IR's rounding: C's, toward zero
    (operator.and_, 6, 3, 2), (operator.or_, 6, 3, 7), (operator.xor, 6, 3, 5), (operator.lshift, 3, 2, 12),
    (operator.rshift, -8, 1, -4), (operator.pow, 3, 2, 9),
    (operator.lt, 1, 2, True), (operator.gt, 1, 2, False), (operator.le, 2, 2, True), (operator.ge, 1, 2, False),
])
def test_operators_from_the_primitives(fn: Any, a: int, b: int, expected: Any) -> None:
    assert fn(Val(a, dtypes.int32), b).value == expected
    assert fn(a, Val(b, dtypes.int32)).value == expected  # the reflected operator


def test_named_ops_from_the_primitives() -> None:
    x = Val(5, dtypes.int32)
    assert (-x).value == -5 and (~x).value == -6 and (~Val(5, dtypes.uint8)).value == 250
    assert (~Val(True, dtypes.bool)).value is False and (-Val(True, dtypes.bool)).value is False
    assert x.maximum(9).value == 9 and x.minimum(9).value == 5 and x.eq(5).value is True and x.ne(5).value is False
    assert Val(True, dtypes.bool).where(x, 0).value == 5 and Val(False, dtypes.bool).where(1, 2.5).dtype == dtypes.int32
    assert (Val(7.0, dtypes.float32) / 2).value == 3.5
    with pytest.raises(TypeError, match="bitwise_not: the tensor must be int or bool, got dtypes.float32"):
        ~Val(1.0, dtypes.float32)


def test_a_class_without_primitives_says_which() -> None:
    class Bare(ElementwiseMixin):
        dtype = dtypes.int32

    with pytest.raises(NotImplementedError, match="Bare must implement const_like"):
        Bare() + 1


def test_uop_operators_build_the_ir_ops() -> None:
    x = UOp.variable("x", 0, 10)
    c = UOp.const
    assert x + 1 is UOp(Ops.ADD, dtypes.index, (x, c(dtypes.index, 1)))
    assert 1 - x is UOp(Ops.ADD, dtypes.index, (c(dtypes.index, 1), x * -1))  # the negation added, constant first
    assert x // 2 is x.alu(Ops.IDIV, c(dtypes.index, 2)) and 7 % x is c(dtypes.index, 7).alu(Ops.MOD, x)
    assert 2 ** x is c(dtypes.index, 2).alu(Ops.POW, x) and 1 << x is c(dtypes.index, 1).alu(Ops.SHL, x)
    assert (x < 3).where(x, 0) is UOp(Ops.WHERE, dtypes.index, (x < 3, x, c(dtypes.index, 0)))
    assert -(x < 3) is (x < 3).logical_not()
    assert not hasattr(x, "__dict__")  # the mixin adds no per-instance state to a hash-consed node


@pytest.mark.parametrize("dt, a, b", [(dtypes.uint8, 0, 5), (dtypes.uint8, 200, 7), (dtypes.bool, True, False),
                                      (dtypes.int32, -3, 2), (dtypes.float32, 1.5, -2.0)])
def test_uop_minimum_evaluates(dt: DType, a: Any, b: Any) -> None:
    assert UOp.const(dt, a).minimum(UOp.const(dt, b)).evaluate() == min(a, b)
