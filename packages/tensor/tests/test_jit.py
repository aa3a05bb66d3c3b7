import numpy as np
import pytest

import ember.tensor.engine as engine
from ember.schedule import schedule
from ember.tensor import Tensor
from ember.tensor.jit import jit
from ember.tensor.nn import optim
from ember.uops import Ops, UOp


def test_replay_matches_eager_and_skips_scheduling():
    w = Tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))

    @jit
    def f(x, y):
        return ((x @ w).relu() + y).sum(1)

    rng = np.random.default_rng(1)
    for call in range(5):
        x, y = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
        xt, yt = Tensor(x), Tensor(y)
        schedules, kernels = engine.ENGINE.schedule_count, len(engine.ENGINE.kernels)
        with engine.capture() as launched:  # what the engine runs during the call
            out = f(xt, yt)
        if call >= 2:  # from the third call on, nothing is scheduled, built or launched through the engine
            assert engine.ENGINE.schedule_count == schedules and len(engine.ENGINE.kernels) == kernels
            assert launched.launches == []
        elif call == 1:  # the capturing call runs and realizes the function's graph: one kernel
            assert engine.ENGINE.schedule_count > schedules and launched.kernel_count == 1
        np.testing.assert_allclose(out.numpy(), (np.maximum(x @ w.numpy(), 0) + y).sum(1), rtol=1e-5, atol=1e-5)
    assert f.kernel_count == 1  # the whole function fuses into one kernel, replayed as one launch


def test_capture_records_the_launches_of_a_block():
    x = Tensor(np.arange(6, dtype=np.float32)).realize()
    with engine.capture() as outer:
        y = (x * 2 + 1).realize()
        with engine.capture() as inner:  # both record
            z = (y.exp() * 3).sum().realize()
        w = (x - 1).realize()
    assert outer.kernel_count == 3 and inner.kernel_count == 1 and inner.launches[0] in outer.launches
    assert all(launch.item.ast.op is not Ops.COPY and len(launch.bufs) == 2 for launch in outer.launches)
    explicit = engine.Capture()  # a schedule run with a capture passed in records into it, none being open
    engine.run_schedule(schedule(UOp.sink((x + 5).uop)), capture=explicit)
    assert explicit.kernel_count == 1 and outer.kernel_count == 3
    np.testing.assert_allclose(y.numpy(), np.arange(6) * 2 + 1)
    np.testing.assert_allclose(z.numpy(), (np.exp(np.arange(6) * 2 + 1) * 3).sum(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), np.arange(6) - 1)


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
