"""Fusion, counted at the Tensor level: the number of kernels a careful engineer would write by hand. (The basic
fusions on UOps, elementwise chains, reduces of products and matmul epilogues, are counted in ember.schedule's
tests.)"""

import numpy as np
import pytest

from ember.schedule import schedule
from ember.tensor import Tensor
from ember.uops import AxisType, Ops, UOp, dtypes, to_numpy_dtype


def n_kernels(*ts):
    return len([it for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK])


@pytest.fixture
def x():
    return Tensor(np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32))


def test_softmax(x):
    m = x.max(-1, keepdim=True)
    e = (x - m).exp()
    assert n_kernels(e / e.sum(-1, keepdim=True)) == 3  # row max, row sum, output


def test_layernorm(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) * (x - mu)).mean(-1, keepdim=True)
    assert n_kernels((x - mu) / (var + 1e-5).sqrt()) == 3  # row mean, row variance, output


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal):
    """softmax(q k^T * scale) v: the scores (a matmul), their row max, the row sum of exp, the probabilities (exp is
    costly, and p @ v reads each 8 times: stored), p @ v. The causal mask is computed in the scores' kernel, never
    a buffer."""
    from ember.tensor.nn import scaled_dot_product_attention

    rng = np.random.default_rng(0)
    q, k, v = (Tensor(rng.standard_normal((2, 4, 16, 8)).astype(np.float32)) for _ in range(3))
    by_hand = (q @ k.transpose(-1, -2)) * (1 / np.sqrt(8))
    if causal:
        by_hand = Tensor.ones(16, 16, dtype=dtypes.bool).tril().where(by_hand, -np.inf)
    out = scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert n_kernels(by_hand.softmax(-1) @ v) == n_kernels(out) == 5
    sizes = {b.arg for it in schedule(UOp.sink(out.uop)).items for b in it.bufs}
    assert sizes == {2 * 4 * 16 * 8, 2 * 4 * 16 * 16, 2 * 4 * 16}  # q, k, v, out; scores, p; row stats: no mask


def test_value_used_twice_computed_once(x):
    y = x @ Tensor.ones(48, 16)
    out = y.relu() + y.sigmoid()
    s = schedule(UOp.sink(out.uop))
    assert len(s.items) == 2
    assert sum(u.op is Ops.REDUCE for it in s.items for u in it.ast.toposort()) == 1


def test_no_grad_realizes_the_same_reduces(x):
    """Under no_grad every value is DETACHed: a matmul read by log_softmax's max and sum must still be stored once,
    not recomputed inside both (the eval step of a language model)."""
    from ember.tensor import no_grad

    w = Tensor.ones(48, 64)
    plain = n_kernels((x @ w).log_softmax(-1))
    with no_grad():
        detached = n_kernels((x @ w).log_softmax(-1))
    assert detached == plain == 4  # matmul, row max, row sum of exp, the output


def test_costly_work_broadcast_into_a_reduce_is_stored(x):
    """silu(x) broadcast over a matmul's output axis would be recomputed 16 times per element: stored once."""
    w = Tensor.ones(48, 16)
    assert n_kernels(x.silu() @ w) == 2
    assert n_kernels((x * 2 + 1) @ w) == 1  # cheap: recomputing beats a store and a load
    # ... unless a wide projection reads it (64+ columns: a register tile recomputes it for each panel of them)
    assert n_kernels((x * 2 + 1) @ Tensor.ones(48, 128)) == 2


def test_long_reduce_splits_into_block_sums():
    """A sum of 3M elements: block sums (stored, in parallel) then their sum. Its error stays within 1e-9 of sum|x|
    (float32's epsilon is 6e-8; one running sum per 16 lanes would be off by 9e-9 here, 0.02 absolute)."""
    v = np.random.default_rng(0).standard_normal(3_000_001).astype(np.float32)
    big = Tensor(v)
    assert n_kernels(big.sum()) == 2 and n_kernels(big.reshape(1, -1).max(1)) == 1  # 3M+1 has no block: max stays
    assert n_kernels(big[:2_097_152].reshape(512, 4096).max()) == 2  # a full reduce of a 2-D tensor, any op
    assert abs(big.sum().item() - v.astype(np.float64).sum()) <= 1e-9 * np.abs(v).astype(np.float64).sum()
    assert n_kernels(Tensor.ones(64, 64).sum()) == 1  # short: untouched


def kernel_asts(*ts):
    return [it.ast for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK]


def test_arange_is_computed_in_the_kernel():
    """An integer arange is an IOTA, not a buffer: reading it costs no load, and it has the values numpy gives."""
    for args, dt in [((10,), None), ((2, 20, 3), None), ((10, 0, -3), None), ((5, -5, -1), dtypes.int64),
                     ((7,), dtypes.float32), ((3, 9), dtypes.uint8), ((4, 4), None)]:
        t = Tensor.arange(*args, dtype=dt)
        assert Ops.BUFFER not in {u.op for u in t.uop.toposort()}
        want = np.arange(*args).astype(to_numpy_dtype(t.dtype))
        np.testing.assert_array_equal(t.numpy(), want)
        assert t.numpy().dtype == want.dtype
    assert Tensor.arange(0.5, 3, 0.5).numpy().tolist() == [0.5, 1.0, 1.5, 2.0, 2.5]  # fractional: numpy's values
    (ast,) = kernel_asts(Tensor.arange(12).reshape(3, 4).permute(1, 0) * 2)
    assert not [u for u in ast.toposort() if u.op is Ops.LOAD]


