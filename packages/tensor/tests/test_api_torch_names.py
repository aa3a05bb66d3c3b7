"""PyTorch's names for Ember's ops, and the torch.nn.functional ops a PyTorch user reaches for daily (issue 16): each
forward (and backward where differentiable) against PyTorch (CPU) on random inputs, tolerances stated per case."""

# ruff: noqa: B023 - the lambdas in loops are called at once, inside their iteration

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes, nn

rng = np.random.default_rng(16)


def data(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def compare(ours, theirs, *arrays, rtol=1e-5, atol=1e-6, backward=True):
    """ours(*Tensors) and theirs(*torch tensors): same values, dtype and shape; and the same gradients of the
    result's sum with respect to each float input."""
    e_in = [Tensor(a, requires_grad=True) if a.dtype.kind == "f" else Tensor(a) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    got, want = ours(*e_in), theirs(*t_in)
    g, w = got.numpy(), want.detach().numpy()
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if backward and w.dtype.kind == "f":
        got.sum().backward()
        want.sum().backward()
        for e, t in zip(e_in, t_in):
            if t.grad is not None:
                np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


ALIASES = {  # method name -> (inputs, extra args)
    "absolute": (1, ()), "arccos": (1, ()), "arcsin": (1, ()), "arctan": (1, ()), "arcsinh": (1, ()),
    "arctanh": (1, ()), "negative": (1, ()), "fix": (1, ()), "arctan2": (2, ()), "multiply": (2, ()),
    "divide": (2, ()), "subtract": (2, ()), "greater": (2, ()), "greater_equal": (2, ()), "less": (2, ()),
    "less_equal": (2, ()), "not_equal": (2, ()),
}


@pytest.mark.parametrize("name", list(ALIASES))
def test_torch_method_aliases(name):
    n, _ = ALIASES[name]
    high = 0.9 if name in ("arccos", "arcsin", "arctanh") else 2.0
    arrays = [data(3, 4, low=-high, high=high) for _ in range(n)]
    arrays[-1][0, 0] = arrays[0][0, 0]  # a tie for the comparisons
    compare(lambda *x: getattr(x[0], name)(*x[1:]), lambda *x: getattr(x[0], name)(*x[1:]), *arrays)


def test_arccosh_and_keyword_forms():
    compare(lambda x: x.arccosh(), lambda x: x.arccosh(), data(5, low=1.1, high=4))
    compare(lambda a, b: a.divide(b, rounding_mode="floor"), lambda a, b: a.divide(b, rounding_mode="floor"),
            data(6), data(6, low=0.5), backward=False)
    compare(lambda a, b: a.subtract(b, alpha=2), lambda a, b: a.subtract(b, alpha=2), data(6), data(6))
    i = rng.integers(0, 64, 6).astype(np.int32)
    compare(lambda a: a.bitwise_left_shift(2), lambda a: a.bitwise_left_shift(2), i)
    compare(lambda a: a.bitwise_right_shift(1), lambda a: a.bitwise_right_shift(1), i)
    compare(lambda a: a.xor(5), lambda a: a.bitwise_xor(5), i)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family_takes_dim(dim):
    for name in ("softmax", "log_softmax", "softmin"):
        compare(lambda x: getattr(x, name)(dim=dim), lambda x: getattr(F, name)(x, dim=dim), data(3, 5), rtol=1e-5)


def test_shape_queries():
    x = Tensor(data(2, 3, 4))
    assert x.dim() == x.ndimension() == 3 and x.nelement() == 24 and x.size() == (2, 3, 4) and x.size(-1) == 4
    assert x.element_size() == 4 and Tensor([1], dtype=dtypes.int16).element_size() == 2
    with pytest.raises(IndexError, match="size: axis 3 is out of range"):
        x.size(3)
    w = Tensor(data(3)).requires_grad_()
    assert w.requires_grad is True and w.requires_grad_(False).requires_grad is False
    a = data(3, 4)
    assert Tensor(a).equal(Tensor(a.copy())) and not Tensor(a).equal(Tensor(a + 1)) and not Tensor(a).equal(Tensor(a.T))
    assert Tensor(a).allclose(Tensor(a + 1e-7)) and not Tensor(a).allclose(Tensor(a + 1e-3))


def test_movement_forms():
    x = data(2, 3, 7)
    compare(lambda t: t.mT, lambda t: t.mT, x)
    compare(lambda t: t[:1].broadcast_to(4, 3, 7), lambda t: t[:1].broadcast_to(4, 3, 7), x)
    for arg in (3, 7, [1, 5], [-2, 2, 9]):
        got, want = Tensor(x).tensor_split(arg, 2), torch.tensor(x).tensor_split(arg, 2)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    y = data(4, 6, 2)
    for name, arg in (("hsplit", 3), ("vsplit", 2), ("dsplit", [1]), ("hsplit", [2, 5])):
        for g, w in zip(getattr(Tensor(y), name)(arg), getattr(torch.tensor(y), name)(arg)):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    with pytest.raises(ValueError, match="hsplit: dim 1 of size 6 does not split into 4 equal parts"):
        Tensor(y).hsplit(4)
    for offset in (0, 1, -2):
        compare(lambda t: t.diag_embed(offset), lambda t: torch.diag_embed(t, offset), data(2, 3))
    assert Tensor(x).sequential([lambda t: t * 2, Tensor.relu]).shape == (2, 3, 7)


def test_matmul_forms_and_kthvalue():
    m, a, b = data(3, 5), data(3, 4), data(4, 5)
    compare(lambda m, a, b: m.addmm(a, b, beta=0.5, alpha=2), lambda m, a, b: m.addmm(a, b, beta=0.5, alpha=2), m, a, b,
            rtol=1e-5, atol=1e-5)
    compare(lambda m, a, b: m[0].addmm(a, b), lambda m, a, b: m[0].addmm(a, b), m, a, b, rtol=1e-5, atol=1e-5)
    nan = m.copy()
    nan[0, 0] = math.nan
    compare(lambda m, a, b: m.addmm(a, b, beta=0), lambda m, a, b: m.addmm(a, b, beta=0), nan, a, b, atol=1e-5)
    compare(lambda v, a, x: v.addmv(a, x), lambda v, a, x: v.addmv(a, x), data(3), a, data(4), atol=1e-5)
    compare(lambda m, a, b: m.baddbmm(a, b, alpha=0.5), lambda m, a, b: m.baddbmm(a, b, alpha=0.5), data(2, 3, 5),
            data(2, 3, 4), data(2, 4, 5), atol=1e-5)
    x = data(4, 6)
    for k, dim, keep in ((1, -1, False), (3, 1, True), (4, 0, False)):
        gv, gi = Tensor(x).kthvalue(k, dim, keep)
        tv, ti = torch.tensor(x).kthvalue(k, dim, keep)
        np.testing.assert_array_equal(gv.numpy(), tv.numpy())
        np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    compare(lambda t: t.kthvalue(2, 1)[0], lambda t: t.kthvalue(2, 1)[0], x)
    with pytest.raises(IndexError, match="kthvalue: k .7. is out of range"):
        Tensor(x).kthvalue(7)


def test_scatter_add_and_argwhere():
    idx = np.array([[0, 1, 0], [2, 2, 1]], np.int64)
    compare(lambda s, i, v: s.scatter_add(1, i, v), lambda s, i, v: s.scatter_add(1, i, v), data(2, 4), idx,
            data(2, 3))
    b = np.array([[0.0, 1.5], [2.0, 0.0]], np.float32)
    np.testing.assert_array_equal(Tensor(b).argwhere().numpy(), torch.tensor(b).argwhere().numpy())


@pytest.mark.parametrize("name, args", [("hardshrink", ()), ("hardshrink", (1.0,)), ("softshrink", ()),
                                        ("softshrink", (0.2,)), ("tanhshrink", ()), ("threshold", (0.3, -1.0)),
                                        ("glu", ()), ("glu", (0,))])
def test_activations(name, args):
    x = data(4, 6)
    x[0, 0], x[1, 1] = 0.5, -0.5  # on the shrink bounds
    compare(lambda t: getattr(t, name)(*args), lambda t: getattr(F, name)(t, *args), x, atol=1e-6)
    x[2, 2] = math.nan  # NaN stays NaN (forward; torch's gradients there differ op by op)
    compare(lambda t: getattr(t, name)(*args), lambda t: getattr(F, name)(t, *args), x, atol=1e-6, backward=False)
    compare(lambda t: getattr(nn, name)(t, *args), lambda t: getattr(F, name)(t, *args), data(2, 4), atol=1e-6)


@pytest.mark.parametrize("shape, channels", [((2, 3, 4), 3), ((2, 3), 1), ((5,), 1), ((2, 3), 3)])
def test_prelu(shape, channels):
    compare(lambda x, w: x.prelu(w), lambda x, w: F.prelu(x, w), data(*shape), data(channels, low=0, high=0.5))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    x, y = data(4, 5), data(4, 5)
    for name, kw in (("l1_loss", {}), ("mse_loss", {}), ("huber_loss", {"delta": 0.7}), ("smooth_l1_loss", {}),
                     ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0})):
        compare(lambda a, b: getattr(a, name)(b, reduction=reduction, **kw),
                lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw), x, y, rtol=1e-5)
        compare(lambda a, b: getattr(nn, name)(a, b, reduction=reduction, **kw),
                lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw), x, y[0], rtol=1e-5)
    logp = np.log(np.abs(data(4, 5)) + 0.1).astype(np.float32)
    p = np.abs(data(4, 5)).astype(np.float32)
    p[0, 0] = 0.0  # 0 * log 0 counts 0
    for log_target in (False, True):
        target = np.log(p + 0.05).astype(np.float32) if log_target else p
        for red in (reduction, "batchmean"):
            compare(lambda a, b: a.kl_div(b, reduction=red, log_target=log_target),
                    lambda a, b: F.kl_div(a, b, reduction=red, log_target=log_target), logp, target, rtol=1e-5)
    probs, labels = np.abs(data(4, 5, low=0.05, high=0.95)), (data(4, 5) > 0).astype(np.float32)
    compare(lambda a, b: a.binary_cross_entropy(b, reduction=reduction),
            lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), probs, labels, rtol=1e-5)
    w = np.abs(data(4, 5))
    compare(lambda a, b: a.binary_cross_entropy_with_logits(b, Tensor(w), reduction=reduction, pos_weight=Tensor(w[0])),
            lambda a, b: F.binary_cross_entropy_with_logits(a, b, torch.tensor(w), reduction=reduction,
                                                            pos_weight=torch.tensor(w[0])), x, labels, rtol=1e-5)


