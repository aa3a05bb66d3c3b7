"""Indexing of the full Tensor API (getitem, gather, one_hot, masked_fill) against PyTorch (CPU)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor


def check(got, want):
    g, w = got.numpy(), want.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_array_equal(g, w)


A = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) - 20
BASIC = [
    (1,), (-1,), (slice(None),), (slice(1, None),), (slice(None, None, 2),), (slice(None, None, -1),),
    (slice(3, 0, -2), 1), (slice(-2, None), None, slice(None, None, 3)), (Ellipsis, 2), (None, Ellipsis, None),
    (1, Ellipsis, slice(4, 0, -3)), (slice(5, 10),), (slice(0, 0),), (0, 0, 0), (None,), (slice(None), None, -1),
    (slice(None, None, 7),), (Ellipsis,), (slice(1, 3), slice(None, None, -2), slice(1, -1, 2)),
]


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("idx", BASIC, ids=[repr(i) for i in BASIC])
def test_basic_indexing(dev, idx):
    check(Tensor(A, dev)[idx], torch.tensor(A[idx].copy()))  # numpy semantics (torch has no negative steps)


ADVANCED = [
    ([0, 2, -1],), ([[0, 1], [2, 2]],), (slice(None), [3, 0, 0]), ([0, 2], [1, 3]), ([0, 2], slice(None), [1, 3]),
    (1, [0, 3]), ([2], [1, 0], [4, 0]), (slice(None), [[0], [2]], [1, 3]), (Ellipsis, [1, -2]),
    (None, [1, 0], 2), ([1, 0], None, [2, 3]), (slice(1, None), [0, 1], slice(None, None, 2)),
]


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("idx", ADVANCED, ids=[repr(i) for i in ADVANCED])
def test_advanced_indexing(dev, idx):
    check(Tensor(A, dev)[idx], torch.tensor(A[idx].copy()))
    tidx = tuple(Tensor(np.array(k, np.int32), dev) if isinstance(k, list) else k for k in idx)
    check(Tensor(A, dev)[tidx], torch.tensor(A[idx].copy()))


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_bool_mask_and_int_dtypes(dev):
    t, ta = Tensor(A, dev), torch.tensor(A)
    check(t[t > 5], ta[ta > 5])
    m = np.array([True, False, True])
    check(t[Tensor(m, dev)], ta[torch.tensor(m)])
    check(t[:, Tensor(np.array([1, 0, 0, 1], bool), dev)], ta[:, torch.tensor([True, False, False, True])])
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    check(Tensor(i, dev)[[2, 0], 1:], torch.tensor(i)[[2, 0], 1:])
    b = i % 3 == 0
    check(Tensor(b, dev)[[1, 2]], torch.tensor(b)[[1, 2]])


def test_indexing_errors():
    t = Tensor(A)
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 of size 3"):
        t[3]
    with pytest.raises(IndexError, match="index -6 is out of range for dim 2 of size 5"):
        t[0, 0, -6]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 3"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="an index can only have a single ellipsis"):
        t[..., 0, ...]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        t[::0]
    with pytest.raises(IndexError, match="tensors used as indices must be int or bool"):
        t[Tensor([0.0, 1.0])]
    with pytest.raises(IndexError, match="shape mismatch: index arrays"):
        t[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="unsupported index 'a'"):
        t["a"]
    # int-tensor indices are checked against the realized shape too (PyTorch raises; never read out of range)
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 of size 3"):
        t[Tensor([0, 3])]
    with pytest.raises(IndexError, match="index -5 is out of range for dim 1 of size 4"):
        t[:, [0, -5]]
    with pytest.raises(IndexError, match="gather: index 4 is out of range for dim 1 of size 4"):
        t.gather(1, Tensor(np.full((3, 2, 5), 4)))


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dev, dim):
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    rng = np.random.default_rng(1)
    size = a.shape[dim]
    for ishape in [(4, 5), (2, 3), (1, 1), (4, 2) if dim != 0 else (6, 2)]:
        ix = rng.integers(0, size, ishape)
        check(Tensor(a, dev).gather(dim, Tensor(ix, dev)), torch.tensor(a).gather(dim, torch.tensor(ix)))


def test_gather_errors():
    t = Tensor.ones(3, 4)
    with pytest.raises(TypeError, match="gather: index must be an int Tensor"):
        t.gather(0, Tensor([[0.0]]))
    with pytest.raises(ValueError, match=r"gather: index shape \(1, 5\) does not fit self shape \(3, 4\)"):
        t.gather(0, Tensor([[0, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="gather: axis 2 is out of range"):
        t.gather(2, Tensor([[0]]))


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_one_hot_masked_fill(dev):
    ix = np.array([[0, 3], [2, 1], [3, 3]], np.int64)
    check(Tensor(ix, dev).one_hot(5), F.one_hot(torch.tensor(ix), 5))
    check(Tensor(ix, dev).one_hot(), F.one_hot(torch.tensor(ix)))
    a = A[0]
    m = a > 0
    check(Tensor(a, dev).masked_fill(Tensor(m, dev), 7.0), torch.tensor(a).masked_fill(torch.tensor(m), 7.0))
    mrow = m[:1]  # broadcasts
    check(Tensor(a, dev).masked_fill(Tensor(mrow, dev), -1), torch.tensor(a).masked_fill(torch.tensor(mrow), -1))
    with pytest.raises(TypeError, match="one_hot: the tensor must be int"):
        Tensor([0.5]).one_hot(2)


SETITEM = [(1,), (slice(1, 3),), (slice(None, None, 2), slice(None, None, -3)), (Ellipsis, 0), (-1, slice(4, 0, -2)),
           (slice(None), None, 2), (slice(5, 9),), (0, 0, 0), (slice(0, 0),)]


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
@pytest.mark.parametrize("idx", SETITEM, ids=[repr(i) for i in SETITEM])
def test_setitem_basic(dev, idx):
    a = A.copy()  # numpy is the reference here: torch has no negative steps
    t = Tensor(a, dev).realize()
    view = t.reshape(-1)  # another view of the same buffer sees the write
    t[idx] = -7.0
    a[idx] = -7.0
    check(t, torch.tensor(a))
    check(view, torch.tensor(a.reshape(-1)))
    shape = a[idx].shape
    v = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t[idx] = Tensor(v, dev)
    a[idx] = v
    check(t, torch.tensor(a))


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_setitem_mask_broadcast_and_errors(dev):
    a, ta = A[0].copy(), torch.tensor(A[0])
    t = Tensor(a, dev)
    t[t > 0] = 0.5
    ta[ta > 0] = 0.5
    check(t, ta)
    t[:, 1:3] = Tensor([[1.0], [2.0], [3.0], [4.0]], dev)  # broadcasts over the slice
    ta[:, 1:3] = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    check(t, ta)
    i = Tensor(np.zeros((2, 3), np.int32), dev)
    i[1] = 2.7  # the value takes the tensor's dtype
    check(i, torch.tensor([[0, 0, 0], [2, 2, 2]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"setitem: cannot broadcast the value to the indexed shape \(4, 2\)"):
        t[:, 1:3] = Tensor.ones(3, device=dev)
    t[[0, 1]] = 1.0  # advanced indices: through scatter (tests/test_api_indexing.py has more)
    ta[[0, 1]] = 1.0
    check(t, ta)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_setitem_mask_takes_values_in_order(dev):
    # torch's x[mask] = v: x[mask] is (k, *rest) for the k True positions in order and v broadcasts to that (a (4,)
    # value with 4 True positions went by column, broadcast against x: silently different)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = [((x % 3) == 0, np.array([10.0, 20.0, 30.0, 40.0], np.float32)),
             (x > 8, np.array([1.0, 2.0, 3.0], np.float32)), (x > 8, np.array([7.0], np.float32)),
             (x > 100, np.zeros(0, np.float32)),
             (np.array([True, False, True]), np.arange(8, dtype=np.float32).reshape(2, 4)),
             (np.array([True, False, True]), np.array([[1.0], [2.0]], np.float32))]
    for mask, v in cases:
        t, ta = Tensor(x, dev), torch.tensor(x)
        t[Tensor(mask, dev)] = Tensor(v, dev)
        ta[torch.tensor(mask)] = torch.tensor(v)
        check(t, ta)
    t = Tensor(x, dev)
    with pytest.raises(RuntimeError, match="cannot be broadcast to the 3 masked positions"):
        t[t > 8] = Tensor([1.0, 2.0], dev)


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_setitem_through_a_view_and_on_lazy(dev):
    a = A[0].copy()
    t = Tensor(a, dev).realize()
    v = t[1:4].permute(1, 0)  # a view of t's buffer: the write reaches t, as in torch
    v[0] = 9.0
    v[::2, -1] = -1.0
    a[1:4].T[0] = 9.0
    a[1:4].T[::2, -1] = -1.0
    check(t, torch.tensor(a))
    check(v, torch.tensor(a[1:4].T.copy()))
    lazy = Tensor(A[0], dev) * 2  # not realized yet: computed first, then written
    lazy[0] = 0.0
    want = torch.tensor(A[0]) * 2
    want[0] = 0.0
    check(lazy, want)
