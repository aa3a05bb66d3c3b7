"""ember.schedule.indexing: one-hot reduces become gated gathers, nested reduces merge, and an index simplified under
its validity condition keeps its value wherever that condition holds."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.schedule.indexing import pm_reduce_collapse, simplify_given_valid
from ember.uops import AxisType, Ops, UOp, dtypes, graph_rewrite, render_expr, view_index

MAX_ELEMENTS = 256  # every position of a view is evaluated


def make_base(size: int) -> UOp:
    return UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="CPU")), size)


def test_simplify_given_valid_pad_index():
    buf = make_base(24)
    view = buf.reshape((4, 6)).permute((1, 0)).reshape((6, 4)).permute((1, 0)).pad(((1, 0), (0, 2)))
    r0, r1 = UOp.range(5, 0), UOp.range(8, 1)
    _, (flat,), valid = view_index(view, (r0, r1))
    got = simplify_given_valid(flat, valid)
    assert got is r0 * 6 + r1 + -6
    for a in range(5):
        for b in range(8):
            if valid.evaluate({r0: a, r1: b}):
                assert got.evaluate({r0: a, r1: b}) == flat.evaluate({r0: a, r1: b}) == (a - 1) * 6 + b
    x = UOp.variable("x", 0, 100)
    assert simplify_given_valid(x + 0, None) is x


@st.composite
def padded_views(draw: st.DrawFn) -> tuple[UOp, np.ndarray]:
    """A view of a buffer through 1-5 random pads, shrinks, permutes, flips and reshapes (at most MAX_ELEMENTS
    positions), and numpy's `arange` through the same ops (pad fills with -1)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    want = np.arange(math.prod(shape)).reshape(shape)
    view = make_base(want.size).reshape(shape)
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["pad", "shrink", "permute", "flip", "reshape"]))
        if kind == "pad":
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in want.shape)
            if math.prod(s + b + e for s, (b, e) in zip(want.shape, arg)) > MAX_ELEMENTS:
                continue
            want, view = np.pad(want, arg, constant_values=-1), view.pad(arg)
        elif kind == "shrink":
            starts = [draw(st.integers(0, s - 1)) for s in want.shape]
            arg = tuple((b, draw(st.integers(b + 1, s))) for b, s in zip(starts, want.shape))
            want, view = want[tuple(slice(b, e) for b, e in arg)], view.shrink(arg)
        elif kind == "permute":
            order = tuple(draw(st.permutations(range(want.ndim))))
            want, view = np.transpose(want, order), view.permute(order)
        elif kind == "flip":
            axes = tuple(draw(st.booleans()) for _ in want.shape)
            want, view = np.flip(want, tuple(i for i, f in enumerate(axes) if f)), view.flip(axes)
        else:  # split the size into 1-3 dims
            dims = [1] * draw(st.integers(1, 3))
            for p in _prime_factors(want.size):
                dims[draw(st.integers(0, len(dims) - 1))] *= p
            want, view = want.reshape(dims), view.reshape(tuple(dims))
    return view, want


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(padded_views())
def test_simplify_given_valid_keeps_the_value_where_valid(case):
    # the index of every valid position, simplified under the validity condition, is the one numpy holds there
    view, want = case
    ranges = tuple(UOp.range(n, axis) for axis, n in enumerate(want.shape))
    _, (idx,), valid = view_index(view, ranges)
    got = simplify_given_valid(idx, valid)
    for pos in np.ndindex(*want.shape):
        env = dict(zip(ranges, pos))
        if valid is None or valid.evaluate(env):
            assert want[pos] != -1 and got.evaluate(env) == want[pos], \
                f"{render_expr(got)} given {render_expr(valid)} at {pos}: numpy holds {want[pos]}"
        else:
            assert want[pos] == -1, f"{render_expr(valid)} is false at {pos}, numpy holds {want[pos]}"


