"""Each first-cut Tensor op on the CPU and PYTHON devices against numpy."""

import os

import numpy as np
import pytest

from ember.tensor import Tensor, dtypes

# the small cases' device: the reference interpreter, or another backend (EMBER_TEST_SMALL_DEVICE=AMD with
# MOCKGPU=1: tests/test_amd_tensor_suite.py)
SMALL = os.environ.get("EMBER_TEST_SMALL_DEVICE", "PYTHON")

DEVICES = ["CPU", SMALL]
SHAPES = [(7,), (33, 7), (1000,), (1, 33), (3, 1, 5), (0, 4), ()]


@pytest.fixture(params=DEVICES)
def dev(request):
    return request.param


def data(shape, kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "float32":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "int32":
        return rng.integers(-50, 50, shape).astype(np.int32)
    return rng.integers(0, 2, shape).astype(np.bool_)


def check(t, want, rtol=1e-5, atol=1e-6):
    got = t.numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
def test_roundtrip_and_creation(dev, shape, kind):
    a = data(shape, kind)
    check(Tensor(a, dev), a)
    assert Tensor(a, dev).tolist() == a.tolist()
    check(Tensor.zeros(shape, device=dev), np.zeros(shape, np.float32))
    check(Tensor.ones(shape, dtype=dtypes.int32, device=dev), np.ones(shape, np.int32))
    check(Tensor.full(shape, 3.5, device=dev), np.full(shape, 3.5, np.float32))


def test_scalars_lists_arange_empty(dev):
    assert Tensor(2.5, dev).item() == 2.5 and Tensor(3, dev).dtype == dtypes.int32
    assert Tensor([[1, 2], [3, 4]], dev).dtype == dtypes.int32
    check(Tensor([1.5, 2.0], dev), np.array([1.5, 2.0], np.float32))
    check(Tensor.arange(7, device=dev), np.arange(7, dtype=np.int32))
    check(Tensor.arange(1.0, 4.0, 0.5, device=dev), np.arange(1.0, 4.0, 0.5, dtype=np.float32))
    e = Tensor.empty(3, 4, device=dev)
    assert e.shape == (3, 4) and e.numpy().shape == (3, 4)
    with pytest.raises(ValueError, match="only a tensor of one element"):
        Tensor([1, 2], dev).item()


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "max": lambda a, b: np.maximum(a, b) if isinstance(a, np.ndarray) else a.maximum(b),
          "min": lambda a, b: np.minimum(a, b) if isinstance(a, np.ndarray) else a.minimum(b),
          "lt": lambda a, b: a < b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b,
          "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("kind", ["float32", "int32"])
@pytest.mark.parametrize("sa, sb", [((33, 7), (33, 7)), ((33, 1), (1, 7)), ((7,), (33, 7)), ((1000,), ()),
                                    ((0, 3), (1, 3))])
def test_binary_broadcast(dev, op, kind, sa, sb):
    a, b = data(sa, kind, 1), data(sb, kind, 2)
    check(BINARY[op](Tensor(a, dev), Tensor(b, dev)), BINARY[op](a, b))


def test_division_and_scalars(dev):
    a, b = data((33, 7), "float32", 1), data((33, 7), "float32", 2) + 3
    check(Tensor(a, dev) / Tensor(b, dev), a / b)
    check(2.0 / Tensor(b, dev), 2.0 / b)
    check(Tensor(a, dev) * 2 + 1, a * 2 + 1)
    check(1 - Tensor(a, dev), 1 - a)
    i = data((7,), "int32")
    check(Tensor(i, dev) + 3, i + 3)
    check(Tensor(i, dev) * 0.5, (i * 0.5).astype(np.float32))  # a float scalar makes an int tensor float
    check(Tensor(i, dev) / 2, (i / 2).astype(np.float32))
    check(-Tensor(i, dev), -i)


def test_promotion(dev):
    i, f, b = data((7,), "int32"), data((7,), "float32"), data((7,), "bool")
    check(Tensor(i, dev) + Tensor(f, dev), (i + f).astype(np.float32))  # int + float32 -> float32, as in PyTorch
    check(Tensor(b, dev) + Tensor(i, dev), b + i)
    check(Tensor(b, dev).where(Tensor(f, dev), 0.0), np.where(b, f, 0).astype(np.float32))
    check(Tensor(i, dev).cast(dtypes.float32), i.astype(np.float32))
    check(Tensor(f, dev).cast(dtypes.int32), f.astype(np.int32))
    check(Tensor(f, dev).cast(dtypes.bool), f.astype(np.bool_))


def test_unary(dev):
    a = data((33, 7), "float32")
    check(Tensor(a, dev).exp(), np.exp(a), rtol=1e-5)
    check(Tensor(np.abs(a) + 0.1, dev).log(), np.log(np.abs(a) + 0.1), rtol=1e-5, atol=1e-6)
    check(Tensor(np.abs(a), dev).sqrt(), np.sqrt(np.abs(a)))
    check(Tensor(a, dev).relu(), np.maximum(a, 0))
    check(Tensor(a, dev).sigmoid(), 1 / (1 + np.exp(-a)), rtol=1e-5)
    check(Tensor(a, dev).abs(), np.abs(a))


@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
@pytest.mark.parametrize("shape, axis", [((33, 7), None), ((33, 7), 0), ((33, 7), 1), ((33, 7), -1),
                                         ((3, 1, 5), (0, 2)), ((1000,), 0), ((0, 4), 1), ((1, 1), None)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(dev, kind, shape, axis, keepdim):
    a = data(shape, kind)
    t = Tensor(a, dev)
    np_axis = axis
    check(t.sum(axis, keepdim), a.sum(np_axis, keepdims=keepdim, dtype=np.int64 if kind != "float32" else None),
          rtol=1e-4, atol=1e-4)
    if a.size and all(a.shape[i] for i in (range(a.ndim) if axis is None else np.atleast_1d(axis))):
        check(t.max(axis, keepdim), a.max(np_axis, keepdims=keepdim))
        check(t.min(axis, keepdim), a.min(np_axis, keepdims=keepdim))
    if kind == "float32":
        with np.errstate(all="ignore"):
            check(t.mean(axis, keepdim), a.mean(np_axis, keepdims=keepdim).astype(np.float32), rtol=1e-4, atol=1e-5)


def test_reduction_axis_errors():
    with pytest.raises(ValueError, match="axis 2 is out of range for a tensor of 2 dims"):
        Tensor.ones(3, 4).sum(2)


@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
def test_movement(dev, kind):
    a = data((4, 6, 5), kind)
    t = Tensor(a, dev)
    check(t.reshape(6, 20), a.reshape(6, 20))
    check(t.reshape(-1, 5), a.reshape(-1, 5))
    check(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    check(t.T, a.T)
    check(t.transpose(0, 2), a.swapaxes(0, 2))
    check(t[:, :1].expand(4, 3, 5), np.broadcast_to(a[:, :1], (4, 3, 5)))
    check(t.pad(((1, 2), (0, 0), (3, 1))), np.pad(a, ((1, 2), (0, 0), (3, 1))))
    check(t.shrink(((1, 3), None, (2, 5))), a[1:3, :, 2:5])
    check(t.flip((0, 2)), a[::-1, :, ::-1])
    check(t[1], a[1])
    check(t[1:3, 2, -2:], a[1:3, 2, -2:])
    # non-contiguous views into more ops, and a realized view
    acc = np.int64 if kind != "float32" else None
    check((t.permute(2, 1, 0).flip(1)[1:4] + t.permute(2, 1, 0)[:3]).sum(0),
          (a.transpose(2, 1, 0)[:, ::-1][1:4] + a.transpose(2, 1, 0)[:3]).sum(0, dtype=acc))
    v = t.permute(1, 0, 2).contiguous().realize()
    check(v, np.ascontiguousarray(a.transpose(1, 0, 2)))
    if kind == "float32":
        check(t.pad(((1, 1), (0, 0), (0, 0)), value=-2.0), np.pad(a, ((1, 1), (0, 0), (0, 0)), constant_values=-2.0))


@pytest.mark.parametrize("n, k, m", [(7, 33, 5), (1, 1, 1), (33, 7, 33), (16, 1, 8), (3, 0, 4)])
@pytest.mark.parametrize("kind", ["float32", "int32"])
def test_matmul(dev, n, k, m, kind):
    a, b = data((n, k), kind, 1), data((k, m), kind, 2)
    check(Tensor(a, dev) @ Tensor(b, dev), a @ b, rtol=1e-5, atol=1e-4)
    check(Tensor(a, dev).T.contiguous().T @ Tensor(b, dev), a @ b, rtol=1e-5, atol=1e-4)
    v = data((k,), kind, 3)
    check(Tensor(a, dev) @ Tensor(v, dev), a @ v, rtol=1e-5, atol=1e-4)
    bat = data((2, n, k), kind, 4)
    check(Tensor(bat, dev) @ Tensor(b, dev), bat @ b, rtol=1e-5, atol=1e-4)


def test_errors():
    with pytest.raises(ValueError, match=r"cannot broadcast shapes \(3,\) and \(4,\)"):
        Tensor.ones(3) + Tensor.ones(4)
    with pytest.raises(ValueError, match="do not align"):
        Tensor.ones(3, 4) @ Tensor.ones(3, 4)
    with pytest.raises(ValueError, match="unknown device.*CPU.*PYTHON"):
        Tensor.ones(3, device="NOPE")
    with pytest.raises(ValueError, match="cannot view shape"):
        Tensor.ones(3, 4).reshape(5, 3)
    with pytest.raises(IndexError, match="index 5 is out of range for dim 0 of size 3"):
        Tensor.ones(3)[5]


def test_to_device_and_contiguous():
    a = data((7, 33), "float32")
    t = Tensor(a, "CPU")
    p = t.to("PYTHON")
    assert p.device == "PYTHON"
    check(p * 2, a * 2)
    check(p.to("CPU").permute(1, 0), a.T)
    assert Tensor(a, "CPU").to("CPU:1").device == "CPU:1"
    check(Tensor(a, "CPU").to("CPU:1") + 1, a + 1)


def test_realize_updates_every_view():
    t = Tensor(data((4, 4), "float32"), "CPU")
    y = (t * 2).realize()
    assert y.uop.src[0].op.name == "BUFFER"
    z = y + 1
    check(z, t.numpy() * 2 + 1)
