"""The Tensor API's numerics at the edges and its errors (issue 16), against PyTorch (CPU): unsigned min, gradients
of prod/cumprod at zeros, of pow at 0/inf/0**0, of relu/clip at ties, of sigmoid/tanh/gelu at extreme inputs, of
paths without a gradient; integer pow wrapping; result dtypes; 0-d tensors; and the exception types (with a message
fragment) that PyTorch raises, at the API boundary."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes


def check(got, want, rtol=0.0, atol=0.0):
    g, w = got.numpy(), want.detach().numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def grads(f, *arrays, upstream=None):
    """(ours, theirs): the gradients of sum(f(x...)) for Ember and torch, one per input."""
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    f(*ours).sum().backward()
    f(*theirs).sum().backward()
    return [o.grad for o in ours], [t.grad for t in theirs]


def grads_match(f, *arrays, rtol=0.0, atol=0.0):
    for o, t in zip(*grads(f, *arrays)):
        check(o, t, rtol, atol)


# *** reductions ***
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64", "bool", "int8", "int32", "int64"])
def test_min_max_of_unsigned_and_small_types(dtype):
    # numpy is the reference: torch has no min/max for uint16-64
    low = np.iinfo(dtype).min if dtype != "bool" else 0
    high = np.iinfo(dtype).max if dtype != "bool" else 1
    a = np.array([[3, low, 100], [0, high, 7]], dtype=dtype if dtype != "bool" else np.int64)
    a = a if dtype != "bool" else a > 50
    x = Tensor(a)
    np.testing.assert_array_equal(x.min().numpy(), a.min())
    np.testing.assert_array_equal(x.max().numpy(), a.max())
    for axis in (0, 1):
        assert x.min(axis).dtype == x.dtype
        np.testing.assert_array_equal(x.min(axis).numpy(), a.min(axis))
        np.testing.assert_array_equal(x.max(axis, keepdim=True).numpy(), a.max(axis, keepdims=True))
    if dtype in ("uint8", "int8", "bool"):
        check(x.min(1), torch.tensor(a).min(1).values)


@pytest.mark.parametrize("values", [[0.0, 2.0, 3.0], [0.0, 0.0, 3.0], [2.0, -1.5, 3.0], [0.0], [-0.0, 5.0]])
def test_prod_and_cumprod_gradients_at_zeros(values):
    a = np.array(values, np.float32)
    grads_match(lambda x: x.prod(), a, rtol=1e-6)
    grads_match(lambda x: x.cumprod(0), a, rtol=1e-6)
    m = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0], [2.0, 0.5, 4.0]], np.float32)
    grads_match(lambda x: x.prod(1) * torch.tensor([1.0, 2.0, 3.0]) if isinstance(x, torch.Tensor) else
                x.prod(1) * Tensor([1.0, 2.0, 3.0]), m, rtol=1e-6)
    grads_match(lambda x: x.cumprod(1), m, rtol=1e-6)
    grads_match(lambda x: x.prod(0, keepdim=True), m, rtol=1e-6)


def test_zero_d_tensors():
    x, t = Tensor(np.float32(2.5)), torch.tensor(2.5)
    check(x.mean(), t.mean())
    check(x.mean(0), t.mean(0))
    check(x.sum(-1), t.sum(-1))
    check(x.transpose(0, 0), t.transpose(0, 0))
    check(x.gather(0, Tensor(0)), t.gather(0, torch.tensor(0)))
    check(x.argmax(), t.argmax())
    check(x.cumsum(0), t.cumsum(0))
    check(x.cummax(0)[1], t.cummax(0).indices)
    check(x.sort()[0], t.sort()[0])
    check(x.logcumsumexp(0), t.logcumsumexp(0))
    check(x.unfold(0, 1, 1), t.unfold(0, 1, 1))
    check(Tensor(np.arange(4.0, dtype=np.float32)).gather(0, Tensor(np.int64(2)).reshape(1)), torch.tensor(
        [2.0]))


# *** elementwise numerics ***
def test_int_pow_wraps_like_torch():
    a = np.array([3, 5, -7, 2, 0, 1, -1, -1, 2, 46341], np.int32)
    e = np.array([30, 20, 11, 31, 0, -3, -3, -4, -1, 2], np.int32)
    check(Tensor(a) ** Tensor(e), torch.tensor(a) ** torch.tensor(e))
    for n in (0, 1, 7, 31, 40):
        check(Tensor(a) ** n, torch.tensor(a) ** n)
    u = np.array([3, 200, 7], np.uint8)
    check(Tensor(u) ** Tensor(np.array([5, 2, 3], np.uint8)), torch.tensor(u) ** torch.tensor([5, 2, 3],
                                                                                                  dtype=torch.uint8))
    big = np.array([3, -5], np.int64)
    check(Tensor(big) ** Tensor(np.array([40, 27])), torch.tensor(big) ** torch.tensor([40, 27]))


def test_pow_gradients_at_zero_and_infinity():
    base = np.array([0.0, 0.0, 0.0, 2.0, -2.0, np.inf, -np.inf, 0.0, 1.0], np.float32)
    expo = np.array([0.0, 2.0, 0.5, 0.0, 3.0, 2.0, 3.0, -1.0, np.inf], np.float32)
    grads_match(lambda x, y: x ** y, base, expo, rtol=1e-6)
    for s in (0.0, 2.0, 0.5, -1.0):  # ((-inf) ** -0.5: C's pow gives 0, torch NaN; left out)
        grads_match(lambda x, s=s: x ** s, base[base != -np.inf], rtol=1e-6)
    grads_match(lambda y: 0.0 ** y if isinstance(y, torch.Tensor) else y.__rpow__(0.0), expo, rtol=1e-6)


def test_relu_clip_hardtanh_gradients_at_ties_and_bounds():
    a = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, -0.0], np.float32)
    grads_match(lambda x: x.relu(), a)
    grads_match(lambda x: x.clip(0.0, 1.0), a)
    grads_match(lambda x: x.clamp(0.0, 1.0), a)
    grads_match(lambda x: x.clip(0.5), a)
    grads_match(lambda x: F.hardtanh(x, 0.0, 1.0) if isinstance(x, torch.Tensor) else x.hardtanh(0.0, 1.0), a)
    grads_match(lambda x: F.relu6(x * 6) if isinstance(x, torch.Tensor) else (x * 6).relu6(), a)
    b = np.array([0.0, 1.0, 1.0], np.float32)
    grads_match(lambda x, y: x.maximum(y), a[:3], b)  # two tensors tie: split evenly, as torch.maximum
    nan = np.array([np.nan, 1.0], np.float32)
    check(Tensor(nan).clip(0.0, 0.5), torch.tensor(nan).clip(0.0, 0.5))


def test_sign_backward_and_paths_without_gradient_give_zeros():
    a = np.array([-2.0, 0.0, 3.0], np.float32)
    grads_match(lambda x: x.sign(), a)
    grads_match(lambda x: (x > 0).float() * 3 if isinstance(x, Tensor) else (x > 0).float() * 3 + 0 * x, a)
    grads_match(lambda x: x.round() + x.floor(), a)
    x = Tensor(a, requires_grad=True)
    y = Tensor(a, requires_grad=True)
    ((x > 0).where(y, 0.0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(y.grad.numpy(), np.array([0.0, 0.0, 1.0], np.float32))
    with pytest.raises(ValueError, match="not used to compute"):
        Tensor([1.0]).sum().gradient(Tensor([2.0]))


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "gelu", "gelu_tanh", "silu_free", "softplus", "logaddexp",
                                  "expm1", "log1p"])
def test_gradients_at_extreme_inputs_are_finite_like_torch(name):
    a = np.array([-1e4, -300.0, -100.0, -20.0, 0.0, 20.0, 100.0, 300.0, 1e4], np.float32)
    fns = {
        "sigmoid": lambda x: x.sigmoid(), "tanh": lambda x: x.tanh(),
        "gelu": lambda x: F.gelu(x) if isinstance(x, torch.Tensor) else x.gelu(),
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh") if isinstance(x, torch.Tensor) else
        x.gelu(approximate="tanh"),
        "silu_free": lambda x: x.quick_gelu() if isinstance(x, Tensor) else x * torch.sigmoid(1.702 * x),
        "softplus": lambda x: F.softplus(x) if isinstance(x, torch.Tensor) else x.softplus(),
        "logaddexp": lambda x: x.logaddexp(x * 0.5), "expm1": lambda x: (x * 1e-3).expm1(),
        "log1p": lambda x: (x.abs() if isinstance(x, Tensor) else x.abs()).log1p(),
    }
    f = fns[name]
    x, t = Tensor(a), torch.tensor(a)
    check(f(x), f(t), 1e-5, 1e-6)
    (ours,), (theirs,) = grads(f, a)
    assert np.isfinite(ours.numpy()).all()
    check(ours, theirs, 1e-5, 1e-6)


def test_result_dtypes():
    assert Tensor([True, False]).square().dtype == dtypes.int64
    check(Tensor([True, False]).square(), torch.tensor([True, False]).square())
    check(Tensor(np.array([1, -5, 3])).hardtanh(), F.hardtanh(torch.tensor([1, -5, 3])))
    check(Tensor(np.array([1, 2], np.uint8)).pad((1, 1), value=1.5), F.pad(torch.tensor([1, 2], dtype=torch.uint8),
                                                                           (1, 1), value=1.5))
    check(Tensor(np.array([1, 0, 3])).clip(0.5, 2.5), torch.tensor([1, 0, 3]).clip(0.5, 2.5))
    assert Tensor.arange(2**31 - 2, 2**31 + 2).dtype == dtypes.int64
    check(Tensor.arange(2**31 - 2, 2**31 + 2), torch.arange(2**31 - 2, 2**31 + 2))
    assert Tensor.arange(-2**31 - 1, -2**31 + 1).dtype == dtypes.int64
    assert Tensor.arange(5).dtype == dtypes.int32  # tinygrad's default below 2**31
    check(Tensor(np.array([7, -7])).div(2, rounding_mode="floor"), torch.div(torch.tensor([7, -7]), 2,
                                                                               rounding_mode="floor"))


def test_detach_of_unrealized_tensors():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).detach()
    (y * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    assert Tensor.rand(3).detach().numpy().shape == (3,)
    np.testing.assert_array_equal(Tensor.arange(3).detach().numpy(), [0, 1, 2])


# *** errors: the type PyTorch raises, at the API boundary, with the message naming what was wrong ***
def test_axis_errors_are_index_errors():
    x = Tensor(np.zeros((2, 3), np.float32))
    for f in (lambda: x.sum(2), lambda: x.max(-3), lambda: x.transpose(0, 2), lambda: x.softmax(5),
              lambda: x.flip(3), lambda: x.cumsum(2), lambda: x.argmax(4), lambda: x.sort(2), lambda: x.topk(1, 3),
              lambda: x.diagonal(0, 0, 2), lambda: x.unfold(2, 1, 1), lambda: x.index_select(2, Tensor([0])),
              lambda: x.gather(2, Tensor([[0]])), lambda: x.cummax(-3), lambda: x.logcumsumexp(2)):
        with pytest.raises(IndexError, match="out of range"):
            f()
    with pytest.raises(IndexError, match="dimension out of range"):
        Tensor(1.0).sum(1)
    with pytest.raises(ValueError, match="axis 2 is out of range"):  # (also a ValueError, as numpy's AxisError)
        x.sum(2)


def test_index_errors():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError, match="index 5 is out of range for dim 1 of size 3"):
        x[:, 5]
    with pytest.raises(IndexError, match="index -3 is out of range"):
        x[-3]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        x[Tensor([0, 3])]
    with pytest.raises(RuntimeError, match="gather: index 3 is out of range for dim 1 of size 3"):
        x.gather(1, Tensor([[3]]))
    with pytest.raises(IndexError, match="index_select: index 7 is out of range"):
        x.index_select(0, Tensor([7]))
    with pytest.raises(RuntimeError, match="scatter: index 4 is out of range"):
        x.scatter(1, Tensor([[4]]), 1.0)
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]


def test_shape_value_and_type_errors():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(RuntimeError, match="cannot broadcast shapes"):
        x + Tensor(np.zeros(4, np.float32))
    with pytest.raises(RuntimeError, match=r"shape is invalid for input of size 6"):
        x.reshape(4, 2)
    with pytest.raises(RuntimeError, match="shape is invalid for input of size 6"):
        x.reshape(-1, 4)
    with pytest.raises(ValueError, match="cannot broadcast shapes"):  # (also a ValueError)
        x + Tensor(np.zeros(4, np.float32))
    with pytest.raises(RuntimeError, match="matmul: shapes .* do not align"):
        x @ x
    with pytest.raises(RuntimeError, match="need to be at least 1D"):
        Tensor(1.0) @ x
    with pytest.raises(RuntimeError, match="topk: k .4. is out of range"):
        x.topk(4)
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 3 but size is 4"):
        x.unfold(1, 4, 1)
    with pytest.raises(RuntimeError, match="step is 0 but must be > 0"):
        x.unfold(1, 2, 0)
    with pytest.raises(RuntimeError, match="scatter_reduce: reduce argument must be either sum, prod, mean, amax"):
        x.scatter_reduce(0, Tensor([[0]]), 1.0, "max")
    with pytest.raises(RuntimeError, match="hardtanh on an unsigned type with negative limits"):
        Tensor(np.array([1], np.uint8)).hardtanh()
    with pytest.raises(RuntimeError, match="masked_select: expected a bool mask"):
        x.masked_select(Tensor([1, 0, 1]))
    with pytest.raises(RuntimeError, match="diagonal: dimensions cannot be identical"):
        x.diagonal(0, 1, 1)
    with pytest.raises(TypeError, match="index_select: index must be an int Tensor"):
        x.index_select(0, Tensor([0.0]))
    with pytest.raises(TypeError, match="dtype: expected a DType or its name"):
        Tensor.zeros(2, dtype=3)
    with pytest.raises(TypeError, match="neg: negation of a bool tensor"):
        -Tensor([True])
    with pytest.raises(ValueError, match="einsum: output subscript 'k' does not appear"):
        Tensor.einsum("ij->k", x)
    with pytest.raises(ValueError, match="meshgrid: indexing must be 'ij' or 'xy'"):
        Tensor.meshgrid(Tensor([1.0]), indexing="yx")
    assert math.isnan(Tensor(np.zeros(0, np.float32)).mean().item())


def test_float_floor_division_and_remainders_are_torchs_exactly():
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.standard_normal(40) * 10, [1.0, -1.0, 0.0, -0.0, 5.0, -5.0, 7.5, np.inf, 3.0, 0.3]])
    b = np.concatenate([rng.standard_normal(40) * 3, [0.1, 0.1, 3.0, 3.0, 0.0, -0.0, -2.5, 2.0, np.inf, 0.1]])
    a, b = a.astype(np.float32), b.astype(np.float32)
    x, y, xt, yt = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
    check(x // y, xt // yt)  # 1 // 0.1 is 9 (Python's and torch's), not floor(1 / 0.1) = 10
    check(x % y, xt % yt)
    check(x.fmod(y), xt.fmod(yt))
    check(x.div(y, rounding_mode="trunc"), torch.div(xt, yt, rounding_mode="trunc"))
    for f in (lambda p, q: p % q, lambda p, q: p.fmod(q)):
        grads_match(f, a[:40], b[:40], rtol=1e-6)


def test_errors_carry_both_conventions():
    # the types PyTorch raises (RuntimeError, NotImplementedError, IndexError), which are also the ValueError/TypeError
    # that Ember raised before: code written against either catches them
    x = Tensor(np.zeros((3, 4), np.float32))
    cases = [
        (lambda: x.permute((0,)), (RuntimeError, ValueError), "permute: order .0,. must name each of the 2 dims"),
        (lambda: x.permute((1, 1)), (RuntimeError, ValueError), "repeats a dim"),
        (lambda: x.flip((1, -1)), (RuntimeError, ValueError), "repeats a dim"),
        (lambda: x.reshape((-1, -1, 2)), (RuntimeError, ValueError), "only one dim can be -1"),
        (lambda: x.roll((1, 2)), (RuntimeError, ValueError), "without dims, shifts must be one int"),
        (lambda: x.roll(1, (0, 1)), (RuntimeError, ValueError), "must have the same length"),
        (lambda: x.clip(None, None), (RuntimeError, ValueError), "at least one of min_ and max_"),
        (lambda: x.div(2, rounding_mode="typo"), (RuntimeError, ValueError), "rounding_mode to be one of"),
        (lambda: Tensor([2]) ** -2, (RuntimeError, ValueError), "negative integer powers"),
        (lambda: x.pad((3, 0), mode="typo"), (NotImplementedError, ValueError), "mode must be"),
        (lambda: x.pad((5, 0), mode="circular"), (RuntimeError, ValueError), "wrap around more than once"),
        (lambda: x.bitwise_xor(x), (RuntimeError, TypeError), "operands must be int or bool"),
        (lambda: ~x, (RuntimeError, TypeError), "bitwise_not: the tensor must be int or bool"),
        (lambda: Tensor(1.0).cat(Tensor(1.0)), (IndexError, ValueError), "zero-dimensional tensors"),
        (lambda: x.meshgrid(indexing="bad"), (RuntimeError, ValueError), "indexing must be 'ij' or 'xy'"),
        (lambda: Tensor.linspace(0, 1, 3, dtype="bool"), (RuntimeError, ValueError), "dtype bool"),
        (lambda: x.sum(dtype=""), (AttributeError, ValueError), "unknown name ''"),
        (lambda: x.gather(0, Tensor([1])), (RuntimeError, ValueError), "index shape .1,. does not fit"),
        (lambda: x.half().scatter(1, Tensor([[0]]), x), RuntimeError, "expected self.dtype to be equal to src.dtype"),
        (lambda: Tensor.einsum("...i...,i", x, x), (RuntimeError, ValueError), "more than one ellipsis"),
        (lambda: Tensor.stack((x, x), x), ValueError, "one non-empty sequence"),
        (lambda: x[1, 4], IndexError, "out of bounds"),
        (lambda: x.cat(Tensor.ones(2, 5)), (RuntimeError, ValueError), "does not match"),
        (lambda: x.split([1, 1]), (RuntimeError, ValueError), "do not add up"),
        (lambda: x.expand(4), (RuntimeError, ValueError), "fewer dims"),
        (lambda: x.repeat(2), (RuntimeError, ValueError), "needs at least 2 repeats"),
        (lambda: Tensor.zeros(0, 2).max(0), (RuntimeError, ValueError), "cannot reduce over dim 0 of size 0"),
        (lambda: Tensor.arange(0, 3, 0), (RuntimeError, ValueError), "step must not be 0"),
        (lambda: Tensor.full((-1,), 2), (RuntimeError, ValueError), "non-negative"),
    ]
    for f, types, fragment in cases:
        for t in (types if isinstance(types, tuple) else (types,)):
            with pytest.raises(t, match=fragment):
                f()


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pads", [(3, -3, 0, -3), (3, -5, 1, -5), (0, 0, 0, -5), (-1, 2, 2, -1), (4, 4, 0, 4)])
def test_reflect_and_replicate_index_the_uncropped_input_like_torch(mode, pads):
    a = np.random.default_rng(2).standard_normal((1, 1, 5, 5)).astype(np.float32)
    grads_match(lambda x: F.pad(x, pads, mode=mode) if isinstance(x, torch.Tensor) else x.pad(pads, mode=mode), a)
    check(Tensor(a).pad(pads, mode=mode), F.pad(torch.tensor(a), pads, mode=mode))


def test_pytorch_keyword_names():
    a = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    x, t = Tensor(a), torch.tensor(a)
    check(x.sum(dim=1), t.sum(dim=1), 1e-6)
    check(x.mean(dim=0, keepdim=True), t.mean(dim=0, keepdim=True), 1e-6)
    check(x.max(dim=1), t.max(dim=1).values)
    check(x.argmax(dim=1), t.argmax(dim=1))
    check(x.std(dim=1), t.std(dim=1), 1e-5)
    check(x.logsumexp(dim=1), t.logsumexp(dim=1), 1e-6)
    check(x.cumsum(dim=1), t.cumsum(dim=1), 1e-6)
    check(x.cummax(dim=0)[1], t.cummax(dim=0).indices)
    check(x.flip(dims=(0,)), t.flip(dims=(0,)))
    check(x.clamp(min=-0.5), t.clamp(min=-0.5))
    check(x.clamp(max=0.5), t.clamp(max=0.5))
    check(x.clamp(min=-0.5, max=0.5), t.clamp(min=-0.5, max=0.5))
    with pytest.raises(TypeError, match="sum: got both axis and dim"):
        x.sum(0, dim=1)


def test_casts_to_ints_carry_no_gradient():
    a = np.array([1.5, -2.5, 0.2], np.float32)
    grads_match(lambda x: x.int().float() * 3 + x, a)
    grads_match(lambda x: x.bool().float() + x.half().float() * 2, a)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_float16_rounds_after_every_op(dev):
    # 100 * 100 * 100 overflows float16 at the second product, as in torch (the C compiler's excess precision kept it)
    assert np.isinf(Tensor([100.0, 100.0, 100.0], dev).prod(dtype="float16").float().numpy())
    a = np.array([300.0, 250.0], np.float32)
    got = (Tensor(a, dev).half() * 300 - Tensor(a, dev).half() * 299).float().numpy()
    want = (torch.tensor(a).half() * 300 - torch.tensor(a).half() * 299).float().numpy()
    np.testing.assert_array_equal(got, want)


def test_dtype_names_and_a_detached_constant():
    assert Tensor([1, 2], dtype="int32").dtype == dtypes.int32
    assert Tensor([1.5]).cast("uint8").dtype == dtypes.uint8
    assert Tensor(3.0).detach().numpy() == 3.0


# *** hostile inputs at creation (issue 15): refused as torch refuses them, never silently changed ***
def test_ints_that_overflow_the_dtype_are_refused_at_creation():
    for data, dt in (([2**40], "int32"), ([300], "uint8"), ([-129], "int8"), ([2**32], "uint32"),
                     ([2**63 - 1], "int32")):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.tensor(data, dtype=getattr(torch, dt))
        with pytest.raises((RuntimeError, ValueError), match="without overflow"):
            Tensor(data, dtype=dt)
        with pytest.raises(RuntimeError, match="without overflow"):
            Tensor(np.array(data), dtype=dt)
    for data in ([-1, 255], [-200, 7]):  # (negatives wrap into unsigned dtypes, as torch's)
        np.testing.assert_array_equal(Tensor(data, dtype="uint8").numpy(), torch.tensor(data, dtype=torch.uint8))
    np.testing.assert_array_equal(Tensor([-2**31, 2**31 - 1], dtype="int32").numpy(), [-2**31, 2**31 - 1])


def test_shapes_must_be_ints_and_names_clear():
    for f in (lambda: Tensor.rand(2.5), lambda: Tensor.zeros(2, 3.0), lambda: Tensor.ones(3).reshape(3.0),
              lambda: Tensor.zeros(float("nan"))):
        with pytest.raises(TypeError, match="shape must be ints"):
            f()
    assert Tensor.zeros(np.int64(2), 3).shape == (2, 3)
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(ValueError, match="must be a non-negative int"):
        Tensor([1.0], device="CPU:x")


def test_autograd_misuse_raises_torchs_runtime_error():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="one-element"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor([1.0]).sum().backward()
    with pytest.raises(RuntimeError, match="float"):
        Tensor([1, 2]).sum().backward()
    with pytest.raises(ValueError, match="not used"):  # (ValueError too, as before)
        (x * 2).sum().gradient(Tensor([3.0], requires_grad=True))


def test_iteration_as_torch():
    # iterating walks dim 0 (unpacking a, b = x too); a 0-d tensor is not iterable (TypeError, as torch): Python's
    # fallback through __getitem__ made list(Tensor(3.0)) an empty list
    x = np.arange(6).reshape(2, 3)
    rows = list(Tensor(x))
    assert len(rows) == 2 and all(r.shape == (3,) for r in rows)
    np.testing.assert_array_equal(rows[1].numpy(), x[1])
    assert list(Tensor.zeros(0, 2)) == []
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(Tensor(3.0))
    with pytest.raises(TypeError, match="0-d"):
        iter(torch.tensor(3.0))  # (the reference)
