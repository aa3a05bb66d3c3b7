"""Writes to shared storage in the scheduler: BUFFER_VIEWs as graph nodes, hazards copied first, kernels ordered by
the memory they touch (not by the names they use for it)."""

import pytest

from ember.schedule import assign_target, buffers_read, overlaps, schedule
from ember.uops import Ops, UOp, dtypes

_n = iter(range(10**6))


def root(size):
    return UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=next(_n)), UOp(Ops.DEVICE, arg="CPU")), size)


def view(r, size, offset):
    return UOp(Ops.BUFFER_VIEW, dtypes.float32, (r,), (size, offset))


def test_overlap_is_by_elements_of_one_root():
    r, other = root(10), root(10)
    a, b, c = view(r, 4, 0), view(r, 6, 4), view(r, 3, 3)
    assert overlaps(a, r) and overlaps(b, r) and not overlaps(a, b)
    assert overlaps(a, c) and overlaps(b, c)  # [3, 6) meets [0, 4) and [4, 10)
    assert not overlaps(a, other) and not overlaps(view(other, 4, 0), a)
    assert view(r, 4, 0) is a  # hash-consed: one name for one slice of memory


def test_buffers_read_names_views_not_their_root():
    r = root(10)
    a = view(r, 4, 0)
    assert buffers_read((a * 2).toposort()) == {a}
    assert buffers_read((r.shrink(((0, 4),)) + a).toposort()) == {r, a}
    assert assign_target(a.reshape((2, 2)).assign(a.reshape((2, 2)) + 1)) is a
    with pytest.raises(ValueError, match="realized buffer"):
        assign_target((a + 1).assign(a))


def _order(sched):
    return [tuple(it.bufs) for it in sched.items]


def test_reader_of_a_view_runs_before_a_write_to_the_root():
    r = root(10)
    a = view(r, 4, 0)
    read = (a * 3).contiguous()  # reads elements [0, 4) of r through the view
    write = r.assign(r * 10)  # overwrites them through the root
    sched = schedule(UOp.sink(write, read))
    writes = [i for i, it in enumerate(sched.items) if r in it.bufs and it.bufs[0] is r]
    reads = [i for i, it in enumerate(sched.items) if a in it.bufs]
    assert len(sched.items) == 2 and reads < writes  # write-after-read: the reader first, though listed second


def test_reader_of_a_disjoint_view_is_not_ordered_by_the_write():
    r = root(10)
    a, b = view(r, 4, 0), view(r, 6, 4)
    read_b = (b * 3).contiguous()
    write_a = a.assign(a + 1)
    sched = schedule(UOp.sink(write_a, read_b))
    assert [it.bufs[0] for it in sched.items][0] is a  # given order kept: no conflict between disjoint slices


@pytest.mark.parametrize("value, copies", [
    (lambda t: t.permute((1, 0)), 1),  # x.assign(x.T)
    (lambda t: t.flip((True, False)), 1),  # y.assign(y.flip(0))
    (lambda t: t + 1, 0),  # elementwise over the target itself: safe in place
    (lambda t: t - t.reduce_axis(Ops.ADD, (1,)).expand((4, 4)), 1),  # a row sum of the target: stored before the write
])
def test_assign_reading_its_target_elsewhere_copies_first(value, copies):
    b = root(16)
    t = b.reshape((4, 4))
    sched = schedule(UOp.sink(t.assign(value(t))))
    assert len(sched.items) == 1 + copies
    if copies:  # the copy reads b before the assign's kernel overwrites it
        assert b in sched.items[0].bufs[1:] and sched.items[-1].bufs[0] is b


def test_assign_reading_an_overlapping_view_copies_first():
    r = root(8)
    lo, hi = view(r, 7, 0), view(r, 7, 1)  # x[1:] = x[:-1], through two views of one root
    sched = schedule(UOp.sink(hi.assign(lo)))
    assert len(sched.items) == 2 and sched.items[-1].bufs[0] is hi
    disjoint = view(r, 1, 0)
    assert len(schedule(UOp.sink(view(r, 1, 7).assign(disjoint))).items) == 1  # no shared element: no copy
