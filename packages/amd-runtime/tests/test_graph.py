"""Batched replay (`graph.AMDGraph`) on the fake driver and GPU: a batch of kernels and a copy recorded once, replayed
with new inputs (the input-address table patched, nothing recorded again), cross-queue fences through signal slots,
per-kernel timestamps, the timeline wrapping between replays, on the AQL queue (MI300X) and the PM4 queue (CPX)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ember.amd_runtime.device import AMDDevice, AMDMemory
from ember.amd_runtime.graph import AMDGraph, GraphCopy, GraphKernel
from ember.amd_runtime.mock import MI300X, MI300X_CPX, MockPlatform, TopologyProfile
from ember.amd_runtime.mock.gpu import attach_fake_gpus
from ember.amd_runtime.queue import AQLQueue
from ember.amd_runtime.signal import TIMELINE_WRAP

pytestmark = pytest.mark.skipif(not (shutil.which("clang-19") and shutil.which("ld.lld-19")),
                                reason="clang-19 and ld.lld-19 build the gfx942 code objects")

SRC = r"""
#define G extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64)))
#define I (__builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x())
G scale(float* out, const float* x, int k) { out[I] = x[I] * k; }
G add(float* out, const float* a, const float* b) { out[I] = a[I] + b[I]; }
"""
N = 128


@pytest.fixture(scope="module", params=[MI300X, MI300X_CPX], ids=["aql", "pm4"])
def dev(request: pytest.FixtureRequest) -> AMDDevice:
    platform = MockPlatform([request.param])
    platform.fake_gpus = attach_fake_gpus(platform.kfd)  # type: ignore[attr-defined]
    return AMDDevice("AMD", platform)


def upload(dev: AMDDevice, data: np.ndarray) -> AMDMemory:
    mem = dev.allocator.alloc(data.nbytes)
    dev.allocator.copyin(mem, memoryview(np.ascontiguousarray(data)).cast("B"))
    return mem


def download(dev: AMDDevice, mem: AMDMemory) -> np.ndarray:
    out = np.empty(mem.nbytes // 4, np.float32)
    dev.allocator.copyout(memoryview(out).cast("B"), mem)
    return out


def profile_of(dev: AMDDevice) -> TopologyProfile:
    return MI300X if isinstance(dev.compute, AQLQueue) else MI300X_CPX


def test_replay_with_new_inputs_without_recording_again(dev: AMDDevice):
    lib = dev.compiler.compile_cached(SRC)
    scale, add = dev.runtime("scale", lib), dev.runtime("add", lib)
    tmp, tmp2, out = (dev.allocator.alloc(4 * N) for _ in range(3))
    grid, block = (N // 64, 1, 1), (64, 1, 1)
    jobs = [GraphKernel(scale, (tmp, 0), grid, block, (3,)),  # tmp = 3 x
            GraphCopy(tmp2, tmp, 4 * N),  # on the SDMA queue: waits for the compute slot
            GraphKernel(add, (out, tmp2, 1), grid, block)]  # waits for the copy slot: out = 3 x + y
    graph = AMDGraph(dev, jobs, n_inputs=2, profile=True)
    assert graph.waits == [[], [("compute", 0)], [("copy", 1)]] and graph.signalled == {0, 1}
    recorded = (graph.compute_stream, [list(p) for p in graph.copy_stream.packets])
    gpu = dev.platform.fake_gpus[dev.node.gpu_id]  # type: ignore[attr-defined]
    dispatches = gpu.dispatches
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
        y = np.random.default_rng(seed + 10).standard_normal(N).astype(np.float32)
        xm, ym = upload(dev, x), upload(dev, y)
        seconds = graph.exec([xm, ym], wait=True)
        np.testing.assert_allclose(download(dev, out), 3 * x + y, rtol=1e-6)
        assert seconds is not None and seconds > 0
        assert graph.input_table == [xm.va, ym.va]
    assert gpu.dispatches - dispatches == 6
    assert graph.compute_stream is recorded[0]  # the same batch, only its patch sites rewritten
    assert [n for n, _ in graph.timings()] == ["scale", "add"] and all(t > 0 for _, t in graph.timings())
    with pytest.raises(ValueError, match="AMDGraph.exec: 1 inputs given, the graph takes 2"):
        graph.exec([xm])
    graph.free()


def test_replay_across_a_timeline_wrap(dev: AMDDevice):
    scale = dev.runtime("scale", dev.compiler.compile_cached(SRC))
    out = dev.allocator.alloc(4 * N)
    graph = AMDGraph(dev, [GraphKernel(scale, (out, 0), (N // 64, 1, 1), (64, 1, 1), (2,))], n_inputs=1)
    x = np.arange(N, dtype=np.float32)
    xm = upload(dev, x)
    dev.synchronize()
    dev.timeline.signal.value = TIMELINE_WRAP - 1  # as if 2**31 submissions had finished
    dev.timeline.value = TIMELINE_WRAP
    old = dev.timeline.signal
    graph.exec([xm], wait=True)  # signals 2**31, the last value before the wrap
    graph.exec([xm])  # wraps first: the batch now waits on and signals the shadow signal
    assert dev.timeline.signal is not old and dev.timeline.value == 2
    dev.synchronize()
    np.testing.assert_array_equal(download(dev, out), 2 * x)


def test_copies_from_and_to_inputs_are_patched(dev: AMDDevice):
    n = 3 * 1024
    out = dev.allocator.alloc(4 * n)
    graph = AMDGraph(dev, [GraphCopy(out, 0, 4 * n), GraphCopy(1, out, 4 * n)], n_inputs=2)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        xm, ym = upload(dev, x), dev.allocator.alloc(4 * n)
        graph.exec([xm, ym], wait=True)
        np.testing.assert_array_equal(download(dev, ym), x)


def test_graph_arguments_are_checked(dev: AMDDevice):
    scale = dev.runtime("scale", dev.compiler.compile_cached(SRC))
    out = dev.allocator.alloc(4 * N)
    with pytest.raises(ValueError, match="AMDGraph: job 0 names input 3; the graph has 1 inputs"):
        AMDGraph(dev, [GraphKernel(scale, (out, 3), (2, 1, 1), (64, 1, 1), (2,))], n_inputs=1)
    with pytest.raises(ValueError, match="AMDGraph: a graph needs at least one kernel or copy"):
        AMDGraph(dev, [], n_inputs=0)


def test_a_jitted_step_recorded_once_and_replayed_as_one_batch():
    """The kernels a jit captured on MOCKGPU's AMD device become one graph; replays on new input Buffers equal the
    CPU."""
    import os

    from ember.runtime import Buffer, Device
    from ember.tensor import Tensor, dtypes, jit

    os.environ["MOCKGPU"] = "1"
    try:
        dev = Device["AMD"]
    finally:
        del os.environ["MOCKGPU"]
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, 8)).astype(np.float32)

    def fn(x: Tensor, y: Tensor) -> Tensor:
        return ((x @ Tensor(w, device=x.device)).relu() + y).softmax(-1).realize()

    step = jit(fn)
    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(4)]
    ys = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(4)]
    for x, y in zip(xs[:2], ys[:2]):
        step(Tensor(x, device="AMD"), Tensor(y, device="AMD"))
    launches = [(k.program, bufs, k.spec.global_size, k.spec.local_size, ()) if k is not None
                else (None, bufs, (1,), None, ()) for k, _, bufs in step.captured]
    inputs = [step.captured[slots[0][0]].bufs[slots[0][1]] for slots in step.input_slots]
    graph = dev.graph(launches, inputs, profile=True)
    kernels = sum(k is not None for k, _, _ in step.captured)
    assert len(graph.jobs) == len(step.captured) and len(graph.prof) == kernels
    for x, y in zip(xs[2:], ys[2:]):
        bx = Buffer("AMD", x.size, dtypes.float32).copyin(x)
        by = Buffer("AMD", y.size, dtypes.float32).copyin(y)
        graph.exec_buffers([bx, by], wait=True)
        ref = fn(Tensor(x, device="CPU"), Tensor(y, device="CPU")).numpy()
        np.testing.assert_allclose(step.result.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_jit_replays_through_the_device_graph():
    """A plain jit on the AMD device replays its capture as the device's graph (recorded once), results equal the
    CPU's for each new input."""
    import os

    from ember.runtime import Device
    from ember.tensor import Tensor, jit

    os.environ["MOCKGPU"] = "1"
    try:
        Device["AMD"]
    finally:
        del os.environ["MOCKGPU"]
    rng = np.random.default_rng(6)
    w = rng.standard_normal((16, 8)).astype(np.float32)

    def fn(x: Tensor) -> Tensor:
        return (x @ Tensor(w, device=x.device)).relu().sum(1).realize()

    step = jit(fn)
    for i in range(5):
        x = rng.standard_normal((4, 16)).astype(np.float32)
        out = step(Tensor(x, device="AMD")).numpy()
        np.testing.assert_allclose(out, fn(Tensor(x, device="CPU")).numpy(), rtol=1e-5, atol=1e-5)
        if i >= 1:
            assert step.graph is not None and len(step.graph.jobs) == step.kernel_count