def test_distances():
    a, b = data(4, 6), data(4, 6)
    for dim in (1, 0, -1):
        compare(lambda x, y: x.cosine_similarity(y, dim), lambda x, y: F.cosine_similarity(x, y, dim), a, b)
    compare(lambda x, y: nn.cosine_similarity(x, y[:1]), lambda x, y: F.cosine_similarity(x, y[:1]), a, b)
    for p, keepdim in ((2.0, False), (1.0, True), (3.0, False), (math.inf, False)):
        compare(lambda x, y: x.pairwise_distance(y, p, keepdim=keepdim),
                lambda x, y: F.pairwise_distance(x, y, p, keepdim=keepdim), a, b, rtol=1e-5)


def test_nd_names_of_conv_and_pooling():
    x1, w1 = data(2, 3, 11), data(4, 3, 3)
    compare(lambda x, w: nn.conv1d(x, w, stride=2, padding=1), lambda x, w: F.conv1d(x, w, stride=2, padding=1), x1, w1,
            atol=1e-5)
    compare(lambda x, w: x.conv1d(w, padding="same"), lambda x, w: F.conv1d(x, w, padding="same"), x1, w1, atol=1e-5)
    x3, w3 = data(1, 2, 4, 5, 6), data(3, 2, 2, 3, 2)
    compare(lambda x, w: nn.conv3d(x, w, dilation=1, groups=1), lambda x, w: F.conv3d(x, w), x3, w3, atol=1e-5)
    compare(lambda x: nn.max_pool1d(x, 3, 2, 1), lambda x: F.max_pool1d(x, 3, 2, 1), x1)
    compare(lambda x: x.max_pool1d(2, ceil_mode=True), lambda x: F.max_pool1d(x, 2, ceil_mode=True), x1)
    compare(lambda x: nn.avg_pool1d(x, 3, 2, 1), lambda x: F.avg_pool1d(x, 3, 2, 1), x1, atol=1e-6)
    compare(lambda x: nn.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
            lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), x1, atol=1e-6)
    compare(lambda x: nn.max_pool3d(x, 2), lambda x: F.max_pool3d(x, 2), x3)
    compare(lambda x: nn.avg_pool3d(x, (2, 2, 3), stride=1), lambda x: F.avg_pool3d(x, (2, 2, 3), stride=1), x3,
            atol=1e-6)
    vals, idx = nn.max_pool1d(Tensor(x1), 2, return_indices=True)
    tvals, tidx = F.max_pool1d(torch.tensor(x1), 2, return_indices=True)
    np.testing.assert_array_equal(vals.numpy(), tvals.numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())


