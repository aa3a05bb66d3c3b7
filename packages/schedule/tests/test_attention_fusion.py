"""Flash-style attention in the scheduler (attention.py) on UOp graphs: which scores are recomputed (kernel counts,
no T x T buffer), and the reduces that a mask on their range lets run over fewer iterations."""

import math

import pytest

from ember.schedule import attention, schedule
from ember.schedule.attention import bound_masked_reduce, range_bound
from ember.uops import AxisType, Ops, UOp, dtypes, gradient, graph_rewrite, verify

_n = iter(range(10**6))

def buf(*shape):
    size = math.prod(shape)
    return UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=next(_n)), UOp(Ops.DEVICE, arg="CPU")), size) \
        .reshape(shape)

def matmul_t(a, b):
    """a @ b^T over (n, k) and (m, k)."""
    (n, k), m = a.shape, b.shape[0]
    return (a.reshape((n, 1, k)).expand((n, m, k)) * b.reshape((1, m, k)).expand((n, m, k))) \
        .reduce_axis(Ops.ADD, (2,)).reshape((n, m))

def attention_graph(q, k, v, mask=None, detach_max=False):
    t = q.shape[0]
    s = matmul_t(q, k) * 0.25
    if mask is not None:
        s = mask.where(s, UOp.const(dtypes.float32, -math.inf, "CPU").reshape((1, 1)).expand((t, t)))
    mx = s.reduce_axis(Ops.MAX, (1,))
    mx = (UOp(Ops.DETACH, mx.dtype, (mx,)) if detach_max else mx).expand((t, t))  # (a backward: as Tensor.softmax)
    e = (s + mx * -1.0).exp2()
    p = e * e.reduce_axis(Ops.ADD, (1,)).expand((t, t)).reciprocal()
    return matmul_t(p, v.permute((1, 0)))

def items(*outs):
    s = schedule(UOp.sink(*outs))
    for it in s.items:
        verify(it.ast, "kernel")
    return s.items

@pytest.mark.parametrize("one_loop", [False, True])
def test_scores_recomputed_in_their_readers(monkeypatch, one_loop):
    """T = 128, head_dim 8 (a 128 x 128 score from two 128 x 8 inputs: a blow-up of 8), only the output asked for: one
    kernel, no 128 x 128 buffer and no row statistic stored. Two passes: the row max over a range of its own, the row
    sum and p @ v over one other range; one loop (ONLINE_ONE_LOOP, the default): all three over the max's range. The
    dot product over head_dim nested in each."""
    monkeypatch.setattr(attention, "ONLINE_ONE_LOOP", one_loop)
    monkeypatch.setattr("ember.schedule._templates", {})  # (kernels by template: built anew under this mode)
    q, k, v = buf(128, 8), buf(128, 8), buf(128, 8)
    its = items(attention_graph(q, k, v))
    assert len(its) == 1
    assert sorted(b.arg for b in its[0].bufs) == [128 * 8] * 4
    reduces = [u for u in its[0].ast.toposort() if u.op is Ops.REDUCE]
    mx = [r for r in reduces if r.arg is Ops.MAX]
    sums = [r for r in reduces if r.arg is Ops.ADD and mx[0] in r.src[0].toposort()]
    assert len(mx) == 1 and len(sums) == 2 and sums[0].src[1:] == sums[1].src[1:]
    assert (sums[0].src[1:] == mx[0].src[1:]) == one_loop
    assert any(inner in mx[0].src[0].toposort() for inner in reduces)

@pytest.mark.parametrize("one_loop", [False, True])
def test_row_statistics_read_elsewhere_are_stored(monkeypatch, one_loop):
    """The row max also an output (as a backward reads the statistics): stored by the output's kernel (a multi-output
    kernel): 1 kernel, no 128 x 128 buffer. Two passes: the max in a loop over the keys of its own, then the row sum
    and p @ v in one loop after it, each loop recomputing the scores; one loop: all three in the max's (the online
    softmax's running max is the statistic stored)."""
    monkeypatch.setattr(attention, "ONLINE_ONE_LOOP", one_loop)
    monkeypatch.setattr("ember.schedule._templates", {})
    q, k, v = buf(128, 8), buf(128, 8), buf(128, 8)
    mx = (matmul_t(q, k) * 0.25).reduce_axis(Ops.MAX, (1,))
    (it,) = items(attention_graph(q, k, v), mx)
    assert sorted(b.arg for b in it.bufs[:2]) == [128, 128 * 8] and max(b.arg for b in it.bufs) == 128 * 8
    assert sum(u.op is Ops.STORE for u in it.ast.toposort()) == 2
    (mxr,) = [u for u in it.ast.toposort() if u.op is Ops.REDUCE and u.arg is Ops.MAX]
    sums = [u for u in it.ast.toposort() if u.op is Ops.REDUCE and u.arg is Ops.ADD and mxr in u.src[0].toposort()]
    assert len(sums) == 2 and sums[0].src[1:] == sums[1].src[1:]
    assert (sums[0].src[1:] == mxr.src[1:]) == one_loop

