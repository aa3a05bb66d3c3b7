"""Kernel counts of the scheduler on tensor graphs written with UOps (what a careful engineer would write by hand)."""

import pytest

from ember.schedule import ExecItem, schedule
from ember.uops import Ops, UOp, dtypes, verify

_n = iter(range(10**6))


def buf(*shape, dt=dtypes.float32):
    size = 1
    for s in shape:
        size *= s
    return UOp(Ops.BUFFER, dt, (UOp(Ops.UNIQUE, arg=next(_n)), UOp(Ops.DEVICE, arg="CPU")), size).reshape(shape)


def const(v, shape):
    return UOp.const(dtypes.float32, v, "CPU").reshape((1,) * len(shape)).expand(shape)


def kernels(*outs, hold=frozenset()):
    s = schedule(UOp.sink(*outs), hold=hold)
    for it in s.items:
        assert isinstance(it, ExecItem)
        if it.ast.op is Ops.SINK:
            verify(it.ast, "kernel")
    return s


def test_elementwise_chain_is_one_kernel():
    a, b = buf(7, 33), buf(7, 33)
    x = a
    for i in range(40):
        x = (x * b + const(float(i), (7, 33))).exp2() if i % 3 == 0 else x + a
    assert len(kernels(x).items) == 1


def test_mul_sum_axis_one_kernel():
    a, b = buf(16, 32), buf(16, 32)
    assert len(kernels((a * b).reduce_axis(Ops.ADD, (1,))).items) == 1


def test_sum_over_broadcast_one_kernel():
    a, b = buf(16, 1), buf(1, 32)
    e = a.expand((16, 32)) + b.expand((16, 32))
    assert len(kernels(e.reduce_axis(Ops.ADD, (0, 1))).items) == 1


def matmul(a, b):
    n, k = a.shape
    m = b.shape[1]
    return (a.reshape((n, 1, k)).expand((n, m, k)) * b.permute((1, 0)).reshape((1, m, k)).expand((n, m, k))) \
        .reduce_axis(Ops.ADD, (2,)).reshape((n, m))


def test_matmul_bias_relu_one_kernel():
    a, b, bias = buf(8, 16), buf(16, 4), buf(1, 4)
    mm = matmul(a, b)
    assert len(kernels(mm).items) == 1
    out = (mm + bias.expand((8, 4))).maximum(const(0.0, (8, 4)))
    assert len(kernels(out).items) == 1


def softmax(x):
    n, m = x.shape
    mx = x.reduce_axis(Ops.MAX, (1,)).expand((n, m))
    e = (x + mx * -1.0).exp2()
    return e * e.reduce_axis(Ops.ADD, (1,)).expand((n, m)).reciprocal()


def test_softmax_three_kernels():
    # the row max, the row sum of exp, the output (a fused single kernel would recompute both reduces per element)
    assert len(kernels(softmax(buf(32, 10))).items) == 3


def test_layernorm_three_kernels():
    # the row mean, the row variance, the output
    x = buf(32, 10)
    mean = x.reduce_axis(Ops.ADD, (1,)) * 0.1
    d = x + mean.expand((32, 10)) * -1.0
    var = (d * d).reduce_axis(Ops.ADD, (1,)) * 0.1
    out = d * (var + 1e-5).sqrt().reciprocal().expand((32, 10))
    assert len(kernels(out).items) == 3


def test_shared_expensive_value_computed_once():
    a, b = buf(8, 16), buf(16, 4)
    y = matmul(a, b)
    out = y.maximum(const(0.0, (8, 4))) + (y * -1.0).exp2()
    s = kernels(out)
    assert len(s.items) == 2  # the matmul once, then the elementwise tail reading it twice
    reduces = [u for it in s.items for u in it.ast.toposort() if u.op is Ops.REDUCE]
    assert len(reduces) == 1


def test_contiguous_and_outputs_realize():
    a = buf(4, 4)
    x = (a + a).contiguous()
    s = kernels(x * 2.0, x)
    assert len(s.items) == 2
    assert all(v.op is Ops.RESHAPE and v.src[0].op is Ops.BUFFER for v in s.becomes.values())


def test_buffer_output_needs_no_kernel():
    a = buf(4, 4)
    s = kernels(a)
    assert s.items == [] and s.becomes[a] is a


def test_identical_kernels_share_an_ast():
    """The kernels of a model's layers (the same graph over other buffers) are one AST, each with its own buffers.
    Reading one buffer twice is another kernel than reading two, and reading a realized node goes through its
    buffer, in both schedules alike."""
    a, b, c, d = (buf(7, 13) for _ in range(4))
    s1, s2 = kernels((a * b).exp2()), kernels((c * d).exp2())
    assert s1.items[0].ast is s2.items[0].ast
    assert s1.items[0].bufs[1:] == (a.src[0], b.src[0]) and s2.items[0].bufs[1:] == (c.src[0], d.src[0])
    (one,) = kernels((c * c).exp2()).items
    assert one.ast is not s1.items[0].ast and one.bufs[1:] == (c.src[0],)
    # a reduce read twice is realized: the second kernel reads it through its buffer
    r1, r2 = a.reduce_axis(Ops.ADD, (1,)), c.reduce_axis(Ops.ADD, (1,))
    t1, t2 = kernels(r1 + r1.exp2()), kernels(r2 + r2.exp2())
    assert [it.ast for it in t1.items] == [it.ast for it in t2.items] and len(t1.items) == 2
    assert t2.items[0].bufs[1:] == (c.src[0],) and t2.items[1].bufs[1] == t2.items[0].bufs[0]


