"""In-place assignment against numpy: hazards of an assign reading its own target, and program order across the
names (views) of shared memory."""

import numpy as np
import pytest

from ember.tensor import Tensor
from ember.tensor.realize import share_storage, storage_views
from ember.uops import Ops


def arange(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("name, fn, ref_fn", [
    ("transpose", lambda x: x.T, lambda r: r.T),
    ("flip", lambda x: x.flip(0), lambda r: r[::-1]),
    ("flip both", lambda x: x.flip(0).flip(1), lambda r: r[::-1, ::-1]),
    ("permute of an expression", lambda x: (x + 1).T, lambda r: (r + 1).T),
    ("minus row sums", lambda x: x - x.sum(1, keepdim=True), lambda r: r - r.sum(1, keepdims=True)),
    ("minus the total", lambda x: x - x.sum(), lambda r: r - r.sum()),
    ("elementwise", lambda x: x * 2 + 1, lambda r: r * 2 + 1),
])
def test_assign_reads_its_own_target(name, fn, ref_fn):
    ref = arange(4, 4)
    x = Tensor(ref.copy()).realize()
    x.assign(fn(x)).realize()
    np.testing.assert_array_equal(x.numpy(), ref_fn(ref), err_msg=name)


def test_assign_to_an_overlapping_shrink():
    ref = arange(8)
    z = Tensor(ref.copy()).realize()
    z[1:].assign(z[:-1]).realize()
    expect = ref.copy()
    expect[1:] = ref[:-1].copy()
    np.testing.assert_array_equal(z.numpy(), expect)


def test_an_assign_through_a_view_keeps_its_buffer_from_the_memory_planner():
    # the target is written through a transpose: a same-size intermediate scheduled after the assign must not be given
    # the target's buffer (it was: the planner saw the transpose, not the buffer under it, as what the assign keeps)
    ref = arange(2, 6)
    x, y = Tensor(ref.copy()).realize(), Tensor(np.ones((2, 6), np.float32)).realize()
    other = (y * 2).contiguous().exp2().sum(1)  # stores 12 floats on the way
    Tensor.realize_all(x.T.assign(Tensor(ref.T * 2)), other)
    np.testing.assert_array_equal(x.numpy(), ref * 2)
    np.testing.assert_array_equal(other.numpy(), [24, 24])


def test_flat_storage_is_views_in_the_graph():
    a, b = Tensor(arange(4)).realize(), Tensor(arange(2, 3)).realize()
    flat = share_storage([a, b])
    base = a.uop
    while base.op is Ops.RESHAPE:
        base = base.src[0]
    assert base.op is Ops.BUFFER_VIEW and base.src[0].op is Ops.BUFFER and base.arg == (4, 0)
    assert [v.uop for v in storage_views(flat, [(4,)])] == [a.uop]  # one name per slice of memory
    np.testing.assert_array_equal(flat.numpy(), np.concatenate([arange(4), arange(6)]))


def test_program_order_across_views():
    a, b = Tensor(arange(4)).realize(), Tensor(arange(3)).realize()
    flat = share_storage([a, b])
    before = a * 1  # lazy, made before the write: sees the old values
    flat.assign(flat + 100)  # pending
    after = a * 1  # made after the write (through another name): sees the new values
    np.testing.assert_array_equal(after.numpy(), arange(4) + 100)
    np.testing.assert_array_equal(before.numpy(), arange(4))
    b.assign(b * 2)  # a pending write to a view, then a read of the root
    np.testing.assert_array_equal(flat.numpy(), np.concatenate([arange(4) + 100, (arange(3) + 100) * 2]))


def test_pending_assign_is_seen_by_another_view_of_the_same_buffer():
    x = Tensor(arange(6)).realize()
    y = x.reshape(2, 3)  # realized: another name for x's buffer
    x.assign(x + 1)
    np.testing.assert_array_equal(y.numpy(), arange(2, 3) + 1)  # as in PyTorch: x.add_(1) is seen through y
