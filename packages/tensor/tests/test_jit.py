import numpy as np
import pytest

import ember.tensor.engine as engine
from ember.tensor import Tensor
from ember.tensor.jit import jit
from ember.tensor.nn import optim


def test_replay_matches_eager_and_skips_scheduling(monkeypatch):
    w = Tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))

    @jit
    def f(x, y):
        return ((x @ w).relu() + y).sum(1)

    rng = np.random.default_rng(1)
    for call in range(5):
        x, y = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
        if call == 3:  # from the third call on, nothing is scheduled or compiled
            def no_schedule(*a, **k):
                raise AssertionError("jit replay scheduled a graph")
            monkeypatch.setattr(engine, "schedule", no_schedule)
            monkeypatch.setattr(engine, "cached_program", no_schedule)
        out = f(Tensor(x), Tensor(y))
        np.testing.assert_allclose(out.numpy(), (np.maximum(x @ w.numpy(), 0) + y).sum(1), rtol=1e-5, atol=1e-5)
    assert f.kernel_count == 1  # the whole function fuses into one kernel, replayed as one launch


def test_signature_mismatch_raises():
    @jit
    def f(x):
        return (x * 2).realize()

    for _ in range(3):
        f(Tensor.ones(4).contiguous())
    with pytest.raises(ValueError, match="captured with"):
        f(Tensor.ones(5).contiguous())


def test_jitted_training_step_updates_in_place():
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((5, 1)).astype(np.float32)
    w = Tensor(w0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    @jit
    def step(x, y):
        opt.zero_grad()
        loss = ((x @ w - y) * (x @ w - y)).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    ref = w0.copy()
    for _ in range(5):
        x, y = rng.standard_normal((16, 5)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
        loss = step(Tensor(x), Tensor(y))
        grad = 2 * x.T @ (x @ ref - y) / 16
        np.testing.assert_allclose(loss.item(), ((x @ ref - y) ** 2).mean(), rtol=1e-4)
        ref = ref - 0.1 * grad
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)
