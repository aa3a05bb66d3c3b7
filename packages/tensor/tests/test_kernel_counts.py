"""Fusion, counted at the Tensor level: the number of kernels a careful engineer would write by hand."""

import numpy as np
import pytest

from ember.schedule import schedule
from ember.tensor import Tensor
from ember.uops import Ops, UOp


def n_kernels(*ts):
    return len([it for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK])


@pytest.fixture
def x():
    return Tensor(np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32))


def test_elementwise_chain(x):
    y = x
    for i in range(30):
        y = (y * 1.01 + i).relu() if i % 2 else y.exp() * x
    assert n_kernels(y) == 1


def test_mul_sum(x):
    assert n_kernels((x * x).sum(1)) == 1


def test_sum_over_broadcast():
    a, b = Tensor.ones(32, 1), Tensor.ones(1, 48) * 2
    assert n_kernels((a + b).sum()) == 1


def test_matmul_bias_relu(x):
    w, b = Tensor.ones(48, 16), Tensor.ones(16)
    assert n_kernels(x @ w) == 1
    assert n_kernels((x @ w + b).relu()) == 1


def test_softmax(x):
    m = x.max(-1, keepdim=True)
    e = (x - m).exp()
    assert n_kernels(e / e.sum(-1, keepdim=True)) <= 3


def test_layernorm(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) * (x - mu)).mean(-1, keepdim=True)
    assert n_kernels((x - mu) / (var + 1e-5).sqrt()) <= 3


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


def test_long_reduce_splits_into_block_sums():
    """A sum of 3M elements: block sums (stored, in parallel) then their sum. Its error stays within 1e-9 of sum|x|
    (float32's epsilon is 6e-8; one running sum per 16 lanes would be off by 9e-9 here, 0.02 absolute)."""
    v = np.random.default_rng(0).standard_normal(3_000_001).astype(np.float32)
    big = Tensor(v)
    assert n_kernels(big.sum()) == 2 and n_kernels(big.reshape(1, -1).max(1)) == 1  # 3M+1 has no block: max stays
    assert n_kernels(big[:2_097_152].reshape(512, 4096).max()) == 2  # a full reduce of a 2-D tensor, any op
    assert abs(big.sum().item() - v.astype(np.float64).sum()) <= 1e-9 * np.abs(v).astype(np.float64).sum()
    assert n_kernels(Tensor.ones(64, 64).sum()) == 1  # short: untouched
