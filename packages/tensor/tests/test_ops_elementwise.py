"""Elementwise ops of the full Tensor API against PyTorch (CPU), on the CPU and PYTHON devices."""

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes

# the small cases' device: the reference interpreter, or another backend (EMBER_TEST_SMALL_DEVICE=AMD with
# MOCKGPU=1: tests/test_amd_tensor_suite.py)
SMALL = os.environ.get("EMBER_TEST_SMALL_DEVICE", "PYTHON")

# the PYTHON device interprets every element: small shapes there
CASES = [("CPU", (33, 7)), ("CPU", (1, 5)), ("CPU", ()), (SMALL, (3, 5))]


def check(got, want, rtol=1e-5, atol=1e-6):
    g, w = got.numpy(), want.detach().numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def normal(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# name -> (ember, torch, input transform (domain), rtol, atol)
UNARY = {
    "exp": (lambda x: x.exp(), torch.exp, None, 1e-5, 1e-6),
    "log": (lambda x: x.log(), torch.log, np.abs, 1e-5, 1e-6),
    "exp2": (lambda x: x.exp2(), torch.exp2, None, 1e-5, 1e-6),
    "log2": (lambda x: x.log2(), torch.log2, np.abs, 1e-5, 1e-6),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt, np.abs, 1e-6, 1e-6),
    "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt, lambda a: np.abs(a) + 0.1, 1e-5, 1e-6),
    "sin": (lambda x: x.sin(), torch.sin, None, 1e-5, 1e-6),
    "cos": (lambda x: x.cos(), torch.cos, None, 1e-5, 1e-6),
    "tan": (lambda x: x.tan(), torch.tan, lambda a: np.clip(a, -1.4, 1.4), 1e-5, 1e-5),
    "abs": (lambda x: x.abs(), torch.abs, None, 0, 0),
    "sign": (lambda x: x.sign(), torch.sign, lambda a: np.where(np.abs(a) < 0.3, 0, a).astype(np.float32), 0, 0),
    "neg": (lambda x: x.neg(), torch.neg, None, 0, 0),
    "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal, None, 1e-6, 1e-6),
    "relu": (lambda x: x.relu(), torch.relu, None, 0, 0),
    "leaky_relu": (lambda x: x.leaky_relu(0.2), lambda t: F.leaky_relu(t, 0.2), None, 1e-6, 1e-7),
    "gelu": (lambda x: x.gelu(), F.gelu, lambda a: a * 3, 1e-5, 1e-6),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), lambda t: F.gelu(t, approximate="tanh"), lambda a: a * 3,
                  1e-5, 1e-6),
    "silu": (lambda x: x.silu(), F.silu, lambda a: a * 3, 1e-5, 1e-6),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid, lambda a: a * 3, 1e-5, 1e-6),
    "tanh": (lambda x: x.tanh(), torch.tanh, lambda a: a * 3, 1e-5, 1e-6),
    "softplus": (lambda x: x.softplus(), F.softplus, lambda a: a * 10, 1e-5, 1e-6),
    "softplus_beta": (lambda x: x.softplus(2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0), lambda a: a * 5, 1e-5, 1e-6),
    "erf": (lambda x: x.erf(), torch.erf, lambda a: a * 2, 0, 1e-6),
    "mish": (lambda x: x.mish(), F.mish, lambda a: a * 3, 1e-5, 1e-6),
    "elu": (lambda x: x.elu(), F.elu, None, 1e-5, 1e-6),
    "floor": (lambda x: x.floor(), torch.floor, lambda a: a * 5, 0, 0),
    "ceil": (lambda x: x.ceil(), torch.ceil, lambda a: a * 5, 0, 0),
    "trunc": (lambda x: x.trunc(), torch.trunc, lambda a: a * 5, 0, 0),
    "round": (lambda x: x.round(), torch.round, lambda a: np.round(a * 8) / 2, 0, 0),  # many exact halves
    "square": (lambda x: x.square(), torch.square, None, 1e-6, 0),
    "clip": (lambda x: x.clip(-0.5, 0.7), lambda t: t.clip(-0.5, 0.7), None, 0, 0),
    "clip_min": (lambda x: x.clip(0.1), lambda t: t.clip(0.1), None, 0, 0),
}


@pytest.mark.parametrize("dev, shape", CASES)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(dev, shape, op):
    fn, tfn, domain, rtol, atol = UNARY[op]
    a = normal(shape, 1)
    if domain is not None:
        a = np.asarray(domain(a), dtype=np.float32)
    check(fn(Tensor(a, dev)), tfn(torch.tensor(a)), rtol, atol)