def test_onehot_reduce_collapses_to_a_gated_gather():
    """sum over r < 8 of (y == r) * w[r*4 + j] is w[y*4 + j] where 0 <= y < 8: a gather whose load is gated (an
    out-of-range y reads nothing), for the product form, the where form, and with other factors; the sum stays a sum
    when y depends on r or the reduce is not a sum."""
    w = UOp(Ops.PARAM, dtypes.float32.ptr(32), (), 0)
    ids = UOp(Ops.PARAM, dtypes.int32.ptr(4), (), 1)
    r, j = UOp.range(8, 0, AxisType.REDUCE), UOp.range(4, 1, AxisType.GLOBAL)
    y = ids.index(j).load()
    wr = w.index(r * 4 + j).load()
    hit = y.alu(Ops.CMPEQ, r.cast(dtypes.int32))
    forms = [hit.cast(dtypes.float32) * wr, hit.where(wr, UOp.const(dtypes.float32, 0.0)),
             (wr * 2.0) * hit.cast(dtypes.float32)]
    for x in forms:
        out = graph_rewrite(UOp(Ops.REDUCE, dtypes.float32, (x, r), Ops.ADD), pm_reduce_collapse)
        assert Ops.REDUCE not in {u.op for u in out.toposort()} and out.op is Ops.WHERE
        (gather,) = [u for u in out.toposort() if u.op is Ops.INDEX and u.src[0] is w]
        assert len(gather.src) == 3 and y in gather.src[1].toposort() and r not in gather.toposort()
    keep = [UOp(Ops.REDUCE, dtypes.float32, (forms[0], r), Ops.MAX),
            UOp(Ops.REDUCE, dtypes.float32, (forms[0].substitute({y: y + r.cast(dtypes.int32)}), r), Ops.ADD)]
    for red in keep:
        assert graph_rewrite(red, pm_reduce_collapse).op is Ops.REDUCE


def test_reduce_of_a_reduce_merges():
    """A sum over b of a sum over a is one sum over (a, b): one accumulator. Different ops stay nested."""
    x = UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 0)
    a, b = UOp.range(8, 0, AxisType.REDUCE), UOp.range(8, 1, AxisType.REDUCE)
    inner = UOp(Ops.REDUCE, dtypes.float32, (x.index(a * 8 + b).load(), a), Ops.ADD)
    out = graph_rewrite(UOp(Ops.REDUCE, dtypes.float32, (inner, b), Ops.ADD), pm_reduce_collapse)
    assert out.op is Ops.REDUCE and out.src[1:] == (a, b) and out.src[0].op is Ops.LOAD
    mixed = UOp(Ops.REDUCE, dtypes.float32, (inner, b), Ops.MAX)
    assert graph_rewrite(mixed, pm_reduce_collapse) is mixed


def test_reduce_range_read_through_a_division_splits():
    """sum over k < 64 of x[(k//16)*512 + k%16] * w[k] (heads merged after a transpose, as `out.transpose(1, 2)
    .reshape(b, t, dim) @ wo` reads them) becomes a sum over (hi < 4, lo < 16) with affine addresses
    x[hi*512 + lo] * w[hi*16 + lo]; every (hi, lo) is one k. A range with no division, or a divisor that does not
    divide its size, stays."""
    import itertools

    from ember.schedule.indexing import pm_split_reduce_ranges

    x = UOp(Ops.PARAM, dtypes.float32.ptr(2048), (), 0)
    w = UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 1)
    k = UOp.range(64, 0, AxisType.REDUCE)
    red = UOp(Ops.REDUCE, dtypes.float32, (x.index((k // 16) * 512 + k % 16).load() * w.index(k).load(), k), Ops.ADD)
    out = graph_rewrite(red, pm_split_reduce_ranges, ctx=itertools.count(1))
    assert out.op is Ops.REDUCE and [(r.src[0].arg, r.arg[1]) for r in out.src[1:]] == \
        [(4, AxisType.REDUCE), (16, AxisType.REDUCE)]
    hi, lo = out.src[1:]
    addresses = {u.src[0]: u.src[1] for u in out.toposort() if u.op is Ops.INDEX}
    assert addresses[x] is hi * 512 + lo and addresses[w] is hi * 16 + lo
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in out.toposort())
    for plain_read in (x.index(k * 2).load(), x.index(k // 24).load()):  # no division / 24 does not divide 64
        keep = UOp(Ops.REDUCE, dtypes.float32, (plain_read, k), Ops.ADD)
        assert graph_rewrite(keep, pm_split_reduce_ranges, ctx=itertools.count(1)) is keep
    # the range read through a division may be any of the reduce's ranges: j (the second) splits, i stays
    i, j = UOp.range(4, 0, AxisType.REDUCE), UOp.range(64, 1, AxisType.REDUCE)
    red = UOp(Ops.REDUCE, dtypes.float32, (x.index(i * 512 + (j // 16) * 64 + j % 16).load(), i, j), Ops.ADD)
    out = graph_rewrite(red, pm_split_reduce_ranges, ctx=itertools.count(2))
    assert [r.src[0].arg for r in out.src[1:]] == [4, 4, 16] and out.src[1] is i
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in out.toposort())