def test_small_blowup_keeps_the_stored_scores():
    """T = 32, head_dim 8 (a blow-up of 2): the scores are one matmul, stored and read by the three reduces."""
    q, k, v = buf(32, 8), buf(32, 8), buf(32, 8)
    its = items(attention_graph(q, k, v))
    assert len(its) == 5 and max(b.arg for it in its for b in it.bufs) == 32 * 32

def test_a_score_read_by_an_output_is_stored():
    """The scores are also an output (the user asked for the weights): realized, and read by the reduces."""
    q, k, v = buf(128, 8), buf(128, 8), buf(128, 8)
    s = matmul_t(q, k)
    its = items(s, matmul_t(s, v.permute((1, 0))))
    assert len(its) == 2 and max(b.arg for it in its for b in it.bufs) == 128 * 128

def causal_mask(t):
    i = UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, arg="CPU"),), t)
    return i.reshape((t, 1)).expand((t, t)) >= i.reshape((1, t)).expand((t, t))

def row_term_reduces(sink, t):
    """The sums over keys to one value per query (T x T -> T x 1): the row max, the row sum, the backward's row
    term."""
    return [u for u in sink.toposort() if u.op is Ops.REDUCE_AXIS and u.src[0].shape == (t, t) and u.shape == (t, 1)]

@pytest.mark.parametrize("causal", [False, True])
def test_softmax_backward_row_term_reads_the_output(causal):
    """The gradient of sum(o * up), o = softmax(q k^T + mask) v: its row term sum_j(dP * e) / l^2 (dP = dO v^T) is
    rewritten to sum_c(dO * o) / l, a sum over head_dim (8) that reads o; the sums over keys left are the row max and
    the row sum. Scheduled: 5 kernels, 3 of them recompute scores (the forward with its row statistics, dq, dk with
    dv: multi-output kernels; 7 before the row term's rule), none of T x T."""
    t = 128
    q, k, v, up = buf(t, 8), buf(t, 8), buf(t, 8), buf(t, 8)
    o = attention_graph(q, k, v, causal_mask(t) if causal else None, detach_max=True)
    loss = (o * up).reduce_axis(Ops.ADD, (0, 1))
    grads = gradient(loss, [q, k, v], UOp.const(dtypes.float32, 1.0, "CPU").reshape((1, 1)))
    sink = UOp.sink(o, *grads.values())
    assert len(row_term_reduces(sink, t)) == 3
    new = attention.rewrite_softmax_grad_rows(sink)
    assert [u.arg[0] for u in row_term_reduces(new, t)] == [Ops.MAX, Ops.ADD]
    # (o as stored: the output, o's reduce (t, 8, 1) read back from it)
    (d,) = [u for u in new.toposort() if u.op is Ops.REDUCE_AXIS and u.src[0].shape == (t, 8, 1)]
    assert d.arg == (Ops.ADD, (1,)) and o in d.src[0].toposort()
    its = items(o, *grads.values())
    assert len(its) == 5 and max(b.arg for it in its for b in it.bufs) < t * t
    nested = [it for it in its if any(r.op is Ops.REDUCE and any(x.op is Ops.REDUCE for x in r.src[0].toposort())
                                      for r in it.ast.toposort())]
    assert len(nested) == 3

def test_row_term_of_other_weights_is_left():
    """sum_j(dP * w) with w not the p of o = p @ v (dP its gradient): not sum(dO * o), left as it is; sum_j(dP * p)
    is rewritten where o is in the graph."""
    t = 128
    q, k, v, up, w = buf(t, 8), buf(t, 8), buf(t, 8), buf(t, 8), buf(t, t)
    o = attention_graph(q, k, v, detach_max=True)
    loss = (o * up).reduce_axis(Ops.ADD, (0, 1))
    (p,) = [u for u in o.toposort() if u.op is Ops.MUL and u.shape == (t, t) and
            any(s.op is Ops.RECIPROCAL for s in u.src)]
    dp = gradient(loss, [p], UOp.const(dtypes.float32, 1.0, "CPU").reshape((1, 1)))[p]
    rows = (dp * w).reduce_axis(Ops.ADD, (1,)), (dp * p).reduce_axis(Ops.ADD, (1,))
    assert attention.rewrite_softmax_grad_rows(UOp.sink(*rows)).src == rows  # (o is not in the graph: not read)
    new = attention.rewrite_softmax_grad_rows(UOp.sink(o, *rows))
    assert new.src[1] is rows[0] and new.src[2] is not rows[1]  # (sum(dP * p) is sum(dO * o))

