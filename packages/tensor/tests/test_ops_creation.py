"""Creation ops of the full Tensor API (linspace, eye, *_like, random) against PyTorch (CPU) and numpy."""

import math

import numpy as np
import pytest
import torch

from ember.tensor import Tensor, dtypes
from ember.tensor.ops.random import _threefry2x32


def check(got, want, rtol=0.0, atol=0.0):
    g, w = got.numpy(), want.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("start, end, steps", [(0, 1, 5), (-3.5, 7.25, 11), (2, -2, 4), (0, 10, 1), (1, 5, 0),
                                               (-1, 1, 100), (3, 3, 3)])
def test_linspace(dev, start, end, steps):
    check(Tensor.linspace(start, end, steps, device=dev), torch.linspace(start, end, steps), 1e-6, 1e-6)


def test_linspace_dtype_and_errors():
    check(Tensor.linspace(0, 10, 6, dtype=dtypes.int32), torch.linspace(0, 10, 6, dtype=torch.int32))
    with pytest.raises(ValueError, match="linspace: steps must be a non-negative int, got -1"):
        Tensor.linspace(0, 1, -1)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("n, m", [(3, None), (1, None), (2, 5), (4, 1), (0, 3)])
def test_eye(dev, n, m):
    want = torch.eye(n) if m is None else torch.eye(n, m)
    check(Tensor.eye(n, m, device=dev), want)
    check(Tensor.eye(n, m, dtype=dtypes.int32, device=dev), want.int())
    with pytest.raises(ValueError, match="eye: n must be a non-negative int"):
        Tensor.eye(-1)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_like(dev):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.zeros_like(), torch.zeros_like(ta))
    check(t.ones_like(), torch.ones_like(ta))
    check(t.full_like(7), torch.full_like(ta, 7))
    check(t.full_like(2.5, dtype=dtypes.float32), torch.full_like(ta, 2.5, dtype=torch.float32))
    check(t.ones_like(dtype=dtypes.bool), torch.ones_like(ta, dtype=torch.bool))
    assert t.zeros_like().device == dev


# Random123's known-answer vectors for threefry2x32 with 20 rounds: (key, counter) -> output
THREEFRY_KAT = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
                ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
                ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_threefry_known_answers(dev):
    for key, ctr, want in THREEFRY_KAT:
        x0, x1 = _threefry2x32(Tensor([ctr[0]], dev, dtypes.uint32), Tensor([ctr[1]], dev, dtypes.uint32), key)
        assert (x0.item(), x1.item()) == want


def test_same_seed_same_numbers_on_every_device():
    out = {}
    for dev in ("CPU", "PYTHON"):
        Tensor.manual_seed(1234)
        out[dev] = [Tensor.rand(3, 7, device=dev).numpy(), Tensor.randn(5, device=dev).numpy(),
                    Tensor.randint(4, low=-3, high=3, device=dev).numpy()]
    # the bits are the same everywhere; randn goes through log/sin, whose last ulp may differ between devices
    np.testing.assert_array_equal(out["CPU"][0], out["PYTHON"][0])
    np.testing.assert_allclose(out["CPU"][1], out["PYTHON"][1], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out["CPU"][2], out["PYTHON"][2])
    Tensor.manual_seed(1234)
    np.testing.assert_array_equal(Tensor.rand(3, 7).numpy(), out["CPU"][0])  # a reseed replays the stream
    assert not np.array_equal(Tensor.rand(3, 7).numpy(), out["CPU"][0])  # the next call draws new numbers
    Tensor.manual_seed(1235)
    assert not np.array_equal(Tensor.rand(3, 7).numpy(), out["CPU"][0])


def test_random_calls_of_one_shape_are_one_kernel():
    """The threefry key is a buffer, not constants in the kernel: two draws of one shape (a model's same-shaped
    weights) are the same kernel AST, compiled once, and still different numbers."""
    from ember.schedule import schedule
    from ember.uops import Ops, UOp

    def asts(t):
        return [it.ast for it in schedule(UOp.sink(t.uop)).items if it.ast.op is Ops.SINK]

    a, b = Tensor.randn(64, 48), Tensor.randn(64, 48)
    assert asts(a) == asts(b) and len(asts(a)) >= 1
    assert not np.array_equal(a.numpy(), b.numpy())


def test_distributions():
    Tensor.manual_seed(0)
    n = 20001  # odd: the last threefry pair is cut
    u = Tensor.rand(n).numpy()
    assert u.dtype == np.float32 and u.shape == (n,) and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > n / 10 * 0.9
    g = Tensor.randn(100, 200).numpy()
    assert g.shape == (100, 200) and abs(g.mean()) < 0.02 and abs(g.std() - 1) < 0.02 and np.isfinite(g).all()
    assert abs((np.abs(g) < 1).mean() - 0.6827) < 0.01
    r = Tensor.randint(n, low=-2, high=5).numpy()
    assert r.dtype == np.int32 and set(np.unique(r)) == set(range(-2, 5))
    v = Tensor.uniform(n, low=-3.0, high=-1.0).numpy()
    assert v.min() >= -3 and v.max() < -1 and abs(v.mean() + 2) < 0.02
    m = Tensor.normal(n, mean=4.0, std=0.5).numpy()
    assert abs(m.mean() - 4) < 0.02 and abs(m.std() - 0.5) < 0.02
    assert Tensor.rand(2, 3, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.rand(0).shape == (0,) and Tensor.rand().shape == ()


def test_inits():
    Tensor.manual_seed(0)
    k = Tensor.kaiming_uniform(64, 32, a=math.sqrt(5)).numpy()
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 5)) / math.sqrt(32)
    assert k.shape == (64, 32) and np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
    g = Tensor.glorot_uniform(64, 32).numpy()
    bound = math.sqrt(6 / (64 + 32))
    assert np.abs(g).max() <= bound and np.abs(g).max() > 0.9 * bound


def test_random_errors():
    with pytest.raises(TypeError, match="manual_seed: seed must be an int"):
        Tensor.manual_seed(1.5)
    with pytest.raises(ValueError, match=r"rand: shape must be non-negative ints, got \(-1,\)"):
        Tensor.rand(-1)
    with pytest.raises(TypeError, match="rand: dtype must be a float type"):
        Tensor.rand(2, dtype=dtypes.int32)
    with pytest.raises(ValueError, match="randint: need ints low < high, got low=3 high=3"):
        Tensor.randint(2, low=3, high=3)


def test_randint_in_torchs_forms():
    for t, low, high, shape in ((Tensor.randint(0, 10, (3,)), 0, 10, (3,)), (Tensor.randint(5, (2, 4)), 0, 5, (2, 4)),
                                (Tensor.randint(-3, 3, size=(50,)), -3, 3, (50,)),
                                (Tensor.randint(2, 3, low=1, high=4), 1, 4, (2, 3))):
        v = t.numpy()
        assert v.shape == shape and v.min() >= low and v.max() < high
    with pytest.raises(ValueError, match="torch's form"):
        Tensor.randint(0, 1, 2, (3,))


def test_a_list_of_tensors_is_stacked_as_torch_tensor_does():
    a, b = Tensor(1.5), Tensor(2.5, requires_grad=True)
    got = Tensor([a, b * 2])
    assert got.shape == (2,) and got.numpy().tolist() == torch.tensor([torch.tensor(1.5), torch.tensor(5.0)]).tolist()
    assert Tensor([Tensor([1, 2]), Tensor([3, 4])], dtype="float32").numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
