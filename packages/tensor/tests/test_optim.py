"""Optimizers against PyTorch: a few steps on a small linear model give the same parameters."""

import numpy as np
import pytest
import torch

from ember.tensor import Tensor
from ember.tensor.nn import optim


def run_both(make_ours, make_theirs, steps=4):
    rng = np.random.default_rng(0)
    w0, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (8, 5), (8, 3)))
    w = Tensor(w0.copy(), requires_grad=True)
    wt = torch.tensor(w0.copy(), requires_grad=True)
    opt, opt_t = make_ours([w]), make_theirs([wt])
    for _ in range(steps):
        opt.zero_grad()
        ((Tensor(x) @ w - Tensor(y)) * (Tensor(x) @ w - Tensor(y))).mean().backward()
        opt.step()
        opt_t.zero_grad()
        ((torch.tensor(x) @ wt - torch.tensor(y)) ** 2).mean().backward()
        opt_t.step()
    np.testing.assert_allclose(w.numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True),
                                dict(momentum=0.5, weight_decay=0.1)])
def test_sgd(kw):
    run_both(lambda p: optim.SGD(p, lr=0.1, **kw), lambda p: torch.optim.SGD(p, lr=0.1, **kw))


def test_adamw_and_adam():
    run_both(lambda p: optim.AdamW(p, lr=0.01, b1=0.9, b2=0.95, eps=1e-5, weight_decay=0.1),
             lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1))
    run_both(lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01))


def test_errors():
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="have no .grad"):
        optim.SGD([w]).step()
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.AdamW([])
    with pytest.raises(ValueError, match="must be a realized tensor"):
        (w * 2).assign(w)


def test_lamb_matches_reference():
    rng = np.random.default_rng(3)
    w0, g1, g2 = (rng.standard_normal((4, 3)).astype(np.float64) for _ in range(3))
    w = Tensor(w0.astype(np.float32), requires_grad=True)
    opt = optim.LAMB([w], lr=0.01, b1=0.9, b2=0.99, eps=1e-6, weight_decay=0.1)
    ref, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, g in enumerate((g1, g2), 1):
        w.grad = Tensor(g.astype(np.float32))
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.99 * v + 0.01 * g * g
        step = (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.99**t)) + 1e-6) + 0.1 * ref
        ref = ref - 0.01 * (np.linalg.norm(ref) / np.linalg.norm(step)) * step
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5, atol=1e-6)
