"""The realize engine schedules and builds programs with Python's cyclic garbage collector paused (engine.gc_paused):
the UOps those make set off full collections over the whole heap that found nothing. It is back on afterwards, also
after an error, and a collector the user turned off stays off."""

import gc

import numpy as np
import pytest

import ember.tensor.engine as engine
from ember.tensor import Tensor


@pytest.fixture
def collector_states(monkeypatch):
    """Whether the collector was on at each schedule and each codegen the engine does from now on."""
    seen: list[tuple[str, bool]] = []
    schedule, codegen = engine.schedule, engine.codegen

    def scheduling(*args, **kwargs):
        seen.append(("schedule", gc.isenabled()))
        return schedule(*args, **kwargs)

    def building(ast, device):
        seen.append(("codegen", gc.isenabled()))
        return codegen(ast, device)

    monkeypatch.setattr(engine, "schedule", scheduling)
    monkeypatch.setattr(engine, "codegen", building)
    return seen


def _new_kernel() -> np.ndarray:
    x = np.arange(7 * 13, dtype=np.float32).reshape(7, 13)
    out = (Tensor(x) * 0.25 - 3.0).exp2().sum(axis=1).numpy()  # (a kernel no other test builds)
    np.testing.assert_allclose(out, np.exp2(x * 0.25 - 3.0).sum(axis=1), rtol=1e-5)
    return out


def test_scheduling_and_codegen_run_with_the_collector_paused(collector_states):
    assert gc.isenabled()
    _new_kernel()
    assert {what for what, _ in collector_states} == {"schedule", "codegen"}
    assert not any(on for _, on in collector_states)
    assert gc.isenabled()


def test_the_collector_is_back_on_after_an_error(monkeypatch):
    def failing(*args, **kwargs):
        raise RuntimeError("schedule failed")

    monkeypatch.setattr(engine, "schedule", failing)
    with pytest.raises(RuntimeError, match="schedule failed"):
        Tensor(np.ones((3, 5), np.float32)).sum().numpy()
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off(collector_states):
    gc.disable()
    try:
        _new_kernel()
        assert not gc.isenabled()
    finally:
        gc.enable()
