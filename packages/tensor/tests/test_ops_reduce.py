"""Reductions of the full Tensor API against PyTorch (CPU), on the CPU and PYTHON devices."""

import os

import numpy as np
import pytest
import torch

from ember.schedule import schedule
from ember.tensor import Tensor, dtypes
from ember.uops import Ops, UOp

# the small cases' device: the reference interpreter, or another backend (EMBER_TEST_SMALL_DEVICE=AMD with
# MOCKGPU=1: tests/test_amd_tensor_suite.py)
SMALL = os.environ.get("EMBER_TEST_SMALL_DEVICE", "PYTHON")


def check(got, want, rtol=1e-5, atol=1e-6):
    g, w = got.numpy(), want.detach().numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (device, shape, axis): odd sizes, size-1 dims, negative and tuple axes; small shapes on PYTHON
CASES = [("CPU", (33, 7), 1), ("CPU", (33, 7), -2), ("CPU", (3, 1, 5), (0, 2)), ("CPU", (3, 1, 5), -2),
         ("CPU", (1000,), 0), ("CPU", (5, 6), None), (SMALL, (3, 5), -1), (SMALL, (2, 3, 4), (0, -1))]


@pytest.mark.filterwarnings("ignore:var\\(\\)|std\\(\\):UserWarning")
@pytest.mark.parametrize("dev, shape, axis", CASES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_float_reductions(dev, shape, axis, keepdim):
    a = normal(shape, 1)
    t, ta = Tensor(a, dev), torch.tensor(a)
    dim = tuple(range(len(shape))) if axis is None else axis
    check(t.prod(axis, keepdim), _torch_prod(ta, dim, keepdim), 1e-4, 1e-6)
    for corr in (0, 1):
        check(t.var(axis, keepdim, correction=corr), ta.var(dim, correction=corr, keepdim=keepdim), 1e-4, 1e-6)
        check(t.std(axis, keepdim, correction=corr), ta.std(dim, correction=corr, keepdim=keepdim), 1e-4, 1e-6)
    check(t.logsumexp(axis, keepdim), ta.logsumexp(dim, keepdim), 1e-5, 1e-5)
    check((t > 0.5).any(axis, keepdim), _torch_bool(ta > 0.5, dim, keepdim, torch.any))
    check((t > -1.5).all(axis, keepdim), _torch_bool(ta > -1.5, dim, keepdim, torch.all))


def _torch_prod(ta, dim, keepdim):  # torch.prod takes one dim
    dims = (dim,) if isinstance(dim, int) else dim
    out = ta
    for d in sorted((d % ta.ndim for d in dims), reverse=True):
        out = out.prod(d, keepdim=keepdim)
    return out


def _torch_bool(ta, dim, keepdim, fn):
    return fn(ta, dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dev", ["CPU", SMALL])
@pytest.mark.parametrize("kind", ["int32", "bool", "uint8"])
def test_int_reductions(dev, kind):
    a = np.random.default_rng(2).integers(0 if kind != "int32" else -3, 2 if kind == "bool" else 4, (3, 5)).astype(kind)
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.prod(1), ta.prod(1), 0, 0)  # ints multiply in int64, as torch
    check(t.prod(), ta.prod(), 0, 0)
    check(t.any(0), ta.any(0).bool())  # torch keeps uint8 for any/all of uint8; we always give bool
    check(t.all(-1, keepdim=True), ta.all(-1, keepdim=True).bool())
    ti = ta.int()  # torch has no bool argmax
    check(t.argmax(1), ti.argmax(1))
    check(t.argmin(0, keepdim=True), ti.argmin(0, keepdim=True))
    check(t.cumsum(1), ta.cumsum(1), 0, 0)


ARG_CASES = [("CPU", (33, 7)), ("CPU", (1, 5)), ("CPU", (4, 1)), (SMALL, (3, 5))]


@pytest.mark.parametrize("dev, shape", ARG_CASES)
def test_argmax_argmin(dev, shape):
    a = np.round(normal(shape, 3) * 2)  # ties: the first index wins, as torch
    t, ta = Tensor(a, dev), torch.tensor(a)
    for axis in (0, 1, -1, -2):
        for keepdim in (False, True):
            check(t.argmax(axis, keepdim), ta.argmax(axis, keepdim), 0, 0)
            check(t.argmin(axis, keepdim), ta.argmin(axis, keepdim), 0, 0)
    check(t.argmax(), ta.argmax(), 0, 0)
    check(t.argmin(), ta.argmin(), 0, 0)
    check(Tensor(3.0, dev).argmax(), torch.tensor(3.0).argmax(), 0, 0)


def test_argmax_nan_and_errors():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    check(Tensor(a).argmax(), torch.tensor(a).argmax(), 0, 0)
    with pytest.raises(ValueError, match="argmax: cannot take the argmax over dim 1 of size 0"):
        Tensor.ones(2, 0).argmax(1)
    with pytest.raises(ValueError, match="axis 2 is out of range for a tensor of 2 dims"):
        Tensor.ones(2, 3).argmax(2)


SM_CASES = [("CPU", (33, 7), -1), ("CPU", (33, 7), 0), ("CPU", (3, 1, 5), 1), ("CPU", (1,), 0),
            (SMALL, (3, 5), -1), (SMALL, (2, 3, 4), -2)]


@pytest.mark.parametrize("dev, shape, axis", SM_CASES)
def test_softmax_log_softmax(dev, shape, axis):
    a = normal(shape, 4) * 5
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.softmax(axis), ta.softmax(axis), 1e-5, 1e-6)
    check(t.log_softmax(axis), ta.log_softmax(axis), 1e-5, 1e-5)
    big = a * 100  # a large spread: the max is subtracted first
    check(Tensor(big, dev).softmax(axis), torch.tensor(big).softmax(axis), 1e-5, 1e-6)
    check(Tensor(big, dev).log_softmax(axis), torch.tensor(big).log_softmax(axis), 1e-5, 1e-4)