@pytest.mark.parametrize("dev", ["CPU", SMALL])
def test_special_values(dev):
    v = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 3.0, -0.0, 1e8, 7.5]
    check(Tensor(v, dev).round(), torch.tensor(v).round())
    check(Tensor(v, dev).floor(), torch.tensor(v).floor())
    check(Tensor(v, dev).ceil(), torch.tensor(v).ceil())
    s = [math.nan, math.inf, -math.inf, 0.0, -2.0, 3.5]
    for name in ("isnan", "isinf", "isfinite"):
        check(getattr(Tensor(s, dev), name)(), getattr(torch.tensor(s), name)())
    check(Tensor(s, dev).sign(), torch.tensor(s).sign())
    check(Tensor([-30.0, 30.0, 0.0], dev).erf(), torch.erf(torch.tensor([-30.0, 30.0, 0.0])), atol=1e-7)
    check(Tensor([-100.0, 100.0], dev).softplus(), F.softplus(torch.tensor([-100.0, 100.0])), atol=1e-7)
    check(Tensor([1, -2, 0], dev).isnan(), torch.tensor([1, -2, 0]).isnan())


@pytest.mark.parametrize("dev", ["CPU", SMALL])
def test_pow(dev):
    a, b = normal((4, 5), 1) * 2, normal((4, 5), 2)
    ta, tb = torch.tensor(a), torch.tensor(b)
    check(Tensor(a, dev).abs() ** Tensor(b, dev), ta.abs() ** tb, 1e-5, 1e-6)
    check(Tensor(a, dev) ** 3, ta**3, 1e-5, 1e-6)
    check(Tensor(a, dev) ** 2.0, ta**2.0, 1e-5, 1e-6)
    check(Tensor(a, dev).pow(-2), ta.pow(-2), 1e-5, 1e-5)
    check(Tensor(a, dev) ** 0.5, ta**0.5, 1e-5, 1e-6)  # negative bases: NaN, as torch
    check(Tensor(a, dev).pow(Tensor([3.0, -2.0, 1.0, 0.0, 5.0], dev)), ta.pow(torch.tensor([3.0, -2.0, 1.0, 0.0, 5.0])),
          1e-5, 1e-5)
    check(2.0 ** Tensor(b, dev), 2.0**tb, 1e-5, 1e-6)
    check(2 ** Tensor(b, dev), 2**tb, 1e-5, 1e-6)
    i = np.array([[-3, -2, 0, 1, 7]], np.int32)
    check(Tensor(i, dev) ** 3, torch.tensor(i) ** 3, 0, 0)
    check(Tensor(i, dev) ** 0, torch.tensor(i) ** 0, 0, 0)
    e = np.array([[2, 3, 1, 5, 2]], np.int32)
    check(Tensor(i, dev) ** Tensor(e, dev), torch.tensor(i) ** torch.tensor(e), 0, 0)
    check(Tensor(i, dev) ** 0.5, torch.tensor(i) ** 0.5, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="negative integer powers"):
        Tensor(i, dev) ** -1
    with pytest.raises(TypeError, match="pow: exponent must be"):
        Tensor(a, dev).pow("2")


BINARY = {
    "maximum": (lambda a, b: a.maximum(b), torch.maximum),
    "minimum": (lambda a, b: a.minimum(b), torch.minimum),
    "lt": (lambda a, b: a < b, torch.lt), "le": (lambda a, b: a <= b, torch.le),
    "gt": (lambda a, b: a > b, torch.gt), "ge": (lambda a, b: a >= b, torch.ge),
    "eq": (lambda a, b: a == b, torch.eq), "ne": (lambda a, b: a != b, torch.ne),
    "logical_and": (lambda a, b: a.logical_and(b), torch.logical_and),
    "logical_or": (lambda a, b: a.logical_or(b), torch.logical_or),
    "logical_xor": (lambda a, b: a.logical_xor(b), torch.logical_xor),
}


@pytest.mark.parametrize("dev, shape", CASES)
@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
def test_binary(dev, shape, op, kind):
    fn, tfn = BINARY[op]
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 3, shape).astype(kind)
    b = rng.integers(-3, 3, shape[-1:] if shape else ()).astype(kind)  # broadcasts over the leading dims
    check(fn(Tensor(a, dev), Tensor(b, dev)), tfn(torch.tensor(a), torch.tensor(b)), 0, 0)


