"""Flash-style attention (ember.schedule.attention): the scores are recomputed inside the reduces that read them,
never stored, and a causal reduce runs over the unmasked keys only. Numerics against PyTorch, forward and backward,
at lengths that are multiples of no block; kernel counts; no score-sized buffer; the plain graph scheduled as sdpa."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.schedule import attention, schedule
from ember.tensor import Tensor, dtypes
from ember.uops import Ops, UOp

rng = np.random.default_rng(0)


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def plain_attention(q, k, v, causal):
    """softmax(q k^T * scale + mask) v as a user writes it, with no sdpa call."""
    scores = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]))
    if causal:
        t, s = q.shape[-2], k.shape[-2]
        scores = scores + Tensor.ones(t, s).tril().where(0.0, -math.inf)
    return scores.softmax(-1) @ v


def sdpa(q, k, v, causal, gqa=False):
    return q.scaled_dot_product_attention(k, v, is_causal=causal, enable_gqa=gqa)


def kernels(*ts):
    return [it for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK]


def grads_schedule(fn, q, k, v):
    """The kernels of out and of d(sum(out * up))/d(q, k, v), scheduled together as a training step does."""
    qt, kt, vt = (Tensor(a, requires_grad=True) for a in (q, k, v))
    out = fn(qt, kt, vt)
    loss = (out * Tensor(arr(*out.shape))).sum()
    return out, kernels(out, *loss.gradient(qt, kt, vt))


# T, head_dim: lengths no block divides; head_dim small enough that the scores are a blow-up worth recomputing
SHAPES = [(37, 2), (100, 4), (257, 8)]


@pytest.mark.parametrize("t,d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gqa", [False, True])
def test_numerics_vs_pytorch(t, d, causal, gqa):
    """Forward and dq, dk, dv against F.scaled_dot_product_attention (float32; rtol 1e-4, atol 2e-5)."""
    hk = 1 if gqa else 2
    q, k, v, up = arr(1, 2, t, d), arr(1, hk, t, d), arr(1, hk, t, d), arr(1, 2, t, d)
    ours = [Tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    o = sdpa(*ours, causal, gqa)
    ref = F.scaled_dot_product_attention(*theirs, is_causal=causal, enable_gqa=gqa)
    np.testing.assert_allclose(o.numpy(), ref.detach().numpy(), rtol=1e-4, atol=2e-5)
    (o * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    for name, a, b in zip("qkv", ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("tq,tk", [(50, 100), (100, 50)])
def test_causal_with_fewer_or_more_queries_than_keys(tq, tk):
    """Top-left causal alignment (PyTorch's): the key loop ends at i + 1 where that stays inside the keys; with more
    queries than keys it is left whole, the mask alone doing the work. Forward and dq, dk, dv."""
    d = 4
    arrays = [arr(1, 2, tq, d), arr(1, 2, tk, d), arr(1, 2, tk, d)]
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    o = sdpa(*ours, causal=True)
    ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
    assert len(kernels(o)) == 1
    np.testing.assert_allclose(o.numpy(), ref.detach().numpy(), rtol=1e-4, atol=2e-5)
    o.sum().backward()
    ref.sum().backward()
    for name, a, b in zip("qkv", ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_explicit_masks_vs_pytorch(kind):
    """A key-padding bool mask (with a query that sees no key: zeros, as PyTorch) and an additive float mask, through
    the recomputed scores: forward and dq, dk, dv; the softmax backward's row term read from the output there too
    (weights where(blind, 0, p)): 4 kernels recompute scores (the blind rows; the forward with its row statistics;
    dq; dk with dv: multi-output kernels; was 8)."""
    t, d = 100, 4
    q, k, v, up = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    if kind == "bool":
        mask = np.ones((t, t), bool)
        mask[:, 90:] = False
        mask[7] = False
    else:
        mask = arr(t, t)
    ours = [Tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    o = ours[0].scaled_dot_product_attention(ours[1], ours[2], attn_mask=Tensor(mask))
    assert max(b.arg for it in kernels(o) for b in it.bufs) < 2 * t * t  # (the mask itself is t x t)
    assert len(score_kernels(kernels(o, *(o * Tensor(up)).sum().gradient(*ours)))) == 4
    ref = F.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(o.numpy(), ref.detach().numpy(), rtol=1e-4, atol=2e-5)
    (o * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    for name, a, b in zip("qkv", ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"d{name}")


def test_python_device():
    """The bounded loops and nested reduces on the PYTHON device (the reference interpreter), forward and dq."""
    t, d = 37, 2
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    qt = Tensor(q, device="PYTHON", requires_grad=True)
    o = sdpa(qt, Tensor(k, device="PYTHON"), Tensor(v, device="PYTHON"), causal=True)
    o.sum().backward()
    tq = torch.tensor(q, requires_grad=True)
    ref = F.scaled_dot_product_attention(tq, torch.tensor(k), torch.tensor(v), is_causal=True)
    ref.sum().backward()
    np.testing.assert_allclose(o.numpy(), ref.detach().numpy(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(qt.grad.numpy(), tq.grad.numpy(), rtol=1e-4, atol=2e-5)


@pytest.fixture(params=[False, True], ids=["two_passes", "one_loop"])
def one_loop(request, monkeypatch):
    """The forward's single kernel as two passes (the default) or one loop (attention.ONLINE_ONE_LOOP)."""
    monkeypatch.setattr(attention, "ONLINE_ONE_LOOP", request.param)
    monkeypatch.setattr("ember.schedule._templates", {})  # (kernels by template: built anew under this mode)
    return request.param


@pytest.mark.parametrize("t,d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_one_kernel_vs_pytorch(one_loop, t, d, causal):
    """Inference (nothing reads the row statistics): one kernel either way, the values of PyTorch's."""
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    o = sdpa(*(Tensor(a) for a in (q, k, v)), causal=causal)
    assert len(kernels(o)) == 1
    ref = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=causal)
    np.testing.assert_allclose(o.numpy(), ref.numpy(), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_python_device_forward_online(one_loop, causal):
    """The forward alone (one kernel) on the PYTHON device, the GPU-style lowering, vs PyTorch."""
    t, d = 37, 2
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    o = sdpa(*(Tensor(a, device="PYTHON") for a in (q, k, v)), causal=causal)
    assert len(kernels(o)) == 1
    ref = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=causal)
    np.testing.assert_allclose(o.numpy(), ref.numpy(), rtol=1e-4, atol=2e-5)


def test_forward_kernels_and_no_scores(one_loop):
    """Forward (inference: nothing else reads the row statistics): one kernel, the row max's loop over the keys then
    the row sum's and p @ v's (or one loop for all three: the online softmax); no buffer of T x T elements nor a
    stored statistic (only q, k, v and the output); the key loops bounded by the query index."""
    t, d = 257, 8
    q, k, v = (Tensor(arr(1, 2, t, d)) for _ in range(3))
    ks = kernels(sdpa(q, k, v, causal=True))
    assert len(ks) == 1
    assert [b.arg for b in ks[0].bufs] == [2 * t * d] * 4
    bounded = [r for r in ks[0].ast.toposort() if r.op is Ops.RANGE and r.src[0].op is not Ops.CONST]
    assert len(bounded) == (1 if one_loop else 2)  # up to the query's own position


def test_keys_stored_transposed_are_copied_once_in_row_order():
    """k kept as k^T (head_dim, T) contiguous, as the trainer stores it for a matmul: the recomputing kernels would
    read a key's head_dim values T apart (as many cache lines, aliasing when T is a power of two), so k is copied
    once in (T, head_dim) order: one more kernel (2 with the online softmax's), of T x head_dim elements; the same
    values."""
    t, d = 256, 8
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    k_t = Tensor(np.ascontiguousarray(k.transpose(0, 1, 3, 2))).transpose(-1, -2)
    out = sdpa(Tensor(q), k_t, Tensor(v), causal=True)
    ks = kernels(out)
    assert len(ks) == 2 and [it.bufs[0].arg for it in ks] == [2 * t * d, 2 * t * d]
    ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=2e-5)


