"""The driver binding and the CUDA device, run against a fake libcuda.so.1 (fake_libcuda.c): no GPU needed."""

import re

import numpy as np
import pytest

from ember.codegen import CUDARenderer
from ember.cuda_runtime import CUDAAllocator, CUDADevice, CUDAError, load_driver
from ember.runtime import Buffer, Device
from ember.tensor import Tensor
from ember.uops import dtypes

ADD = """extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}"""
IOTA64 = """extern "C" __global__ void iota64(long long* out, long long start) {
  long long i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = start + i;
}"""


def test_missing_driver_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_DRIVER_PATH", str(tmp_path / "no-such" / "libcuda.so.1"))
    with pytest.raises(RuntimeError, match=r"cannot load the NVIDIA driver library .*libcuda\.so\.1.*CUDA_DRIVER_PATH"):
        CUDADevice("CUDA")


def test_failed_call_names_the_call_and_the_error(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_INIT_ERROR", "100")
    with pytest.raises(CUDAError, match=r"cuInit failed: CUDA_ERROR_NO_DEVICE \(100\): no CUDA-capable device") as e:
        load_driver()
    assert e.value.call == "cuInit" and e.value.code == 100


def test_device_facts_and_names(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    monkeypatch.setenv("FAKE_CUDA_CC", "89")
    dev = Device["cuda:0"]
    assert isinstance(dev, CUDADevice) and dev.name == "CUDA" and Device["CUDA:1"].context.ordinal == 1
    ctx = dev.context
    assert (ctx.name, ctx.arch, ctx.compute_capability, ctx.multiprocessors) == ("Fake GPU 0", "sm_89", (8, 9), 132)
    assert ctx.total_memory == 80 << 30 and ctx.max_block == (1024, 1024, 64) and ctx.max_grid[0] == 2**31 - 1
    assert dev.compiler.arch == "sm_89" and dev.compiler.flags[0] == "--gpu-architecture=sm_89"
    assert load_driver().version == (13, 0)
    with pytest.raises(ValueError, match=r"CUDA:2: no such device; this machine has 2 CUDA device"):
        CUDADevice("CUDA:2")
    with pytest.raises(ValueError, match="a name is 'CUDA' or 'CUDA:<n>'"):
        CUDADevice("CUDA:x")
    assert isinstance(dev.renderer, CUDARenderer) and dev.renderer.arch == "sm_89"
    dev.context.close()
    assert fake_cuda.calls("cuStreamDestroy_v2") and fake_cuda.calls("cuDevicePrimaryCtxRelease")


@pytest.mark.parametrize("nbytes", [4, 1000, 4096, 10_000])
def test_copy_round_trip_through_pinned_staging(fake_cuda, monkeypatch, nbytes):
    dev = CUDADevice("CUDA")
    dev.allocator = CUDAAllocator(dev.context, staging_bytes=4096)
    monkeypatch.setitem(Device._instances, "CUDA", dev)
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    buf = Buffer("CUDA", nbytes, dtypes.uint8).copyin(data)
    np.testing.assert_array_equal(buf.numpy(), data)
    chunks = -(-nbytes // 4096)
    assert [int(c.split("n=")[1]) for c in fake_cuda.calls("cuMemcpyHtoDAsync_v2")] == \
        [min(4096, nbytes - i * 4096) for i in range(chunks)]
    assert len(fake_cuda.calls("cuMemcpyDtoHAsync_v2")) == chunks
    assert len(fake_cuda.calls("cuMemHostAlloc")) == 2  # the two staging buffers, allocated once
    assert len(fake_cuda.calls("cuMemAlloc_v2")) == 1


def test_launch_packs_arguments_and_times_with_events(fake_cuda, monkeypatch):
    dev = Device["CUDA"]
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    bufs = [Buffer("CUDA", n, dtypes.float32) for _ in range(3)]
    bufs[1].copyin(a)
    bufs[2].copyin(b)
    prg = dev.runtime("add", dev.compiler.compile_cached(ADD))
    assert prg.param_sizes == [8, 8, 8, 4]
    seconds = prg(*bufs, global_size=(4,), local_size=(256,), vals=(n,), wait=True)
    assert seconds == pytest.approx(1.5e-3)  # the fake GPU's clock: 1.5 ms a launch
    np.testing.assert_array_equal(bufs[0].numpy(), a + b)
    (launch,) = fake_cuda.calls("cuLaunchKernel")
    ptrs = ",".join(str(buf.raw.ptr) for buf in bufs)
    assert launch == f"cuLaunchKernel add grid=4,1,1 block=256,1,1 shared=0 args={ptrs},{n}"
    assert prg(*bufs, global_size=(4,), local_size=(256,), vals=(n,)) is None  # not waited for
    dev.synchronize()


def test_eight_byte_parameter(fake_cuda):
    dev = Device["CUDA"]
    out = Buffer("CUDA", 64, dtypes.int64)
    prg = dev.runtime("iota64", dev.compiler.compile_cached(IOTA64))
    start = 3 << 40  # needs all 8 bytes
    prg(out, global_size=(2,), local_size=(32,), vals=(start,), wait=True)
    np.testing.assert_array_equal(out.numpy(), start + np.arange(64))


def test_launch_checks(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    dev = Device["CUDA"]
    bufs = [Buffer("CUDA", 16, dtypes.float32) for _ in range(3)]
    prg = dev.runtime("add", dev.compiler.compile_cached(ADD))
    with pytest.raises(ValueError, match=r"add: the kernel takes 4 parameters, given 3 buffers and 0 values"):
        prg(*bufs, global_size=(1,), local_size=(16,))
    with pytest.raises(ValueError, match=r"add: value 0 \(4294967296\) does not fit the kernel's 32-bit parameter"):
        prg(*bufs, global_size=(1,), local_size=(16,), vals=(2**32,))
    with pytest.raises(ValueError, match=r"local_size \(64, 32, 1\) is 2048 threads; this kernel allows 1024"):
        prg(*bufs, global_size=(1,), local_size=(64, 32), vals=(16,))
    with pytest.raises(ValueError, match=r"global_size \(1, 70000, 1\) exceeds the GPU's limits"):
        prg(*bufs, global_size=(1, 70000), local_size=(16,), vals=(16,))
    other = Buffer("CUDA:1", 16, dtypes.float32)
    with pytest.raises(ValueError, match=r"buffer argument 1 .* is not memory of CUDA:0"):
        prg(bufs[0], other, bufs[2], global_size=(1,), local_size=(16,), vals=(16,))
    assert prg(*bufs, global_size=(0,), local_size=(16,), vals=(16,), wait=True) == 0.0  # nothing to run
    assert fake_cuda.calls("cuLaunchKernel") == []
    with pytest.raises(CUDAError, match=r"cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND"):
        dev.runtime("not_in_the_cubin", dev.compiler.compile_cached(ADD))


def test_cubin_for_another_architecture_is_refused(fake_cuda, monkeypatch):
    from ember.cuda_runtime import NVRTCCompiler

    dev = Device["CUDA"]
    with pytest.raises(RuntimeError, match=r"a cubin for sm_80; the GPU \(Fake GPU 0\) is sm_90"):
        dev.runtime("add", NVRTCCompiler("sm_80").compile_cached(ADD))


def test_hang_detected(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_HANG", "1")
    monkeypatch.setenv("CUDA_TIMEOUT", "0.2")
    dev = Device["CUDA"]
    with pytest.raises(RuntimeError, match=r"^CUDA:0: hang detected: the work queued on Fake GPU 0 not finished "
                                           r"after 0\.2 s \(set \$CUDA_TIMEOUT"):
        dev.synchronize()
    out = Buffer("CUDA", 64, dtypes.int64).allocate()
    prg = dev.runtime("iota64", dev.compiler.compile_cached(IOTA64))
    with pytest.raises(RuntimeError, match=r"^CUDA:0: hang detected: kernel iota64 on Fake GPU 0 not finished"):
        prg(out, global_size=(2,), local_size=(32,), vals=(0,), wait=True)
    with pytest.raises(RuntimeError, match=r"hang detected: a copy from the GPU"):
        out.numpy()
    monkeypatch.setenv("CUDA_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=r"CUDA_TIMEOUT='soon': expected a number of seconds > 0"):
        dev.synchronize()


def test_copies_between_devices(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    dev0, dev1 = Device["CUDA"], Device["CUDA:1"]
    data = np.arange(100, dtype=np.float32)
    src = Buffer("CUDA", 100, dtypes.float32).copyin(data)
    peer = Buffer("CUDA:1", 100, dtypes.float32)
    dev1.copy(peer, src)  # on the GPUs
    np.testing.assert_array_equal(peer.numpy(), data)
    assert fake_cuda.calls("cuMemcpyPeerAsync") == ["cuMemcpyPeerAsync n=400 dst_dev=1 src_dev=0"]
    assert fake_cuda.calls("cuCtxEnablePeerAccess") == ["cuCtxEnablePeerAccess dev=1 peer=0"]
    assert len(fake_cuda.calls("cuStreamWaitEvent")) == 2  # each stream waits for the other's side
    same = Buffer("CUDA", 100, dtypes.float32)
    dev0.copy(same, src)
    np.testing.assert_array_equal(same.numpy(), data)
    assert fake_cuda.calls("cuMemcpyDtoDAsync_v2") == ["cuMemcpyDtoDAsync_v2 n=400"]
    through_host = Buffer("CUDA:1", 100, dtypes.float32).copy_from(src)  # what the engine's copies use
    np.testing.assert_array_equal(through_host.numpy(), data)
    on_cpu = Buffer("CPU", 100, dtypes.float32).copy_from(src)
    np.testing.assert_array_equal(on_cpu.numpy(), data)


def test_freed_memory_is_reused_then_released(fake_cuda):
    Device["CUDA"]
    buf = Buffer("CUDA", 256, dtypes.float32).allocate()
    ptr = buf.raw.ptr
    buf.deallocate()
    again = Buffer("CUDA", 256, dtypes.float32).allocate()
    assert again.raw.ptr == ptr and len(fake_cuda.calls("cuMemAlloc_v2")) == 1
    view = again.view(16, dtypes.float32, offset=64).allocate()
    assert view.raw.ptr == ptr + 64 and view.raw.owner is again.raw
    again.deallocate()
    Device["CUDA"].allocator.free_cache()
    assert fake_cuda.calls("cuMemFree_v2") == [f"cuMemFree_v2 ptr={ptr:#x}"]
    assert re.fullmatch(r"cuMemAlloc_v2 size=1024 dev=0", fake_cuda.calls("cuMemAlloc_v2")[0])


def test_gpu_before_sm80_has_no_renderer(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_CC", "75")
    dev = Device["CUDA"]
    assert dev.compiler.arch == "sm_75"  # hand-written kernels still compile and run
    with pytest.raises(NotImplementedError, match=r"cannot be rendered for sm_75 \(CUDARenderer: arch 'sm_75'"):
        dev.renderer.render("k", ())


def test_tensor_kernels_render_compile_and_launch(fake_cuda):
    # the whole path from a tensor to cuLaunchKernel; the fake runs none of these kernels, so only the launches
    # (and the fake's checks of every handle, pointer and dimension) are checked here: values need a GPU
    a = Tensor(np.arange(4096, dtype=np.float32).reshape(64, 64), device="CUDA")
    b = Tensor(np.ones((64, 64), dtype=np.float32), device="CUDA")
    for out in ((a * 2 + 1).sum(1), a @ b, a.cast(dtypes.bfloat16) * 3):
        out.realize()
    launches = fake_cuda.calls("cuLaunchKernel")
    assert len(launches) == 3 and len(fake_cuda.calls("cuModuleLoadData")) == 3
    for line in launches:
        dims = re.search(r"grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+)", line).groups()
        assert 1 <= int(dims[3]) * int(dims[4]) * int(dims[5]) <= 1024, line


def test_a_batch_cubin_is_loaded_once(fake_cuda):
    import gc

    dev = Device["CUDA"]
    add_lib, iota_lib = dev.compiler.compile_cached_many([("add", ADD), ("iota64", IOTA64)])
    assert add_lib == iota_lib  # one NVRTC program holds both kernels
    add, iota = dev.runtime("add", add_lib), dev.runtime("iota64", iota_lib)
    assert add.module is iota.module and len(fake_cuda.calls("cuModuleLoadData")) == 1
    out = Buffer("CUDA", 32, dtypes.int64)
    iota(out, global_size=(np.int64(1),), local_size=[32], vals=(5,), wait=True)  # numpy ints and lists are fine
    np.testing.assert_array_equal(out.numpy(), 5 + np.arange(32))
    del add, iota
    gc.collect()
    assert fake_cuda.calls("cuModuleUnload") == ["cuModuleUnload"]


def _replay_setup(dev, n):
    prg = dev.runtime("add", dev.compiler.compile_cached(ADD))
    tmp, tmp2, tmp3, out = (Buffer("CUDA", n, dtypes.float32).allocate() for _ in range(4))
    a = Buffer("CUDA", n, dtypes.float32).copyin(np.ones(n, np.float32))
    b = Buffer("CUDA", n, dtypes.float32).copyin(np.full(n, 2.0, np.float32))
    # tmp = a + b; tmp2 = tmp + b; tmp3 <- tmp2 (a copy); out = tmp3 + a: out = 2a + 2b
    launches = [(prg, [tmp, a, b], (1,), (256,), (n,)), (prg, [tmp2, tmp, b], (1,), (256,), (n,)),
                (None, [tmp3, tmp2], (1,), None, ()), (prg, [out, tmp3, a], (1,), (256,), (n,))]
    return launches, (a, b), out


def _inputs(n, k):
    return (Buffer("CUDA", n, dtypes.float32).copyin(np.arange(n, dtype=np.float32) * k),
            Buffer("CUDA", n, dtypes.float32).copyin(np.full(n, float(k), np.float32)))


def test_a_jit_replays_through_cuda_graphs_with_new_inputs(fake_cuda):
    """CUDADevice.graph: each run of kernels between copies is one CUDA graph, a chain of kernel nodes; a replay on
    new inputs gives the nodes that hold them their new arguments (the fake's executable graph keeps its own copy of
    the values, as a driver does: without the update it would compute on the old inputs)."""
    dev, n = Device["CUDA"], 256
    launches, recorded, out = _replay_setup(dev, n)
    graph = dev.graph(launches, list(recorded))
    assert graph is not None and graph.mode == "cuda-graph" and len(graph.graphs) == 2
    assert len(fake_cuda.calls("cuGraphCreate")) == 2
    nodes = fake_cuda.calls("cuGraphAddKernelNode_v2")
    assert [re.search(r"node=(\d+) deps=(\d+)", line).groups() for line in nodes] == \
        [("0", "0"), ("1", "1"), ("0", "0")]
    assert all("grid=1,1,1 block=256,1,1 shared=0" in line for line in nodes)
    assert fake_cuda.calls("cuGraphInstantiateWithFlags") == ["cuGraphInstantiateWithFlags nodes=2",
                                                              "cuGraphInstantiateWithFlags nodes=1"]
    graph.exec_buffers(list(recorded), wait=True)  # the recorded inputs: nothing to update
    assert fake_cuda.calls("cuGraphExecKernelNodeSetParams_v2") == []
    np.testing.assert_array_equal(out.numpy(), np.full(n, 6.0, np.float32))
    for k in (1, 2):
        x, y = _inputs(n, k)
        graph.exec_buffers([x, y], wait=True)
        np.testing.assert_array_equal(out.numpy(), np.arange(n, dtype=np.float32) * 2 * k + 2 * k)
        # every node holding x or y got them: all three (node 0 of graph 0 holds both, node 1 y, graph 1's x)
        updates = fake_cuda.calls("cuGraphExecKernelNodeSetParams_v2")[-3:]
        assert [line.split(" args=")[0] for line in updates] == [
            "cuGraphExecKernelNodeSetParams_v2 add node=0", "cuGraphExecKernelNodeSetParams_v2 add node=1",
            "cuGraphExecKernelNodeSetParams_v2 add node=0"]
        assert f",{x.raw.ptr},{y.raw.ptr}," in updates[0] and updates[1].endswith(f",{y.raw.ptr},{n}")
        assert f",{x.raw.ptr},{n}" in updates[2]
    before = len(fake_cuda.calls("cuGraphExecKernelNodeSetParams_v2"))
    graph.exec_buffers([x, y], wait=True)  # the same inputs again: launched as they are
    assert len(fake_cuda.calls("cuGraphExecKernelNodeSetParams_v2")) == before
    assert len(fake_cuda.calls("cuGraphLaunch")) == 2 * 4 and fake_cuda.calls("cuLaunchKernel") == []
    del graph
    import gc

    gc.collect()
    assert len(fake_cuda.calls("cuGraphExecDestroy")) == 2 and len(fake_cuda.calls("cuGraphDestroy")) == 2
    cpu = Buffer("CPU", n, dtypes.float32)
    assert dev.graph([(None, [out, cpu], (1,), None, ())], []) is None  # another device's memory: no graph


@pytest.mark.parametrize("how", ["driver without graphs", "CUDA_GRAPH=0"])
def test_batched_launches_without_cuda_graphs(request, monkeypatch, how):
    fake = request.getfixturevalue("fake_cuda_no_graphs" if how == "driver without graphs" else "fake_cuda")
    if how == "CUDA_GRAPH=0":
        monkeypatch.setenv("CUDA_GRAPH", "0")
    else:
        assert not load_driver().has_graphs
    dev, n = Device["CUDA"], 256
    launches, recorded, out = _replay_setup(dev, n)
    graph = dev.graph(launches, list(recorded))
    assert graph.mode == "batched" and graph.graphs == [] and len(graph.jobs) == 4
    x, y = _inputs(n, 3)
    graph.exec_buffers([x, y], wait=True)
    np.testing.assert_array_equal(out.numpy(), np.arange(n, dtype=np.float32) * 6 + 6)
    assert len(fake.calls("cuLaunchKernel")) == 3 and fake.calls("cuGraphLaunch") == []
    assert f"args={out.raw.ptr}," in fake.calls("cuLaunchKernel")[-1]


def test_cuda_graph_setting_is_checked(fake_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_GRAPH", "yes")
    dev = Device["CUDA"]
    with pytest.raises(ValueError, match=r"CUDA_GRAPH='yes': expected 1 \(CUDA graphs, the default\) or 0"):
        dev.graph([], [])


BIG_SHARED = """extern "C" __device__ unsigned int emb_dynamic_shared_big = {bytes}u;
extern "C" __global__ void __launch_bounds__(256) big(float* out) {{
  extern __shared__ __align__(16) unsigned char emb_smem[];
  float* local0 = (float*)(emb_smem + 0);
  for (int i = threadIdx.x; i < {bytes} / 4; i += 256) local0[i] = (float)i;
  __syncthreads();
  out[threadIdx.x] = local0[{bytes} / 4 - 1 - threadIdx.x];
}}"""


def test_dynamic_shared_memory_opts_in_before_the_launch(fake_cuda):
    """A kernel over 48 KiB of shared memory: the runtime reads its size from the cubin, sets the kernel's dynamic
    shared memory ceiling (cuFuncSetAttribute 8) before any launch, and launches (and graphs) with that many bytes;
    the fake refuses a launch over 48 KiB without the attribute."""
    dev, nbytes = Device["CUDA"], 150_000
    prg = dev.runtime("big", dev.compiler.compile_cached(BIG_SHARED.format(bytes=nbytes)))
    assert prg.shared_bytes == nbytes and dev.context.max_shared_optin == 232448
    out = Buffer("CUDA", 256, dtypes.float32)
    prg(out, global_size=(1,), local_size=(256,), wait=True)
    log = fake_cuda.log()
    setattr_at = log.index(f"cuFuncSetAttribute big attr=8 value={nbytes}")
    launch_at = next(i for i, line in enumerate(log) if line.startswith("cuLaunchKernel big"))
    assert setattr_at < launch_at and f"shared={nbytes} " in log[launch_at]
    graph = dev.graph([(prg, [out], (1,), (256,), ())], [])
    graph.exec_buffers([], wait=True)
    assert f"shared={nbytes} " in fake_cuda.calls("cuGraphAddKernelNode_v2")[0]
    small = dev.runtime("add", dev.compiler.compile_cached(ADD))
    assert small.shared_bytes == 0 and len(fake_cuda.calls("cuFuncSetAttribute")) == 1
    with pytest.raises(ValueError, match=r"kernel 'big' needs 300000 bytes of shared memory, Fake GPU 0 allows "
                                         r"232448 per block"):
        dev.runtime("big", dev.compiler.compile_cached(BIG_SHARED.format(bytes=300_000)))


def test_jit_on_cuda_replays_through_the_device_graph(fake_cuda):
    from ember.cuda_runtime import CUDAGraph
    from ember.tensor import engine, jit

    w = Tensor(np.ones((32, 32), dtype=np.float32), device="CUDA")
    step = jit(lambda x: (x @ w).relu().realize())
    for _ in range(4):
        step(Tensor(np.ones((8, 32), dtype=np.float32), device="CUDA"))
    assert isinstance(step.graph, CUDAGraph) and len(step.graph.jobs) == step.kernel_count
    assert step.graph.mode == "cuda-graph"
    # each replay launched the captured graph, with this call's input pointer in the first kernel's arguments
    x = Tensor(np.ones((8, 32), dtype=np.float32), device="CUDA").realize()
    before = len(fake_cuda.calls("cuGraphLaunch"))
    step(x)
    assert len(fake_cuda.calls("cuGraphLaunch")) == before + len(step.graph.graphs)
    (ptr,) = (b.raw.ptr for b in engine.buffers_of(x.uop))
    assert any(str(ptr) in line for line in fake_cuda.calls("cuGraphExecKernelNodeSetParams_v2"))
