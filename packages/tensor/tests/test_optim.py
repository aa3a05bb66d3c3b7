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


@pytest.mark.parametrize("kw", [dict(betas=(0.8, 0.9)), dict(weight_decay=0.1), dict(betas=(0.9, 0.95), eps=1e-6,
                                                                              weight_decay=0.05)])
def test_adam_and_adamw_take_torchs_keywords(kw):
    # betas= (torch's name for b1, b2); Adam's weight_decay is torch's L2 on the gradient, AdamW's decoupled
    run_both(lambda p: optim.Adam(p, lr=0.01, **kw), lambda p: torch.optim.Adam(p, lr=0.01, **kw))
    run_both(lambda p: optim.AdamW(p, lr=0.01, **kw), lambda p: torch.optim.AdamW(p, lr=0.01, **kw))


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


# *** fused steps: flat storage, constant kernel counts, device-side lr, jit ***
from ember.tensor import engine  # noqa: E402
from ember.tensor.jit import jit  # noqa: E402
from ember.tensor.realize import share_storage  # noqa: E402


def launches(fn):
    """Kernels (not copies) launched while fn runs."""
    with engine.capture() as cap:
        fn()
    return cap.kernel_count


def make_params(n, rng):
    shapes = [(3, 4), (7,), (2, 3, 5), (1,), (6, 2)]
    return [Tensor(rng.standard_normal(shapes[i % len(shapes)]).astype(np.float32), requires_grad=True)
            for i in range(n)]


def loss_of(ps):
    total = ps[0].sum() * 0
    for i, p in enumerate(ps):
        total = total + ((p * (i + 1)) ** 2).mean()
    return total


@pytest.mark.parametrize("make,expected", [
    (lambda ps: optim.SGD(ps, lr=0.1), 1),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01), 2),
    (lambda ps: optim.AdamW(ps, lr=0.01), 4),  # m, v, parameters, b1^t/b2^t
    (lambda ps: optim.AdamW(ps, lr=0.01, clip_norm=1.0), 5),  # + the global norm
])
def test_step_kernel_count_is_constant(make, expected):
    counts = []
    for n in (2, 12):
        ps = make_params(n, np.random.default_rng(n))
        opt = make(ps)
        opt.zero_grad()
        loss_of(ps).backward()
        Tensor.realize_all(*[p.grad for p in ps])  # the backward's kernels, not the optimizer's
        counts.append(launches(opt.step))
    assert counts == [expected, expected]


def test_weight_decay_groups_and_clipping_match_pytorch():
    rng = np.random.default_rng(5)
    w0, b0, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (3,), (8, 5), (8, 3)))
    w, b = Tensor(w0, requires_grad=True), Tensor(b0, requires_grad=True)
    wt, bt = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt = optim.AdamW([{"params": [w]}, {"params": [b], "weight_decay": 0.0}], lr=0.05, b1=0.9, b2=0.95, eps=1e-5,
                      weight_decay=0.1, clip_norm=0.5)
    opt_t = torch.optim.AdamW([{"params": [wt]}, {"params": [bt], "weight_decay": 0.0}], lr=0.05, betas=(0.9, 0.95),
                              eps=1e-5, weight_decay=0.1)
    for _ in range(5):
        opt.zero_grad()
        (((Tensor(x) @ w + b) - Tensor(y)) ** 2).mean().backward()
        opt.step()
        opt_t.zero_grad()
        (((torch.tensor(x) @ wt + bt) - torch.tensor(y)) ** 2).mean().backward()
        norm = torch.nn.utils.clip_grad_norm_([wt, bt], 0.5)
        opt_t.step()
        np.testing.assert_allclose(opt.grad_norm.item(), norm.item(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), bt.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_accumulates_in_place():
    w = Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    opt.zero_grad()
    grad_before = w.grad
    for k in (1.0, 2.0, 3.0):
        (w * k).sum().backward()
    assert w.grad is grad_before
    np.testing.assert_allclose(w.grad.numpy(), np.full((2, 2), 6.0))
    opt.step()
    np.testing.assert_allclose(w.numpy(), np.full((2, 2), -5.0))
    opt.zero_grad()
    np.testing.assert_allclose(w.grad.numpy(), np.zeros((2, 2)))


def test_master_weights_bfloat16():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 4)).astype(np.float32)
    w = Tensor(w0).cast(optim.dtypes.bfloat16).contiguous().realize()
    w.requires_grad = True
    opt = optim.AdamW([w], lr=1e-4, weight_decay=0.0, master_weights=True)
    master0 = opt.master[0].numpy().copy()
    for _ in range(3):
        opt.zero_grad()
        (w.float() * w.float()).sum().backward()
        opt.step()
    # the master copy moved by ~3 * lr (Adam's step size) while bf16 alone could not represent that change
    assert np.abs(opt.master[0].numpy() - master0).max() > 2e-4
    np.testing.assert_allclose(w.float().numpy(), opt.master[0].numpy().reshape(4, 4), rtol=1e-2)