def test_pixel_shuffle_and_dropout():
    x = data(2, 8, 3, 5)
    compare(lambda t: nn.pixel_shuffle(t, 2), lambda t: F.pixel_shuffle(t, 2), x)
    compare(lambda t: t.pixel_unshuffle(2), lambda t: F.pixel_unshuffle(t, 2), data(1, 2, 4, 6))
    compare(lambda t: nn.pixel_unshuffle(nn.pixel_shuffle(t, 2), 2), lambda t: t * 1, x)
    with pytest.raises(ValueError, match="pixel_shuffle: input of shape"):
        Tensor(data(2, 3, 4, 4)).pixel_shuffle(2)
    t = Tensor(np.ones((100, 100), np.float32))
    assert t.dropout(0.5, training=False) is t and (t.dropout(1.0).numpy() == 0).all()
    kept = t.dropout(0.25).numpy()
    assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)} and 0.7 < (kept > 0).mean() < 0.8


@pytest.mark.parametrize("n, size, out", [(1, (2, 3, 10), 4), (1, (3, 7), 7), (2, (2, 3, 7, 9), (3, 4)),
                                          (2, (2, 3, 7, 9), 1), (2, (1, 2, 5, 6), (None, 4)), (3, (1, 2, 5, 4, 6), 2)])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pooling(n, size, out, kind):
    name = f"adaptive_{kind}_pool{n}d"
    compare(lambda x: getattr(x, name)(out), lambda x: getattr(F, name)(x, out), data(*size), atol=1e-6)
    compare(lambda x: getattr(nn, name)(x, out), lambda x: getattr(F, name)(x, out), data(*size), atol=1e-6)