def test_embedding_is_a_gather_and_its_gradient_a_scatter():
    """embedding(idx, w) = one-hot(idx) @ w: the sum over the vocabulary collapses to one gated load per row (no
    reduce), and the weight gradient, a sum over tokens picked by the one-hot, is a scatter: zeros, then
    out[idx[t]] += g[t] (LOOP ranges, no reduce). Both match numpy with repeated and out-of-range indices (rows of
    zeros, updates dropped); a gradient accumulated into a view of a flat buffer scatters into it in place."""
    from ember.tensor.nn import embedding

    rng = np.random.default_rng(0)
    idx_np = rng.integers(0, 33, (5, 7)).astype(np.int32)
    idx_np[0, :3] = [4, 4, 4]
    idx_np[1, :2] = [33, -1]  # out of range
    w_np = rng.standard_normal((33, 24)).astype(np.float32)
    g_np = rng.standard_normal((5, 7, 24)).astype(np.float32)
    # (ids computed on the device are not checked: made from numpy alone, the out-of-range ones would raise)
    idx = Tensor(idx_np) - Tensor(np.zeros_like(idx_np))
    w, g = Tensor(w_np, requires_grad=True), Tensor(g_np)
    out = embedding(idx, w)
    (fwd,) = kernel_asts(out)
    assert not [u for u in fwd.toposort() if u.op is Ops.REDUCE]
    ok = (idx_np >= 0) & (idx_np < 33)
    np.testing.assert_array_equal(out.numpy(), np.where(ok[..., None], w_np[np.clip(idx_np, 0, 32)], 0))
    (gw,) = out.gradient(w, gradient=g)
    (bwd,) = kernel_asts(gw)
    ops = {u.op for u in bwd.toposort()}
    assert Ops.REDUCE not in ops and {u.arg[1] for u in bwd.toposort() if u.op is Ops.RANGE} >= {AxisType.LOOP}
    want = np.zeros_like(w_np)
    np.add.at(want, idx_np[ok], g_np[ok])
    np.testing.assert_allclose(gw.numpy(), want, rtol=1e-6, atol=1e-6)
    flat = Tensor(np.ones(8 + 33 * 24, np.float32)).realize()
    view = flat[8:].reshape(33, 24)
    view.assign(view + embedding(idx, w).gradient(w, gradient=g)[0]).realize()
    np.testing.assert_allclose(flat.numpy(), np.concatenate([np.ones(8), 1 + want.reshape(-1)]), rtol=1e-6,
                               atol=1e-6)


def test_cross_entropy_picks_the_label_without_a_sum_over_classes():
    from ember.tensor.nn import sparse_categorical_crossentropy

    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((6, 50)).astype(np.float32), rng.integers(0, 50, 6).astype(np.int32)
    loss = sparse_categorical_crossentropy(Tensor(logits), Tensor(labels))
    asts = kernel_asts(loss)
    # the label's log-probability is a gated load: only the softmax's max and sum reduce over the 50 classes
    assert sum(1 for a in asts for u in a.toposort() if u.op is Ops.REDUCE and
               any(r.src[0].arg == 50 for r in u.src[1:] if r.op is Ops.RANGE)) == 2
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    np.testing.assert_allclose(loss.item(), -lp[np.arange(6), labels].mean(), rtol=1e-5)



@pytest.mark.parametrize("fn, kernels", [("softmax", 4), ("log_softmax", 4), ("logsumexp", 3)])
def test_softmax_backward_routes_nothing_through_the_max(x, fn, kernels):
    """The max a softmax subtracts is a shift the result does not depend on: detached, the gradient is p * (g - sum(p
    * g)) (4 kernels with the forward's max and sum), not also a sum routed to the argmax (2 more); vs PyTorch."""
    import torch

    c = np.linspace(0, 1, 48, dtype=np.float32)
    xs = Tensor(x.numpy(), requires_grad=True)
    (gx,) = (getattr(xs, fn)(-1) * Tensor(c if fn != "logsumexp" else np.float32(1))).sum().gradient(xs)
    assert n_kernels(gx) == kernels
    xt = torch.tensor(x.numpy(), requires_grad=True)
    ref = getattr(torch, fn)(xt, -1) if fn != "logsumexp" else torch.logsumexp(xt, -1)
    (ref * torch.tensor(c if fn != "logsumexp" else 1.0)).sum().backward()
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)


def _residual_stack(depth, backward):
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 64)).astype(np.float32))
    ws = [Tensor(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, requires_grad=True) for _ in range(depth)]
    h = x
    for w in ws:  # pre-norm residual layers: h + norm(h) @ w
        h = h + (h * ((h * h).mean(-1, keepdim=True) + 1e-5).rsqrt()) @ w
    outs = [h]
    if backward:
        loss = h.square().sum()
        loss.backward()
        outs = [loss, *(w.grad for w in ws)]
    return [it for it in schedule(UOp.sink(*(t.uop for t in outs))).items if it.ast.op is Ops.SINK]


@pytest.mark.parametrize("backward", [False, True])
def test_a_residual_stream_is_stored_with_its_matmul(backward):
    """Each layer's h + norm(h) @ w is stored by the matmul's kernel (the add its epilogue): no kernel re-sums the
    stream from all earlier layers' outputs, and the layers share their kernels, whatever the depth."""
    shallow, deep = _residual_stack(2, backward), _residual_stack(8, backward)
    def widest(items):  # the most activation-sized buffers one kernel reads
        return max(sum(b.arg == 8 * 64 for b in it.bufs[1:]) for it in items)

    assert widest(deep) == widest(shallow) <= 3
    assert len({it.ast for it in deep}) == len({it.ast for it in shallow})
    # forward per layer: the norm's row reduce, the normalized input (a 64-wide projection reads it), the matmul
    assert len(deep) <= (7 if backward else 3) * 8
