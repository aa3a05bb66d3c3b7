"""The engine allocates a schedule's buffers before it builds the schedule's programs: a device can ready the memory
in the background meanwhile (the CPU faults its pages in on another thread)."""

import numpy as np

import ember.tensor.engine as engine
from ember.tensor import Tensor


def test_a_schedules_buffers_are_allocated_before_its_programs_are_built(monkeypatch):
    events: list[str] = []
    buffer_for, codegen = engine.buffer_for, engine.codegen

    def allocating(u):
        b = buffer_for(u)
        events.append("buffer")
        return b

    def building(ast, device):
        events.append("codegen")
        return codegen(ast, device)

    monkeypatch.setattr(engine, "buffer_for", allocating)
    monkeypatch.setattr(engine, "codegen", building)
    x = Tensor(np.arange(5 * 11, dtype=np.float32).reshape(5, 11)).realize()
    events.clear()
    out = (x * 1.75 + 0.5).max(axis=0).numpy()  # (a kernel no other test builds: input and output buffers)
    np.testing.assert_allclose(out, (np.arange(55, dtype=np.float32).reshape(5, 11) * 1.75 + 0.5).max(axis=0))
    assert "codegen" in events and events.index("codegen") >= 2
