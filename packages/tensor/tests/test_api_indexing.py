"""Indexing, selection, sorting and movement of the Tensor API (issue 16): scatter/scatter_reduce, index_select,
masked_select, nonzero, sort/argsort/topk, cummax/cummin/logcumsumexp, diag/diagonal, unfold, meshgrid,
repeat_interleave, clone, bitcast, padding modes, reshape/stack/roll forms, dtypes by name, nested-list indices.
Forward and backward against PyTorch (CPU), with the tolerances stated per case."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes

TORCH_DTYPES = {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16,
                dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.uint8: torch.uint8,
                dtypes.bool: torch.bool, dtypes.int8: torch.int8}


def as_numpy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.float().numpy() if t.dtype in (torch.float16, torch.bfloat16) else t.numpy()
    return t.float().numpy() if t.dtype in (dtypes.float16, dtypes.bfloat16) else t.numpy()


def check(got, want, rtol=0.0, atol=0.0):
    g, w = as_numpy(got), as_numpy(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def pair(a, dtype=dtypes.float32, grad=False, device="CPU"):
    return (Tensor(a, device, dtype=dtype, requires_grad=grad or None),
            torch.tensor(a).to(TORCH_DTYPES[dtype]).requires_grad_(grad))


def grads_match(out, ref, ours, theirs, rtol=1e-6, atol=1e-6):
    up = np.random.default_rng(5).standard_normal(ref.shape).astype(np.float32)
    (out * Tensor(up, out.device)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    check(ours.grad, theirs.grad, rtol, atol)


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# *** scatter, scatter_reduce, index_select, masked_select, nonzero ***
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_forward_and_backward(dim):
    rng = np.random.default_rng(dim + 3)
    base, src = normal((4, 5), 1), normal((3, 4), 2)
    index = np.stack([rng.permutation(5 if dim != 0 else 4)[:4 if dim != 0 else 3] for _ in range(3)])
    index = index[:, :4] if dim != 0 else rng.permutation(4)[:3].repeat(4).reshape(3, 4)
    (x, xt), (s, st) = pair(base, grad=True), pair(src, grad=True)
    out, ref = x.scatter(dim, Tensor(index), s), xt.scatter(dim, torch.tensor(index), st)
    check(out, ref)
    up = normal(ref.shape, 7)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    check(x.grad, xt.grad)
    check(s.grad, st.grad)


def test_scatter_scalar_value_ints_and_reduce_keyword():
    index = np.array([[0, 2], [1, 0]])
    for dtype in (dtypes.int32, dtypes.uint8, dtypes.float16, dtypes.bool):
        x, xt = pair(np.arange(6).reshape(2, 3) % 2, dtype)
        check(x.scatter(1, Tensor(index), 1), xt.scatter(1, torch.tensor(index), 1))
    x, xt = pair(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    s = np.full((2, 2), 2.0, np.float32)
    check(x.scatter(1, Tensor(index), Tensor(s), reduce="add"), xt.scatter(1, torch.tensor(index), torch.tensor(s),
                                                                          reduce="add"))
    check(x.scatter(1, Tensor(index), Tensor(s), reduce="multiply"),
          xt.scatter(1, torch.tensor(index), torch.tensor(s), reduce="multiply"))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    rng = np.random.default_rng(1)
    index = rng.integers(0, 4, (6, 3))  # repeated targets
    (x, xt), (s, st) = pair(normal((4, 3), 1), grad=True), pair(normal((6, 3), 2), grad=reduce in ("sum", "mean"))
    out = x.scatter_reduce(0, Tensor(index), s, reduce, include_self=include_self)
    ref = xt.scatter_reduce(0, torch.tensor(index), st, reduce, include_self=include_self)
    check(out, ref, 1e-6, 1e-6)
    if reduce in ("sum", "mean"):
        up = normal(ref.shape, 7)
        (out * Tensor(up)).sum().backward()
        (ref * torch.tensor(up)).sum().backward()
        check(x.grad, xt.grad, 1e-6, 1e-6)
        check(s.grad, st.grad, 1e-6, 1e-6)
    ints = rng.integers(-9, 9, (4, 3))
    xi, xit = pair(ints, dtypes.int32)
    si, sit = pair(rng.integers(-9, 9, (6, 3)), dtypes.int32)
    check(xi.scatter_reduce(0, Tensor(index), si, reduce, include_self=include_self),
          xit.scatter_reduce(0, torch.tensor(index), sit, reduce, include_self=include_self))


def test_index_select_masked_select_nonzero():
    a = normal((4, 5), 3)
    (x, xt) = pair(a, grad=True)
    idx = np.array([3, 0, 0, 2])
    out, ref = x.index_select(1, Tensor(idx)), xt.index_select(1, torch.tensor(idx))
    check(out, ref)
    grads_match(out, ref, x, xt)
    mask = a > 0.2
    (y, yt) = pair(a, grad=True)
    out, ref = y.masked_select(Tensor(mask)), yt.masked_select(torch.tensor(mask))
    check(out, ref)
    grads_match(out, ref, y, yt)
    row = Tensor(mask[0])  # broadcasts over the rows
    check(Tensor(a).masked_select(row), torch.tensor(a).masked_select(torch.tensor(mask[0])))
    for arr in (mask, np.array([0, 3, 0, -1]), np.zeros((2, 0)), np.array(5.0), np.array(0)):
        check(Tensor(arr).nonzero(), torch.tensor(arr).nonzero())
    for ours, theirs in zip(Tensor(mask).nonzero(as_tuple=True), torch.tensor(mask).nonzero(as_tuple=True)):
        check(ours, theirs)
    check(Tensor(np.arange(5), dtype=dtypes.uint8).index_select(0, Tensor([4, 1])), torch.arange(5).to(
        torch.uint8).index_select(0, torch.tensor([4, 1])))


# *** sorting ***
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 6), 1), ((5, 4), 0), ((2, 3, 4), -2), ((1,), 0), ((0, 3), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort(shape, dim, descending):
    a = normal(shape, 4)
    (x, xt) = pair(a, grad=True)
    (v, i), (vt, it) = x.sort(dim, descending), xt.sort(dim=dim, descending=descending, stable=True)
    check(v, vt)
    check(i, it)
    check(x.argsort(dim, descending), torch.tensor(a).argsort(dim=dim, descending=descending, stable=True))
    grads_match(v, vt, x, xt)


def test_sort_ties_nan_and_dtypes():
    a = np.array([3.0, np.nan, 1.0, 3.0, -np.inf, 1.0, np.nan, 0.0], np.float32)
    for desc in (False, True):
        (v, i), (vt, it) = Tensor(a).sort(descending=desc), torch.tensor(a).sort(dim=-1, descending=desc, stable=True)
        check(v, vt)
        check(i, it)
    ints = np.array([[5, 1, 5, 0, 200], [7, 7, 1, 2, 0]])
    for dtype in (dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.bool, dtypes.float16):
        data = ints % 100 if dtype == dtypes.int8 else ints
        (x, xt) = pair(data, dtype)
        for desc in (False, True):
            (v, i), (vt, it) = x.sort(1, desc), xt.sort(dim=1, descending=desc, stable=True)
            check(v, vt)
            check(i, it)


@pytest.mark.parametrize("k, largest", [(1, True), (3, True), (3, False), (5, True), (0, True)])
def test_topk(k, largest):
    a = normal((4, 5), 6)
    (x, xt) = pair(a, grad=True)
    (v, i), (vt, it) = x.topk(k, largest=largest), xt.topk(k, largest=largest)
    check(v, vt)
    check(i, it)
    grads_match(v, vt, x, xt)
    (v, i), (vt, it) = x.topk(min(k, 4), dim=0, largest=largest), xt.topk(min(k, 4), dim=0, largest=largest)
    check(v, vt)
    check(i, it)


# *** running reductions ***
@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("shape, axis", [((7,), 0), ((3, 6), 1), ((5, 4), 0), ((1,), 0), ((0, 2), 0)])
def test_cummax_cummin_values_and_indices(op, shape, axis):
    a = np.round(normal(shape, 8) * 2) / 2  # ties
    (x, xt) = pair(a, grad=True)
    (v, i), ref = getattr(x, op)(axis), getattr(xt, op)(axis)
    check(v, ref.values)
    check(i, ref.indices)
    for dtype in (dtypes.uint8, dtypes.bool):
        data = (np.abs(a) * 4).astype(np.int64) % 3
        (y, yt) = pair(data, dtype)
        (v, i), ref = getattr(y, op)(axis), getattr(yt, op)(axis)
        check(v, ref.values)
        check(i, ref.indices)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("axis", [0, 1])
def test_cummax_cummin_nan_ties_and_gradient(op, axis):
    # a NaN is the running max/min from where it appears, at its own (last) index (was -1); the gradient goes to the
    # element at the returned index (torch scatters it there; a tie shared it through the max, a NaN row misplaced it)
    a = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0], [np.nan, 1, np.nan, -np.inf, np.inf, -0.0]], np.float32)
    g = np.arange(18, dtype=np.float32).reshape(3, 6) + 1
    xt = torch.tensor(a, requires_grad=True)
    ref = getattr(xt, op)(axis)
    (ref.values * torch.tensor(g)).sum().backward()
    x = Tensor(a, requires_grad=True)
    v, i = getattr(x * 1, op)(axis)  # (through an intermediate: its requires_grad is None)
    (v * Tensor(g)).sum().backward()
    check(v, ref.values)
    check(i, ref.indices)
    check(x.grad, xt.grad)


def test_logcumsumexp():
    for shape, axis in (((6,), 0), ((3, 5), 1), ((4, 3), 0), ((1,), 0)):
        a = normal(shape, 9) * 10
        (x, xt) = pair(a, grad=True)
        out, ref = x.logcumsumexp(axis), torch.logcumsumexp(xt, axis)
        check(out, ref, 1e-5, 1e-5)
        grads_match(out, ref, x, xt, 1e-5, 1e-6)
    edge = np.array([-np.inf, 1.0, -100.0, 50.0, -np.inf], np.float32)
    check(Tensor(edge).logcumsumexp(0), torch.logcumsumexp(torch.tensor(edge), 0), 1e-6, 1e-6)
    check(Tensor(np.array([1, 2, 3])).logcumsumexp(0), torch.logcumsumexp(torch.tensor([1.0, 2.0, 3.0]), 0), 1e-6)


# *** views: diag, diagonal, unfold, meshgrid, repeat_interleave, clone ***
@pytest.mark.parametrize("offset", [0, 1, -2, 5])
def test_diagonal_and_diag(offset):
    a = normal((4, 5, 3), 1)
    (x, xt) = pair(a, grad=True)
    out, ref = x.diagonal(offset, 0, 1), xt.diagonal(offset, 0, 1)
    check(out, ref)
    if ref.numel():
        grads_match(out, ref, x, xt)
    check(Tensor(a).diagonal(offset, -1, 1), torch.tensor(a).diagonal(offset, -1, 1))
    (m, mt) = pair(a[:, :, 0], grad=True)
    check(m.diag(offset), mt.diag(offset))
    (v, vt) = pair(a[0, :, 0], grad=True)
    out, ref = v.diag(offset), vt.diag(offset)
    check(out, ref)
    grads_match(out, ref, v, vt)
    check(Tensor(np.arange(3), dtype=dtypes.int32).diag(offset), torch.arange(3, dtype=torch.int32).diag(offset))


@pytest.mark.parametrize("dim, size, step", [(0, 2, 1), (1, 3, 2), (-1, 5, 1), (1, 1, 3), (0, 4, 4), (1, 0, 1)])
def test_unfold(dim, size, step):
    a = normal((4, 5), 2)
    (x, xt) = pair(a, grad=True)
    out, ref = x.unfold(dim, size, step), xt.unfold(dim, size, step)
    check(out, ref)
    if ref.numel():
        grads_match(out, ref, x, xt)
    check(Tensor(np.arange(7)).unfold(0, 3, 2), torch.arange(7).unfold(0, 3, 2))


def test_meshgrid_repeat_interleave_clone():
    a, b, c = normal((3,), 1), normal((4,), 2), normal((2,), 3)
    for indexing in ("ij", "xy"):
        ours = Tensor.meshgrid(Tensor(a), Tensor(b), Tensor(c), indexing=indexing)
        theirs = torch.meshgrid(torch.tensor(a), torch.tensor(b), torch.tensor(c), indexing=indexing)
        for o, t in zip(ours, theirs):
            check(o, t)
        for o, t in zip(Tensor.meshgrid((Tensor(a), Tensor(b)), indexing=indexing),
                        torch.meshgrid((torch.tensor(a), torch.tensor(b)), indexing=indexing)):
            check(o, t)
    m = normal((2, 3), 4)
    (x, xt) = pair(m, grad=True)
    out, ref = x.repeat_interleave(2, 1), xt.repeat_interleave(2, 1)
    check(out, ref)
    grads_match(out, ref, x, xt)
    check(Tensor(m).repeat_interleave(3), torch.tensor(m).repeat_interleave(3))
    check(Tensor(m).repeat_interleave([1, 0, 2], 1), torch.tensor(m).repeat_interleave(torch.tensor([1, 0, 2]), 1))
    check(Tensor(m).repeat_interleave(Tensor([2, 1]), 0), torch.tensor(m).repeat_interleave(torch.tensor([2, 1]), 0))
    x = Tensor(m).realize()
    c = x.clone()
    x.assign(x + 1).realize()
    np.testing.assert_array_equal(c.numpy(), m)


# *** dtypes: conversions, bitcast, names, DType.min/max, sum/prod(dtype=) ***
def test_conversions_and_bitcast():
    a = np.array([[1.5, -2.0, 0.0, 3.25]], np.float32)
    check(Tensor(a).bool(), torch.tensor(a).bool())
    check(Tensor(a).half(), torch.tensor(a).half())
    check(Tensor(a).long(), torch.tensor(a).long())
    check(Tensor(a).double(), torch.tensor(a).double())
    check(Tensor(np.abs(a)).byte().short(), torch.tensor(np.abs(a)).byte().short())
    check(Tensor(a).bfloat16(), torch.tensor(a).bfloat16())
    t = torch.tensor(a)
    for dtype, tdt in ((dtypes.int32, torch.int32), (dtypes.uint32, torch.uint32), (dtypes.uint8, torch.uint8),
                       (dtypes.int16, torch.int16), (dtypes.float16, torch.float16)):
        check(Tensor(a).bitcast(dtype), t.view(tdt))
    check(Tensor(a).bitcast("uint8").bitcast(dtypes.float32), t)
    h = torch.tensor(a).half()
    check(Tensor(a).half().bitcast(dtypes.int16), h.view(torch.int16))
    check(Tensor(np.arange(8, dtype=np.uint8)).bitcast(dtypes.int64), torch.arange(8, dtype=torch.uint8).view(
        torch.int64))
    with pytest.raises(ValueError, match="last dim .3. must be a multiple of 4"):
        Tensor(np.arange(3, dtype=np.uint8)).bitcast(dtypes.int32)


def test_dtype_names_min_max_and_accumulation_dtypes():
    assert Tensor.zeros(2, dtype="int32").dtype == dtypes.int32
    assert Tensor.ones(2, 2, dtype="uint8").dtype == dtypes.uint8
    assert Tensor.full((2,), 3, dtype="float16").dtype == dtypes.float16
    assert Tensor.arange(4, dtype="int64").dtype == dtypes.int64
    assert Tensor.eye(2, dtype="bool").dtype == dtypes.bool
    assert Tensor.rand(2, dtype="half").dtype == dtypes.float16
    assert Tensor([1, 2]).sum(dtype="int8").dtype == dtypes.int8
    assert Tensor.ones(2).zeros_like(dtype="int32").dtype == dtypes.int32
    with pytest.raises(ValueError, match="unknown name 'int33'"):
        Tensor.zeros(2, dtype="int33")
    for dt, tdt in ((dtypes.int8, torch.int8), (dtypes.uint8, torch.uint8), (dtypes.int32, torch.int32),
                    (dtypes.int64, torch.int64), (dtypes.float16, torch.float16), (dtypes.float32, torch.float32),
                    (dtypes.bfloat16, torch.bfloat16)):
        info = torch.finfo(tdt) if tdt.is_floating_point else torch.iinfo(tdt)
        assert (dt.min, dt.max) == (info.min, info.max)
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    big = np.array([[100, 100, 100], [1, 2, 3]])  # int8 wraps (the float16 product 1e6 would be inf: not asked)
    for dtype in ("int8", "float16", "int32"):
        tdt = getattr(torch, dtype)
        check(Tensor(big).sum(1, dtype=dtype), torch.tensor(big).sum(1, dtype=tdt))
        check(Tensor(big % 30).prod(1, dtype=dtype), torch.tensor(big % 30).prod(1, dtype=tdt))
    check(Tensor([True, True]).sum(dtype=dtypes.float32), torch.tensor([True, True]).sum(dtype=torch.float32))


# *** padding, reshape, stack, roll forms ***
@pytest.mark.parametrize("pads", [(1, 2), (2, -1, -1, 1), (0, 3, 3, 0), (-2, -1, 0, 0)])
@pytest.mark.parametrize("mode", ["circular", "reflect", "replicate", "constant"])
def test_pad_modes_with_negative_pads(pads, mode):
    a = normal((1, 4, 5), 3)
    (x, xt) = pair(a, grad=True)
    out, ref = x.pad(pads, mode=mode), F.pad(xt, pads, mode=mode)
    check(out, ref)
    grads_match(out, ref, x, xt)


def test_pad_fill_keeps_the_dtype():
    for a, dtype in ((np.array([1, 2]), dtypes.int32), (np.array([True, False]), dtypes.bool),
                     (np.array([1, 2]), dtypes.uint8), (np.array([1.0, 2.0]), dtypes.float16)):
        (x, xt) = pair(a, dtype)
        check(x.pad((1, 2), value=1.5), F.pad(xt, (1, 2), value=1.5))


def test_reshape_none_stack_tuple_roll_without_dims_transpose_same():
    a = normal((2, 3, 4), 1)
    check(Tensor(a).reshape(None, -1), torch.tensor(a).reshape(2, -1))
    check(Tensor(a).reshape(None, 3, -1), torch.tensor(a).reshape(2, 3, 4))
    check(Tensor(a).reshape(-1, None, None), torch.tensor(a).reshape(-1, 3, 4))
    check(Tensor(a).reshape((-1,)), torch.tensor(a).reshape(-1))
    parts = (Tensor(a[0]), Tensor(a[1]))
    check(Tensor.stack(parts), torch.stack((torch.tensor(a[0]), torch.tensor(a[1]))))
    check(Tensor.stack(list(parts), dim=-1), torch.stack([torch.tensor(a[0]), torch.tensor(a[1])], dim=-1))
    check(Tensor.cat(parts, dim=1), torch.cat((torch.tensor(a[0]), torch.tensor(a[1])), dim=1))
    for shift in (1, -5, 0, 30):
        check(Tensor(a).roll(shift), torch.tensor(a).roll(shift))
    check(Tensor(a).transpose(1, 1), torch.tensor(a).transpose(1, 1))
    check(Tensor(np.float32(2.0)).transpose(0, 0), torch.tensor(2.0).transpose(0, 0))
    check(Tensor(np.float32(2.0)).transpose(-1, 0), torch.tensor(2.0).transpose(-1, 0))


# *** indexing with nested lists/tuples and negative steps; isinf/isclose ***
def test_nested_list_and_tuple_indices_and_negative_steps():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x, t = Tensor(a), torch.tensor(a)
    for idx in (((0, 2), (1, 3)), (slice(None), [[1, 3], [0, 0]]), ([2, 0], slice(None), (4, -1)), (-1, [0, -1], 2),
                (Ellipsis, [1, 1]), ([[[0]]],), (Tensor([[0, 2], [1, 0]]),)):
        check(x[idx], t[tuple(torch.tensor(k.numpy()) if isinstance(k, Tensor) else k for k in idx)])
    # torch refuses negative steps: numpy is the reference
    for idx in ((slice(None, None, -1),), (slice(None), slice(None, None, -2), slice(4, 0, -3)),
                (slice(None, None, -1), None, 1), (slice(-1, -4, -2), [0, 2])):
        np.testing.assert_array_equal(x[idx].numpy(), a[idx])
    (y, yt) = pair(a, grad=True)
    out, ref = y[::-1, [0, 3], ::-2], yt.flip(0)[:, [0, 3]].flip(-1)[..., ::2]
    check(out, ref)
    grads_match(out, ref, y, yt)


def test_isinf_detect_and_isclose():
    a = np.array([np.inf, -np.inf, 1.0, np.nan, 0.0], np.float32)
    for pos in (True, False):
        for neg in (True, False):
            check(Tensor(a).isinf(detect_positive=pos, detect_negative=neg),
                  torch.tensor(a).isinf() & ((torch.tensor(a) > 0) if not neg else True) &
                  ((torch.tensor(a) < 0) if not pos else True))
    b = np.array([np.inf, np.inf, 1.0 + 1e-6, np.nan, 1e-9], np.float32)
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 1e-8}, {"rtol": 1e-3}):
        check(Tensor(a).isclose(Tensor(b), **kw), torch.tensor(a).isclose(torch.tensor(b), **kw))
    ints = np.array([1, 2, 3])
    check(Tensor(ints).isclose(Tensor(ints[::-1].copy())), torch.tensor(ints).isclose(torch.tensor(ints[::-1].copy())))


def test_python_device_tiny():
    a = normal((2, 3), 1)
    (x, xt) = pair(a, device="PYTHON", grad=True)
    (v, i), (vt, it) = x.sort(1), xt.sort(1)
    check(v, vt)
    check(i, it)
    grads_match(v, vt, x, xt)
    index = np.array([[1, 0, 1]])
    check(Tensor(a, "PYTHON").scatter(0, Tensor(index, "PYTHON"), 5.0), torch.tensor(a).scatter(0, torch.tensor(index),
                                                                                                  5.0))
    check(Tensor(a, "PYTHON").bitcast(dtypes.int32), torch.tensor(a).view(torch.int32))
    check(Tensor(a, "PYTHON").unfold(1, 2, 1), torch.tensor(a).unfold(1, 2, 1))
    check(Tensor(a, "PYTHON").cummax(1)[1], torch.tensor(a).cummax(1).indices)


def test_random_like_randperm_idiv_and_stable_keyword():
    x = Tensor.ones(3, 4, dtype=dtypes.float16)
    r, n = x.rand_like(), x.randn_like()
    assert (r.shape, r.dtype, n.shape, n.dtype) == ((3, 4), dtypes.float16, (3, 4), dtypes.float16)
    assert 0 <= r.float().numpy().min() and r.float().numpy().max() < 1
    assert Tensor.ones(2, dtype=dtypes.int32).rand_like().dtype == dtypes.float32
    Tensor.manual_seed(3)
    p = Tensor.randperm(9)
    assert p.dtype == dtypes.int64 and sorted(p.numpy().tolist()) == list(range(9))
    a, b = np.array([7, -7, 7, -7, 0]), np.array([2, 2, -2, -2, 3])
    check(Tensor(a).idiv(Tensor(b)), torch.div(torch.tensor(a), torch.tensor(b), rounding_mode="trunc"))
    a = normal((3, 5), 2)
    check(Tensor(a).sort(dim=1, stable=True)[1], torch.tensor(a).sort(dim=1, stable=True)[1])
    check(Tensor(a).argsort(dim=0, descending=True, stable=True),
          torch.tensor(a).argsort(dim=0, descending=True, stable=True))


def test_pad_and_flip_argument_orders_of_tinygrad_and_torch():
    a = normal((1, 3, 4), 1)
    check(Tensor(a).pad((1, 2), "reflect"), F.pad(torch.tensor(a), (1, 2), "reflect"))
    check(Tensor(a).pad((1, 2), "constant", 2.5), F.pad(torch.tensor(a), (1, 2), "constant", 2.5))
    check(Tensor(a).pad((1, 2), mode="replicate"), F.pad(torch.tensor(a), (1, 2), mode="replicate"))
    check(Tensor(a).pad((1, 2), -1.0), F.pad(torch.tensor(a), (1, 2), value=-1.0))
    check(Tensor(a).flip(1, 2), torch.tensor(a).flip(1, 2))
    check(Tensor(a).flip((0, -1)), torch.tensor(a).flip((0, -1)))


def test_setitem_with_advanced_indices():
    a = normal((4, 5), 3)
    cases = [([0, 2], 5.0), ((slice(None), [1, 3]), normal((4, 2), 4)), (([0, 1, 3], [4, 0, 2]), normal((3,), 5)),
             ((slice(1, None), Tensor([[0], [4]])), 7.0), (([-1, 0], slice(None, None, 2)), normal((1, 3), 6)),
             ((Tensor(a[:, 0] > 0), 1), -2.0)]
    for idx, value in cases:
        x = Tensor(a).realize()
        t = torch.tensor(a)
        x[idx] = Tensor(value) if isinstance(value, np.ndarray) else value
        tidx = tuple(torch.tensor(k.numpy()) if isinstance(k, Tensor) else k for k in idx) if isinstance(idx, tuple) \
            else idx
        t[tidx] = torch.tensor(value) if isinstance(value, np.ndarray) else value
        check(x, t)
    x = Tensor(np.arange(6), dtype=dtypes.int32).realize()
    x[[5, 0]] = Tensor([50, 7], dtype=dtypes.int32)
    np.testing.assert_array_equal(x.numpy(), [7, 1, 2, 3, 4, 50])
    with pytest.raises(ValueError, match="setitem: cannot broadcast the value of shape .3,. to the indexed shape .2,."):
        x[[0, 1]] = Tensor([1, 2, 3], dtype=dtypes.int32)


def test_diagonal_of_empty_dims():
    for shape in [(0, 3), (3, 0), (2, 0, 4)]:
        a = np.zeros(shape, np.float32)
        for off in (0, 1, -1):
            check(Tensor(a).diagonal(off), torch.tensor(a).diagonal(off))
    check(Tensor(np.zeros(0, np.float32)).diag(), torch.zeros(0).diag())


def test_pytorch_method_spellings():
    a = normal((2, 3, 4), 5)
    x, t = Tensor(a), torch.tensor(a)
    check(x.view(dtypes.int32), t.view(torch.int32))
    check(x.view("int32"), t.view(torch.int32))
    check(x[0].view_as(x[1].T), t[0].view_as(t[1].T))
    check(x[0, :1].expand_as(x[0]), t[0, :1].expand_as(t[0]))
    check(x[0].t(), t[0].t())
    check(x.narrow(2, 1, 2), t.narrow(2, 1, 2))
    check(x.narrow(-1, -3, 3), t.narrow(-1, -3, 3))
    check(x.movedim(0, -1), t.movedim(0, -1))
    check(x.moveaxis((0, 1), (2, 0)), t.moveaxis((0, 1), (2, 0)))
    check(x.amax(dim=(0, 2)), t.amax(dim=(0, 2)))
    check(x.amin(1, keepdim=True), t.amin(1, keepdim=True))
    check(x.new_zeros(2, 2), t.new_zeros(2, 2))
    check(x.new_ones((3,)), t.new_ones((3,)))
    check(x.new_full((2,), 7.5), t.new_full((2,), 7.5))
    assert x.new_empty(2, dtype="int32").shape == (2,)
    for name in ("lt", "gt", "le", "ge"):
        check(getattr(x, name)(0.1), getattr(t, name)(0.1))
    check(x.true_divide(0.1), t.true_divide(0.1), 1e-6)  # (x * (1 / 0.1): within an ulp of IEEE division)
    check(x.type_as(Tensor([1], dtype=dtypes.int32)), t.type_as(torch.tensor([1], dtype=torch.int32)))
    with pytest.raises(IndexError, match="narrow: start 3 and length 2 are out of range"):
        x.narrow(1, 3, 2)


def test_movement_and_indexing_more():
    a = normal((3, 4, 5), 6)
    (x, xt) = pair(a, grad=True)
    for ours, theirs in ((lambda v: v.ravel(), lambda v: v.ravel()), (lambda v: v.fliplr(), lambda v: v.fliplr()),
                         (lambda v: v.flipud(), lambda v: v.flipud()), (lambda v: v.swapdims(0, 2), None),
                         (lambda v: v.tile(2, 1), None), (lambda v: v.tile((1, 2, 1, 1)), None),
                         (lambda v: v.select(1, -1), None), (lambda v: v.rot90(), None),
                         (lambda v: v.rot90(2, (1, 2)), lambda v: v.rot90(2, (1, 2))),
                         (lambda v: v.rot90(-1, (0, 2)), lambda v: v.rot90(-1, (0, 2)))):
        check(ours(Tensor(a)), (theirs or ours)(torch.tensor(a)))
    for ours, theirs in zip(Tensor(a).unbind(1), torch.tensor(a).unbind(1)):
        check(ours, theirs)
    idx = np.array([[0, -1], [7, 3]])
    out, ref = x.take(Tensor(idx)), xt.take(torch.tensor(idx))
    check(out, ref)
    grads_match(out, ref, x, xt)
    ind = np.array([[[0], [3], [1], [1]]] * 3)
    check(Tensor(a).take_along_dim(Tensor(ind), 2), torch.tensor(a).take_along_dim(torch.tensor(ind), 2))
    check(Tensor(a).take_along_dim(Tensor(ind[:1]), 2), torch.tensor(a).take_along_dim(torch.tensor(ind[:1]), 2))
    check(Tensor(a).take_along_dim(Tensor(np.array([5, 0])), None),
          torch.tensor(a).take_along_dim(torch.tensor([5, 0])))
    src = normal((3, 2, 5), 7)
    index = np.array([3, 0])
    for name in ("index_add", "index_copy"):
        check(getattr(Tensor(a), name)(1, Tensor(index), Tensor(src)), getattr(torch.tensor(a), name)(
            1, torch.tensor(index), torch.tensor(src)), 1e-6, 1e-6)
    check(Tensor(a).index_add(1, Tensor(np.array([1, 1])), Tensor(src), alpha=2),
          torch.tensor(a).index_add(1, torch.tensor([1, 1]), torch.tensor(src), alpha=2), 1e-6, 1e-6)
    check(Tensor(a).index_fill(2, Tensor(np.array([0, -1])), -7.0), torch.tensor(a).index_fill(2, torch.tensor(
        [0, -1]), -7.0))


def test_unique_and_isin():
    a = np.array([[3, 1, 3], [2, 1, 0]])
    x, t = Tensor(a), torch.tensor(a)
    check(x.unique(), t.unique())
    for ours, theirs in zip(x.unique(return_inverse=True, return_counts=True),
                            t.unique(return_inverse=True, return_counts=True)):
        check(ours, theirs)
    rows = np.array([[1, 2], [1, 2], [0, 5]])
    check(Tensor(rows).unique(dim=0), torch.tensor(rows).unique(dim=0))
    check(x.isin(Tensor(np.array([1, 3]))), torch.isin(t, torch.tensor([1, 3])))
    check(x.isin([0, 7], invert=True), torch.isin(t, torch.tensor([0, 7]), invert=True))