@pytest.mark.parametrize("dev", ["CPU", SMALL])
def test_where_lerp_logical_not(dev):
    c, a, b = normal((3, 4), 1) > 0, normal((3, 4), 2), normal((4,), 3)
    check(Tensor(c, dev).where(Tensor(a, dev), Tensor(b, dev)), torch.where(torch.tensor(c), torch.tensor(a),
                                                                         torch.tensor(b)))
    check(Tensor(c, dev).where(1.5, Tensor(b, dev)), torch.where(torch.tensor(c), 1.5, torch.tensor(b)))
    check(Tensor(a, dev).lerp(Tensor(b, dev), 0.3), torch.lerp(torch.tensor(a), torch.tensor(b), 0.3), 1e-5, 1e-6)
    w = np.abs(normal((3, 4), 4))
    check(Tensor(a, dev).lerp(Tensor(b, dev), Tensor(w, dev)),
          torch.lerp(torch.tensor(a), torch.tensor(b), torch.tensor(w)), 1e-5, 1e-6)
    check(Tensor(a, dev).logical_not(), torch.tensor(a).logical_not())
    check(Tensor(a, dev).masked_fill(Tensor(c, dev), -1.0), torch.tensor(a).masked_fill(torch.tensor(c), -1.0))


INT_KINDS = ["int32", "uint8", "int64", "bool"]


@pytest.mark.parametrize("dev", ["CPU", SMALL])
@pytest.mark.parametrize("kind", INT_KINDS)
def test_bitwise(dev, kind):
    rng = np.random.default_rng(4)
    lo, hi = (0, 2) if kind == "bool" else (0, 200) if kind == "uint8" else (-1000, 1000)
    a, b = rng.integers(lo, hi, (3, 5)).astype(kind), rng.integers(lo, hi, (5,)).astype(kind)
    x, y, tx, ty = Tensor(a, dev), Tensor(b, dev), torch.tensor(a), torch.tensor(b)
    check(x & y, tx & ty, 0, 0)
    check(x | y, tx | ty, 0, 0)
    check(x ^ y, tx ^ ty, 0, 0)
    check(~x, ~tx, 0, 0)
    check(x.bitwise_and(y), tx.bitwise_and(ty), 0, 0)
    check(x.bitwise_not(), tx.bitwise_not(), 0, 0)
    if kind != "bool":
        check(x & 6, tx & 6, 0, 0)
        check(x << 2, tx << 2, 0, 0)
        check(x >> 3, tx >> 3, 0, 0)  # arithmetic on signed ints, as torch


def test_bitwise_errors():
    f, i = Tensor([1.0, 2.0]), Tensor([1, 2])
    with pytest.raises(TypeError, match="bitwise_and: operands must be int or bool"):
        f & i
    with pytest.raises(TypeError, match="bitwise_or: operands must be int or bool"):
        i | 1.5
    with pytest.raises(TypeError, match="bitwise_not: the tensor must be int or bool"):
        _ = ~f
    with pytest.raises(TypeError, match="left_shift: operands must be ints"):
        f << 1
    with pytest.raises(TypeError, match="right_shift: operands must be ints"):
        Tensor([True]) >> 1


def test_argument_errors():
    x = Tensor([1.0, -1.0])
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'fast'"):
        x.gelu(approximate="fast")
    with pytest.raises(ValueError, match="clip: at least one of min_ and max_"):
        x.clip()
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool Tensor"):
        x.masked_fill(x, 0.0)


def test_int_inputs_become_float():
    i = np.array([1, 4, 9], np.int32)
    for name in ("exp", "log", "sqrt", "sin", "cos", "rsqrt", "sigmoid", "erf"):
        got = getattr(Tensor(i), name)()
        assert got.dtype == dtypes.float32, name
        np.testing.assert_allclose(got.numpy(), getattr(torch, name)(torch.tensor(i)).numpy(), rtol=1e-5, atol=1e-6)
    check(Tensor(i).floor(), torch.tensor(i).floor())
    check(Tensor(i).sign(), torch.tensor(i).sign())
    check(Tensor(i).abs(), torch.tensor(i).abs())