def test_tinygrad_linear_and_multinomial():
    x, w, b = data(3, 4), data(4, 5), data(5)
    compare(lambda x, w, b: x.linear(w, b), lambda x, w, b: F.linear(x, w.T, b), x, w, b, atol=1e-5)
    compare(lambda x, w: x.linear(w), lambda x, w: x * w, x, data(4))
    Tensor.manual_seed(0)
    probs = np.array([[0.0, 1.0, 3.0, 0.0], [5.0, 0.0, 0.0, 5.0]], np.float32)
    draws = Tensor(probs).multinomial(4000, replacement=True).numpy()
    assert draws.shape == (2, 4000) and draws.dtype == np.int64
    np.testing.assert_allclose(np.bincount(draws[0], minlength=4) / 4000, [0, 0.25, 0.75, 0], atol=0.03)
    np.testing.assert_allclose(np.bincount(draws[1], minlength=4) / 4000, [0.5, 0, 0, 0.5], atol=0.03)
    one = Tensor(probs[0]).multinomial()
    assert one.shape == (1,) and one.numpy()[0] in (1, 2)
    with pytest.raises(ValueError, match="without replacement only num_samples=1"):
        Tensor(probs).multinomial(2)


def test_in_place_forms():
    a, b = data(3, 4), data(3, 4)
    cases = [("add_", lambda t, u: t.add_(u, alpha=2)), ("sub_", lambda t, u: t.sub_(u)),
             ("mul_", lambda t, u: t.mul_(u)),
             ("div_", lambda t, u: t.div_(2.0)), ("clamp_", lambda t, u: t.clamp_(-0.5, 0.5)),
             ("zero_", lambda t, u: t.zero_()), ("fill_", lambda t, u: t.fill_(1.5)),
             ("copy_", lambda t, u: t.copy_(u[0])), ("masked_fill_", lambda t, u: t.masked_fill_(u > 0, -1.0)),
             ("add_ flipped self", lambda t, u: t.add_(t.flip(0)))]
    for name, f in cases:
        ours, theirs = Tensor(a), torch.tensor(a)
        view = ours.reshape(12)  # a view made before: it sees the write, as in torch
        tview = theirs.reshape(12)
        got = f(ours, Tensor(b))
        f(theirs, torch.tensor(b))
        assert got is ours, name
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(view.numpy(), tview.numpy(), rtol=1e-6, err_msg=name)
    lazy = Tensor(a) * 2  # not realized yet: realized, then written
    lazy.add_(1.0)
    np.testing.assert_allclose(lazy.numpy(), a * 2 + 1, rtol=1e-6)
    Tensor.manual_seed(1)
    w = Tensor.zeros(200, 50)
    assert w.uniform_(-0.1, 0.1) is w and -0.1 <= w.numpy().min() < -0.09 and 0.09 < w.numpy().max() < 0.1
    assert abs(float(w.normal_(0.0, 2.0).numpy().std()) - 2.0) < 0.1
    assert Tensor(a).cpu().device == "CPU" and Tensor(a).new_tensor([1, 2]).dtype == dtypes.float32


