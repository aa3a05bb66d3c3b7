"""`jit`: capture the kernels a function runs once, then replay them on new input buffers.

    @jit
    def step(x, y): return (x @ w + y).relu().realize()

The first call runs normally; the second runs normally while recording every kernel launch (`engine.capture()`);
from the third on the recorded kernels are replayed with the new inputs' buffers: no scheduling, no codegen, no
compilation. When every launch is on one device that batches launches (`CompiledDevice.graph`: the AMD device's HCQ
batches), the replay is that device's graph, recorded once; otherwise the kernels are launched one by one. The
outputs are the tensors the captured call returned, overwritten in place by each replay. A call whose
tensor inputs differ in shape, dtype, device or shard axis from the captured ones raises ValueError.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ember.runtime import Device
from ember.tensor import engine
from ember.tensor.tensor import Tensor

R = TypeVar("R")


def _tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
    return [a for a in (*args, *(kwargs[k] for k in sorted(kwargs))) if isinstance(a, Tensor)]


def _signature(t: Tensor) -> tuple[Any, ...]:
    # a multi-device input's layout too: its buffers are as big sharded along any axis, but the kernels differ
    return (t.shape, t.dtype, t.device) + ((t.shard_axis,) if isinstance(t.device, tuple) else ())


def _buffers(t: Tensor) -> list[Any]:
    return engine.buffers_of(t.uop)  # inputs are realized first; a multi-device input has a buffer per device


class JitFunction(Generic[R]):
    def __init__(self, fn: Callable[..., R]):
        self.fn, self.calls = fn, 0
        self.captured: list[engine.Launch] = []
        self.signature: list[tuple[Any, ...]] = []
        self.input_slots: list[list[tuple[int, int]]] = []  # per input buffer: (launch, buffer position)
        self.result: Any = None
        self.graph: Any = None  # the device's batched replay of the capture, where it has one
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        inputs = _tensor_args(args, kwargs)
        Tensor.realize_all(*inputs)  # inputs live in buffers, so a replay can point the kernels at them
        if self.calls >= 2:
            return self._replay(inputs)
        self.calls += 1
        if self.calls == 1:
            return self.fn(*args, **kwargs)
        with engine.capture() as cap:
            self.result = self.fn(*args, **kwargs)
            Tensor.realize_all(*_outputs(self.result))
        self.captured = cap.launches
        self.signature = [_signature(t) for t in inputs]
        bufs = [b for t in inputs for b in _buffers(t)]
        self.input_slots = [[(i, j) for i, (_, _, launch_bufs) in enumerate(self.captured)
                             for j, b in enumerate(launch_bufs) if b is buf] for buf in bufs]
        self.graph = _device_graph(self.captured, bufs)
        return self.result

    def _replay(self, inputs: list[Tensor]) -> R:
        got = [_signature(t) for t in inputs]
        if got != self.signature:
            raise ValueError(f"jit: called with tensors {got}, but captured with {self.signature}; "
                             "make a new jit function for other shapes, dtypes, devices or shardings")
        if self.graph is not None:
            self.graph.exec_buffers([b for t in inputs for b in _buffers(t)])
            return self.result  # type: ignore[no-any-return]
        launches = [list(bufs) for _, _, bufs in self.captured]
        for buf, slots in zip([b for t in inputs for b in _buffers(t)], self.input_slots):
            for i, j in slots:
                launches[i][j] = buf
        for (kernel, item, _), bufs in zip(self.captured, launches):
            if kernel is None:
                engine.run_copy(item, bufs)
            else:
                kernel(bufs)
        return self.result  # type: ignore[no-any-return]

    @property
    def kernel_count(self) -> int:
        """How many launches a replay makes (0 before the capture)."""
        return len(self.captured)


def _device_graph(captured: list[engine.Launch], inputs: list[Any]) -> Any | None:
    """The captured launches as one device's graph, when they all run on one device that has graphs."""
    devices = {b.device for _, _, bufs in captured for b in bufs}
    if len(devices) != 1 or any(k is not None and k.spec.vars for k, _, _ in captured):
        return None  # (several devices, or symbolic kernels: replayed one by one)
    launches = [(k.program, bufs, k.spec.global_size, k.spec.local_size, ()) if k is not None else
                (None, bufs, (1,), None, ()) for k, _, bufs in captured]
    return Device[devices.pop()].graph(launches, inputs)


def _outputs(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for r in result for t in _outputs(r)]
    if isinstance(result, dict):
        return [t for r in result.values() for t in _outputs(r)]
    return []


def jit(fn: Callable[..., R]) -> JitFunction[R]:
    """Capture `fn`'s kernels on its second call and replay them from the third on (see the module docstring)."""
    return JitFunction(fn)
