import math

import numpy as np
import pytest

from ember.uops import Ops, UOp, dtypes, exec_alu, graph_rewrite, render_expr, symbolic, to_numpy_dtype

x = UOp.variable("x", 0, 100)
y = UOp.variable("y", 0, 7)
s = UOp.variable("s", -20, 20)


def c(v, dt=dtypes.index):
    return UOp.const(dt, v)


# *** reference semantics: exec_alu against numpy ***
INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64]


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_int_ops_wrap_like_numpy(dt):
    npdt = to_numpy_dtype(dt)
    rng = np.random.default_rng(0)
    info = np.iinfo(npdt)
    a = rng.integers(info.min, info.max, 200, dtype=npdt, endpoint=True)
    b = rng.integers(info.min, info.max, 200, dtype=npdt, endpoint=True)
    b[b == 0] = 1
    with np.errstate(all="ignore"):
        expect = {Ops.ADD: a + b, Ops.MUL: a * b, Ops.MAX: np.maximum(a, b), Ops.AND: a & b, Ops.OR: a | b,
                  Ops.XOR: a ^ b, Ops.CMPLT: a < b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b,
                  Ops.MOD: np.fmod(a, b)}  # C remainder: sign of the dividend
    for op, want in expect.items():
        out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
        got = [exec_alu(op, out_dt, (int(p), int(q))) for p, q in zip(a, b)]
        assert got == want.tolist(), op


def test_int_division_truncates_toward_zero():
    assert exec_alu(Ops.IDIV, dtypes.int32, (-7, 2)) == -3
    assert exec_alu(Ops.IDIV, dtypes.int32, (7, -2)) == -3
    assert exec_alu(Ops.MOD, dtypes.int32, (-7, 2)) == -1
    assert exec_alu(Ops.MOD, dtypes.int32, (7, -2)) == 1
    assert exec_alu(Ops.IDIV, dtypes.int32, (-(2**31), -1)) == -(2**31)  # wraps like the hardware result
    assert exec_alu(Ops.IDIV, dtypes.int32, (1, 0)) is None  # undefined: not folded
    assert exec_alu(Ops.NEG, dtypes.int8, (-128,)) == -128
    assert exec_alu(Ops.SHL, dtypes.uint8, (0xF0, 2)) == 0xC0
    assert exec_alu(Ops.SHR, dtypes.int8, (-8, 1)) == -4


def test_float32_ops_are_ieee_single():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(300).astype(np.float32) * 100
    b = rng.standard_normal(300).astype(np.float32)
    with np.errstate(all="ignore"):
        cases = {Ops.ADD: (a + b, (a, b)), Ops.MUL: (a * b, (a, b)), Ops.FDIV: (a / b, (a, b)),
                 Ops.SQRT: (np.sqrt(np.abs(a)), (np.abs(a),)), Ops.RECIPROCAL: (np.float32(1) / b, (b,)),
                 Ops.MAX: (np.maximum(a, b), (a, b)), Ops.TRUNC: (np.trunc(a), (a,)), Ops.NEG: (-a, (a,))}
    for op, (want, args) in cases.items():
        got = np.array([exec_alu(op, dtypes.float32, tuple(float(v[i]) for v in args)) for i in range(300)],
                       dtype=np.float32)
        np.testing.assert_array_equal(got, want, err_msg=str(op))
    for op, fn in ((Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin)):
        args = np.abs(b) + 0.01 if op is Ops.LOG2 else b * 4
        got = np.array([exec_alu(op, dtypes.float32, (float(v),)) for v in args], dtype=np.float32)
        np.testing.assert_allclose(got, fn(args), rtol=1e-6, atol=1e-7, err_msg=str(op))


def test_float_special_values():
    inf, nan = math.inf, math.nan
    assert exec_alu(Ops.FDIV, dtypes.float32, (1.0, 0.0)) == inf
    assert exec_alu(Ops.FDIV, dtypes.float32, (1.0, -0.0)) == -inf
    assert math.isnan(exec_alu(Ops.FDIV, dtypes.float32, (0.0, 0.0)))
    assert exec_alu(Ops.RECIPROCAL, dtypes.float32, (-0.0,)) == -inf
    assert exec_alu(Ops.LOG2, dtypes.float32, (0.0,)) == -inf
    assert math.isnan(exec_alu(Ops.LOG2, dtypes.float32, (-1.0,)))
    assert math.isnan(exec_alu(Ops.SQRT, dtypes.float32, (-1.0,)))
    assert exec_alu(Ops.EXP2, dtypes.float32, (200.0,)) == inf  # overflows float32
    assert exec_alu(Ops.EXP2, dtypes.float64, (200.0,)) == 2.0**200
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (nan, 1.0)))
    assert exec_alu(Ops.CMPNE, dtypes.bool, (nan, nan)) is True
    assert exec_alu(Ops.CMPLT, dtypes.bool, (nan, 1.0)) is False
    assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 65504.0)) == inf
    assert exec_alu(Ops.CAST, dtypes.int32, (-2.7,)) == -2
    assert exec_alu(Ops.CAST, dtypes.uint8, (300,)) == 44
    assert exec_alu(Ops.CAST, dtypes.int32, (nan,)) is None
    assert exec_alu(Ops.CAST, dtypes.bool, (0.5,)) is True


