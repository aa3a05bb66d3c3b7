"""Movement and shape ops of the full Tensor API against PyTorch (CPU), on the CPU and PYTHON devices."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes

# the small cases' device: the reference interpreter, or another backend (EMBER_TEST_SMALL_DEVICE=AMD with
# MOCKGPU=1: tests/test_amd_tensor_suite.py)
SMALL = os.environ.get("EMBER_TEST_SMALL_DEVICE", "PYTHON")


def check(got, want):
    g, w = got.numpy(), want.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_array_equal(g, w)  # movement is exact


def arr(shape, kind="float32", seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32) if kind == "float32" else \
        rng.integers(-50, 50, shape).astype(kind) if kind != "bool" else rng.integers(0, 2, shape).astype(np.bool_)


DEVS = ["CPU", SMALL]


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
def test_shape_ops(dev, kind):
    a = arr((2, 1, 3, 5), kind)
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.view(6, -1), ta.view(6, -1))
    check(t.reshape(-1), ta.reshape(-1))
    check(t.squeeze(), ta.squeeze())
    check(t.squeeze(1), ta.squeeze(1))
    check(t.squeeze(-1), ta.squeeze(-1))  # not size 1: kept, as torch
    check(t.squeeze((0, 1)), ta.squeeze((0, 1)))
    for d in (0, 2, 4, -1, -5):
        check(t.unsqueeze(d), ta.unsqueeze(d))
    check(t.flatten(), ta.flatten())
    check(t.flatten(1), ta.flatten(1))
    check(t.flatten(1, -2), ta.flatten(1, -2))
    check(Tensor(a[0, 0, 0, 0], dev).flatten(), torch.tensor(a[0, 0, 0, 0]).flatten())
    check(t.unflatten(-1, (5, 1)), ta.unflatten(-1, (5, 1)))
    check(t.unflatten(2, (-1, 3)), ta.unflatten(2, (-1, 3)))
    check(t.swapaxes(0, -1), ta.swapaxes(0, -1))


def test_shape_errors():
    t = Tensor.ones(2, 3)
    with pytest.raises(ValueError, match="reshape: only one dim can be -1"):
        t.reshape(-1, -1)
    with pytest.raises(ValueError, match="cannot view shape"):
        t.view(4, -1)
    with pytest.raises(IndexError, match="unsqueeze: dim 3 is out of range for a tensor of 2 dims"):
        t.unsqueeze(3)
    with pytest.raises(ValueError, match="squeeze: axis 2 is out of range"):
        t.squeeze(2)
    with pytest.raises(ValueError, match=r"unflatten: sizes \(2, 2\) multiply to 4, dim 1 has size 3"):
        t.unflatten(1, (2, 2))
    with pytest.raises(ValueError, match="flatten: start_dim 1 comes after end_dim 0"):
        t.flatten(1, 0)


PAD_CASES = [(1, 2), (0, 0, 2, 1), (3, 0, 1, 1), (1, 1, 0, 2, 1, 0)]


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("pad", PAD_CASES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad(dev, pad, mode):
    a = arr((2, 4, 5), seed=1)
    t, ta = Tensor(a, dev), torch.tensor(a)
    kw = {"value": 1.5} if mode == "constant" else {}
    want = F.pad(ta if mode == "constant" or len(pad) < 6 else ta[None], pad, mode=mode, **kw)
    check(t.pad(pad, mode=mode, **kw), want if mode == "constant" or len(pad) < 6 else want[0])


@pytest.mark.parametrize("dev", DEVS)
def test_pad_pairs_negative_and_errors(dev):
    a = arr((3, 4), seed=2)
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.pad(((1, 0), (2, 3))), F.pad(ta, (2, 3, 1, 0)))
    check(t.pad(((1, 0), None), value=-1.0), F.pad(ta, (0, 0, 1, 0), value=-1.0))
    check(t.pad((-1, 2, 1, -2)), F.pad(ta, (-1, 2, 1, -2)))
    check(t.pad((2, 1), mode="reflect"), F.pad(ta[None], (2, 1), mode="reflect")[0])
    check(t.pad((3, 3, 2, 2), mode="replicate"), F.pad(ta[None], (3, 3, 2, 2), mode="replicate")[0])
    with pytest.raises(ValueError, match="pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got "
                       "'wrap'"):
        t.pad((1, 1), mode="wrap")
    with pytest.raises(ValueError, match=r"pad: reflect padding \(4, 0\) of dim 1 must be smaller than its size 4"):
        t.pad((4, 0), mode="reflect")
    with pytest.raises(ValueError, match="pad: flat padding"):
        t.pad((1, 1, 1))


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("reps", [(2, 1), (1, 3), (2, 2, 3), (1, 1), (0, 2)])
def test_repeat(dev, reps):
    a = arr((3, 2), "int32")
    check(Tensor(a, dev).repeat(*reps), torch.tensor(a).repeat(*reps))
    check(Tensor(a, dev).repeat(reps), torch.tensor(a).repeat(reps))


def test_repeat_errors():
    with pytest.raises(ValueError, match=r"repeat: needs at least 2 repeats for shape \(3, 2\), got \(2,\)"):
        Tensor.ones(3, 2).repeat(2)


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("kind", ["float32", "int32", "bool"])
def test_cat_stack(dev, kind):
    a, b, c = arr((2, 3), kind, 1), arr((2, 1), kind, 2), arr((2, 3), kind, 3)
    ta, tb, tc = torch.tensor(a), torch.tensor(b), torch.tensor(c)
    x, y, z = Tensor(a, dev), Tensor(b, dev), Tensor(c, dev)
    check(x.cat(y, z, dim=1), torch.cat([ta, tb, tc], 1))
    check(x.cat(z, dim=-2), torch.cat([ta, tc], -2))
    check(x.cat(dim=0), torch.cat([ta], 0))
    check(Tensor.cat(x, z), torch.cat([ta, tc]))
    for d in (0, 1, 2, -1, -3):
        check(x.stack(z, x, dim=d), torch.stack([ta, tc, ta], d))
    check(Tensor.stack(x, z), torch.stack([ta, tc]))


def test_cat_promotes_and_errors():
    i, f = Tensor([1, 2]), Tensor([0.5])
    check(i.cat(f), torch.cat([torch.tensor([1, 2], dtype=torch.int32), torch.tensor([0.5])]))
    with pytest.raises(ValueError, match=r"cat: tensor 1 has shape \(2, 4\), which does not match \(2, 3\) outside"):
        Tensor.ones(2, 3).cat(Tensor.ones(2, 4), dim=0)
    with pytest.raises(TypeError, match="cat: argument 1 is a list, not a Tensor"):
        Tensor.ones(2).cat([1, 2])
    with pytest.raises(ValueError, match="cat: zero-dimensional tensors cannot be concatenated"):
        Tensor(1.0).cat(Tensor(2.0))
    with pytest.raises(ValueError, match="stack: tensor 1 has shape"):
        Tensor.ones(2).stack(Tensor.ones(3))


@pytest.mark.parametrize("dev", DEVS)
def test_split_chunk(dev):
    a = arr((7, 4), "int32")
    t, ta = Tensor(a, dev), torch.tensor(a)
    for got, want in [(t.split(3), ta.split(3)), (t.split(2, dim=1), ta.split(2, dim=1)),
                      (t.split([1, 4, 2]), ta.split([1, 4, 2])), (t.split(7), ta.split(7)),
                      (t.split(10), ta.split(10)), (t.chunk(3), ta.chunk(3)), (t.chunk(4, -1), ta.chunk(4, -1)),
                      (t.chunk(10), ta.chunk(10)), (t.chunk(2, 1), ta.chunk(2, 1))]:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            check(g, w)
    with pytest.raises(ValueError, match=r"split: sizes \[1, 2\] do not add up to dim 0 of size 7"):
        t.split([1, 2])
    with pytest.raises(ValueError, match="chunk: chunks must be a positive int"):
        t.chunk(0)


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (2, 3, 4), (1, 1)])
@pytest.mark.parametrize("diag", [0, 1, -2, 5])
def test_tril_triu(dev, shape, diag):
    a = arr(shape, "int32")
    check(Tensor(a, dev).tril(diag), torch.tensor(a).tril(diag))
    check(Tensor(a, dev).triu(diag), torch.tensor(a).triu(diag))


def test_tril_error():
    with pytest.raises(ValueError, match=r"tril: needs at least 2 dims, got shape \(3,\)"):
        Tensor.ones(3).tril()


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 3), (0, 1)), (7, -1), (5, None), (0, 0), (-13, None)])
def test_roll(dev, shifts, dims):
    a = arr((3, 5), "int32")
    check(Tensor(a, dev).roll(shifts, dims), torch.tensor(a).roll(shifts, dims))


def test_roll_errors():
    with pytest.raises(ValueError, match="roll: shifts .* and dims .* must have the same length"):
        Tensor.ones(2, 2).roll((1, 2), 0)


def test_dtypes_kept():
    assert Tensor.ones(2, 3, dtype=dtypes.int8).repeat(2, 2).dtype == dtypes.int8
    assert Tensor([True]).pad((1, 1), mode="replicate").dtype == dtypes.bool