def test_jitted_step_sees_new_learning_rate():
    rng = np.random.default_rng(2)
    w_np = rng.standard_normal((3, 3)).astype(np.float32)
    w = Tensor(w_np.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    @jit
    def step(x):
        opt.zero_grad()
        (w * x).sum().backward()
        opt.step()
        return w

    ref = w_np.copy()
    for i, lr in enumerate((0.1, 0.2, 0.3, 0.4, 0.5)):
        opt.lr = lr
        x = rng.standard_normal((3, 3)).astype(np.float32)
        step(Tensor(x))
        ref = ref - lr * x
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6, atol=1e-6, err_msg=f"call {i}")


def test_share_storage_orders_reads_and_writes():
    a, b = Tensor(np.arange(4, dtype=np.float32)), Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    reader = b * 1  # lazy, reads b's old buffer (which share_storage moves)
    flat = share_storage([a, b])
    assert flat.shape == (10,)
    lazy_read = a + 0  # reads a's view of flat
    flat.assign(flat * 10).realize()  # overwrites the memory lazy_read and reader read: they must see the old values
    np.testing.assert_allclose(lazy_read.numpy(), np.arange(4))
    np.testing.assert_allclose(reader.numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_allclose(a.numpy(), np.arange(4) * 10)
    a.assign(a + 1)  # a pending write to a view, then a read of the root
    np.testing.assert_allclose(flat.numpy()[:4], np.arange(4) * 10 + 1)
    with pytest.raises(ValueError, match="one device and dtype"):
        share_storage([Tensor([1.0]), Tensor([1], dtype=optim.dtypes.int32)])
    with pytest.raises(ValueError, match="appears twice"):
        share_storage([a, a])
    # whole buffers are copied into their slices; a view of a buffer (a slice) and a lazy tensor go through kernels
    c, d = Tensor(np.arange(10, dtype=np.float32))[2:7], Tensor(np.ones(3, np.float32)) * 2
    np.testing.assert_array_equal(share_storage([c, d, Tensor(np.full(2, 9.0, np.float32))]).numpy(),
                                  [2, 3, 4, 5, 6, 2, 2, 2, 9, 9])
    np.testing.assert_array_equal(c.numpy(), [2, 3, 4, 5, 6])


def test_load_state_dict_after_optimizer_keeps_storage():
    from ember.tensor.nn.state import load_state_dict

    class M:
        def __init__(self):
            self.w = Tensor(np.zeros((2, 2), np.float32), requires_grad=True)

    m = M()
    opt = optim.SGD([m.w], lr=1.0)
    load_state_dict(m, {"w": Tensor(np.full((2, 2), 3.0, np.float32))})
    np.testing.assert_allclose(opt.groups[0].flat.numpy(), np.full(4, 3.0))
    opt.zero_grad()
    m.w.sum().backward()
    opt.step()
    np.testing.assert_allclose(m.w.numpy(), np.full((2, 2), 2.0))


def test_optimizer_state_dict_round_trip_continues_identically():
    def make():
        w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7, requires_grad=True).realize()
        b = Tensor(np.ones(3, dtype=np.float32), requires_grad=True).realize()
        return w, b, optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
                                    lr=0.01, clip_norm=0.5)

    def step(w, b, opt, k):
        opt.zero_grad()
        ((w * (k + 1)).sum() + (b * b).sum() * k).backward()
        opt.step()

    w1, b1, opt1 = make()
    for k in range(4):
        step(w1, b1, opt1, k)
    w2, b2, opt2 = make()
    for k in range(2):
        step(w2, b2, opt2, k)
    saved = {k: Tensor(v.numpy()) for k, v in opt2.state_dict().items()}
    w3, b3, opt3 = make()
    w3.assign(Tensor(w2.numpy())).realize()
    b3.assign(Tensor(b2.numpy())).realize()
    opt3.load_state_dict(saved)
    assert opt3.step_count == 2 and sorted(saved) == ["betas_pow.CPU", "lr", "m.0", "m.1", "step_count", "v.0", "v.1"]
    for k in range(2, 4):
        step(w3, b3, opt3, k)
    np.testing.assert_array_equal(w3.numpy(), w1.numpy())  # bit-identical continuation
    np.testing.assert_array_equal(b3.numpy(), b1.numpy())
    with pytest.raises(ValueError, match="missing keys"):
        opt3.load_state_dict({"lr": saved["lr"]})


def test_leaf_realized_with_requires_grad_stays_a_leaf():
    w = (Tensor.randn(3, 4) * 0.5).contiguous()
    w.requires_grad = True
    w.realize()
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)


def test_equal_lazy_values_get_distinct_storage():
    a, b = Tensor.ones(3).contiguous(), Tensor.ones(3).contiguous()  # one hash-consed UOp
    Tensor.realize_all(a, b)
    a.assign(a + 1).realize()
    np.testing.assert_array_equal(a.numpy(), [2, 2, 2])
    np.testing.assert_array_equal(b.numpy(), [1, 1, 1])
    flat = share_storage([a, b])  # two buffers, so they can share one flat storage
    np.testing.assert_array_equal(flat.numpy(), [2, 2, 2, 1, 1, 1])