@pytest.mark.parametrize("dev", ["CPU", SMALL])
@pytest.mark.parametrize("kind", ["int32", "float32"])
def test_floordiv_mod(dev, kind):
    a = np.array([[7, -7, 7, -7, 0, 5, -1]], kind)
    b = np.array([[2, 2, -2, -2, 3, 5, 4]], kind)
    x, y, tx, ty = Tensor(a, dev), Tensor(b, dev), torch.tensor(a), torch.tensor(b)
    check(x // y, tx // ty, 1e-6, 1e-6)
    check(x % y, tx % ty, 1e-6, 1e-6)
    check(x // 3, tx // 3, 1e-6, 1e-6)
    check(x % -3, tx % -3, 1e-6, 1e-6)
    check(10 // y, 10 // ty, 1e-6, 1e-6)
    check(x.floor_divide(y), tx.floor_divide(ty), 1e-6, 1e-6)
    check(x.remainder(y), tx.remainder(ty), 1e-6, 1e-6)


def test_named_ops_match_the_operators():
    # the operators come from ember.uops.ElementwiseMixin: each named op is its operator, reflected with reverse=True
    a, b = normal((3, 4), 5), normal((4,), 6)
    x, y, tx, ty = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
    check(x.add(y), tx + ty)
    check(x.sub(2.0, reverse=True), 2.0 - tx)
    check(x.mul(3), tx * 3)
    check(x.div(y, reverse=True), ty / tx, 1e-6, 1e-6)
    check(x.eq(x), tx == tx)
    check(x.ne(y), tx != ty)
    with pytest.raises(TypeError, match="neg: negation of a bool tensor is not allowed"):
        1 - Tensor([True])


@pytest.mark.parametrize("device", ["CPU", SMALL])
@pytest.mark.parametrize("npdt", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_division_never_traps(device, npdt):
    """x // 0 and x % 0 are 0 and MIN // -1 is MIN (numpy's results; C traps on them, SIGFPE on x86), the same on
    every device; everything else is Python's floor division. Random values with the edge cases mixed in."""
    info = np.iinfo(npdt)
    rng = np.random.default_rng(int(info.bits))
    edges = [0, 1, info.min, info.max] + ([-1] if info.min < 0 else [])
    a = np.concatenate([rng.integers(info.min, info.max, 200, dtype=npdt, endpoint=True),
                        np.array(edges * len(edges), npdt)])
    b = np.concatenate([rng.integers(info.min, info.max, 200, dtype=npdt, endpoint=True),
                        np.array([e for e in edges for _ in edges], npdt)])
    b[:40] = 0  # plenty of zero divisors among the random values
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((ta // tb).numpy(), want_q)
    np.testing.assert_array_equal((ta % tb).numpy(), want_r)
    for k in (3, -3, 0, -1) if info.min < 0 else (3, 0):  # Python int divisors: the guard only where they trap
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal((ta // k).numpy(), np.floor_divide(a, npdt(k)))
            np.testing.assert_array_equal((ta % k).numpy(), np.remainder(a, npdt(k)))


def test_bad_shapes_and_empty_reductions_are_clear_errors():
    with pytest.raises(ValueError, match=r"empty: shape must be non-negative ints, got \(-5,\)"):
        Tensor.empty(-5)
    for op in ("max", "min"):  # no identity: torch and numpy raise too
        with pytest.raises(ValueError, match=rf"{op}: cannot reduce over dim 0 of size 0 \(shape \(0, 3\)\)"):
            getattr(Tensor.zeros(0, 3), op)(axis=0)
        with pytest.raises(ValueError, match=rf"{op}: cannot reduce over dim 0 of size 0"):
            getattr(Tensor.zeros(0), op)()
    assert Tensor.zeros(0, 3).max(axis=1).shape == (0,)  # over a non-empty axis: an empty result, fine
    x = Tensor(np.arange(12.0).reshape(3, 4))
    with pytest.raises(IndexError, match=r"the shape of the mask \(2,\) at index 0 does not match the shape of the "
                                         r"indexed tensor \(3, 4\) at index 0"):
        x[Tensor([True, False])]
    with pytest.raises(IndexError, match=r"mask \(3,\) at index 1 does not match"):
        x[..., Tensor([True, False, True])]
    np.testing.assert_array_equal(x[..., Tensor([True, False, True, False])].numpy(), x.numpy()[..., [0, 2]])
    np.testing.assert_array_equal(x[1:, Tensor([False, True, True, False])].numpy(), x.numpy()[1:, [1, 2]])


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("npdt", [np.int32, np.int64])
def test_integer_division_property(device, npdt):
    """Property (hypothesis): for any int32/int64 values, 0 and MIN included, x // y and x % y are numpy's floor
    division and remainder, with x // 0 = x % 0 = 0 and MIN // -1 = MIN (the documented results), on CPU and PYTHON."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    info = np.iinfo(npdt)
    value = st.one_of(st.sampled_from([0, -1, 1, int(info.min), int(info.max)]),
                      st.integers(int(info.min), int(info.max)))
    pairs = st.lists(st.tuples(value, value), min_size=8, max_size=8)  # one shape: one kernel, compiled once

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(pairs)
    def check(xy):
        a, b = (np.array(v, npdt) for v in zip(*xy))
        with np.errstate(all="ignore"):
            want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
        ta, tb = Tensor(a, device=device), Tensor(b, device=device)
        np.testing.assert_array_equal((ta // tb).numpy(), want_q)
        np.testing.assert_array_equal((ta % tb).numpy(), want_r)

    check()