def test_more_torch_methods():
    x = data(4, 6)
    x[1, 2] = math.nan
    compare(lambda t, e: t.ldexp(e), lambda t, e: t.ldexp(e), data(6), np.arange(-2, 4).astype(np.float32))
    compare(lambda t: t.angle(), lambda t: t.angle(), x, backward=False)
    np.testing.assert_array_equal(Tensor(x).isreal().numpy(), torch.tensor(x).isreal().numpy())
    y = data(5, 7)
    for q in (0.3, [0.0, 0.25, 1.0]):
        for dim, keepdim in ((None, False), (1, False), (0, True), (None, True)):
            for interpolation in ("linear", "lower", "higher", "nearest", "midpoint"):
                tq = torch.tensor(q) if isinstance(q, list) else q
                compare(lambda t: t.quantile(q, dim, keepdim, interpolation),
                        lambda t: t.quantile(tq, dim, keepdim, interpolation=interpolation), y, atol=1e-6)
    compare(lambda t: t.sum_to_size(1, 7), lambda t: t.sum_to_size(1, 7), y, atol=1e-6)
    compare(lambda t: t[None].sum_to_size((5, 1)), lambda t: t[None].sum_to_size((5, 1)), y, atol=1e-6)
    with pytest.raises(ValueError, match="sum_to_size: size .3, 7. is not expandable"):
        Tensor(y).sum_to_size(3, 7)
    h = data(50)
    for kw in ({"bins": 5}, {"bins": 4, "min": -1.0, "max": 1.0}, {"bins": 3, "min": 0.0, "max": 2.0}):
        np.testing.assert_array_equal(Tensor(h).histc(**kw).numpy(), torch.tensor(h).histc(**kw).numpy())
    v = np.array([1, 1, 2, 2, 3, 1, 1, 2], np.int64)
    for g, w in zip(Tensor(v).unique_consecutive(return_inverse=True, return_counts=True),
                    torch.tensor(v).unique_consecutive(return_inverse=True, return_counts=True)):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    Tensor.manual_seed(2)
    p = Tensor(np.full((100, 100), 0.3, np.float32))
    draws = p.bernoulli().numpy()
    assert draws.dtype == np.float32 and set(np.unique(draws)) <= {0.0, 1.0} and 0.27 < draws.mean() < 0.33
    assert 0.65 < p.bernoulli(0.7).numpy().mean() < 0.75


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int8", "int32", "bool"])
def test_integer_sums_are_int64(dtype):
    # every int (unsigned too) and bool sums in int64, as torch (and as prod and cumsum already did)
    a = np.arange(12).reshape(3, 4) * 37 % 256
    a = a.astype(dtype) if dtype != "bool" else a % 3 > 0
    for f in (lambda t: t.sum(), lambda t: t.sum(0), lambda t: t.sum(1, keepdim=True)):
        got, want = f(Tensor(a)), f(torch.tensor(a))
        assert got.dtype == dtypes.int64 and want.dtype == torch.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_cat_and_stack_of_a_list_take_dim_positionally():
    a, b = data(2, 3), data(2, 3)
    compare(lambda x, y: Tensor.cat([x, y], 1), lambda x, y: torch.cat([x, y], 1), a, b)
    compare(lambda x, y: Tensor.cat((x, y * 2), -1), lambda x, y: torch.cat((x, y * 2), -1), a, b)
    compare(lambda x, y: Tensor.stack([x, y], 1), lambda x, y: torch.stack([x, y], 1), a, b)
    compare(lambda x, y: Tensor.stack((x, y), -1), lambda x, y: torch.stack((x, y), -1), a, b)
    with pytest.raises(TypeError, match="not a Tensor"):
        Tensor.cat([Tensor(a)], Tensor(b), 1)


