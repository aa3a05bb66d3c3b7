"""Forward values and gradients at the edges (0, -0.0, +-inf, huge and tiny floats) against PyTorch, for the ops an
external op suite found off there: the odd functions computed on |x| (erf, atan, asin, asinh: gradient 0 at 0 through
abs/sign), silu below -88 (inf * 0), logit at 0 and 1, atan2 with signed zeros and x == 0, x ** 0.5, and the gradients
of rounded divisions (0, never NaN)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor
from ember.uops import dtypes

EDGE = [0.0, -0.0, 1e-30, -1e-30, 0.3, -0.7, 1.0, -1.0, 2.5, -3.0, 20.0, -20.0, 88.5, -88.5, 100.0, -100.0, 1e30, -1e30,
        3.4e38, -3.4e38, math.inf, -math.inf]


def _run(f_torch, f_ember, *arrays):
    ts = [torch.tensor(a, dtype=torch.float32, requires_grad=True) for a in arrays]
    out_t = f_torch(*ts)
    out_t.sum().backward()
    es = [Tensor(np.asarray(a, np.float32), requires_grad=True) for a in arrays]
    out_e = f_ember(*es)
    out_e.sum().backward()
    return out_t.detach().numpy(), out_e.numpy(), [t.grad.numpy() for t in ts], [e.grad.numpy() for e in es]


def _assert_close(want, got, rtol, atol, what):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


UNARY = {
    "erf": (torch.erf, lambda x: x.erf()),
    "erfc": (torch.erfc, lambda x: x.erfc()),
    "atan": (torch.atan, lambda x: x.atan()),
    "arctan": (torch.arctan, lambda x: x.arctan()),
    "asinh": (torch.asinh, lambda x: x.asinh()),
    "silu": (F.silu, lambda x: x.silu()),
    "gelu": (F.gelu, lambda x: x.gelu()),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_forward_and_gradient_at_the_edges(name):
    f_torch, f_ember = UNARY[name]
    # (torch's gelu overflows from 3.4e38 (0.5 * x last), ours not, and silu's gradient at -inf is NaN, ours 0)
    xs = [x for x in EDGE if not (name in ("gelu", "silu") and abs(x) > 1e38)]
    want, got, gt, ge = _run(f_torch, f_ember, np.array(xs))
    _assert_close(want, got, 2e-6, 1e-6, f"{name} forward")
    _assert_close(gt[0], ge[0], 1e-5, 1e-6, f"{name} gradient")  # (erf at 0: 2 / sqrt(pi), not 0)


@pytest.mark.parametrize("name", ["erf", "atan", "asinh", "asin", "sinh"])
def test_odd_functions_keep_the_sign_of_zero(name):
    got = getattr(Tensor(np.array([0.0, -0.0], np.float32)), name)().numpy()
    assert list(np.signbit(got)) == [False, True], f"{name}(+-0.0) gave {got}"


def test_asin_gradient_at_zero_and_inside():
    xs = np.array([0.0, -0.0, 0.25, -0.5, 0.75, -0.99])
    want, got, gt, ge = _run(torch.asin, lambda x: x.asin(), xs)
    _assert_close(want, got, 2e-6, 1e-6, "asin forward")
    _assert_close(gt[0], ge[0], 1e-5, 1e-6, "asin gradient")


def test_logit_gradient_is_inf_at_0_and_1():
    xs = np.array([0.0, 1.0, 0.25, 0.5, 0.9])
    want, got, gt, ge = _run(torch.logit, lambda x: x.logit(), xs)
    _assert_close(want, got, 1e-6, 1e-6, "logit forward")
    _assert_close(gt[0], ge[0], 1e-5, 1e-6, "logit gradient")


def test_atan2_signed_zeros_infinities_and_gradient_at_x_zero():
    vals = [0.0, -0.0, 1.0, -2.5, math.inf, -math.inf, math.nan]
    ys = np.array([y for y in vals for _ in vals])
    xs = np.array([x for _ in vals for x in vals])
    want, got, gt, ge = _run(torch.atan2, lambda y, x: y.atan2(x), ys, xs)
    _assert_close(want, got, 1e-6, 1e-6, "atan2 forward")
    assert (np.signbit(want) == np.signbit(got))[~np.isnan(want)].all(), "atan2: sign of a zero result"
    finite = np.isfinite(ys) & np.isfinite(xs)  # (torch's gradient at an infinite input is NaN, ours 0: both untaken)
    for i in range(2):
        _assert_close(gt[i][finite], ge[i][finite], 1e-5, 1e-6, f"atan2 gradient {i}")


def test_atan2_keeps_16_bit_dtypes_and_makes_ints_float():
    y, x = np.array([1.0, -2.0, 0.5]), np.array([-1.0, 3.0, 0.0])
    for dt, tdt in [(dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)]:
        got = Tensor(y, dtype=dt).atan2(Tensor(x, dtype=dt))
        assert got.dtype == dt
        want = torch.tensor(y, dtype=tdt).atan2(torch.tensor(x, dtype=tdt))
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1e-2, atol=1e-2)
    got = Tensor([1, -2]).atan2(Tensor([0, 3]))
    assert got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), torch.tensor([1, -2]).atan2(torch.tensor([0, 3])).numpy(), rtol=1e-6)


def test_pow_one_half_is_sqrt_as_torch():  # (torch's x ** -0.5 is rsqrt forward, pow backward: left as pow)
    xs = np.array([-0.0, 0.0, 4.0, -math.inf, math.inf, -1.0, 2.0])
    for e in (0.5, 2.0):
        want, got, gt, ge = _run(lambda x, e=e: x ** e, lambda x, e=e: x ** e, xs)
        _assert_close(want, got, 1e-6, 1e-6, f"x ** {e}")
        assert (np.signbit(want) == np.signbit(got))[~np.isnan(want)].all()
        _assert_close(gt[0], ge[0], 1e-6, 1e-6, f"x ** {e} gradient")


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_rounded_division_has_zero_gradients_even_by_zero(mode):
    a = np.array([1.0, -1.0, 0.0, 3.0, math.inf, 2.0])
    b = np.array([0.0, -0.0, 0.0, 2.0, 1.0, math.inf])
    want, got, gt, ge = _run(lambda x, y: x.div(y, rounding_mode=mode), lambda x, y: x.div(y, rounding_mode=mode), a, b)
    _assert_close(want, got, 0, 0, f"div {mode}")
    for g in ge:
        assert (g == 0).all(), f"div {mode}: gradient {g}"
    _, _, _, ge = _run(lambda x, y: (x / y).floor() + x, lambda x, y: (x / y).floor() + x, a, b)
    assert (ge[0] == 1).all() and (ge[1] == 0).all()


@pytest.mark.parametrize("name", ["std", "var", "mean", "sum", "logsumexp"])
@pytest.mark.parametrize("dim", [0, -1])
def test_reductions_of_a_0d_tensor_over_dim_0(name, dim):
    want = getattr(torch.tensor(1.5), name)(dim)
    got = getattr(Tensor(1.5), name)(dim)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), equal_nan=True)  # (std and var: NaN, 0 / 0)


def test_max_gradient_goes_to_the_nan_that_is_the_max():
    x = np.array([1.0, math.nan, 2.0, 0.5])
    want, got, gt, ge = _run(lambda t: t.max(), lambda t: t.max(), x)
    _assert_close(want, got, 0, 0, "max forward")
    _assert_close(gt[0], ge[0], 0, 0, "max gradient")  # [0, 1, 0, 0], was NaN everywhere (mask empty: 0 / 0)
    x2 = np.array([[1.0, math.nan, 2.0], [3.0, 3.0, 0.0]])
    want, got, gt, ge = _run(lambda t: t.min(), lambda t: t.min(), x2)
    _assert_close(gt[0], ge[0], 0, 0, "min gradient")
    _, _, _, ge = _run(lambda t: t.amax(1), lambda t: t.max(1), x2)
    _assert_close(np.array([[0, 1, 0], [0.5, 0.5, 0]]), ge[0], 0, 0, "max(1) gradient")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_gradient_at_saturated_probabilities(reduction):
    # a float32 sigmoid saturates to exactly 1.0 from x = 17: torch's gradient there is (p - y) / max(p (1 - p), 1e-12)
    p = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 0.3, 1.0])
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.6, 0.25])
    pt, yt = torch.tensor(p, dtype=torch.float32, requires_grad=True), torch.tensor(y, dtype=torch.float32)
    want = F.binary_cross_entropy(pt, yt, reduction=reduction)
    want.sum().backward()
    pe = Tensor(p.astype(np.float32), requires_grad=True)
    got = pe.binary_cross_entropy(Tensor(y.astype(np.float32)), reduction=reduction)
    got.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pe.grad.numpy(), pt.grad.numpy(), rtol=1e-5)  # (1e12 where p is 1 and y 0: not NaN)



MASKED = np.array([[0.0, -math.inf, 1.0], [2.0, -math.inf, -math.inf], [-math.inf, 0.5, -1.0]])
LOSSES_OVER_MASKED_LOGITS = {
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y, reduction="none"),
                      lambda x, y: x.cross_entropy(y, reduction="none")),
    "cross_entropy weight": (lambda x, y: F.cross_entropy(x, y, weight=torch.tensor([0.5, 2.0, 1.0])),
                             lambda x, y: x.cross_entropy(y, weight=Tensor([0.5, 2.0, 1.0]))),
    "cross_entropy label_smoothing": (lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
                                      lambda x, y: x.cross_entropy(y, label_smoothing=0.1)),
    "nll_loss": (lambda x, y: F.nll_loss(x.log_softmax(1), y), lambda x, y: x.log_softmax(1).nll_loss(y)),
    "sparse_categorical_crossentropy": (lambda x, y: F.cross_entropy(x, y),
                                        lambda x, y: x.sparse_categorical_crossentropy(y)),
}


@pytest.mark.parametrize("name", list(LOSSES_OVER_MASKED_LOGITS))
def test_class_losses_with_masked_logits(name):
    # logits masked with -inf beside the label (attention-style masking): torch's loss is finite, the pick of the
    # label's log-probability was a product with the one-hot (0 * -inf = NaN in every row)
    f_torch, f_ember = LOSSES_OVER_MASKED_LOGITS[name]
    y = np.array([0, 0, 2])
    xt = torch.tensor(MASKED, dtype=torch.float32, requires_grad=True)
    want = f_torch(xt, torch.tensor(y))
    want.sum().backward()
    xe = Tensor(MASKED.astype(np.float32), requires_grad=True)
    got = f_ember(xe, Tensor(y.astype(np.int32)))
    got.sum().backward()
    _assert_close(want.detach().numpy(), got.numpy(), 1e-6, 1e-6, f"{name} forward")  # (label smoothing: inf)
    _assert_close(xt.grad.numpy(), xe.grad.numpy(), 1e-5, 1e-6, f"{name} gradient")


@pytest.mark.parametrize("name", ["atanh", "acosh"])
def test_inverse_hyperbolic_gradients_at_the_domain_ends(name):
    # torch: atanh' = 1 / (1 - x^2) is inf at +-1 and 0 at +-inf, acosh' = 1 / sqrt(x^2 - 1) is inf at 1 and 0 at inf
    # (both were NaN: inf * 0 inside log1p(2x / (1 - x)) and sqrt(2t + t^2))
    x = [1.0, -1.0, 0.0, -0.0, 0.5, -0.999, 0.9999, 1e-20, 2.0, 1e10, math.inf, -math.inf] if name == "atanh" else \
        [1.0, 1.0000001, 1.5, 2.0, 10.0, 1e9, 2e9, 1e30, math.inf]  # (1e30: torch 1 / sqrt(inf) = 0, Ember 1e-30)
    want, got, gt, ge = _run(getattr(torch, name), lambda t: getattr(t, name)(), x)
    _assert_close(want, got, 1e-6, 0, f"{name} forward")
    _assert_close(gt[0], ge[0], 1e-4, 1e-19, f"{name} gradient")  # (1e-4: atanh near 1 is 500.257, torch 500.260)


def test_sinc_gradient_near_zero():
    # the series below |pi x| < 0.5: sin(pi x) / (pi x) differentiated cancelled (-0.32 at 1e-8, exactly 0 wanted);
    # compared with torch in float64 (torch's own float32 gradient at 1e-4 is 2.8x off through that cancellation)
    x = [0.0, -0.0, 1e-30, -1e-30, 1e-8, 1e-4, -1e-3, 0.1, 0.159, 0.16, -0.3, 0.5, 1.0, 2.5, -7.25, 1e6]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    xt.sinc().sum().backward()
    xe = Tensor(np.asarray(x, np.float32), requires_grad=True)
    out = xe.sinc()
    out.sum().backward()
    _assert_close(xt.detach().sinc().numpy(), out.numpy(), 1e-6, 1e-7, "sinc forward")
    _assert_close(xt.grad.numpy(), xe.grad.numpy(), 1e-5, 1e-6, "sinc gradient")


def test_hypot_gradient_at_ties_and_extremes():
    # torch: d hypot(a, b) / da = a / hypot; a tie split it through maximum/minimum, 1e-30 and 1e30 under/overflowed
    a = np.array([3.0, -3.0, 1e-30, 1e30, 0.5, -2.0, 0.0, 4.0, 1e-20, 3e38], np.float32)
    b = np.array([3.0, 3.0, 1e-30, 1e30, -1.5, 0.0, 5.0, -4.0, 2e-20, 3e38], np.float32)
    want, got, gt, ge = _run(torch.hypot, lambda x, y: x.hypot(y), a, b)
    _assert_close(want, got, 1e-6, 0, "hypot forward")  # (3e38, 3e38: inf in both)
    for i in range(2):
        _assert_close(gt[i][:-1], ge[i][:-1], 1e-5, 0, f"hypot gradient {i}")  # (at inf both give 0 * ... : skipped)
    x = Tensor([math.inf, -math.inf, math.nan, 1.0, 1e-45])
    np.testing.assert_array_equal(x.hypot(Tensor([math.nan, 2.0, math.inf, math.nan, 0.0])).numpy(),
                                  [math.inf, math.inf, math.inf, math.nan, 0.0])  # (inf with NaN is inf, as C's)
