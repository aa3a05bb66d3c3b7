"""The fake GPU's command processor running kernels: HIP compiled by clang-19 for gfx942, loaded into the fake GPU's
memory, dispatched through the PM4 queue (DISPATCH_DIRECT from the SH registers) and the AQL queue
(KERNEL_DISPATCH), executed by the ISA interpreter. Also: indirect buffers with PRED_EXEC, the memory barrier,
a faulting kernel, and the synthetic clock."""

from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

from ember.amd_runtime import pm4
from ember.amd_runtime.elf import load_code_object
from ember.amd_runtime.kernargs import kernarg_layout
from ember.amd_runtime.mock import MI300X, MI300X_CPX, TopologyProfile
from ember.amd_runtime.mock.gpu import CommandError, MockGpuRig, open_mock_gpu
from ember.amd_runtime.queue import KernelLaunch, PM4ComputeQueue

CLANG = shutil.which("clang-19") and shutil.which("ld.lld-19")
needs_clang = pytest.mark.skipif(not CLANG, reason="clang-19 and ld.lld-19 build the gfx942 code objects")

SRC = r"""
#define G extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 256)))
#define TID __builtin_amdgcn_workitem_id_x()
#define BID __builtin_amdgcn_workgroup_id_x()
G axpy(float* y, const float* x, float a, int n) { int i = BID * 64 + TID; if (i < n) y[i] = a * x[i] + y[i]; }
G block_sum(float* out, const float* x) {
  __attribute__((shared)) float sm[64]; int t = TID; sm[t] = x[BID * 64 + t];
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  if (t == 0) { float s = 0; for (int i = 0; i < 64; i++) s += sm[i]; out[BID] = s; } }
G shape(int* out) { const unsigned short* p = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
  if (TID == 0 && BID == 0) { out[0] = p[2]; out[1] = ((const int*)p)[3]; } }
G poke(float* out) { out[TID + (1 << 30)] = 1.0f; }
G perm(int* out, const int* idx) { int a[48]; for (int i = 0; i < 48; i++) a[i] = i * 3 + TID; out[TID] = a[idx[TID]]; }
"""


@pytest.fixture(scope="module")
def code() -> bytes:
    from ember.amd_runtime.clang_compiler import ClangCompiler

    return ClangCompiler("gfx942").compile(SRC)


@pytest.fixture(params=[MI300X_CPX, MI300X], ids=["pm4", "aql"])
def profile(request: pytest.FixtureRequest) -> TopologyProfile:
    return request.param


def _rig(profile: TopologyProfile) -> MockGpuRig:
    return open_mock_gpu(profile)


class Loaded:
    """A code object copied into the fake GPU's memory, and a launcher for its kernels."""

    def __init__(self, rig, lib: bytes):  # noqa: ANN001
        self.rig, self.co = rig, load_code_object(lib, "gfx942")
        self.image = rig.memory.alloc(len(self.co.image), host=True)
        self.image.view.write(0, self.co.relocated(self.image.va))
        self.kernargs = rig.memory.alloc(0x1000, host=True)
        self.queue = rig.compute()

    def run(self, name: str, bufs: list[int], scalars: str, vals: list, groups: int, local: int = 64) -> None:  # noqa: ANN001
        k = self.co.kernel(name)
        layout = kernarg_layout(len(bufs), scalars, k.descriptor, self.co.code_object_version, k.metadata)
        va = self.kernargs.va
        self.kernargs.view.write(0, layout.pack(bufs, vals, (groups, 1, 1), (local, 1, 1), kernarg_address=va,
                                                kernel_object=self.image.va + k.descriptor_offset))
        launch = KernelLaunch(k.descriptor, self.image.va + k.descriptor_offset, self.image.va + k.entry_offset, va,
                              (groups, 1, 1), (local, 1, 1), dispatch_packet_va=layout.dispatch_packet_address(va))
        done = self.rig.signals.new()
        self.queue.exec(launch).signal(done, 1).submit()
        done.wait(1, 2000, waiter=self.rig.events, queue="compute")