def test_bool_float_int_of_a_one_element_tensor():
    assert bool(Tensor([1.5]) > 1) is True and bool(Tensor(0)) is False
    assert (Tensor([[1, 2]]) == Tensor([[1, 2]])).all() and not (Tensor([1, 2]) == Tensor([1, 3])).all()
    assert float(Tensor(2.5)) == 2.5 and int(Tensor([[7]])) == 7 and int(Tensor(-2.7)) == int(torch.tensor(-2.7))
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(Tensor([1, 2]))
    with pytest.raises(ValueError, match="one element"):
        float(Tensor.zeros(0))


def test_every_tensor_method_is_an_nn_function_with_torch_keywords():
    x = data(3, 4)
    compare(lambda t: nn.leaky_relu(t, negative_slope=0.2), lambda t: F.leaky_relu(t, negative_slope=0.2), x)
    compare(lambda t: t.leaky_relu(negative_slope=0.3), lambda t: F.leaky_relu(t, negative_slope=0.3), x)
    compare(lambda t: nn.softmax(t, dim=0), lambda t: F.softmax(t, dim=0), x)
    compare(lambda t: nn.gelu(t, approximate="tanh"), lambda t: F.gelu(t, approximate="tanh"), x)
    compare(lambda t: nn.pad(t, (1, 2)), lambda t: F.pad(t, (1, 2)), x)
    compare(lambda t: nn.silu(t) + nn.relu6(t) + nn.hardswish(t), lambda t: F.silu(t) + F.relu6(t) + F.hardswish(t), x)
    with pytest.raises(AttributeError, match="no attribute 'not_an_op'"):
        nn.not_an_op  # noqa: B018
    with pytest.raises(TypeError, match="expected a Tensor"):
        nn.relu(x)


