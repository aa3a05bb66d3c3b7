"""Gradients against PyTorch: forward and backward of each differentiable op, and the autograd API."""

import numpy as np
import pytest
import torch

from ember.tensor import Tensor, dtypes, no_grad


def both(fn, *shapes, positive=False, seed=0, rtol=1e-4, atol=1e-5, device="CPU"):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if positive:
        arrays = [np.abs(a) + 0.5 for a in arrays]
    ours = [Tensor(a, device, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), fn(*theirs)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    upstream = rng.standard_normal(ref.shape).astype(np.float32)
    (out * Tensor(upstream, device)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for i, (o, t) in enumerate(zip(ours, theirs)):
        assert o.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"grad of input {i}")


UNARY = {
    "neg": lambda x: -x, "exp": lambda x: x.exp(), "sigmoid": lambda x: x.sigmoid(), "tanh": lambda x: x.tanh(),
    "relu": lambda x: x.relu(), "abs": lambda x: x.abs(), "sin": lambda x: x.sin(),
    "reciprocal": lambda x: x.reciprocal() if hasattr(x, "uop") else torch.reciprocal(x),
    "square": lambda x: x * x, "scale_shift": lambda x: x * 3.0 + 1.0, "rsub": lambda x: 2.0 - x,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    both(UNARY[name], (7, 33), positive=name in ("reciprocal",))


@pytest.mark.parametrize("name, fn", [("log", lambda x: x.log()), ("sqrt", lambda x: x.sqrt()),
                                      ("div", lambda x: 1.0 / x)])
def test_unary_positive(name, fn):
    both(fn, (33, 7), positive=True)


@pytest.mark.parametrize("sa, sb", [((7, 33), (7, 33)), ((7, 1), (1, 33)), ((33,), (7, 33)), ((1,), (5,))])
def test_binary_broadcast(sa, sb):
    both(lambda a, b: a * b + a - b, sa, sb)
    both(lambda a, b: a / (b * b + 1.0), sa, sb)
    both(lambda a, b: a.maximum(b), sa, sb)


def test_maximum_ties_split_like_torch():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(a.copy(), requires_grad=True)
    x.maximum(y).sum().backward()
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(a.copy(), requires_grad=True)
    torch.maximum(xt, yt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
    np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy())


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(axis, keepdim):
    both(lambda x: x.sum(axis, keepdim=keepdim) if hasattr(x, "uop") else
         (x.sum() if axis is None else x.sum(axis, keepdim=keepdim)), (7, 33))
    both(lambda x: x.mean(axis, keepdim=keepdim) if hasattr(x, "uop") else
         (x.mean() if axis is None else x.mean(axis, keepdim=keepdim)), (7, 33))


def test_max_reduce_splits_ties():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]], np.float32)
    x = Tensor(a, requires_grad=True)
    x.max(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])
    both(lambda x: x.max(1) if hasattr(x, "uop") else x.max(1).values, (7, 33))


def test_movement():
    both(lambda x: x.reshape(33, 7).permute(1, 0) * 2.0, (7, 33))
    both(lambda x: x.reshape(7, 1, 33).expand(7, 4, 33), (7, 33))
    both(lambda x: x.flip((0,)) if hasattr(x, "uop") else x.flip((0,)), (7, 33))
    both(lambda x: x[2:5, 1:30] * 3.0, (7, 33))
    both(lambda x: x.pad(((1, 2), (0, 3))) if hasattr(x, "uop") else torch.nn.functional.pad(x, (0, 3, 1, 2)), (7, 33))
    both(lambda x: x.T.contiguous() * x.T, (7, 33))


def test_matmul_and_mlp():
    both(lambda a, b: a @ b, (7, 33), (33, 5))
    both(lambda a, b: (a @ b).relu() @ b.T, (7, 33), (33, 5))
    both(lambda a, b: a @ b, (2, 7, 33), (33, 5))


def test_softmax_cross_entropy_like():
    def f(x):
        m = x.max(-1, keepdim=True) if hasattr(x, "uop") else x.max(-1, keepdim=True).values
        e = (x - m).exp()
        return (e / e.sum(-1, keepdim=True)).log()
    both(f, (7, 33), rtol=1e-4, atol=1e-5)


def test_where_and_cast():
    def f(x):
        return (x > 0).where(x * 2.0, x * -3.0) if hasattr(x, "uop") else torch.where(x > 0, x * 2.0, x * -3.0)
    both(f, (7, 33))
    both(lambda x: x.cast(dtypes.float64).cast(dtypes.float32) * x if hasattr(x, "uop") else x.double().float() * x,
         (7, 33))


def test_python_device_gradients_match():
    both(lambda a, b: (a @ b).relu().sum(0), (5, 7), (7, 3), device="PYTHON")


def test_backward_accumulates_and_api():
    x = Tensor(np.ones((3,), np.float32), requires_grad=True)
    (x * 2.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5, 5, 5])
    y = Tensor(np.ones((3,), np.float32), requires_grad=True)
    (gx, gy) = (x * y * 4.0).sum().gradient(x, y)
    np.testing.assert_allclose(gx.numpy(), [4, 4, 4])
    # detach stops the gradient
    z = Tensor(np.full((3,), 2.0, np.float32), requires_grad=True)
    (gz,) = (z * z.detach()).sum().gradient(z)
    np.testing.assert_allclose(gz.numpy(), [2, 2, 2])
    # under no_grad, new tensors carry no gradient
    with no_grad():
        w = z * 5.0
    with pytest.raises(ValueError, match="no tensor with requires_grad=True"):
        w.sum().backward()


def test_errors():
    x = Tensor(np.ones((3,), np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="needs a one-element tensor"):
        (x * 2.0).backward()
    with pytest.raises(TypeError, match="only a float tensor"):
        Tensor([1, 2]).sum().backward()
    other = Tensor(np.ones((2,), np.float32))
    with pytest.raises(ValueError, match="target 0 .* is not used"):
        (x * 2.0).sum().gradient(other)
    with pytest.raises(ValueError, match="`gradient` has shape"):
        (x * 2.0).backward(Tensor.ones(4))


@pytest.mark.parametrize("order", ["detached first", "twin first", "detach of a realized twin", "lazy reader"])
def test_a_realized_detached_tensor_passes_no_gradient_beside_its_twin(order):
    # y = 2x and z = y.detach() share their values (and, once realized, their memory), but only y carries x's
    # gradient: d/dx sum(z * y) = 2 z, as PyTorch gives, whichever of them is realized first
    xn = np.array([1.0, -2.0, 3.0], np.float32)
    x = Tensor(xn, requires_grad=True)
    y = x * 2
    if order == "detached first":
        z = y.detach().realize()
    elif order == "twin first":
        z = y.detach()
        y.realize()
        z.realize()
    elif order == "detach of a realized twin":
        y.realize()
        z = y.detach().realize()
    else:
        z = y.detach()
        w = z * 1.5  # lazy, made before z is realized: it reads z's realized value afterwards
        z.realize()
    loss = ((w / 1.5) if order == "lazy reader" else z) * y
    loss.sum().backward()
    xt = torch.tensor(xn, requires_grad=True)
    yt = xt * 2
    (yt.detach() * yt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(z.numpy(), 2 * xn)
    # and a gradient still flows through the twin alone
    (gx,) = (y * y).sum().gradient(x)
    np.testing.assert_allclose(gx.numpy(), 8 * xn, rtol=1e-6)