def test_mlp_learns_synthetic_classification():
    """A 2-layer MLP, jitted AdamW steps, on 4 Gaussian blobs in 8-d: > 95% accuracy on held-out points."""
    from ember.tensor import nn

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((4, 8)).astype(np.float32) * 2.5

    def sample(n):
        y = rng.integers(0, 4, n)
        return (centers[y] + rng.standard_normal((n, 8)).astype(np.float32)).astype(np.float32), y.astype(np.int32)

    Tensor.manual_seed(0)
    l1, l2 = nn.Linear(8, 32), nn.Linear(32, 4)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = optim.AdamW(params, lr=0.02, weight_decay=0.0)

    @jit
    def step(x, y):
        opt.zero_grad()
        loss = nn.sparse_categorical_crossentropy(l2(l1(x).relu()), y)
        loss.backward()
        opt.step()
        return loss.realize()

    losses = [step(Tensor(x), Tensor(y)).item() for x, y in (sample(64) for _ in range(60))]
    assert step.kernel_count > 0 and losses[-1] < losses[0] / 4
    xt, yt = sample(512)
    accuracy = (l2(l1(Tensor(xt)).relu()).numpy().argmax(-1) == yt).mean()
    assert accuracy > 0.95, accuracy


def test_rng_state_round_trip():
    Tensor.manual_seed(5)
    Tensor.rand(3).numpy()
    state = Tensor.rng_state()
    a = Tensor.rand(4).numpy()
    Tensor.manual_seed(99)
    Tensor.set_rng_state(state)
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), a)
    with pytest.raises(ValueError, match="set_rng_state"):
        Tensor.set_rng_state((1, -1))


def test_global_grad_norm_is_accurate_over_millions_of_elements():
    n = 3_000_001  # not a multiple of the block
    c = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    w = Tensor.zeros(n).contiguous()
    w.requires_grad = True
    w.realize()
    opt = optim.AdamW([w], lr=1e-3, clip_norm=1.0)
    opt.zero_grad()
    (w * Tensor(c)).sum().backward()  # the gradient is c
    opt.step()
    # one running float32 sum of 3M squares drifts by ~1e-4 (a Llama's norm was off by 7e-4); blocked stays ~1e-6
    assert opt.grad_norm.item() == pytest.approx(np.linalg.norm(c.astype(np.float64)), rel=1e-5)


def test_loss_read_after_the_step_is_computed_with_its_gradients():
    """`zero_grad(); loss.backward(); opt.step(); return loss` (PyTorch's order) runs the forward once: the loss is
    realized in the schedule of its gradients, not recomputed from the (old) parameters in the step's schedule. Same
    kernels as realizing the loss beside the gradients by hand, and the loss of the parameters before the step."""
    from ember.tensor import jit

    rng = np.random.default_rng(0)
    x0, w0, v0 = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 8), (8, 4)))

    def make(by_hand: bool):  # type: ignore[no-untyped-def]
        w, v = Tensor(w0.copy(), requires_grad=True), Tensor(v0.copy(), requires_grad=True)
        opt = optim.AdamW([w, v], lr=0.01)

        @jit
        def step(x: Tensor) -> Tensor:
            opt.zero_grad()
            loss = ((x @ w).relu() @ v).square().mean()
            loss.backward()
            if by_hand:
                Tensor.realize_all(loss, w.grad, v.grad)
            opt.step()
            return loss.realize()
        return step

    plain, by_hand = make(False), make(True)
    losses = [[f(Tensor(x0 * (1 + i))).item() for i in range(3)] for f in (plain, by_hand)]
    assert plain.kernel_count == by_hand.kernel_count
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
    want = ((np.maximum(x0 @ w0, 0) @ v0) ** 2).mean()
    np.testing.assert_allclose(losses[0][0], want, rtol=1e-5)


def test_an_optimizers_buffers_are_realized_together():
    # each buffer realized on its own was a schedule and a C compile, one after another (~0.3 s of a cold AdamW)
    from ember.tensor import realize

    params = [Tensor(np.ones((4, 8), np.float32)), Tensor(np.ones(8, np.float32)), Tensor(np.ones(3, np.float16))]
    schedules = engine.ENGINE.schedule_count
    opt = optim.AdamW([{"params": params[:1]}, {"params": params[1:2], "weight_decay": 0.0},
                          {"params": params[2:]}], lr=0.1, master_weights=True)
    assert engine.ENGINE.schedule_count - schedules <= 2  # the gradients and lr, then the state
    assert all(realize.is_realized(t.uop) for t in opt._state().values())
    assert all(realize.is_realized(v.uop) for g in opt.groups for v in g.grad_views)
    schedules = engine.ENGINE.schedule_count
    sgd = optim.SGD(params, lr=0.1, momentum=0.9)
    assert engine.ENGINE.schedule_count - schedules <= 2 and all(realize.is_realized(b.uop) for b in sgd.bufs)