# *** constant folding and identities ***
def test_constant_folding_every_alu_op():
    i, f = dtypes.int32, dtypes.float32
    cases = [
        (c(7, i) + c(-9, i), c(-2, i)), (c(7, i) * c(6, i), c(42, i)), (c(-7, i) // c(2, i), c(-3, i)),
        (c(-7, i) % c(2, i), c(-1, i)), (c(7, i).maximum(c(9, i)), c(9, i)), (c(7, i) < c(9, i), c(True, dtypes.bool)),
        (c(7, i).ne(c(7, i)), c(False, dtypes.bool)), (c(7, i).eq(c(7, i)), c(True, dtypes.bool)),
        (c(6, i) & c(3, i), c(2, i)), (c(6, i) | c(3, i), c(7, i)), (c(6, i) ^ c(3, i), c(5, i)),
        (c(1, i) << c(4, i), c(16, i)), (c(-16, i) >> c(2, i), c(-4, i)),
        (c(2**30, i) * c(4, i), c(0, i)),  # int32 wraps
        (c(1.0, f) / c(3.0, f), c(float(np.float32(1) / np.float32(3)), f)),
        (c(2.0, f).sqrt(), c(float(np.sqrt(np.float32(2))), f)), (c(3.0, f).exp2(), c(8.0, f)),
        (c(8.0, f).log2(), c(3.0, f)), (c(0.0, f).sin(), c(0.0, f)), (c(4.0, f).reciprocal(), c(0.25, f)),
        (c(-2.5, f).trunc(), c(-2.0, f)), (c(2.0, f).pow(c(10.0, f)), c(1024.0, f)), (-c(2.0, f), c(-2.0, f)),
        (c(True, dtypes.bool).where(c(1.0, f), c(2.0, f)), c(1.0, f)),
        (c(3.9, f).cast(dtypes.int32), c(3, i)), (c(-1, i).cast(dtypes.uint8), c(255, dtypes.uint8)),
    ]
    for expr, want in cases:
        assert expr.simplify() is want, render_expr(expr)


def test_identities():
    assert (x * 1).simplify() is x
    assert (x + 0).simplify() is x
    assert (x * 0).simplify() is c(0)
    assert (x // 1).simplify() is x
    assert (x % 1).simplify() is c(0)
    assert (x - x).simplify() is c(0)
    assert ((x * 3) + (x * 4)).simplify() is x * 7
    assert (x + (x * 4)).simplify() is x * 5
    assert (((x + 3) + y) + 5).simplify() is (x + y) + 8
    assert ((x * 3) * 5).simplify() is x * 15
    assert (UOp.const(dtypes.index, 3) + x).simplify() is x + 3  # constants go right
    b = x < 5
    assert (b & True).simplify() is b and (b | False).simplify() is b and (b ^ False).simplify() is b
    assert (b & False).simplify() is c(False, dtypes.bool) and (b | True).simplify() is c(True, dtypes.bool)
    assert x.maximum(x).simplify() is x
    assert b.where(x, x).simplify() is x
    f = UOp.variable("f", 0, 10, dtypes.int32).cast(dtypes.float32)
    assert (f * 1.0).simplify() is f
    assert (f * 0.0).simplify() is f * 0.0  # not folded: nan*0 and inf*0 are nan
    assert (f + 0.0).simplify() is f + 0.0  # not folded: -0.0 + 0.0 is +0.0


def test_range_analysis_folds():
    assert ((x * 4 + 3) // 4).simplify() is x
    assert ((x * 4 + 3) % 4).simplify() is c(3)
    assert ((x + 8) % 4).simplify() is x % 4
    assert ((x + 8) // 4).simplify() is x // 4 + 2
    assert (x < 101).simplify() is c(True, dtypes.bool)
    assert (x < 0).simplify() is c(False, dtypes.bool)
    assert (x < 100).simplify() is (x < 100)
    assert (y // 8).simplify() is c(0) and (y % 8).simplify() is y
    assert ((x * 6 + y * 2) // 2).simplify() is x * 3 + y
    assert ((x // 4) // 5).simplify() is x // 20
    assert ((x % 12) % 4).simplify() is x % 4
    assert x.maximum(y + 101).simplify() is y + 101
    assert ((x // 4) * 4 + x % 4).simplify() is x
    assert (((x // 4) % 5) * 4 + x % 4).simplify() is x % 20
    # reshape (4, 25) -> (100,) -> (4, 25) index math collapses back
    r0, r1 = UOp.range(4, 0), UOp.range(25, 1)
    flat = r0 * 25 + r1
    assert (flat // 25).simplify() is r0 and (flat % 25).simplify() is r1


def test_negative_numerators_left_alone():
    # C division of a possibly negative value: (s*4+3)//4 is not s for s < 0 (e.g. s=-1: -1//4 == 0)
    e = (s * 4 + 3) // 4
    got = e.simplify()
    for v in range(-20, 21):
        assert got.evaluate({s: v}) == e.evaluate({s: v})
    assert got is not s


def test_symbolic_is_a_pattern_matcher():
    assert graph_rewrite((x + 0) * 1, symbolic) is x


def test_simplify_given_valid_pad_index():
    from ember.uops import simplify_given_valid, view_index

    buf = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="CPU")), 24)
    view = buf.reshape((4, 6)).permute((1, 0)).reshape((6, 4)).permute((1, 0)).pad(((1, 0), (0, 2)))
    r0, r1 = UOp.range(5, 0), UOp.range(8, 1)
    _, (flat,), valid = view_index(view, (r0, r1))
    got = simplify_given_valid(flat, valid)
    assert got is r0 * 6 + r1 + -6
    for a in range(5):
        for b in range(8):
            if valid.evaluate({r0: a, r1: b}):
                assert got.evaluate({r0: a, r1: b}) == flat.evaluate({r0: a, r1: b}) == (a - 1) * 6 + b
    assert simplify_given_valid(x + 0, None) is x


def test_onehot_reduce_collapses_to_a_gated_gather():
    """sum over r < 8 of (y == r) * w[r*4 + j] is w[y*4 + j] where 0 <= y < 8: a gather whose load is gated (an
    out-of-range y reads nothing), for the product form, the where form, and with other factors; the sum stays a sum
    when y depends on r or the reduce is not a sum."""
    from ember.uops import AxisType, pm_reduce_collapse

    w = UOp(Ops.PARAM, dtypes.float32.ptr(32), (), 0)
    ids = UOp(Ops.PARAM, dtypes.int32.ptr(4), (), 1)
    r, j = UOp.range(8, 0, AxisType.REDUCE), UOp.range(4, 1, AxisType.GLOBAL)
    y = ids.index(j).load()
    wr = w.index(r * 4 + j).load()
    hit = y.alu(Ops.CMPEQ, r.cast(dtypes.int32))
    forms = [hit.cast(dtypes.float32) * wr, hit.where(wr, UOp.const(dtypes.float32, 0.0)),
             (wr * 2.0) * hit.cast(dtypes.float32)]
    for x in forms:
        out = graph_rewrite(UOp(Ops.REDUCE, dtypes.float32, (x, r), Ops.ADD), pm_reduce_collapse)
        assert Ops.REDUCE not in {u.op for u in out.toposort()} and out.op is Ops.WHERE
        (gather,) = [u for u in out.toposort() if u.op is Ops.INDEX and u.src[0] is w]
        assert len(gather.src) == 3 and y in gather.src[1].toposort() and r not in gather.toposort()
    keep = [UOp(Ops.REDUCE, dtypes.float32, (forms[0], r), Ops.MAX),
            UOp(Ops.REDUCE, dtypes.float32, (forms[0].substitute({y: y + r.cast(dtypes.int32)}), r), Ops.ADD)]
    for red in keep:
        assert graph_rewrite(red, pm_reduce_collapse).op is Ops.REDUCE


def test_reduce_of_a_reduce_merges():
    """A sum over b of a sum over a is one sum over (a, b): one accumulator. Different ops stay nested."""
    from ember.uops import AxisType, pm_reduce_collapse

    x = UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 0)
    a, b = UOp.range(8, 0, AxisType.REDUCE), UOp.range(8, 1, AxisType.REDUCE)
    inner = UOp(Ops.REDUCE, dtypes.float32, (x.index(a * 8 + b).load(), a), Ops.ADD)
    out = graph_rewrite(UOp(Ops.REDUCE, dtypes.float32, (inner, b), Ops.ADD), pm_reduce_collapse)
    assert out.op is Ops.REDUCE and out.src[1:] == (a, b) and out.src[0].op is Ops.LOAD
    mixed = UOp(Ops.REDUCE, dtypes.float32, (inner, b), Ops.MAX)
    assert graph_rewrite(mixed, pm_reduce_collapse) is mixed