def test_size_zero_has_no_kernel():
    a = buf(0, 4)
    s = kernels(a + a)
    assert s.items == [] and s.becomes[(a + a)].shape == (0, 4)


def test_memory_plan_reuses_dead_intermediates():
    x = buf(64)
    a = (x * 2.0).contiguous()
    b = (a * 3.0).contiguous()  # a is dead after this
    c = (b * 4.0).contiguous()  # may reuse a's storage
    s = kernels(c * 5.0)
    assert len(s.items) == 4
    out_bufs = [it.bufs[0] for it in s.items]
    assert len(set(out_bufs)) < 4
    # the kernel reading a buffer never writes the same one
    assert all(it.bufs[0] not in it.bufs[1:] for it in s.items)
    s_held = kernels(c * 5.0, hold=frozenset({a, b, c}))
    assert len({it.bufs[0] for it in s_held.items}) == 4


def test_copy_item():
    a = buf(4, 4)
    cp = UOp(Ops.COPY, dtypes.float32, ((a * 2.0).contiguous(), UOp(Ops.DEVICE, arg="PYTHON")))
    s = kernels(cp)
    assert [it.ast.op for it in s.items] == [Ops.SINK, Ops.COPY]
    assert s.items[1].bufs[0].src[1].arg == "PYTHON" and s.items[1].ast.arg == 64


def test_assign_writes_the_target_buffer():
    a = buf(4, 4)
    s = kernels(a.assign(a * 2.0))
    assert len(s.items) == 1
    base = a.src[0]
    assert s.items[0].bufs == (base,)


def test_bad_input():
    with pytest.raises(ValueError, match="expected a SINK"):
        schedule(buf(4))


def test_read_before_assign_runs_first():
    a = buf(4, 4)
    base = a.src[0]
    old_sum = a.reduce_axis(Ops.ADD, (0, 1))  # reads a's old value
    s = kernels(a.assign(a * 2.0), old_sum)
    writer = next(i for i, it in enumerate(s.items) if it.bufs[0] is base)
    reader = next(i for i, it in enumerate(s.items) if it.bufs[0] is not base)
    assert reader < writer
    # reading the assigned value runs after the assign
    asg = a.assign(a * 3.0)
    s = kernels(asg, asg.reduce_axis(Ops.ADD, (0, 1)))
    writer = next(i for i, it in enumerate(s.items) if it.bufs[0] is base)
    reader = next(i for i, it in enumerate(s.items) if it.bufs[0] is not base)
    assert writer < reader


def test_assign_to_a_view():
    a = buf(4, 4)
    s = kernels(a.shrink(((1, 3), (0, 4))).assign(const(1.0, (2, 4))))
    assert len(s.items) == 1 and s.items[0].bufs[0] is a.src[0]


def output_ranges(item):
    (end,) = (u for u in item.ast.toposort() if u.op is Ops.END and u.src[0].op is Ops.STORE)
    return [r.src[0].arg for r in end.src[1:]]


def test_contiguous_output_ranges_merge():
    # every address reads (4, 6, 8) row-major: one loop of 192
    a, b = buf(4, 6, 8), buf(4, 6, 8)
    (item,) = kernels(a * b + const(1.0, (4, 6, 8))).items
    assert output_ranges(item) == [192]
    # a bias along the last axis reads it alone: the two outer axes merge, the last stays
    (item,) = kernels(a + buf(8).reshape((1, 1, 8)).expand((4, 6, 8))).items
    assert output_ranges(item) == [24, 8]
    # a transposed read keeps its axes
    (item,) = kernels(buf(6, 4).permute((1, 0)) + buf(4, 6)).items
    assert output_ranges(item) == [4, 6]



def test_merge_ranges_keeps_a_merge_only_without_a_division_left():
    from ember.schedule.rangeify import _divides, merge_ranges
    from ember.uops import AxisType

    out, src = UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 0), UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 1)
    a, b = UOp.range(8, 0, AxisType.GLOBAL), UOp.range(8, 1, AxisType.GLOBAL)
    store, rngs = merge_ranges(out.index(a * 8 + b).store(src.index(a * 8 + b).load()), [a, b])
    (m,) = rngs
    assert m.src[0].arg == 64 and store is out.index(m).store(src.index(m).load())
    # a gate on the outer range alone would read m // 8 once merged: the ranges stay
    gated = out.index(a * 8 + b).store(src.index(a * 8 + b, valid=a < 3).load())
    assert merge_ranges(gated, [a, b]) == (gated, [a, b])
    # (the check: a division or remainder whose numerator reads the range, anywhere in the kernel)
    assert _divides(out.index((a * 8 + b) // 8).store(src.index(b).load()), a)
    assert not _divides(out.index((b // 2) * 16 + a).store(src.index(b % 2).load()), a)
    assert _divides(out.index(b // 2).store(src.index(a).load()), b)

def test_a_projection_in_a_split_shape_is_a_plain_matmul():
    # x @ w.T stored as (batch, seq, heads, pairs, 2), RoPE's view: a (batch * seq, dim) output over the reduce
    x, w = buf(2, 16, 32), buf(32, 32)
    y = (x.reshape((2, 16, 1, 32)).expand((2, 16, 32, 32)) * w.reshape((1, 1, 32, 32)).expand((2, 16, 32, 32)))
    y = y.reduce_axis(Ops.ADD, (3,)).reshape((2, 16, 4, 4, 2))
    (item,) = kernels(y).items
    assert output_ranges(item) == [32, 32]
