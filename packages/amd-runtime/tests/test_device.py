"""The AMD device end to end on the fake driver and GPU (`MOCKGPU=1`): Tensor programs rendered by HIPRenderer,
compiled by clang-19 for gfx942, submitted through the AQL queue of a (fake) MI300X and executed by the ISA
interpreter, against the CPU device; buffers, copies between devices, launches, timing, and a PM4 device on a
one-XCC part opened and closed."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from ember.amd_runtime.device import AMDDevice, MissingCompiler
from ember.amd_runtime.mock import MI300X, MI300X_CPX, MI350X, MockPlatform
from ember.amd_runtime.mock.gpu import FakeGpu, attach_fake_gpus
from ember.amd_runtime.platform import LinuxPlatform
from ember.amd_runtime.queue import AQLQueue, PM4ComputeQueue
from ember.runtime import Buffer, CompileError, Device
from ember.tensor import Tensor, dtypes
from ember.uops.settings import Context

pytestmark = pytest.mark.skipif(not (shutil.which("clang-19") and shutil.which("ld.lld-19")),
                                reason="clang-19 and ld.lld-19 build the gfx942 code objects")


@pytest.fixture(scope="module", autouse=True)
def mockgpu() -> Iterator[None]:
    old = os.environ.get("MOCKGPU")
    os.environ["MOCKGPU"] = "1"
    yield
    if old is None:
        del os.environ["MOCKGPU"]
    else:
        os.environ["MOCKGPU"] = old


rng = np.random.default_rng(7)
X = rng.standard_normal((12, 20)).astype(np.float32)
Y = rng.standard_normal((20, 9)).astype(np.float32)
H = rng.standard_normal((32, 32)).astype(np.float16)

CASES: dict[str, tuple[Callable[..., Tensor], list[np.ndarray], float]] = {
    "elementwise": (lambda x: (x * 3 + 1).exp2() / (x.abs() + 1).sqrt() - x.sin(), [X], 1e-5),
    "reduction": (lambda x: x.sum(1) + x.max(0).reshape(1, 20).sum() - x.mean(), [X], 1e-5),
    "matmul": (lambda x, y: x @ y, [X, Y], 1e-5),
    "softmax": (lambda x: x.softmax(-1), [X], 1e-6),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tensor_programs_match_the_cpu(name: str):
    fn, arrays, tol = CASES[name]
    got = fn(*[Tensor(a, device="AMD") for a in arrays]).numpy()
    ref = fn(*[Tensor(a, device="CPU") for a in arrays]).numpy()
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_half_matmul_on_mfma_rounds_once():
    """The 16x16x16 f16 MFMA accumulates in f32: each output is the exact product rounded once to f16 (the CPU,
    accumulating in f16, is further off)."""
    a, b = H, H.T.copy()
    got = (Tensor(a, device="AMD") @ Tensor(b, device="AMD")).numpy().astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    half_ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64) / 2
    assert np.all(np.abs(got - exact) <= half_ulp)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), as float64."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def test_bf16_matmul_on_mfma_rounds_once():
    """`__builtin_amdgcn_mfma_f32_16x16x16bf16_1k` (v_mfma_f32_16x16x16_bf16 on gfx942) accumulates in f32: each
    output is within half a bfloat16 ulp of the exact product of the bf16-rounded inputs."""
    a, b = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    got = (Tensor(a, device="AMD").cast(dtypes.bfloat16) @ Tensor(b, device="AMD").cast(dtypes.bfloat16)).float()
    exact = _bf16(a) @ _bf16(b)
    half_ulp = np.exp2(np.floor(np.log2(np.abs(exact))) - 8)
    assert np.all(np.abs(got.numpy().astype(np.float64) - exact) <= half_ulp * (1 + 1e-6))


def test_the_device_is_registered_and_uses_the_aql_queue():
    dev = Device["AMD"]
    assert isinstance(dev, AMDDevice) and dev.arch == "gfx942" and dev.node.xccs == 8
    assert isinstance(dev.compute, AQLQueue) and dev.renderer.arch == "gfx942"
    assert Device["AMD:1"].node.gpu_id != dev.node.gpu_id
    assert Device["AMD:1"].platform is dev.platform  # AMD:0..n share one fake driver


def test_device_names_and_a_machine_without_kfd():
    with pytest.raises(ValueError, match=r"AMDDevice: AMD:9 does not exist; this machine has 4 AMD GPU\(s\)"):
        Device["AMD:9"]
    with pytest.raises(ValueError, match="AMDDevice: a name is 'AMD' or 'AMD:<n>', got 'AMD:x'"):
        AMDDevice("AMD:x")
    if not os.path.exists("/sys/devices/virtual/kfd/kfd/topology/nodes"):
        with pytest.raises(FileNotFoundError, match="AMD: no KFD on this machine .* MOCKGPU=1 runs the AMD device"):
            AMDDevice("AMD", LinuxPlatform())


def test_buffers_copy_in_out_through_staging_and_between_devices():
    n = (5 << 20) // 4 + 3  # more than two 2 MiB staging buffers
    data = rng.standard_normal(n).astype(np.float32)
    a = Buffer("AMD", n, dtypes.float32).copyin(data)
    np.testing.assert_array_equal(a.numpy(), data)
    view = a.view(100, dtypes.float32, offset=4 * 1000)
    np.testing.assert_array_equal(view.numpy(), data[1000:1100])
    b = Buffer("AMD:1", n, dtypes.float32).copy_from(a)
    c = Buffer("CPU", n, dtypes.float32).copy_from(b)
    np.testing.assert_array_equal(c.numpy(), data)


def test_a_tensor_sharded_over_two_gpus():
    x = rng.standard_normal((8, 16)).astype(np.float32)
    t = Tensor(x).shard(("AMD", "AMD:1"), axis=0)
    np.testing.assert_allclose((t * 2).sum(0).numpy(), (x * 2).sum(0), rtol=1e-5, atol=1e-6)  # an allreduce


def test_a_launch_with_vars_and_timing():
    dev = Device["AMD"]
    src = ('extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64))) '
           'scale(float* out, const float* x, int n, int k) { int i = __builtin_amdgcn_workgroup_id_x() * 64 + '
           '__builtin_amdgcn_workitem_id_x(); if (i < n) out[i] = x[i] * k; }')
    prg = dev.runtime("scale", dev.compiler.compile_cached(src))
    x = Buffer("AMD", 100, dtypes.float32).copyin(np.arange(100, dtype=np.float32))
    out = Buffer("AMD", 100, dtypes.float32)
    seconds = prg(out, x, global_size=(2, 1, 1), local_size=(64, 1, 1), vals=(100, 3), wait=True)
    assert isinstance(seconds, float) and 0 < seconds < 1
    np.testing.assert_array_equal(out.numpy(), np.arange(100, dtype=np.float32) * 3)
    assert prg(out, x, global_size=(2, 1, 1), local_size=(64, 1, 1), vals=(100, 5)) is None
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy(), np.arange(100, dtype=np.float32) * 5)
    with pytest.raises(ValueError, match="the kernel's kernarg_size is 24: the kernel takes fewer arguments"):
        prg(out, x, global_size=(2, 1, 1), local_size=(64, 1, 1), vals=(100, 5, 6))
    with pytest.raises(ValueError, match=r"scale: buffer argument 1 \(<AMDMemory 400 B at 0x[0-9a-f]+>\) is not "
                                         r"memory of AMD$"):
        prg(out, Buffer("AMD:1", 100, dtypes.float32).copyin(np.zeros(100, np.float32)), vals=(1, 1))


SCRATCH_SRC = ('extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64))) '
               'perm(int* out, const int* idx) { int a[48]; unsigned t = __builtin_amdgcn_workitem_id_x(); '
               'for (int i = 0; i < 48; i++) a[i] = i * 3 + t; out[t] = a[idx[t]]; }')


def test_a_kernel_with_a_private_array_in_scratch():
    dev = Device["AMD"]
    prg = dev.runtime("perm", dev.compiler.compile_cached(SCRATCH_SRC))
    assert prg.kernel.descriptor.private_segment_fixed_size >= 48 * 4  # the array lives in scratch
    idx = rng.integers(0, 48, 64).astype(np.int32)
    bidx = Buffer("AMD", 64, dtypes.int32).copyin(idx)
    out = Buffer("AMD", 64, dtypes.int32)
    prg(out, bidx, global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)
    np.testing.assert_array_equal(out.numpy(), idx * 3 + np.arange(64))
    buf, lane, tmpring = dev._scratch  # type: ignore[misc]
    assert lane >= 48 * 4 and tmpring >> 12 == -(-64 * lane // 1024)  # WAVESIZE in KiB per wave


def test_a_pm4_device_opens_runs_and_closes():
    platform = MockPlatform([MI300X_CPX])
    attach_fake_gpus(platform.kfd)
    dev = AMDDevice("AMD", platform)
    assert isinstance(dev.compute, PM4ComputeQueue)
    src = ('extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64))) '
           'sq(float* out) { unsigned i = __builtin_amdgcn_workitem_id_x(); out[i] = (float)(i * i); }')
    prg = dev.runtime("sq", dev.compiler.compile_cached(src))
    mem = dev.allocator.alloc(256)
    prg.launch([mem], (1, 1, 1), (64, 1, 1), (), wait=False)
    out = np.empty(64, np.float32)
    dev.allocator.copyout(memoryview(out).cast("B"), mem)
    np.testing.assert_array_equal(out, np.arange(64, dtype=np.float32) ** 2)
    perm = dev.runtime("perm", dev.compiler.compile_cached(SCRATCH_SRC))  # scratch through COMPUTE_TMPRING_SIZE
    idx = rng.integers(0, 48, 64).astype(np.int32)
    bidx = dev.allocator.alloc(256)
    dev.allocator.copyin(bidx, memoryview(idx).cast("B"))
    perm.launch([mem, bidx], (1, 1, 1), (64, 1, 1), (), wait=True)
    got = np.empty(64, np.int32)
    dev.allocator.copyout(memoryview(got).cast("B"), mem)
    np.testing.assert_array_equal(got, idx * 3 + np.arange(64))
    dev.allocator.free(mem, 256)
    dev.allocator.free(bidx, 256)
    del prg, perm
    dev.close()
    fake = platform.kfd
    assert (fake.queues, fake.bos, fake.events, platform.live_mappings()) == ({}, {}, {}, [])  # the last device
    assert [t.op for t in platform.trace[-3:]] == ["ioctl", "close", "close"]  # FREE (event page), render, kfd


def test_launches_copies_and_a_graph_with_the_gpu_on_its_own_thread():
    """Ordering through the timeline holds when the fake GPU runs beside the host."""
    from ember.amd_runtime.graph import AMDGraph, GraphCopy, GraphKernel

    platform = MockPlatform([MI300X])
    gpu = FakeGpu(platform.kfd, next(iter(platform.kfd.gpus)), threaded=True)
    try:
        dev = AMDDevice("AMD", platform)
        src = ('extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64))) '
               'bump(float* out, const float* x) { unsigned i = __builtin_amdgcn_workgroup_id_x() * 64 + '
               '__builtin_amdgcn_workitem_id_x(); out[i] = x[i] + 1.0f; }')
        prg = dev.runtime("bump", dev.compiler.compile_cached(src))
        n = 3 << 20  # 12 MiB: the copies cycle through the staging buffers while kernels run
        x = rng.standard_normal(n).astype(np.float32)
        bufs = [dev.allocator.alloc(4 * n) for _ in range(3)]
        dev.allocator.copyin(bufs[0], memoryview(x).cast("B"))
        for i in range(20):
            prg.launch([bufs[(i + 1) % 2], bufs[i % 2]], (4, 1, 1), (64, 1, 1), (), wait=False)
        ref = x.copy()
        ref[:256] = functools.reduce(lambda v, _: v + np.float32(1), range(20), x[:256])
        out = np.empty_like(x)
        dev.allocator.copyout(memoryview(out).cast("B"), bufs[0])
        np.testing.assert_array_equal(out, ref)
        graph = AMDGraph(dev, [GraphKernel(prg, (bufs[2], 0), (4, 1, 1), (64, 1, 1)),
                               GraphCopy(bufs[1], bufs[2], 1024)], n_inputs=1)
        for _ in range(5):
            graph.exec([bufs[0]])
        dev.allocator.copyout(memoryview(out).cast("B"), bufs[1])
        np.testing.assert_array_equal(out[:256], ref[:256] + np.float32(1))
        dev.close()
    finally:
        gpu.detach()


def test_an_mi350x_opens_and_copies_without_a_gfx950_compiler():
    platform = MockPlatform([MI350X])
    attach_fake_gpus(platform.kfd)
    dev = AMDDevice("AMD", platform)
    assert dev.arch == "gfx950" and isinstance(dev.compute, AQLQueue)
    data = np.arange(1000, dtype=np.float32)
    mem = dev.allocator.alloc(data.nbytes)
    dev.allocator.copyin(mem, memoryview(data).cast("B"))
    out = np.empty_like(data)
    dev.allocator.copyout(memoryview(out).cast("B"), mem)
    np.testing.assert_array_equal(out, data)
    if isinstance(dev.compiler, MissingCompiler):  # clang-19 only: gfx950 needs LLVM >= 20 or comgr
        with pytest.raises(CompileError, match="AMD: cannot compile for gfx950: .*LLVM >= 20"):
            dev.compiler.compile_cached("void k() {}")
    dev.close()


@pytest.fixture(scope="module")
def llama_steps() -> dict[str, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The loss and gradients of one step of a 2-layer Llama on the CPU and on AMD (same seed, same tokens)."""
    from ember.mlperf_llama.model import Llama, LlamaConfig

    cfg = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=64, max_seq_len=8)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, 9)).astype(np.int32)

    def step(device: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with Context(DEV=device):
            model = Llama(cfg, seed=3)
            loss = model.loss(Tensor(tokens))
            params = model.named_parameters()
            grads = loss.gradient(*params.values())
            Tensor.realize_all(loss, *grads)  # (one schedule: each .numpy() alone ran the shared forward again)
            return loss.numpy(), {name: g.numpy() for name, g in zip(params, grads)}

    return {"CPU": step("CPU"), "AMD": step("AMD")}


@pytest.mark.slow
def test_llama_training_step_matches_the_cpu(llama_steps):  # noqa: ANN001
    (ref_loss, ref_grads), (loss, grads) = llama_steps["CPU"], llama_steps["AMD"]
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert len(grads) == 21
    for name in ref_grads:
        if name != "tok_embeddings.weight":  # (the next test)
            np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_llama_embedding_gradient_matches_the_cpu(llama_steps):  # noqa: ANN001
    name = "tok_embeddings.weight"
    np.testing.assert_allclose(llama_steps["AMD"][1][name], llama_steps["CPU"][1][name], rtol=1e-4, atol=1e-6)
