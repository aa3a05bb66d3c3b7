"""The math of the Tensor API a PyTorch or tinygrad user reaches for (issue 16): operator methods with torch's
keywords, matmul/dot/einsum in every broadcast form, activations, inverse trig and hyperbolic functions, log1p/expm1,
copysign, logaddexp, fmod. Forward and backward against PyTorch (CPU), with the tolerances stated per case."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes

TORCH_DTYPES = {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16,
                dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.uint8: torch.uint8,
                dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.float64: torch.float64}


def as_numpy(t):
    """An Ember or torch tensor as numpy (16-bit floats widened to float32, so both sides compare alike)."""
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.float().numpy() if t.dtype in (torch.float16, torch.bfloat16) else t.numpy()
    return t.float().numpy() if t.dtype in (dtypes.float16, dtypes.bfloat16) else t.numpy()


def check(got, want, rtol=1e-5, atol=1e-6):
    g, w = as_numpy(got), as_numpy(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def make(a, dtype, device="CPU", grad=False):
    ours = Tensor(a, device, dtype=dtype, requires_grad=grad or None)
    theirs = torch.tensor(a).to(TORCH_DTYPES[dtype])
    return ours, theirs.requires_grad_(grad)


def both(f, arrays, rtol=1e-5, atol=1e-6, grad_rtol=None, grad_atol=None, dtype=dtypes.float32, device="CPU",
         grad=True, g=None):
    """f(*tensors) on Ember and torch: the values, and with `grad` the gradients of sum(f * upstream)."""
    pairs = [make(a, dtype, device, grad) for a in arrays]
    out, ref = f(*(p[0] for p in pairs)), f(*(p[1] for p in pairs))
    check(out, ref, rtol, atol)
    if grad:
        up = np.random.default_rng(9).standard_normal(ref.shape).astype(np.float32)
        (out * Tensor(up, device).cast(out.dtype)).sum().backward()
        (ref * torch.tensor(up).to(ref.dtype)).sum().backward()
        for (o, t) in pairs:
            check(o.grad, t.grad, grad_rtol or rtol, grad_atol or atol)


def normal(shape, seed=0, scale=1.0, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


def uniform(shape, low, high, seed=0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


SHAPES = [(4, 5), (1,), (0, 3), ()]


# *** operator methods with torch's keywords ***
@pytest.mark.parametrize("shape", SHAPES)
def test_add_sub_mul_with_alpha(shape):
    a, b = normal(shape, 1), normal(shape, 2)
    both(lambda x, y: x.add(y, alpha=2.5), [a, b])
    both(lambda x, y: x.sub(y, alpha=-0.5), [a, b])
    both(lambda x, y: x.mul(y), [a, b])
    both(lambda x, y: x.add(y) - x.sub(y), [a, b])


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.int8])
def test_div_rounding_modes_and_mod_on_ints(dtype):
    rng = np.random.default_rng(3)
    low = 0 if dtype == dtypes.uint8 else -50
    a = rng.integers(low, 50, (6, 7))
    b = rng.integers(1 if dtype == dtypes.uint8 else -9, 9, (6, 7))
    b[b == 0] = 3
    for mode in ("trunc", "floor"):
        both(lambda x, y, m=mode: x.div(y, rounding_mode=m), [a, b], 0, 0, dtype=dtype, grad=False)
    both(lambda x, y: x.div(y), [a, b], 1e-6, 0, dtype=dtype, grad=False)
    both(lambda x, y: x.fmod(y), [a, b], 0, 0, dtype=dtype, grad=False)
    ours, theirs = make(a, dtype)
    check(ours.mod(4), theirs.remainder(4), 0, 0)
    check(ours.fmod(3), theirs.fmod(3), 0, 0)


def test_div_rounding_modes_and_fmod_on_floats():
    a, b = normal((5, 6), 1, 4), normal((5, 6), 2, 2)
    both(lambda x, y: x.div(y, rounding_mode="trunc"), [a, b], 1e-6, 1e-6, grad=False)
    both(lambda x, y: x.div(y, rounding_mode="floor"), [a, b], 1e-6, 1e-6, grad=False)
    both(lambda x, y: x.fmod(y), [a, b], 1e-5, 1e-5, grad_rtol=1e-5, grad_atol=1e-5)
    both(lambda x, y: x.mod(y) if isinstance(x, Tensor) else x.remainder(y), [a, b], 1e-5, 1e-5, grad=False)
    with pytest.raises(ValueError, match="rounding_mode to be one of None, 'trunc', or 'floor' but found 'round'"):
        Tensor([1.0]).div(2, rounding_mode="round")


# *** matmul in every broadcast form, dot, einsum, __rmatmul__ ***
MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((3,), (5, 3, 4)), ((5, 2, 3), (3,)), ((2, 1, 2, 3), (5, 3, 4)), ((1, 2, 3), (5, 3, 2)),
                 ((0, 3), (3, 2)), ((2, 0), (0, 3)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_broadcast_forms(sa, sb):
    both(lambda x, y: x @ y, [normal(sa, 1), normal(sb, 2)], 1e-5, 1e-5)


def test_matmul_dot_rmatmul_and_dtypes():
    a, b = normal((4, 3), 1), normal((3, 5), 2)
    both(lambda x, y: x.matmul(y), [a, b], 1e-5, 1e-5)
    check(Tensor(a).dot(Tensor(b)), torch.tensor(a) @ torch.tensor(b), 1e-5, 1e-5)
    check(Tensor(a[0]).dot(Tensor(a[1])), torch.dot(torch.tensor(a[0]), torch.tensor(a[1])), 1e-5, 1e-5)
    check(Tensor(b).__rmatmul__(Tensor(a)), torch.tensor(a) @ torch.tensor(b), 1e-5, 1e-5)
    check(Tensor(b).matmul(Tensor(a), reverse=True), torch.tensor(a) @ torch.tensor(b), 1e-5, 1e-5)
    ints = np.arange(12).reshape(3, 4) - 5
    both(lambda x, y: x @ y, [ints, ints.T.copy()], 0, 0, dtype=dtypes.int32, grad=False)
    both(lambda x, y: x @ y, [a, b], 2e-2, 2e-2, dtype=dtypes.float16, grad=False)
    both(lambda x, y: x @ y, [a, b], 5e-2, 5e-2, dtype=dtypes.bfloat16, grad=False)
    half = Tensor(a, dtype=dtypes.float16).matmul(Tensor(b, dtype=dtypes.float16), dtype=dtypes.float32)
    assert half.dtype == dtypes.float32
    check(half, torch.tensor(a).half().float() @ torch.tensor(b).half().float(), 1e-5, 1e-5)


@pytest.mark.parametrize("formula, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(2, 3)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]), ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),
    ("ijk->", [(2, 3, 4)]), ("i,i,i->i", [(3,), (3,), (3,)]), ("ij,j->i", [(0, 3), (3,)]),
    ("ba,ca->bc", [(2, 3), (4, 3)]),
])
def test_einsum(formula, shapes):
    arrays = [normal(s, i) for i, s in enumerate(shapes)]
    pairs = [make(a, dtypes.float32, grad=True) for a in arrays]
    out = Tensor.einsum(formula, *(p[0] for p in pairs))
    ref = torch.einsum(formula, *(p[1] for p in pairs))
    check(out, ref, 1e-5, 1e-5)
    up = normal(ref.shape, 7)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    for o, t in pairs:
        check(o.grad, t.grad, 1e-5, 1e-5)


def test_einsum_list_operands_ints_and_errors():
    a = np.arange(6).reshape(2, 3)
    check(Tensor.einsum("ij,kj->ik", [Tensor(a, dtype=dtypes.int32), Tensor(a, dtype=dtypes.int32)]),
          torch.einsum("ij,kj->ik", torch.tensor(a, dtype=torch.int32), torch.tensor(a, dtype=torch.int32)), 0, 0)
    with pytest.raises(ValueError, match="einsum: the formula 'ij,jk->ik' has 2 operands, 1 were given"):
        Tensor.einsum("ij,jk->ik", Tensor(a))
    with pytest.raises(RuntimeError, match="einsum: subscript 'j' has size 2"):
        Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(a))


# *** activations ***
ACTIVATIONS = {
    "softsign": (lambda x: x.softsign(), F.softsign, 3.0),
    "quick_gelu": (lambda x: x.quick_gelu(), lambda t: t * torch.sigmoid(1.702 * t), 3.0),
    "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid, 4.0),
    "relu6": (lambda x: x.relu6(), F.relu6, 5.0),
    "selu": (lambda x: x.selu(), F.selu, 2.0),
    "celu": (lambda x: x.celu(), F.celu, 2.0),
    "celu_alpha": (lambda x: x.celu(0.5), lambda t: F.celu(t, 0.5), 2.0),
    "hardswish": (lambda x: x.hardswish(), F.hardswish, 4.0),
    "elu": (lambda x: x.elu(0.7), lambda t: F.elu(t, 0.7), 2.0),
    "hardtanh": (lambda x: x.hardtanh(-0.5, 0.8), lambda t: F.hardtanh(t, -0.5, 0.8), 1.0),
    "relu": (lambda x: x.relu(), torch.relu, 1.0),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid, 5.0),
    "tanh": (lambda x: x.tanh(), torch.tanh, 3.0),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("shape", [(6, 7), (0,)])
def test_activations(name, shape):
    ours, theirs, scale = ACTIVATIONS[name]
    both(lambda x: ours(x) if isinstance(x, Tensor) else theirs(x), [normal(shape, 4, scale)], 1e-5, 1e-6,
         grad_rtol=1e-5, grad_atol=1e-6)


@pytest.mark.parametrize("name", ["softsign", "hardsigmoid", "relu6", "hardswish", "selu", "sigmoid", "tanh"])
def test_activations_half_and_bf16(name):
    ours, theirs, scale = ACTIVATIONS[name]
    a = normal((5, 4), 5, scale)
    both(lambda x: ours(x) if isinstance(x, Tensor) else theirs(x), [a], 1e-2, 1e-2, dtype=dtypes.float16, grad=False)
    both(lambda x: ours(x) if isinstance(x, Tensor) else theirs(x), [a], 3e-2, 3e-2, dtype=dtypes.bfloat16,
         grad=False)


def test_activations_at_their_kinks_match_torch_gradients():
    kinks = np.array([-3.0, 0.0, 3.0, 6.0, -1.0, 1.0, 0.5], np.float32)
    for name in ("relu", "relu6", "hardsigmoid", "hardswish", "hardtanh", "celu", "elu"):
        ours, theirs, _ = ACTIVATIONS[name]
        both(lambda x, o=ours, t=theirs: o(x) if isinstance(x, Tensor) else t(x), [kinks], 1e-6, 1e-6)


# *** inverse trig, hyperbolic, logs ***
UNARY = {  # name -> (input domain (low, high), rtol, atol)
    "asin": ((-0.99, 0.99), 1e-5, 1e-6), "acos": ((-0.99, 0.99), 1e-5, 1e-6), "atan": ((-20.0, 20.0), 1e-5, 1e-6),
    "sinh": ((-5.0, 5.0), 1e-5, 1e-6), "cosh": ((-5.0, 5.0), 1e-5, 1e-6), "asinh": ((-50.0, 50.0), 1e-5, 1e-6),
    "acosh": ((1.0, 50.0), 1e-5, 1e-6), "atanh": ((-0.99, 0.99), 1e-5, 1e-6), "log10": ((0.01, 100.0), 1e-5, 1e-6),
    "log1p": ((-0.99, 5.0), 1e-5, 1e-6), "expm1": ((-3.0, 3.0), 1e-5, 1e-6),
}


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("shape", [(7, 9), (0, 2), ()])
def test_unary_math(name, shape):
    (low, high), rtol, atol = UNARY[name]
    a = uniform(shape, low, high, 11)
    grad_rtol = 1e-4 if name in ("acosh", "atanh", "asin", "acos") else 1e-5  # steep near the domain's edges
    both(lambda x: getattr(x, name)(), [a], rtol, atol, grad_rtol=grad_rtol, grad_atol=1e-5)


@pytest.mark.parametrize("name", ["log1p", "expm1", "sinh", "asinh", "atan", "atanh", "asin"])
def test_unary_math_keeps_precision_near_zero(name):
    a = np.array([1e-7, -3e-6, 2e-4, -0.01, 0.3, -0.49, 0.51], np.float32)
    both(lambda x: getattr(x, name)(), [a], 2e-6, 0, grad_rtol=2e-6, grad_atol=0)


@pytest.mark.parametrize("name", UNARY)
def test_unary_math_edges_ints_and_16_bit(name):
    edges = np.array([0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 2.0], np.float32)
    both(lambda x: getattr(x, name)(), [edges], 1e-5, 1e-6, grad=False)
    both(lambda x: getattr(x, name)(), [np.array([[0, 1, 2, 3]])], 1e-5, 1e-6, dtype=dtypes.int32, grad=False)
    both(lambda x: getattr(x, name)(), [np.array([True, False])], 1e-5, 1e-6, dtype=dtypes.bool, grad=False)
    (low, high), _, _ = UNARY[name]
    a = uniform((4, 3), low, min(high, 8.0), 2)
    both(lambda x: getattr(x, name)(), [a], 2e-3, 2e-3, dtype=dtypes.float16, grad=False)
    both(lambda x: getattr(x, name)(), [a], 1e-2, 1e-2, dtype=dtypes.bfloat16, grad=False)


def test_copysign_and_logaddexp():
    a, b = normal((5, 6), 1, 3), normal((5, 6), 2, 3)
    both(lambda x, y: x.copysign(y), [a, b], 0, 0)
    both(lambda x, y: x.logaddexp(y), [a, b], 1e-5, 1e-6)
    both(lambda x, y: x.logaddexp(y), [a * 30, b], 1e-5, 1e-6)
    signs = np.array([1.0, -0.0, 0.0, -np.inf, np.inf, -2.0], np.float32)
    both(lambda x, y: x.copysign(y), [np.full(6, 1.5, np.float32), signs], 0, 0, grad=False)
    infs = np.array([np.inf, -np.inf, np.inf, -np.inf, 0.0], np.float32)
    both(lambda x, y: x.logaddexp(y), [infs, np.array([np.inf, -np.inf, 1.0, 2.0, 0.0], np.float32)], 1e-6, 1e-6,
         grad=False)
    ints = np.array([3, -2, 0, 7])
    both(lambda x, y: x.copysign(y), [ints, -ints], 0, 0, dtype=dtypes.int32, grad=False)
    check(Tensor(ints, dtype=dtypes.int32).logaddexp(Tensor(ints[::-1].copy(), dtype=dtypes.int32)),
          torch.logaddexp(torch.tensor(ints).float(), torch.tensor(ints[::-1].copy()).float()), 1e-6, 1e-6)


def test_python_device_tiny():
    a = uniform((2, 3), -0.9, 0.9, 3)
    for name in ("asin", "atan", "log1p", "expm1", "sinh"):
        both(lambda x, n=name: getattr(x, n)(), [a], 1e-5, 1e-6, device="PYTHON")
    both(lambda x: x.hardswish() if isinstance(x, Tensor) else F.hardswish(x), [a * 5], 1e-5, 1e-6, device="PYTHON")
    both(lambda x, y: x.copysign(y), [a, -a], 0, 0, device="PYTHON", grad=False)
    both(lambda x, y: x @ y, [a, a.T.copy()], 1e-5, 1e-5, device="PYTHON")


def test_sinh_cosh_finite_past_exp_overflow():
    a = np.array([89.0, -89.2, 88.5, 50.0, 0.3, -1e-5, 100.0], np.float32)
    for name in ("sinh", "cosh"):
        both(lambda x, n=name: getattr(x, n)(), [a], 2e-6, 1e-6)


# *** more of PyTorch's op database ***
BINARY_MORE = {
    "atan2": (lambda x, y: x.atan2(y), torch.atan2, 1e-5, 1e-6),
    "hypot": (lambda x, y: x.hypot(y), torch.hypot, 1e-6, 1e-6),
    "xlogy": (lambda x, y: x.xlogy(y.abs()), lambda x, y: torch.xlogy(x, y.abs()), 1e-5, 1e-6),
    "fmax": (lambda x, y: x.fmax(y), torch.fmax, 0, 0),
    "fmin": (lambda x, y: x.fmin(y), torch.fmin, 0, 0),
    "logaddexp2": (lambda x, y: x.logaddexp2(y), torch.logaddexp2, 1e-5, 1e-6),
    "addcmul": (lambda x, y: x.addcmul(y, x, value=0.5), lambda x, y: torch.addcmul(x, y, x, value=0.5), 1e-6, 1e-6),
    "addcdiv": (lambda x, y: x.addcdiv(x, y, value=2.0), lambda x, y: torch.addcdiv(x, x, y, value=2.0), 1e-5, 1e-6),
}


@pytest.mark.parametrize("name", BINARY_MORE)
def test_binary_math_more(name):
    ours, theirs, rtol, atol = BINARY_MORE[name]
    a, b = normal((5, 6), 1, 2), normal((5, 6), 2, 2) + 0.05
    both(lambda x, y: ours(x, y) if isinstance(x, Tensor) else theirs(x, y), [a, b], rtol, atol)


def test_binary_math_more_edges():
    zeros = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.inf, 0.0, np.nan], np.float32)
    other = np.array([0.0, 0.0, -0.0, -0.0, np.inf, -np.inf, np.inf, np.inf, -np.inf, -1.0, 1.0], np.float32)
    for name in ("atan2", "hypot", "fmax", "fmin"):
        ours, theirs, _, _ = BINARY_MORE[name]
        check(ours(Tensor(zeros), Tensor(other)), theirs(torch.tensor(zeros), torch.tensor(other)), 1e-6, 1e-6)
        check(ours(Tensor(other), Tensor(zeros)), theirs(torch.tensor(other), torch.tensor(zeros)), 1e-6, 1e-6)
    big = np.array([3e30, 1e-30, 3.0], np.float32)
    check(Tensor(big).hypot(Tensor(big * 2)), torch.hypot(torch.tensor(big), torch.tensor(big * 2)), 1e-6)


def test_unary_math_more():
    a = normal((4, 5), 3, 3)
    x, t = Tensor(a), torch.tensor(a)
    for name in ("deg2rad", "rad2deg", "frac", "sgn", "signbit"):
        check(getattr(x, name)(), getattr(t, name)(), 1e-6, 1e-6)
    p = uniform((4, 5), 0.01, 0.99, 4)
    both(lambda v: v.logit(), [p], 1e-5, 1e-6)
    both(lambda v: v.logit(0.1) if isinstance(v, Tensor) else v.logit(eps=0.1), [p], 1e-5, 1e-6)
    edges = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], np.float32)
    check(Tensor(edges).nan_to_num(), torch.tensor(edges).nan_to_num())
    check(Tensor(edges).nan_to_num(1.0, 2.0, -3.0), torch.tensor(edges).nan_to_num(1.0, 2.0, -3.0))
    check(Tensor(edges).isposinf(), torch.tensor(edges).isposinf())
    check(Tensor(edges).isneginf(), torch.tensor(edges).isneginf())
    check(Tensor(edges).signbit(), torch.tensor(edges).signbit())
    check(Tensor(np.array([-2, 0, 3])).heaviside(Tensor(np.array([7, 7, 7]))),
          torch.tensor([-2, 0, 3]).heaviside(torch.tensor([7, 7, 7])))
    check(Tensor(edges).clamp_min(0.5), torch.tensor(edges).clamp_min(0.5))
    check(Tensor(edges).clamp_max(0.5), torch.tensor(edges).clamp_max(0.5))
    check(Tensor(np.array([1, -2, 3])).signbit(), torch.tensor([1, -2, 3]).signbit())
    check(Tensor(np.array([1.5, 2.0])).float_power(2), torch.tensor([1.5, 2.0]).float_power(2))


def test_reductions_and_products_more():
    a = normal((4, 5), 5)
    a[1, 2] = np.nan
    x, t = Tensor(a), torch.tensor(a)
    check(x.nansum(), t.nansum(), 1e-6, 1e-6)
    check(x.nansum(1), t.nansum(1), 1e-6, 1e-6)
    check(x.nanmean(dim=0), t.nanmean(dim=0), 1e-6, 1e-6)
    b = normal((4, 5), 6)
    for ours, theirs in zip(Tensor(b).aminmax(dim=1), torch.tensor(b).aminmax(dim=1)):
        check(ours, theirs)
    m, v = normal((3, 4), 1), normal((4,), 2)
    both(lambda p, q: p.mm(q), [m, m.T.copy()], 1e-5, 1e-6)
    both(lambda p, q: p.mv(q), [m, v], 1e-5, 1e-6)
    both(lambda p, q: p.bmm(q), [normal((2, 3, 4), 3), normal((2, 4, 5), 4)], 1e-5, 1e-6)
    both(lambda p, q: p.outer(q), [v, normal((3,), 5)], 1e-6, 1e-6)
    both(lambda p, q: p.inner(q), [normal((2, 3, 4), 3), normal((5, 4), 4)], 1e-5, 1e-6)
    both(lambda p: p.trace(), [normal((4, 4), 7)], 1e-6, 1e-6)
    both(lambda p, q: p.cross(q, dim=1) if isinstance(p, Tensor) else torch.linalg.cross(p, q, dim=1),
         [normal((2, 3), 1), normal((2, 3), 2)], 1e-6, 1e-6)
    both(lambda p: p.diff(), [normal((3, 6), 8)], 1e-6, 1e-6)
    both(lambda p: p.diff(n=2, dim=0), [normal((5, 3), 8)], 1e-6, 1e-6)
    check(Tensor(a).diff(dim=1, prepend=Tensor(a[:, :1]), append=Tensor(a[:, :2])),
          torch.tensor(a).diff(dim=1, prepend=torch.tensor(a[:, :1]), append=torch.tensor(a[:, :2])))
    check(Tensor(np.array([True, False, False])).diff(), torch.tensor([True, False, False]).diff())
    check(Tensor(b).msort(), torch.tensor(b).msort())
    with pytest.raises(RuntimeError, match="mm: expects operands of 2 and 2 dims"):
        Tensor(v).mm(Tensor(m))


def test_norms_median_counts_kron():
    a = normal((4, 5), 9)
    for p, dim in ((2, None), ("fro", None), (1, 1), (math.inf, 0), (-math.inf, 1), (0, None), (3.0, 1), (0.5, 0)):
        both(lambda v, p=p, dim=dim: v.norm(p, dim) if isinstance(v, Tensor) else torch.norm(v, p, dim), [a], 1e-5,
             1e-6, grad=p not in (0,))
    both(lambda v: v.norm(), [np.zeros((3,), np.float32)], 0, 0)  # the gradient at 0 is 0, not NaN
    both(lambda v, w: v.dist(w), [a, normal((4, 5), 3)], 1e-5, 1e-6)
    check(Tensor(a).median(), torch.tensor(a).median())
    for dim, keep in ((0, False), (1, True), (-1, False)):
        for ours, theirs in zip(Tensor(a).median(dim, keep), torch.tensor(a).median(dim, keep)):
            check(ours, theirs)
    r = np.round(a)
    check(Tensor(r).count_nonzero(dim=1), torch.tensor(r).count_nonzero(dim=1))
    check(Tensor(r).count_nonzero(), torch.tensor(r).count_nonzero())
    both(lambda v, w: v.kron(w), [normal((2, 3), 1), normal((3, 2), 2)], 1e-6, 1e-6)
    both(lambda v, w: v.kron(w), [normal((2,), 1), normal((2, 3), 2)], 1e-6, 1e-6)
    ints = np.array([1, 3, 3, 0, 7])
    check(Tensor(ints).bincount(), torch.tensor(ints).bincount())
    check(Tensor(ints).bincount(minlength=10), torch.tensor(ints).bincount(minlength=10))
    w = normal((5,), 4)
    check(Tensor(ints).bincount(Tensor(w)), torch.tensor(ints).bincount(torch.tensor(w)), 1e-6, 1e-6)


def test_logspace_and_triangle_indices():
    check(Tensor.logspace(-2, 3, 7), torch.logspace(-2, 3, 7), 1e-5)
    check(Tensor.logspace(0, 4, 5, base=2.0), torch.logspace(0, 4, 5, base=2.0), 1e-6)
    for args in ((3, 3), (4, 5, 1), (4, 3, -1), (0, 0)):
        check(Tensor.triu_indices(*args), torch.triu_indices(*args))
        check(Tensor.tril_indices(*args), torch.tril_indices(*args))
    x = Tensor.ones(2, 3, dtype=dtypes.int32)
    assert (x.empty_like().shape, x.empty_like().dtype) == ((2, 3), dtypes.int32)


def test_unbiased_type_sinc_erfc():
    a = normal((4, 5), 2)
    x, t = Tensor(a), torch.tensor(a)
    check(x.var(1, unbiased=False), t.var(1, unbiased=False), 1e-5, 1e-6)
    check(x.std(unbiased=True), t.std(unbiased=True), 1e-5, 1e-6)
    check(x.type(dtypes.int32), t.type(torch.int32))
    check(x.type("float16"), t.type(torch.float16))
    assert x.type() == "float32"
    both(lambda v: v.sinc(), [np.concatenate([a.reshape(-1), [0.0]]).astype(np.float32)], 1e-5, 1e-6)
    both(lambda v: v.erfc(), [a], 1e-5, 2e-6)


def test_einsum_broadcasts_size_one_dims():
    a, b = normal((2, 1, 3, 4), 1), normal((5, 4, 2), 2)
    both(lambda x, y: Tensor.einsum("...ij,...jk->...ik", x, y) if isinstance(x, Tensor) else
         torch.einsum("...ij,...jk->...ik", x, y), [a, b], 1e-5, 1e-6)
    c = normal((1, 3), 3)
    both(lambda x, y: Tensor.einsum("ij,kj->ik", x, y) if isinstance(x, Tensor) else torch.einsum("ij,kj->ik", x, y),
         [c, normal((4, 3), 4)], 1e-5, 1e-6)