def stored(item):
    """The buffers a kernel stores (two for a multi-output kernel)."""
    params = {u.src[0].src[0].arg for u in item.ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    return [item.bufs[i] for i in sorted(params)]


def score_kernels(ks):
    """The kernels that recompute scores: a reduce nested in another (a dot product inside a loop over keys)."""
    return [it for it in ks if any(r.op is Ops.REDUCE and any(x.op is Ops.REDUCE for x in r.src[0].toposort())
                                   for r in it.ast.toposort())]


def test_backward_kernels_and_no_scores():
    """Forward: one kernel storing o and the row max and row sum the backward reads (a multi-output kernel: the max's
    loop over the keys, then the sum's and p @ v's). Backward: dq = dS k, and dv = p^T dO with dk = dS^T q in one
    kernel (they sum over the same queries: p and dP computed once for both), each recomputing p (and dP) from the
    stored row statistics; the rows' sum(dP * p) read from the output as sum(dO * o) (a reduce over head_dim, no
    scores); none with a T x T buffer; and the upstream gradient dO = up * 1 (the sum's gradient), stored as it is read
    by several reduces: 5 kernels, 3 of them recomputing scores (was 8 and 6)."""
    t, d = 257, 8
    _, ks = grads_schedule(lambda q, k, v: sdpa(q, k, v, causal=True), arr(1, 2, t, d), arr(1, 2, t, d),
                           arr(1, 2, t, d))
    assert len(ks) == 5
    assert sum(any(u.op is Ops.REDUCE for u in it.ast.toposort()) for it in ks) == 4
    assert len(score_kernels(ks)) == 3
    (fwd,) = [it for it in ks if len(stored(it)) == 3]  # o, and the row max and sum: (1, 2, t, d), (1, 2, t, 1) x 2
    assert sorted(b.arg for b in stored(fwd)) == [2 * t, 2 * t, 2 * t * d] and fwd in score_kernels(ks)
    (both,) = [it for it in ks if len(stored(it)) == 2]  # dk and dv: two buffers of (1, 2, t, d), one loop
    assert [b.arg for b in stored(both)] == [2 * t * d, 2 * t * d] and both in score_kernels(ks)
    (rows,) = [it for it in ks if it.bufs[0].arg == 2 * t and it not in score_kernels(ks) and
               any(u.op is Ops.REDUCE for u in it.ast.toposort())]
    (red,) = [u for u in rows.ast.toposort() if u.op is Ops.REDUCE]
    assert [r.src[0].arg for r in red.src[1:]] == [d]  # (a sum over head_dim)
    assert max(b.arg for it in ks for b in it.bufs) < t * t


@pytest.mark.parametrize("t,d", [(300, 16), (1000, 16), (600, 32), (640, 32)])
@pytest.mark.parametrize("fn", ["sdpa", "plain"])
def test_training_numerics_vs_pytorch_long(fn, t, d):
    """Causal attention forward and dq, dk, dv at lengths no block divides (and at 640 = 40 blocks of 16 queries and
    keys, each loop unrolled by 4: test_unrolled_score_loops_compute_each_score_once), scores recomputed (T >= 16
    head_dim) and
    the softmax backward's row term read from the output: against F.scaled_dot_product_attention (float32; rtol
    1e-4, atol 5e-5: sums of T terms); 3 kernels recompute scores (the forward with its row statistics, dq, and dk
    with dv: multi-output kernels)."""
    q, k, v, up = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    ours = [Tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    o = sdpa(*ours, causal=True) if fn == "sdpa" else plain_attention(*ours, causal=True)
    loss = (o * Tensor(up)).sum()
    grads = loss.gradient(*ours)
    assert len(score_kernels(kernels(o, *grads))) == 3
    ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
    (ref * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(o.numpy(), ref.detach().numpy(), rtol=1e-4, atol=5e-5)
    for name, a, b in zip("qkv", grads, theirs):
        np.testing.assert_allclose(a.numpy(), b.grad.numpy(), rtol=1e-4, atol=5e-5, err_msg=f"d{name}")


def test_jitted_training_step_vs_pytorch():
    """A jitted step returning out and dq, dk, dv (the jit assigns them to its output buffers: the row term reads o
    back from the assigned buffer, not from a second copy): every call (eager, capture, replays) gives PyTorch's
    values (rtol 1e-4, atol 5e-5); the capture is the 5 kernels of the unjitted step."""
    from ember.tensor import jit

    t, d = 300, 16

    @jit
    def step(q, k, v, up):
        out = sdpa(q, k, v, causal=True)
        return [out, *(out * up).sum().gradient(q, k, v)]

    for call in range(4):
        q, k, v, up = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
        got = step(*(Tensor(a, requires_grad=i < 3) for i, a in enumerate((q, k, v, up))))
        theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
        (ref * torch.tensor(up)).sum().backward()
        for name, a, b in zip(["out", "dq", "dk", "dv"], got, [ref.detach(), *(x.grad for x in theirs)]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=5e-5, err_msg=f"{name}, call {call}")
    captured = [launch.item for launch in step.captured if launch.kernel is not None]
    assert len(captured) == 5 and len(score_kernels(captured)) == 3


def test_jitted_step_on_the_same_inputs_keeps_its_multi_output_kernels():
    """Calls on the same tensors while the earlier calls' outputs are held (a benchmark's loop): the capture computes
    the same lazy values as the first call, so its outputs get buffers of their own (assigns), and those are members
    of the multi-output kernels like any other output: still 5 kernels, 3 recomputing scores; PyTorch's values."""
    from ember.tensor import jit

    t, d = 300, 16

    @jit
    def step(q, k, v, up):
        out = sdpa(q, k, v, causal=True)
        return [out, *(out * up).sum().gradient(q, k, v)]

    arrays = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    ins = [Tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)]
    results = [step(*ins) for _ in range(3)]
    captured = [launch.item for launch in step.captured if launch.kernel is not None]
    assert len(captured) == 5 and len(score_kernels(captured)) == 3
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
    ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
    (ref * torch.tensor(arrays[3])).sum().backward()
    for got in results:
        for name, a, b in zip(["out", "dq", "dk", "dv"], got, [ref.detach(), *(x.grad for x in theirs)]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=5e-5, err_msg=name)


def test_weights_read_by_the_loss_keep_the_row_term():
    """The attention weights p also in the loss (sum(o * up) + sum(p * z)): p's gradient is dP + z, whose row term
    sum((dP + z) * p) is not sum(dO * o); it stays a reduce over the keys, and the gradients are PyTorch's (rtol
    1e-4, atol 5e-5). 3 kernels recompute scores, each a multi-output kernel: the forward with its row statistics,
    dq with the row term it reads, and dk with dv."""
    t, d = 300, 16
    q, k, v, up, z = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, t)

    def weights(q, k, v, lib):
        s = q @ k.transpose(-1, -2) * (1 / math.sqrt(d))
        if lib is torch:
            return torch.softmax(s + torch.ones(t, t).tril().log(), -1)
        return (s + Tensor.ones(t, t).tril().where(0.0, -math.inf)).softmax(-1)

    ours = [Tensor(a, requires_grad=True) for a in (q, k, v)]
    p = weights(*ours, Tensor)
    o = p @ ours[2]
    grads = ((o * Tensor(up)).sum() + (p * Tensor(z)).sum()).gradient(*ours)
    ks = kernels(o, *grads)
    assert len(score_kernels(ks)) == 3 and sorted(len(stored(it)) for it in ks if len(stored(it)) > 1) == [2, 2, 3]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    pt = weights(*theirs, torch)
    (((pt @ theirs[2]) * torch.tensor(up)).sum() + (pt * torch.tensor(z)).sum()).backward()
    for name, a, b in zip("qkv", grads, theirs):
        np.testing.assert_allclose(a.numpy(), b.grad.numpy(), rtol=1e-4, atol=5e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
def test_plain_graph_schedules_as_sdpa(causal):
    """softmax(q k^T * scale + mask) @ v written by hand makes the same kernels as scaled_dot_product_attention,
    forward and backward, and the same values."""
    t, d = 100, 4
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    o1, k1 = grads_schedule(lambda q, k, v: sdpa(q, k, v, causal), q, k, v)
    o2, k2 = grads_schedule(lambda q, k, v: plain_attention(q, k, v, causal), q, k, v)
    assert len(k1) == len(k2) == 5
    assert max(b.arg for it in k2 for b in it.bufs) < t * t
    np.testing.assert_allclose(o2.numpy(), o1.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_plain_graph_forward_is_one_kernel(one_loop, causal):
    """The plain softmax(q k^T * scale + mask) @ v alone (no backward): one kernel, as sdpa's, the row sum and p @ v
    over one range of keys (the row max's own, with one loop); the values of PyTorch's sdpa."""
    t, d = 100, 4
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    o = plain_attention(*(Tensor(a) for a in (q, k, v)), causal)
    (item,) = kernels(o)
    (mx,) = [u for u in item.ast.toposort() if u.op is Ops.REDUCE and u.arg is Ops.MAX]
    sums = [u for u in item.ast.toposort() if u.op is Ops.REDUCE and u.arg is Ops.ADD and mx in u.src[0].toposort()]
    assert len(sums) == 2 and sums[0].src[1:] == sums[1].src[1:] and (sums[0].src[1:] == mx.src[1:]) == one_loop
    ref = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=causal)
    np.testing.assert_allclose(o.numpy(), ref.numpy(), rtol=1e-4, atol=2e-5)


def test_long_sequence_step_has_no_score_buffer():
    """A causal attention layer's training step at T = 2048 (8 heads of 32, as the tiny Llama): no buffer in its
    schedule holds T x T elements, and 4 kernels recompute scores (the forward: o with the row max and row sum it
    reads, one kernel though they are of another rank than o, the matmul's; 3 backward: the softmax backward's row
    term read from the output); scheduled only, not run."""
    t, h, d = 2048, 8, 32
    x = Tensor(arr(1, t, h * d), requires_grad=True)
    w = Tensor(arr(h * d, 3 * h * d) / 16, requires_grad=True)
    q, k, v = (p.reshape(1, t, h, d).transpose(1, 2) for p in (x @ w).chunk(3, -1))
    loss = sdpa(q, k, v, causal=True).sum()
    ks = kernels(loss, *loss.gradient(x, w))
    sizes = [b.arg for it in ks for b in it.bufs]
    assert max(sizes) < t * t and max(sizes) == 3 * h * d * t
    assert len(score_kernels(ks)) == 4


def test_unrolled_score_loops_compute_each_score_once():
    """The CPU codegen unrolls the loops that recompute scores (ember.codegen.heuristic.NESTED_UNROLL_SCORES: 64 scores
    an iteration). The forward at head_dim 32 (one loop: the online softmax) takes blocks of 16 queries and 4 keys an
    iteration: one 16-lane exp2 per key (that key's scores for the block) and one for the running max's rescale (once
    an iteration, not once a key), and one accumulator per vector of o (16 x 32 lanes) and per row statistic (the max
    and the sum, stored and read by o alike): no second copy of them in other lanes. dq takes 4 keys an iteration too,
    dk with dv (blocks of 16 keys) 4 queries; the values are test_training_numerics_vs_pytorch_long's."""
    from ember.codegen import CRenderer, OptOps, to_program
    from ember.codegen.heuristic import NESTED_UNROLL_SCORES

    t, d = 640, 32
    _, ks = grads_schedule(lambda q, k, v: sdpa(q, k, v, causal=True), arr(1, 2, t, d), arr(1, 2, t, d),
                           arr(1, 2, t, d))
    progs = {len(stored(it)): to_program(it.ast, CRenderer()) for it in score_kernels(ks)}  # (3: fwd, 2: dk+dv, 1: dq)
    for outputs in (3, 1, 2):
        loops = [o.amount for o in progs[outputs].applied_opts if o.op is OptOps.UNROLL and o.amount != d]
        assert loops and set(loops) == {NESTED_UNROLL_SCORES // 16}
    fwd = progs[3].uops
    assert sum(u.op is Ops.EXP2 and u.dtype.count == 16 for u in fwd) == NESTED_UNROLL_SCORES // 16 + 1
    assert sum(u.op is Ops.DEFINE_REG for u in fwd) == 16 * d // 16 + 2


def test_head_dim_128_computes_each_score_once():
    """At head_dim 128 (Llama 3.1 8B's) the outputs' rows are whole blocks of accumulators
    (ember.codegen.heuristic.NESTED_MAX_ACCUMULATORS): no score kernel splits head_dim into parts that each recompute
    the scores (the forward's o, dq, dk with dv: UPCAST of head_dim by 128), and their loops take 8 keys (or queries)
    an iteration, one per NESTED_ROW_LANES_PER_KEY lanes of the row (the row's accumulators loaded once for 8)."""
    from ember.codegen import CRenderer, OptOps, to_program

    t, d = 2048, 128
    _, ks = grads_schedule(lambda q, k, v: sdpa(q, k, v, causal=True), arr(1, 1, t, d), arr(1, 1, t, d),
                           arr(1, 1, t, d))
    score = score_kernels(ks)
    assert len(score) == 3
    for it in score:
        prg = to_program(it.ast, CRenderer())
        upcasts = [o.amount for o in prg.applied_opts if o.op is OptOps.UPCAST]
        assert d in upcasts and d // 2 not in upcasts, (prg.name, prg.applied_opts)
        assert {o.amount for o in prg.applied_opts if o.op is OptOps.UNROLL and o.amount != d} == {8}, prg.name


def test_score_loops_unrolled_by_the_part_of_the_amount_that_divides_them():
    """T = 36 (non-causal): blocks of 4 queries (16 and 8 do not divide 36) would unroll their key loops by 64 / 4 =
    16, which does not divide 36: they take 4 keys an iteration (the largest half of 16 that does), and the values
    are PyTorch's."""
    from ember.codegen import CRenderer, OptOps, to_program

    t, d = 36, 2
    q, k, v = arr(1, 2, t, d), arr(1, 2, t, d), arr(1, 2, t, d)
    out, ks = grads_schedule(lambda q, k, v: sdpa(q, k, v, causal=False), q, k, v)
    for it in score_kernels(ks):
        prg = to_program(it.ast, CRenderer())
        assert 4 in {o.amount for o in prg.applied_opts if o.op is OptOps.UNROLL}, (prg.name, prg.applied_opts)
    ref = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=2e-5)


def test_short_sequence_keeps_the_stored_scores():
    """Below the blow-up threshold (T < 16 head_dim) the scores are stored: one matmul, then cheap reads."""
    t, d = 16, 8
    q, k, v = (Tensor(arr(2, 4, t, d)) for _ in range(3))
    assert len(kernels(sdpa(q, k, v, causal=True))) == 5
    assert dtypes.float32 == q.dtype
