import math

import numpy as np
import pytest

from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.schedule import WarmupCosine, learning_rate

BASE, END, W, MAX = 1e-3, 1e-4, 10, 110


@pytest.mark.parametrize("step, expected", [
    (0, 1e-3 * 1 / 11),  # first update: base / (W + 1)
    (4, 1e-3 * 5 / 11),
    (9, 1e-3 * 10 / 11),
    (10, 1e-3),  # step W: the peak
    (35, 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * 0.25))),
    (60, 1e-4 + 9e-4 * 0.5),  # middle of the decay: halfway between base and end
    (85, 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * 0.75))),
    (110, 1e-4),  # step max_steps: cos(pi) = -1
    (111, 1e-4),  # past max_steps: end
    (10_000, 1e-4),
])
def test_values(step, expected):
    assert learning_rate(step, BASE, END, W, MAX) == pytest.approx(expected, rel=1e-12, abs=0.0)


def test_warmup_is_linear_and_decay_is_monotone():
    lrs = np.array([learning_rate(s, BASE, END, W, MAX) for s in range(MAX + 5)])
    np.testing.assert_allclose(lrs[: W + 1], BASE * np.arange(1, W + 2) / (W + 1), rtol=1e-12)
    decay = lrs[W: MAX + 1]
    assert np.all(np.diff(decay) < 0)
    assert lrs.max() == pytest.approx(BASE, rel=1e-15) and lrs.min() == pytest.approx(BASE / (W + 1), rel=1e-15)


def test_no_warmup_starts_at_base():
    assert learning_rate(0, BASE, END, 0, MAX) == BASE
    assert learning_rate(1, BASE, END, 0, MAX) == pytest.approx(1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi / MAX)),
                                                                rel=1e-12)


def test_rcp_gbs32_schedule():
    cfg = TrainConfig(batch_size=32, lr=8e-4, warmup_samples=4096, seq_len=8192).validate()
    assert (cfg.warmup_steps, cfg.decay_steps) == (128, 1_199_872)
    assert learning_rate(0, cfg.lr, cfg.end_learning_rate, cfg.warmup_steps, cfg.max_steps) == \
        pytest.approx(8e-4 / 129, rel=1e-12)
    assert learning_rate(128, cfg.lr, cfg.end_learning_rate, 128, cfg.max_steps) == pytest.approx(8e-4, rel=1e-15)
    # convergence at ~5.6k steps: the LR is still within 1e-4 relative of the peak
    lr_5600 = learning_rate(5600, cfg.lr, cfg.end_learning_rate, 128, cfg.max_steps)
    assert 8e-4 * (1 - 1e-4) < lr_5600 < 8e-4


def test_numpy_integers_accepted():
    assert learning_rate(np.int64(10), BASE, END, np.int32(10), np.int64(MAX)) == pytest.approx(BASE, rel=1e-15)


@pytest.mark.parametrize("args, error, message", [
    ((-1, BASE, END, W, MAX), ValueError, "learning_rate: step must be a non-negative integer, got -1"),
    ((1.0, BASE, END, W, MAX), TypeError, "learning_rate: step must be an integer, got float 1.0"),
    ((True, BASE, END, W, MAX), TypeError, "learning_rate: step must be an integer, got bool True"),
    ((0, 0.0, 0.0, W, MAX), ValueError, "learning_rate: base_lr must be a positive finite number, got 0.0"),
    ((0, "1e-3", END, W, MAX), TypeError, "learning_rate: base_lr must be a number, got str '1e-3'"),
    ((0, BASE, 2e-3, W, MAX), ValueError, "learning_rate: end_lr must be in [0, base_lr=0.001], got 0.002"),
    ((0, BASE, -1e-4, W, MAX), ValueError, "learning_rate: end_lr must be in [0, base_lr=0.001], got -0.0001"),
    ((0, BASE, END, -1, MAX), ValueError, "learning_rate: warmup_steps must be a non-negative integer, got -1"),
    ((0, BASE, END, 1.5, MAX), TypeError, "learning_rate: warmup_steps must be an integer, got float 1.5"),
    ((0, BASE, END, W, W), ValueError, "learning_rate: max_steps must be greater than warmup_steps=10, got 10"),
])
def test_errors(args, error, message):
    with pytest.raises(error) as info:
        learning_rate(*args)
    assert str(info.value) == message


def test_warmup_cosine_counter_and_state():
    sched = WarmupCosine(BASE, END, W, MAX)
    assert sched.steps_done == 0
    assert sched() == learning_rate(0, BASE, END, W, MAX)
    sched.advance()
    sched.advance(59)
    assert sched.steps_done == 60
    assert sched() == pytest.approx(1e-4 + 9e-4 * 0.5, rel=1e-12)
    assert sched(0) == pytest.approx(BASE / 11, rel=1e-12)  # an explicit step does not move the counter
    state = sched.state_dict()
    assert state == {"steps_done": 60, "base_lr": BASE, "end_lr": END, "warmup_steps": W, "max_steps": MAX}

    restored = WarmupCosine(BASE, END, W, MAX)
    restored.load_state_dict({**state, "steps_done": np.int64(60)})
    assert restored.steps_done == 60 and type(restored.steps_done) is int
    assert restored() == sched()
    assert repr(restored) == "WarmupCosine(base_lr=0.001, end_lr=0.0001, warmup_steps=10, max_steps=110, steps_done=60)"


def test_warmup_cosine_from_config():
    cfg = TrainConfig(batch_size=32, lr=8e-4, warmup_samples=4096).validate()
    sched = WarmupCosine.from_config(cfg)
    assert (sched.base_lr, sched.end_lr, sched.warmup_steps, sched.max_steps) == \
        (8e-4, pytest.approx(8e-5, rel=1e-15), 128, 1_200_000)


def test_warmup_cosine_errors():
    with pytest.raises(ValueError, match="WarmupCosine: max_steps must be greater than warmup_steps=10, got 5"):
        WarmupCosine(BASE, END, 10, 5)
    sched = WarmupCosine(BASE, END, W, MAX)
    with pytest.raises(ValueError, match="advance: n must be a non-negative integer, got -1"):
        sched.advance(-1)
    with pytest.raises(ValueError, match=r"state lacks keys \['max_steps'\]"):
        sched.load_state_dict({"steps_done": 3, "base_lr": BASE, "end_lr": END, "warmup_steps": W})
    with pytest.raises(ValueError, match="saved base_lr=0.002 differs from this schedule's base_lr=0.001"):
        sched.load_state_dict({**sched.state_dict(), "base_lr": 2e-3})
    with pytest.raises(ValueError, match="steps_done must be a non-negative integer, got -3"):
        sched.load_state_dict({**sched.state_dict(), "steps_done": -3})
    with pytest.raises(TypeError, match="state must be a mapping, got list"):
        sched.load_state_dict([])  # type: ignore[arg-type]
    assert sched.steps_done == 0
