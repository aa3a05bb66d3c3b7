"""NaN propagates as in PyTorch (issue 16): max/min reductions (whole tensor and along an axis), relu, maximum/minimum
(NaN on either side), clip/clamp, hardtanh/relu6, cummax/cummin, and the comparisons (`nan >= x` and `nan <= x` are
False, as IEEE, numpy and torch), on the CPU (vectorized and scalar kernels: NOOPT) and PYTHON devices, for float16,
float32 and float64."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor
from ember.uops import settings

NAN = float("nan")

OPS = {
    "max": (lambda a, b: a.max(), lambda a, b: a.max()),
    "min": (lambda a, b: a.min(), lambda a, b: a.min()),
    "max axis 1": (lambda a, b: a.max(1), lambda a, b: a.amax(1)),
    "min axis 0": (lambda a, b: a.min(0), lambda a, b: a.amin(0)),
    "relu": (lambda a, b: a.relu(), lambda a, b: torch.relu(a)),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
    "maximum reversed": (lambda a, b: b.maximum(a), lambda a, b: torch.maximum(b, a)),
    "minimum": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b)),
    "maximum scalar": (lambda a, b: a.maximum(0.25), lambda a, b: torch.clamp(a, min=0.25)),
    "clip": (lambda a, b: a.clip(-0.5, 0.5), lambda a, b: a.clip(-0.5, 0.5)),
    "clamp max": (lambda a, b: a.clamp(max=0.1), lambda a, b: a.clamp(max=0.1)),
    "hardtanh": (lambda a, b: a.hardtanh(), lambda a, b: F.hardtanh(a)),
    "relu6": (lambda a, b: a.relu6(), lambda a, b: F.relu6(a)),
    "cummax": (lambda a, b: a.cummax(1)[0], lambda a, b: a.cummax(1)[0]),
    "clamp min tensor": (lambda a, b: a.clamp(min=b), lambda a, b: torch.clamp(a, min=b)),  # (a NaN bound: NaN)
    "clamp max tensor": (lambda a, b: a.clamp(max=b), lambda a, b: torch.clamp(a, max=b)),
    "clamp nan scalar": (lambda a, b: a.clamp(min=NAN, max=1.0), lambda a, b: a.clamp(min=NAN, max=1.0)),
    ">=": (lambda a, b: a >= b, lambda a, b: a >= b),
    "<=": (lambda a, b: a <= b, lambda a, b: a <= b),
    ">= scalar": (lambda a, b: a >= 0.0, lambda a, b: a >= 0.0),
    "scalar <=": (lambda a, b: 0.0 <= a, lambda a, b: 0.0 <= a),
}


def inputs(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal((3, n)).astype(dtype) for _ in range(2))
    a[1, n // 2] = NAN  # a NaN inside a row, and rows/columns without one
    b[2, 0] = b[0, -1] = NAN
    return a, b


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype, n, noopt", [("float32", 37, False), ("float32", 5, True), ("float64", 3, False),
                                             ("float16", 17, False), ("float64", 1, True)])
@pytest.mark.parametrize("name", list(OPS))
def test_nan_propagates_as_torch(name, dtype, n, noopt, dev):
    ours, theirs = OPS[name]
    a, b = inputs(dtype, n)
    with settings.Context(NOOPT=noopt):
        got = ours(Tensor(a, device=dev), Tensor(b, device=dev)).numpy()
    want = theirs(torch.tensor(a), torch.tensor(b)).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # exact: these ops pick one of their inputs (or NaN)


def test_unique_keeps_each_nan():
    a = np.array([3, NAN, 1, 3, NAN, -1], np.float32)
    got = Tensor(a).unique(return_inverse=True, return_counts=True)
    want = torch.unique(torch.tensor(a), return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


EMPTY_AXIS = {
    "exp sum": (lambda x: x.exp().sum(0), lambda x: x.exp().sum(0)),
    "sigmoid prod": (lambda x: x.sigmoid().prod(0), lambda x: x.sigmoid().prod(0)),
    "softmax": (lambda x: x.softmax(0), lambda x: x.softmax(0)),
    "log_softmax": (lambda x: x.log_softmax(0), lambda x: x.log_softmax(0)),
    "logsumexp": (lambda x: x.logsumexp(0), lambda x: x.logsumexp(0)),
    "mean of exp": (lambda x: x.exp().mean(0), lambda x: x.exp().mean(0)),
    "matmul": (lambda x: x.T.exp() @ x, lambda x: x.T.exp() @ x),
}


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("name", list(EMPTY_AXIS))
def test_reductions_over_an_empty_axis(name, dev):
    # (0, 3) reduced over its empty axis: the identity, as torch (a load hoisted out of the empty loop killed the
    # process with SIGFPE); and the input's gradient is empty
    ours, theirs = EMPTY_AXIS[name]
    a = np.zeros((0, 3), np.float32)
    x, t = Tensor(a, device=dev, requires_grad=True), torch.tensor(a, requires_grad=True)
    got, want = ours(x), theirs(t)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    assert x.grad is not None and x.grad.shape == (0, 3)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_an_empty_reduce_beside_another_input(dev):
    # the empty input's slot stays a kernel argument though nothing reads it: the runtimes pass buffers by position, so
    # dropping it handed the next input's slot the empty buffer (0.25 came out as 0 or garbage)
    e = Tensor(np.zeros((0, 6), np.float32), device=dev)
    s = Tensor(np.float32(0.5), device=dev)
    w = Tensor(np.arange(6, dtype=np.float32), device=dev)
    np.testing.assert_allclose((e.sum() * 3 + s * s).numpy(), 0.25)
    np.testing.assert_allclose((e.sum(0) + w * s).numpy(), np.arange(6) * 0.5)