def floats(buf, n: int) -> np.ndarray:  # noqa: ANN001
    return np.frombuffer(buf.view.read(0, 4 * n), np.float32)


@needs_clang
def test_kernels_run_through_both_compute_queues(code: bytes, profile: TopologyProfile):
    rig = _rig(profile)
    k = Loaded(rig, code)
    x, y = np.arange(200, dtype=np.float32), np.ones(200, np.float32)
    bx, by = rig.host(800), rig.host(800)
    bx.view.write(0, x.tobytes())
    by.view.write(0, y.tobytes())
    clock = rig.gpu.clock
    k.run("axpy", [by.va, bx.va], "fi", [2.5, 200], groups=4)
    np.testing.assert_array_equal(floats(by, 200), 2.5 * x + 1)
    assert rig.gpu.dispatches == 1 and rig.gpu.clock - clock > rig.gpu.instructions > 0
    kind = "DispatchDirect" if isinstance(k.queue, PM4ComputeQueue) else "KERNEL_DISPATCH"
    assert rig.gpu.packets[kind] == 1

    out = rig.host(16)
    k.run("block_sum", [out.va, bx.va], "", [], groups=3)  # LDS: the group segment of the descriptor
    np.testing.assert_array_equal(floats(out, 3), x[:192].reshape(3, 64).sum(1))


@needs_clang
def test_dispatch_pointer_reaches_the_kernel(code: bytes, profile: TopologyProfile):
    rig = _rig(profile)
    k = Loaded(rig, code)
    out = rig.host(16)
    k.run("shape", [out.va], "", [], groups=5, local=32)
    assert struct.unpack("<2i", out.view.read(0, 8)) == (32, 160)  # workgroup_size_x, grid_size_x (work-items)


@needs_clang
def test_a_faulting_kernel_stops_its_queue_and_reports_the_address(code: bytes, profile: TopologyProfile):
    rig = _rig(profile)
    k = Loaded(rig, code)
    out = rig.host(0x1000)
    bad = out.va + (1 << 32)
    with pytest.raises(RuntimeError, match=rf"AMD:0: GPU memory fault at 0x{bad:x} "):
        k.run("poke", [out.va], "", [], groups=1)
    q = k.queue
    assert not q.idle()  # the faulted queue does not move on
    later = rig.signals.new()
    q.signal(later, 1).submit()
    assert later.value == 0


def test_indirect_buffers_with_pred_exec_and_the_memory_barrier():
    rig = _rig(MI300X_CPX)
    q = rig.compute()
    assert isinstance(q, PM4ComputeQueue)
    mine, other, done = rig.signals.new(), rig.signals.new(), rig.signals.new()
    body = [*pm4.pred_exec(0x1, pm4.release_mem(mine.va, 11)), *pm4.pred_exec(0x2, pm4.release_mem(other.va, 22)),
            *pm4.write_data(done.va + 8, 0x1234)]
    ib = rig.memory.alloc(0x1000, uncached=True, cpu_access=True)
    ib.view.view(0, 4 * len(body), "I")[:] = body
    q.memory_barrier()
    q.pending.append(pm4.indirect_buffer(ib.va, len(body)))
    q.signal(done, 1).submit()
    done.wait(1, 2000, waiter=rig.events, queue=q.name)
    assert (mine.value, other.value, done.timestamp_ticks) == (11, 0, 0x1234)
    assert rig.gpu.packets["AcquireMem"] == 1 and rig.gpu.packets["PredExec"] == 1


@needs_clang
def test_a_kernel_using_scratch_needs_the_queue_to_provide_it(code: bytes, profile: TopologyProfile):
    rig = _rig(profile)
    k = Loaded(rig, code)
    out, idx = rig.host(256), rig.host(256)
    with pytest.raises(CommandError, match="scratch"):  # KernelLaunch without scratch_va/tmpring, no amd_queue_t fields
        k.run("perm", [out.va, idx.va], "", [], groups=1)