def test_dtype_keywords_of_mean_cumsum_cumprod_and_to_a_dtype():
    x = data(3, 4)
    f64 = torch.float64
    compare(lambda t: t.mean(dtype="float64"), lambda t: t.mean(dtype=f64), x)
    compare(lambda t: t.mean(1, dtype=dtypes.float64), lambda t: t.mean(1, dtype=f64), x)
    compare(lambda t: t.cumsum(1, dtype="float64"), lambda t: t.cumsum(1, dtype=f64), x)
    compare(lambda t: t.cumprod(dim=0, dtype="float64"), lambda t: t.cumprod(dim=0, dtype=f64), x)
    ints = rng.integers(-3, 4, (3, 4)).astype(np.int64)
    compare(lambda t: t.cumsum(0, dtype="int8"), lambda t: t.cumsum(0, dtype=torch.int8), ints, backward=False)
    compare(lambda t: t.to(dtypes.float16), lambda t: t.to(torch.float16), x, atol=1e-3)
    compare(lambda t: t.to("torch.float64"), lambda t: t.to(torch.float64), x)
    compare(lambda t: t.to(dtype="int32"), lambda t: t.to(dtype=torch.int32), x, backward=False)
    compare(lambda t: t.to("CPU", "float64"), lambda t: t.to("cpu", torch.float64), x)
    compare(lambda t: t.to(Tensor([1], dtype="int8")), lambda t: t.to(torch.tensor([1], dtype=torch.int8)), x,
            backward=False)
    assert Tensor([1.0]).to("CPU").device == "CPU"


def test_older_tinygrads_acc_dtype():
    x = data(3, 4)
    compare(lambda t: t.sum(1, acc_dtype="float64"), lambda t: t.sum(1, dtype=torch.float64), x)
    compare(lambda t: t.matmul(t.T, acc_dtype="float64"), lambda t: t.double() @ t.T.double(), x)
    compare(lambda t: t.dot(t.T, acc_dtype=dtypes.float64), lambda t: t.double() @ t.T.double(), x)


def test_positive():
    x = data(2, 3)
    compare(lambda t: t.positive() * 2, lambda t: t.positive() * 2, x)
    with pytest.raises(TypeError, match="bool"):
        Tensor([True]).positive()


@pytest.mark.parametrize("padding_idx", [1, -1])
def test_embedding_padding_idx_gets_no_gradient(padding_idx):
    # F.embedding(ids, weight, padding_idx=): the row is looked up as the others, its gradient is 0 (torch's)
    rng = np.random.default_rng(3)
    ids, w = np.array([[0, 1], [2, 1]]), rng.standard_normal((3, 4)).astype(np.float32)
    g = rng.standard_normal((2, 2, 4)).astype(np.float32)
    wt = torch.tensor(w, requires_grad=True)
    want = F.embedding(torch.tensor(ids), wt, padding_idx=padding_idx)
    (want * torch.tensor(g)).sum().backward()
    we = Tensor(w, requires_grad=True)
    got = nn.embedding(Tensor(ids.astype(np.int32)), we, padding_idx=padding_idx)
    (got * Tensor(g)).sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(we.grad.numpy(), wt.grad.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.embedding(Tensor([0]), we, padding_idx=3)


def test_cosine_similarity_gradient_at_a_zero_vector():
    # torch: the norm's gradient is 0 at a zero vector, so the gradient is finite (x2 / (eps |x2|)); was NaN
    rng = np.random.default_rng(4)
    a, b = np.zeros((2, 3), np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    a[1] = rng.standard_normal(3)
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    F.cosine_similarity(at, bt).sum().backward()
    ae, be = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ae.cosine_similarity(be).sum().backward()
    np.testing.assert_allclose(ae.grad.numpy(), at.grad.numpy(), rtol=1e-5)  # (row 0: about 1e8, not NaN)
    np.testing.assert_allclose(be.grad.numpy(), bt.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                                   "float64"])
def test_is_floating_point_and_is_signed(dtype):
    t, x = torch.zeros(1, dtype=getattr(torch, dtype)), Tensor.zeros(1, dtype=dtype)
    assert x.is_floating_point() is t.is_floating_point()
    assert x.is_signed() is t.is_signed()