def n_kernels(*ts):
    return len([it for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK])


def test_softmax_kernel_counts():
    x = Tensor(normal((32, 48)))
    assert n_kernels(x.softmax(-1)) <= 3
    assert n_kernels(x.log_softmax(-1)) <= 3
    assert n_kernels(x.softmax(0)) <= 3


CUM_CASES = [("CPU", (33, 7), 1), ("CPU", (33, 7), 0), ("CPU", (3, 1, 5), -1), ("CPU", (1,), 0), ("CPU", (200,), 0),
             (SMALL, (3, 5), -1), (SMALL, (2, 3, 4), 1)]


@pytest.mark.parametrize("dev, shape, axis", CUM_CASES)
def test_cumulative(dev, shape, axis):
    a = normal(shape, 5)
    t, ta = Tensor(a, dev), torch.tensor(a)
    check(t.cumsum(axis), ta.cumsum(axis), 1e-5, 1e-5)
    check((t * 0.2 + 1).cumprod(axis), (ta * 0.2 + 1).cumprod(axis), 1e-4, 1e-5)
    check(t.cummax(axis)[0], ta.cummax(axis).values, 0, 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_var_edge_cases():
    a = normal((4, 1))
    check(Tensor(a).var(1), torch.tensor(a).var(1))  # N - correction == 0: NaN, as torch
    check(Tensor(a).var(1, correction=0), torch.tensor(a).var(1, correction=0))
    check(Tensor(a).var(), torch.tensor(a).var(), 1e-5)
    v, m = Tensor(a).var_mean(0)
    tv, tm = torch.var_mean(torch.tensor(a), 0)
    check(v, tv, 1e-5)
    check(m, tm, 1e-5)
    s, m = Tensor(a).std_mean(0, correction=0)
    ts, tm = torch.std_mean(torch.tensor(a), 0, correction=0)
    check(s, ts, 1e-5)
    with pytest.raises(ValueError, match="var: axis 3 is out of range"):
        Tensor(a).var(3)
    with pytest.raises(ValueError, match="softmax: axis -3 is out of range"):
        Tensor(a).softmax(-3)
    with pytest.raises(ValueError, match="cumsum: axis 2 is out of range"):
        Tensor(a).cumsum(2)


def test_reduce_dtypes():
    assert Tensor([1, 2], dtype=dtypes.int32).prod().dtype == dtypes.int64
    assert Tensor([1.0, 2.0]).logsumexp(0).dtype == dtypes.float32
    assert Tensor([1, 2]).softmax().dtype == dtypes.float32
    assert Tensor([True, False]).any().dtype == dtypes.bool


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_accumulate_in_float32(dtype):
    # torch (and tinygrad) sum, mean, cumsum and matmul 16-bit floats in float32 and round once: a running float16
    # sum overflowed at 65504 (60000 + 60000 - 60000 was inf) and lost bits over 1000 terms
    big = [60000.0, 60000.0, -60000.0] if dtype == "float16" else [3e38, 3e38, -3e38]
    small = np.random.default_rng(0).random(1000).astype(np.float32)
    tdt = getattr(torch, dtype)
    for values in (big, small):
        t, x = torch.tensor(values).to(tdt), Tensor(np.asarray(values, np.float32)).cast(dtype)
        for got, want in ((x.sum(), t.sum()), (x.mean(), t.mean()), (x.cumsum(0), t.cumsum(0)),
                          (x.reshape(1, -1) @ x.reshape(-1, 1), t.reshape(1, -1) @ t.reshape(-1, 1)),
                          (x.dot(x.ones_like()), t.dot(torch.ones_like(t)))):
            assert got.dtype == getattr(dtypes, dtype)
            np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())  # (bit-exact: one rounding)