def whole_graph_rewrite(sink):
    """rewrite_softmax_grad_rows as the rule over every node: graph_rewrite with the same context."""
    graph = attention.ProductReduces({}, {})
    users = {}
    for u in sink.toposort():
        for s in u.src:
            users.setdefault(s, []).append(u)
        if u.op is Ops.REDUCE_AXIS and u.src[0].op is Ops.MUL:
            for s in dict.fromkeys(u.src[0].src):
                graph.by_operand.setdefault(s, []).append(u)
    for o in {o for reduces in graph.by_operand.values() for o in reduces}:
        if (view := attention._stored_view(o, users, set(sink.src))) is not None:
            graph.views[o] = view
    return graph_rewrite(sink, attention.pm_softmax_grad_rows, ctx=graph)

def test_row_terms_of_stacked_layers_rewritten_as_the_whole_graph_is():
    """Two attention layers, the second's queries the first's output: the first's row term lies above the second's
    (its dO comes through it). The graph is the rule's over every node (the same UOp), both row terms sums over
    head_dim; a graph without a softmax backward comes back as it is."""
    t = 128
    q, k, v, k2, v2, up = (buf(t, 8) for _ in range(6))
    o1 = attention_graph(q, k, v, causal_mask(t), detach_max=True)
    o2 = attention_graph(o1, k2, v2, causal_mask(t), detach_max=True)
    loss = (o2 * up).reduce_axis(Ops.ADD, (0, 1))
    grads = gradient(loss, [q, k, v], UOp.const(dtypes.float32, 1.0, "CPU").reshape((1, 1)))
    sink = UOp.sink(o2, *grads.values())
    assert len(row_term_reduces(sink, t)) == 6
    new = attention.rewrite_softmax_grad_rows(sink)
    assert new is whole_graph_rewrite(sink) and new is not sink
    assert sorted(u.arg[0] for u in row_term_reduces(new, t)) == [Ops.ADD, Ops.ADD, Ops.MAX, Ops.MAX]
    forward = UOp.sink(o2)
    assert attention.rewrite_softmax_grad_rows(forward) is forward

# *** bounds of masked reduces ***
def ranges(n=16):
    return UOp.range(n, 0, AxisType.GLOBAL), UOp.range(n, 1, AxisType.REDUCE)

def test_range_bound_of_causal_comparisons():
    i, j = ranges()
    ci, cj = i.cast(dtypes.int32), j.cast(dtypes.int32)
    # cols - rows <= 0, as tril writes it: !(0 < j - i)
    (start, end) = range_bound((UOp.const(dtypes.int32, 0) < cj + ci * -1) ^ True, j)
    assert start is None and end.evaluate({i: 5}) == 6
    # j >= i (a column at or after the row): its start
    (start, end) = range_bound((cj < ci) ^ True, j)
    assert end is None and start.evaluate({i: 5}) == 5
    assert range_bound(cj * 2 < ci, j) is None  # (a coefficient of 2: not an interval of the range's own steps)

def test_masked_max_runs_to_the_diagonal():
    i, j = ranges()
    x = UOp(Ops.PARAM, dtypes.float32.ptr(256), (), 1).index(i * 16 + j).load()
    red = UOp(Ops.REDUCE, dtypes.float32, ((i < j).where(UOp.const(dtypes.float32, -math.inf), x), j), Ops.MAX)
    new = bound_masked_reduce(red)
    (r,) = new.src[1:]
    assert r.src[0].evaluate({i: 5}) == 6 and new.src[0].op is Ops.WHERE  # (the mask stays)

def test_masked_exp_sum_runs_to_the_diagonal_and_a_nonidentity_mask_does_not():
    i, j = ranges()
    x = UOp(Ops.PARAM, dtypes.float32.ptr(256), (), 1).index(i * 16 + j).load()
    m = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), 2).index(i).load()
    inf = UOp.const(dtypes.float32, -math.inf)
    s = (i < j).where(inf, x)
    total = UOp(Ops.REDUCE, dtypes.float32, (((s + m * -1.0) * 1.4426950408889634).exp2(), j), Ops.ADD)
    assert bound_masked_reduce(total) is not None
    ones = UOp(Ops.REDUCE, dtypes.float32, ((i < j).where(UOp.const(dtypes.float32, 1.0), x), j), Ops.ADD)
    assert bound_masked_reduce(ones) is None  # (the masked terms are 1s, not the sum's 0)


def test_broadcast_shape_aligns_a_statistic_of_another_rank():
    """A row statistic beside o of another rank (the matmul kept the reduced axis) is matched to o's axes in order;
    one of o's rank is kept as it is; axes that do not fit in order are None."""
    from ember.schedule.rangeify import broadcast_shape, broadcasts_to

    assert broadcast_shape((1, 8, 1024, 1), (1, 8, 1024, 1, 32)) == (1, 8, 1024, 1, 1)
    assert broadcast_shape((8, 1024), (1, 8, 1024, 32)) == (1, 8, 1024, 1)
    assert broadcast_shape((1, 8), (8, 8)) == (1, 8)  # (same rank: as it is, not the first axis that fits)
    assert broadcast_shape((1024, 8), (1, 8, 1024, 32)) is None
    assert not broadcasts_to((3,), (2, 2)) and broadcasts_to((2, 1), (2, 5))
