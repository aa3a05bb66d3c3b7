"""An in-process fake of /dev/kfd, the DRM render nodes and the KFD sysfs topology, strict enough that code which
passes it follows the real driver's rules.

`MockPlatform` implements `Platform`: sysfs reads come from a tree built from topology profiles; ioctls on the fake
/dev/kfd fd are dispatched by their full request number to `FakeKfd`, which checks sizes and arguments the way
`kfd_chardev.c`/`kfd_queue.c` do (ring mappings exact, power-of-two rings, CWSR sizes, EOP on compute, the
USERPTR/VRAM/PUBLIC rules, n_success resumption) and fails with the errno the kernel would give plus a message.

Memory is real: each BO is a memfd; the render-node mmap maps it MAP_FIXED at the BO's VA, so CPU pointers work and
CPU VA == GPU VA. The fake GPU (another module) reaches memory through `FakeKfd.read/write/view` with the GPU's view
of the VM: an unmapped address raises `GpuPageFault` carrying the address.

Hooks for the fake GPU:
  * `FakeKfd.on_doorbell.append(fn)`: fn(queue, value) runs when a doorbell is rung (`doorbell_rung`).
  * `FakeKfd.progress_hooks.append(fn)`: fn() -> bool (did work) runs from WAIT_EVENTS until idle (`progress`).
  * `FakeKfd.signal_interrupt(gpu_id, context_id)`: the CP/SDMA raised an interrupt (RELEASE_MEM int_sel=2, TRAP);
    signal events whose mailbox slot was written become signaled.
  * `FakeKfd.raise_memory_fault(gpu_id, va, write)` / `raise_hw_exception(gpu_id)`: wake exception events.
A fake GPU running on its own thread holds `FakeKfd.lock` (reentrant) around what it does; ioctls and the memory
API take it too, and WAIT_EVENTS lets go of it while it sleeps.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import mmap as _mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.amd_runtime import kfd as k
from ember.amd_runtime.mock.isa.memory import MemoryFault
from ember.amd_runtime.mock.topologies import MI300X, TopologyProfile
from ember.amd_runtime.platform import (
    MAP_ANONYMOUS,
    MAP_FIXED,
    MAP_SHARED,
    PAGE_SIZE,
    PROT_READ,
    PROT_WRITE,
    Doorbell,
    Mmio,
    libc_mmap,
    libc_munmap,
    oserror,
)
from ember.amd_runtime.topology import GC_HWID, NBIF_HWID, SDMA0_HWID, TOPOLOGY_NODES

MOCK_FD_BASE = 1 << 30  # fake fds live far above real ones
GPU_IDS = (0x8C31, 0x4D2E, 0x1B77, 0xE5A2, 0x72C9, 0x3F10, 0xA6D4, 0x5E8B)  # 16-bit, as KFD's hashed ids are
FIRST_RENDER_MINOR = 128
SDMA_DOORBELL_BASE = 0x100  # SDMA queues take doorbell slots from here, compute queues from 0
DOORBELL_SLOTS = k.DOORBELL_SLICE_SIZE // 8
MAX_QUEUES_PER_PROCESS = 1024  # KFD_MAX_NUM_OF_QUEUES_PER_PROCESS
_KNOWN_FLAGS = int(sum(k.AllocFlag))


class GpuPageFault(MemoryFault):
    """A GPU access to a VA that is not mapped on that GPU (or a write to a read-only BO). It is the ISA
    interpreter's `MemoryFault`, so a faulting instruction is reported with its program counter."""

    def __init__(self, address: int, nbytes: int = 0, write: bool = False, *, gpu_id: int | None = None):
        super().__init__(address, nbytes, write)
        self.gpu_id = gpu_id
        gpu = f" on gpu 0x{gpu_id:x}" if gpu_id is not None else ""
        self.args = (f"GPU page fault{gpu}: {'write' if write else 'read'} of {nbytes} bytes at 0x{address:x} is not "
                     f"mapped{' writable' if write else ''}",)


@dataclass(eq=False)
class MockBo:
    """A buffer object: what ALLOC_MEMORY_OF_GPU created."""

    handle: int
    gpu_id: int
    va: int
    size: int
    flags: int
    mmap_offset: int  # the render-node offset (GTT/VRAM) or the CPU address (USERPTR)
    memfd: int | None = None
    backing: _mmap.mmap | None = None  # the mock's own mapping of the memfd
    mapped_gpus: set[int] = field(default_factory=set)
    cpu_maps: int = 0  # live render-node mappings
    queue_refs: int = 0  # live queues using it (ring, rptr/wptr, EOP, CWSR)
    host_gone: bool = False  # USERPTR memory munmapped under the BO

    @property
    def domain(self) -> k.AllocFlag:
        return k.AllocFlag(self.flags & k.ALLOC_DOMAINS)

    def host_view(self) -> memoryview:
        """The BO's bytes as the GPU sees them."""
        if self.backing is not None:
            return memoryview(self.backing)
        if self.host_gone:
            raise GpuPageFault(self.va, self.size, gpu_id=self.gpu_id)
        return memoryview((ctypes.c_char * self.size).from_address(self.mmap_offset)).cast("B")


@dataclass(eq=False)
class MockEvent:
    """A KFD event."""

    event_id: int
    event_type: k.EventType
    auto_reset: bool
    node_id: int
    signaled: bool = False
    memory_fault: tuple[int, int, bool] | None = None  # (gpu_id, va, write) for MEMORY events
    hw_exception: tuple[int, int] | None = None  # (gpu_id, reset_cause) for HW_EXCEPTION events


@dataclass(eq=False)
class MockQueue:
    """A user-mode queue KFD created: what the fake GPU's command processor or SDMA engine reads."""

    queue_id: int
    gpu_id: int
    queue_type: k.QueueType
    ring_va: int
    ring_size: int
    rptr_va: int
    wptr_va: int
    doorbell_index: int
    doorbell_offset: int
    priority: int
    percentage: int
    xcc_id: int
    eop_va: int
    eop_size: int
    cwsr_va: int
    ctx_save_restore_size: int
    ctl_stack_size: int
    sdma_engine_id: int
    bos: list[MockBo] = field(default_factory=list)
    doorbell_value: int = 0


@dataclass(eq=False)
class MockGpu:
    """One GPU node: its profile, ids and this process's VM on it."""

    profile: TopologyProfile
    node: int
    gpu_id: int
    render_minor: int
    vm_fd: int | None = None  # the render fd ACQUIRE_VM bound
    gpuvm_starts: list[int] = field(default_factory=list)  # sorted VA starts of mapped BOs
    gpuvm_bos: list[MockBo] = field(default_factory=list)
    vram_used: int = 0
    doorbells: dict[int, MockQueue] = field(default_factory=dict)  # doorbell slot -> queue

    def lookup(self, va: int) -> MockBo | None:
        i = bisect.bisect_right(self.gpuvm_starts, va) - 1
        if i >= 0 and va < self.gpuvm_bos[i].va + self.gpuvm_bos[i].size:
            return self.gpuvm_bos[i]
        return None

    def map_bo(self, bo: MockBo) -> None:
        i = bisect.bisect_left(self.gpuvm_starts, bo.va)
        self.gpuvm_starts.insert(i, bo.va)
        self.gpuvm_bos.insert(i, bo)

    def unmap_bo(self, bo: MockBo) -> None:
        i = self.gpuvm_bos.index(bo)
        del self.gpuvm_starts[i], self.gpuvm_bos[i]


def _fail(code: int, message: str) -> OSError:
    return oserror(code, f"mock kfd: {message}")


class FakeKfd:
    """The KFD process state of one mock platform: GPUs, BOs, GPU VMs, events, queues."""

    def __init__(self, profiles: Sequence[TopologyProfile], version: tuple[int, int] = (1, 17)):
        if not 1 <= len(profiles) <= len(GPU_IDS):
            raise ValueError(f"FakeKfd: between 1 and {len(GPU_IDS)} GPUs, got {len(profiles)}")
        self.version = version
        self.gpus: dict[int, MockGpu] = {}
        for i, profile in enumerate(profiles):
            gpu = MockGpu(profile, node=i + 1, gpu_id=GPU_IDS[i], render_minor=FIRST_RENDER_MINOR + i)
            self.gpus[gpu.gpu_id] = gpu
        self.bos: dict[int, MockBo] = {}
        self.bo_starts: list[int] = []  # process-wide VA map: sorted starts
        self.bo_list: list[MockBo] = []
        self.events: dict[int, MockEvent] = {}
        self.event_page: MockBo | None = None
        self.queues: dict[int, MockQueue] = {}
        self.runtime_enabled = False
        self._next_idr = 1
        self._next_drm_offset = 0x1_0000_0000
        self._next_nonsignal_id = k.KFD_FIRST_NONSIGNAL_EVENT_ID
        self.render_fds: dict[int, int] = {}  # open render fd -> gpu_id (kept by MockPlatform)
        self.on_doorbell: list[Callable[[MockQueue, int], None]] = []
        self.progress_hooks: list[Callable[[], bool]] = []
        self.wait_poll_s = 0.001  # how often an idle WAIT_EVENTS rechecks (a threaded fake GPU may set events)
        self.lock = threading.RLock()
        self._handlers: dict[int, Callable[[Any], None]] = {
            k.AMDKFD_IOC_GET_VERSION: self._get_version, k.AMDKFD_IOC_ACQUIRE_VM: self._acquire_vm,
            k.AMDKFD_IOC_RUNTIME_ENABLE: self._runtime_enable, k.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: self._alloc,
            k.AMDKFD_IOC_FREE_MEMORY_OF_GPU: self._free, k.AMDKFD_IOC_MAP_MEMORY_TO_GPU: self._map,
            k.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU: self._unmap, k.AMDKFD_IOC_CREATE_EVENT: self._create_event,
            k.AMDKFD_IOC_DESTROY_EVENT: self._destroy_event, k.AMDKFD_IOC_SET_EVENT: self._set_event,
            k.AMDKFD_IOC_WAIT_EVENTS: self._wait_events, k.AMDKFD_IOC_CREATE_QUEUE: self._create_queue,
            k.AMDKFD_IOC_DESTROY_QUEUE: self._destroy_queue,
        }

    # ---- dispatch ----------------------------------------------------------------------------------------------

    def ioctl(self, request: int, arg: ctypes.Structure) -> None:
        """Run one ioctl: the request must be one KFD defines (full number, so direction and size included) and
        `arg` exactly its struct."""
        handler = self._handlers.get(request)
        if handler is None:
            raise _fail(errno.EINVAL, f"unknown ioctl 0x{request:08x} (nr 0x{k.ioc_nr(request):02x}, size "
                                      f"{k.ioc_size(request)})")
        expected = k.IOCTL_ARGS[request]
        if not isinstance(arg, ctypes.Structure) or ctypes.sizeof(arg) != k.ioc_size(request):
            raise _fail(errno.EINVAL, f"{k.IOCTL_NAMES[request]}: argument is {type(arg).__name__} of "
                                      f"{ctypes.sizeof(arg)} bytes, the request encodes {k.ioc_size(request)}")
        if type(arg) is not expected:
            raise _fail(errno.EINVAL, f"{k.IOCTL_NAMES[request]}: argument is {type(arg).__name__}, expected "
                                      f"{expected.__name__}")
        with self.lock:
            handler(arg)

    def _gpu(self, gpu_id: int, what: str, need_vm: bool = True) -> MockGpu:
        gpu = self.gpus.get(gpu_id)
        if gpu is None:
            raise _fail(errno.EINVAL, f"{what}: unknown gpu_id 0x{gpu_id:x} (known: "
                                      f"{', '.join(f'0x{g:x}' for g in self.gpus)})")
        if need_vm and gpu.vm_fd is None:
            raise _fail(errno.EINVAL, f"{what}: gpu 0x{gpu_id:x} has no VM in this process (ACQUIRE_VM first)")
        return gpu

    # ---- process -----------------------------------------------------------------------------------------------

    def _get_version(self, a: k.GetVersionArgs) -> None:
        a.major_version, a.minor_version = self.version

    def _acquire_vm(self, a: k.AcquireVmArgs) -> None:
        gpu = self._gpu(a.gpu_id, "ACQUIRE_VM", need_vm=False)
        if self.render_fds.get(a.drm_fd) != gpu.gpu_id:
            raise _fail(errno.EINVAL, f"ACQUIRE_VM: drm_fd {a.drm_fd} is not an open render node of gpu "
                                      f"0x{gpu.gpu_id:x} (/dev/dri/renderD{gpu.render_minor})")
        if gpu.vm_fd is not None and gpu.vm_fd != a.drm_fd:
            raise _fail(errno.EBUSY, f"ACQUIRE_VM: gpu 0x{gpu.gpu_id:x} already has a VM from drm_fd {gpu.vm_fd}")
        gpu.vm_fd = a.drm_fd

    def _runtime_enable(self, a: k.RuntimeEnableArgs) -> None:
        if a.mode_mask & 1:  # KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK
            if self.runtime_enabled:
                raise _fail(errno.EBUSY, "RUNTIME_ENABLE: the runtime is already enabled")
            if self.queues:
                raise _fail(errno.EEXIST, "RUNTIME_ENABLE: the process already has queues")
            self.runtime_enabled = True
            a.capabilities_mask = 0
        else:  # mode_mask 0 disables the debug runtime: idempotent
            self.runtime_enabled = False

    # ---- memory ------------------------------------------------------------------------------------------------

    def _overlapping_bo(self, va: int, size: int) -> MockBo | None:
        i = bisect.bisect_left(self.bo_starts, va + size) - 1
        if i >= 0 and self.bo_list[i].va + self.bo_list[i].size > va:
            return self.bo_list[i]
        return None

    def _alloc(self, a: k.AllocMemoryArgs) -> None:
        gpu = self._gpu(a.gpu_id, "ALLOC_MEMORY_OF_GPU")
        flags = a.flags
        if flags & ~_KNOWN_FLAGS:
            raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: unknown flag bits 0x{flags & ~_KNOWN_FLAGS:x}")
        domains = [f for f in (k.AllocFlag.VRAM, k.AllocFlag.GTT, k.AllocFlag.USERPTR, k.AllocFlag.DOORBELL,
                               k.AllocFlag.MMIO_REMAP) if flags & f]
        if len(domains) != 1:
            raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: flags 0x{flags:08x} name {len(domains)} domains; exactly "
                                      f"one of VRAM, GTT, USERPTR, DOORBELL, MMIO_REMAP")
        domain = domains[0]
        if domain in (k.AllocFlag.DOORBELL, k.AllocFlag.MMIO_REMAP):
            raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: {domain.name} BOs are not modelled by the mock")
        if a.size == 0 or a.size % PAGE_SIZE or a.va_addr == 0 or a.va_addr % PAGE_SIZE:
            raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: va 0x{a.va_addr:x} size 0x{a.size:x} must be non-zero "
                                      f"multiples of 0x{PAGE_SIZE:x}")
        if (other := self._overlapping_bo(a.va_addr, a.size)) is not None:
            raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: [0x{a.va_addr:x}, 0x{a.va_addr + a.size:x}) overlaps "
                                      f"BO 0x{other.handle:x} at [0x{other.va:x}, 0x{other.va + other.size:x})")
        if domain == k.AllocFlag.VRAM:
            if flags & k.AllocFlag.PUBLIC and not gpu.profile.large_bar:
                raise _fail(errno.EINVAL, "ALLOC_MEMORY_OF_GPU: VRAM | PUBLIC needs a large BAR, which this GPU has "
                                          "not")
            if gpu.vram_used + a.size > gpu.profile.vram_size:
                raise _fail(errno.ENOMEM, f"ALLOC_MEMORY_OF_GPU: 0x{a.size:x} bytes of VRAM requested, "
                                          f"0x{gpu.profile.vram_size - gpu.vram_used:x} free")
        handle = (gpu.gpu_id << 32) | self._next_idr  # MAKE_HANDLE(gpu_id, idr_handle)
        if domain == k.AllocFlag.USERPTR:
            if a.mmap_offset == 0 or a.mmap_offset % PAGE_SIZE:
                raise _fail(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: USERPTR address 0x{a.mmap_offset:x} must be a "
                                          f"non-zero page-aligned CPU pointer (passed in mmap_offset)")
            if not host_range_mapped(a.mmap_offset, a.size):
                raise _fail(errno.EFAULT, f"ALLOC_MEMORY_OF_GPU: USERPTR [0x{a.mmap_offset:x}, "
                                          f"0x{a.mmap_offset + a.size:x}) is not readable and writable process memory")
            bo = MockBo(handle, gpu.gpu_id, a.va_addr, a.size, flags, a.mmap_offset)
        else:
            memfd = os.memfd_create(f"ember-mock-bo-{self._next_idr}", os.MFD_CLOEXEC)
            os.ftruncate(memfd, a.size)
            backing = _mmap.mmap(memfd, a.size, _mmap.MAP_SHARED, PROT_READ | PROT_WRITE)
            offset, self._next_drm_offset = self._next_drm_offset, self._next_drm_offset + a.size
            bo = MockBo(handle, gpu.gpu_id, a.va_addr, a.size, flags, offset, memfd=memfd, backing=backing)
            a.mmap_offset = offset
            if domain == k.AllocFlag.VRAM:
                gpu.vram_used += a.size
        self._next_idr += 1
        a.handle = handle
        self.bos[handle] = bo
        i = bisect.bisect_left(self.bo_starts, bo.va)
        self.bo_starts.insert(i, bo.va)
        self.bo_list.insert(i, bo)

    def _bo(self, handle: int, what: str) -> MockBo:
        if (bo := self.bos.get(handle)) is None:
            raise _fail(errno.EINVAL, f"{what}: unknown handle 0x{handle:x}")
        return bo

    def _free(self, a: k.FreeMemoryArgs) -> None:
        bo = self._bo(a.handle, "FREE_MEMORY_OF_GPU")
        if bo.mapped_gpus:
            raise _fail(errno.EBUSY, f"FREE_MEMORY_OF_GPU: BO 0x{bo.handle:x} is still mapped on gpu(s) "
                                     f"{', '.join(f'0x{g:x}' for g in sorted(bo.mapped_gpus))} (UNMAP first)")
        if bo.cpu_maps:
            raise _fail(errno.EBUSY, f"FREE_MEMORY_OF_GPU: BO 0x{bo.handle:x} still has a CPU mapping at "
                                     f"0x{bo.va:x} (munmap it first; the mock frees in the order UNMAP, munmap, FREE)")
        del self.bos[bo.handle]
        i = self.bo_list.index(bo)
        del self.bo_starts[i], self.bo_list[i]
        if bo.domain == k.AllocFlag.VRAM:
            self.gpus[bo.gpu_id].vram_used -= bo.size
        if self.event_page is bo:
            self.event_page = None
        if bo.backing is not None:
            try:
                bo.backing.close()
            except BufferError:
                pass  # a view is still exported; the mapping goes with the last reference
            bo.backing = None
        if bo.memfd is not None:
            os.close(bo.memfd)
            bo.memfd = None

    def _device_ids(self, a: k.MapMemoryArgs, what: str) -> list[int]:
        if a.n_devices == 0 or a.n_success > a.n_devices:
            raise _fail(errno.EINVAL, f"{what}: n_devices {a.n_devices}, n_success {a.n_success}: need n_devices > 0 "
                                      f"and n_success <= n_devices")
        if a.device_ids_array_ptr == 0:
            raise _fail(errno.EFAULT, f"{what}: device_ids_array_ptr is NULL")
        return list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))

    def _map(self, a: k.MapMemoryArgs) -> None:
        bo = self._bo(a.handle, "MAP_MEMORY_TO_GPU")
        ids = self._device_ids(a, "MAP_MEMORY_TO_GPU")
        for i in range(a.n_success, a.n_devices):  # a retry resumes after the devices already done
            gpu = self._gpu(ids[i], f"MAP_MEMORY_TO_GPU (device {i})")
            if gpu.gpu_id not in bo.mapped_gpus:
                gpu.map_bo(bo)
                bo.mapped_gpus.add(gpu.gpu_id)
            a.n_success = i + 1

    def _unmap(self, a: k.MapMemoryArgs) -> None:
        bo = self._bo(a.handle, "UNMAP_MEMORY_FROM_GPU")
        ids = self._device_ids(a, "UNMAP_MEMORY_FROM_GPU")
        if bo.queue_refs:
            raise _fail(errno.EBUSY, f"UNMAP_MEMORY_FROM_GPU: BO 0x{bo.handle:x} at 0x{bo.va:x} is in use by a queue "
                                     f"(DESTROY_QUEUE first)")
        for i in range(a.n_success, a.n_devices):
            gpu = self._gpu(ids[i], f"UNMAP_MEMORY_FROM_GPU (device {i})")
            if gpu.gpu_id not in bo.mapped_gpus:
                raise _fail(errno.EINVAL, f"UNMAP_MEMORY_FROM_GPU: BO 0x{bo.handle:x} is not mapped on gpu "
                                          f"0x{gpu.gpu_id:x} (the kernel skips it silently; the mock calls it a bug)")
            gpu.unmap_bo(bo)
            bo.mapped_gpus.discard(gpu.gpu_id)
            a.n_success = i + 1

    # ---- GPU memory access (for the fake GPU) ------------------------------------------------------------------

    def _segments(self, va: int, nbytes: int, gpu_id: int | None, write: bool) -> list[memoryview]:
        gpus = [self.gpus[gpu_id]] if gpu_id is not None else list(self.gpus.values())
        out, addr, end = [], va, va + nbytes
        while addr < end:
            bo = next((b for g in gpus if (b := g.lookup(addr)) is not None), None)
            if bo is None or bo.host_gone or (write and not bo.flags & k.AllocFlag.WRITABLE):
                raise GpuPageFault(addr, nbytes, write, gpu_id=gpu_id)
            take = min(end, bo.va + bo.size) - addr
            out.append(bo.host_view()[addr - bo.va:addr - bo.va + take])
            addr += take
        return out

    def read(self, va: int, nbytes: int, gpu_id: int | None = None) -> bytes:
        """`nbytes` at GPU VA `va` as `gpu_id` (default: any GPU) sees them; GpuPageFault where unmapped."""
        with self.lock:
            return b"".join(bytes(s) for s in self._segments(va, nbytes, gpu_id, False))

    def write(self, va: int, data: bytes | bytearray | memoryview, gpu_id: int | None = None) -> None:
        """Store `data` at GPU VA `va` (all of it checked first, so a fault writes nothing)."""
        with self.lock:
            segs, pos, raw = self._segments(va, len(data), gpu_id, True), 0, memoryview(data).cast("B")
            for s in segs:
                s[:] = raw[pos:pos + len(s)]
                pos += len(s)

    def view(self, va: int, nbytes: int, gpu_id: int | None = None, write: bool = False) -> memoryview:
        """A zero-copy byte view of `nbytes` at `va` inside one BO (rings, signals)."""
        with self.lock:
            segs = self._segments(va, nbytes, gpu_id, write)
        if len(segs) != 1:
            raise GpuPageFault(va, nbytes, write, gpu_id=gpu_id)
        return segs[0]

    def gpu_vm(self, gpu_id: int) -> GpuVm:
        """GPU `gpu_id`'s view of memory: the `GlobalMemory` its command processor and ISA interpreter use."""
        self._gpu(gpu_id, "gpu_vm", need_vm=False)
        return GpuVm(self, gpu_id)

    def read_u64(self, va: int, gpu_id: int | None = None) -> int:
        """The little-endian u64 at `va`."""
        return int(struct.unpack("<Q", self.read(va, 8, gpu_id))[0])

    def write_u64(self, va: int, value: int, gpu_id: int | None = None) -> None:
        """Store a little-endian u64 at `va`."""
        self.write(va, struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF), gpu_id)

    # ---- events ------------------------------------------------------------------------------------------------

    def _create_event(self, a: k.CreateEventArgs) -> None:
        if a.event_page_offset:
            if self.event_page is not None:
                raise _fail(errno.EINVAL, "CREATE_EVENT: the event page is already set")
            bo = self._bo(a.event_page_offset, "CREATE_EVENT (event_page_offset)")
            if bo.domain != k.AllocFlag.GTT:
                raise _fail(errno.EINVAL, f"CREATE_EVENT: the event page BO 0x{bo.handle:x} is {bo.domain.name}, "
                                          f"KFD maps only GTT BOs into the kernel")
            self.event_page = bo
            bo.host_view()[:] = b"\xff" * bo.size  # every slot UNSIGNALED_EVENT_SLOT
        try:
            event_type = k.EventType(a.event_type)
        except ValueError:
            raise _fail(errno.EINVAL, f"CREATE_EVENT: unknown event_type {a.event_type}") from None
        if event_type in (k.EventType.SIGNAL, k.EventType.DEBUG_EVENT):
            if self.event_page is None:
                raise _fail(errno.EINVAL, "CREATE_EVENT: SIGNAL event without an event page (pass the handle of a GTT "
                                          "BO as event_page_offset; the kernel-allocated page is not modelled)")
            limit = min(self.event_page.size // 8, k.KFD_SIGNAL_EVENT_LIMIT)
            event_id = next((i for i in range(limit) if i not in self.events), None)
            if event_id is None:
                raise _fail(errno.ENOSPC, f"CREATE_EVENT: all {limit} signal event slots are in use")
            self._slot_write(event_id, k.UNSIGNALED_EVENT_SLOT)
            a.event_slot_index = a.event_trigger_data = event_id
            a.event_page_offset = k.mmap_offset(k.KFD_MMAP_TYPE_EVENTS, 0, 0)
        else:
            event_id, self._next_nonsignal_id = self._next_nonsignal_id, self._next_nonsignal_id + 1
        a.event_id = event_id
        self.events[event_id] = MockEvent(event_id, event_type, bool(a.auto_reset), a.node_id)

    def _event(self, event_id: int, what: str) -> MockEvent:
        if (ev := self.events.get(event_id)) is None:
            raise _fail(errno.EINVAL, f"{what}: unknown event_id {event_id}")
        return ev

    def _destroy_event(self, a: k.DestroyEventArgs) -> None:
        self._event(a.event_id, "DESTROY_EVENT")
        del self.events[a.event_id]

    def _set_event(self, a: k.SetEventArgs) -> None:
        ev = self._event(a.event_id, "SET_EVENT")
        if ev.event_type != k.EventType.SIGNAL:
            raise _fail(errno.EINVAL, f"SET_EVENT: event {a.event_id} is {ev.event_type.name}; only SIGNAL events can "
                                      f"be set from the CPU")
        ev.signaled = True

    def _slot_view(self) -> memoryview:
        assert self.event_page is not None
        return self.event_page.host_view().cast("Q")

    def _slot_write(self, slot: int, value: int) -> None:
        self._slot_view()[slot] = value

    def signal_interrupt(self, gpu_id: int | None = None, context_id: int | None = None) -> None:
        """An interrupt from the GPU (RELEASE_MEM int_sel=2, SDMA TRAP): set the signal events whose mailbox slot was
        written, resetting the slot. `context_id` names the event to check first (gfx9 passes 0: scan them all)."""
        with self.lock:
            if self.event_page is None:
                return
            slots = self._slot_view()
            ids = [context_id] if context_id in self.events and context_id else list(self.events)
            for event_id in ids:
                ev = self.events[event_id]
                if ev.event_type in (k.EventType.SIGNAL, k.EventType.DEBUG_EVENT) and \
                        slots[event_id] != k.UNSIGNALED_EVENT_SLOT:
                    slots[event_id] = k.UNSIGNALED_EVENT_SLOT
                    ev.signaled = True

    def raise_memory_fault(self, gpu_id: int, va: int, write: bool = False) -> None:
        """A GPU VM fault: every MEMORY event fires with the faulting VA."""
        with self.lock:
            for ev in self.events.values():
                if ev.event_type == k.EventType.MEMORY:
                    ev.signaled, ev.memory_fault = True, (gpu_id, va, write)

    def raise_hw_exception(self, gpu_id: int, reset_cause: int = 0) -> None:
        """A GPU hang/reset: every HW_EXCEPTION event fires."""
        with self.lock:
            for ev in self.events.values():
                if ev.event_type == k.EventType.HW_EXCEPTION:
                    ev.signaled, ev.hw_exception = True, (gpu_id, reset_cause)

    def progress(self) -> bool:
        """Run the fake GPU's progress hooks until none does work; True if any did."""
        any_work = False
        while any([hook() for hook in list(self.progress_hooks)]):  # every hook each round, until all are idle
            any_work = True
        return any_work

    def _wait_events(self, a: k.WaitEventsArgs) -> None:
        if a.num_events == 0 or a.events_ptr == 0:
            raise _fail(errno.EINVAL, f"WAIT_EVENTS: num_events {a.num_events}, events_ptr 0x{a.events_ptr:x}")
        data = (k.EventData * a.num_events).from_address(a.events_ptr)
        events = [self._event(d.event_id, f"WAIT_EVENTS (entry {i})") for i, d in enumerate(data)]
        deadline = time.monotonic() + a.timeout / 1000
        while True:
            self.progress()
            fired = [ev.signaled for ev in events]
            if all(fired) if a.wait_for_all else any(fired):
                for d, ev in zip(data, events):
                    if not ev.signaled:
                        continue
                    if ev.memory_fault is not None:
                        gpu_id, va, write = ev.memory_fault
                        d.memory_exception_data.gpu_id, d.memory_exception_data.va = gpu_id, va
                        d.memory_exception_data.failure.NotPresent = int(not write)
                        d.memory_exception_data.failure.ReadOnly = int(write)
                    if ev.hw_exception is not None:
                        d.hw_exception_data.gpu_id, d.hw_exception_data.reset_cause = ev.hw_exception
                    if ev.auto_reset:
                        ev.signaled = False
                a.wait_result = k.WaitResult.COMPLETE
                return
            if time.monotonic() >= deadline:
                a.wait_result = k.WaitResult.TIMEOUT
                return
            self.lock.release()  # a GPU thread may run (and set events) while the host sleeps
            try:
                time.sleep(min(self.wait_poll_s, max(deadline - time.monotonic(), 0)))
            finally:
                self.lock.acquire()

    # ---- queues ------------------------------------------------------------------------------------------------

    def _queue_bo(self, gpu: MockGpu, va: int, expected_size: int, what: str) -> MockBo:
        """kfd_queue_buffer_get: `va` must be the first page of a mapping on this GPU that is `expected_size` long
        (0: any length)."""
        bo = gpu.lookup(va)
        if bo is None:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: {what} 0x{va:x} is not mapped on gpu 0x{gpu.gpu_id:x}")
        if va // PAGE_SIZE != bo.va // PAGE_SIZE or (expected_size and bo.size != expected_size):
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: {what} 0x{va:x} must start a mapping of exactly "
                                      f"0x{expected_size:x} bytes; it lies in [0x{bo.va:x}, 0x{bo.va + bo.size:x})")
        return bo

    def _create_queue(self, a: k.CreateQueueArgs) -> None:
        gpu = self._gpu(a.gpu_id, "CREATE_QUEUE")
        props, profile = gpu.profile.properties, gpu.profile
        try:
            queue_type = k.QueueType(a.queue_type)
        except ValueError:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: unknown queue_type {a.queue_type}") from None
        percentage, xcc_id = a.queue_percentage & 0xFF, (a.queue_percentage >> 8) & 0xFF
        if percentage > k.KFD_MAX_QUEUE_PERCENTAGE:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: queue_percentage {percentage} > {k.KFD_MAX_QUEUE_PERCENTAGE}")
        if xcc_id >= profile.xccs:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: target xcc {xcc_id} (queue_percentage bits 15:8) >= num_xcc "
                                      f"{profile.xccs}")
        if a.queue_priority > k.KFD_MAX_QUEUE_PRIORITY:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: queue_priority {a.queue_priority} > {k.KFD_MAX_QUEUE_PRIORITY}")
        if a.ring_base_address == 0 or a.ring_base_address % 256:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: ring_base_address 0x{a.ring_base_address:x} must be non-zero "
                                      f"and 256-byte aligned")
        size = a.ring_size
        if size < k.KFD_MIN_QUEUE_RING_SIZE or size & (size - 1):
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: ring_size 0x{size:x} must be a power of two >= "
                                      f"0x{k.KFD_MIN_QUEUE_RING_SIZE:x}")
        if queue_type == k.QueueType.SDMA_BY_ENG_ID:
            engines = props.get("num_sdma_engines", 0) + props.get("num_sdma_xgmi_engines", 0)
            if a.sdma_engine_id >= engines:
                raise _fail(errno.EINVAL, f"CREATE_QUEUE: sdma_engine_id {a.sdma_engine_id} >= {engines} engines")
        for name in ("write_pointer_address", "read_pointer_address"):
            if getattr(a, name) % 8:
                raise _fail(errno.EINVAL, f"CREATE_QUEUE: {name} 0x{getattr(a, name):x} is not 8-byte aligned")
        bos = [self._queue_bo(gpu, a.write_pointer_address, PAGE_SIZE, "write_pointer_address"),
               self._queue_bo(gpu, a.read_pointer_address, PAGE_SIZE, "read_pointer_address"),
               self._queue_bo(gpu, a.ring_base_address, (size + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE,
                              "ring_base_address")]
        if queue_type.is_compute:
            if a.eop_buffer_address == 0 or a.eop_buffer_size != profile.eop_buffer_size:
                raise _fail(errno.EINVAL, f"CREATE_QUEUE: compute queues need an EOP buffer of exactly "
                                          f"0x{profile.eop_buffer_size:x} bytes; got 0x{a.eop_buffer_size:x} at "
                                          f"0x{a.eop_buffer_address:x}")
            bos.append(self._queue_bo(gpu, a.eop_buffer_address, a.eop_buffer_size, "eop_buffer_address"))
            if a.ctl_stack_size != profile.ctl_stack_size:
                raise _fail(errno.EINVAL, f"CREATE_QUEUE: ctl_stack_size 0x{a.ctl_stack_size:x} != the node's "
                                          f"0x{profile.ctl_stack_size:x}")
            if a.ctx_save_restore_size < profile.cwsr_size:
                raise _fail(errno.EINVAL, f"CREATE_QUEUE: ctx_save_restore_size 0x{a.ctx_save_restore_size:x} < the "
                                          f"node's cwsr_size 0x{profile.cwsr_size:x}")
            total = (a.ctx_save_restore_size + profile.debug_memory_size) * profile.xccs  # the queue's, since 6.12
            total = (total + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
            bos.append(self._queue_bo(gpu, a.ctx_save_restore_address, total, "ctx_save_restore_address"))
        elif a.eop_buffer_address or a.eop_buffer_size or a.ctx_save_restore_address or a.ctx_save_restore_size:
            raise _fail(errno.EINVAL, f"CREATE_QUEUE: {queue_type.name} queues take no EOP buffer or CWSR area")
        if len(self.queues) >= MAX_QUEUES_PER_PROCESS:
            raise _fail(errno.ENOSPC, f"CREATE_QUEUE: {MAX_QUEUES_PER_PROCESS} queues per process")
        lo = 0 if queue_type.is_compute else SDMA_DOORBELL_BASE
        slot = next((i for i in range(lo, DOORBELL_SLOTS) if i not in gpu.doorbells), None)
        if slot is None:
            raise _fail(errno.ENOSPC, f"CREATE_QUEUE: no free doorbell on gpu 0x{gpu.gpu_id:x}")
        queue_id = next(i for i in range(MAX_QUEUES_PER_PROCESS) if i not in self.queues)
        q = MockQueue(queue_id, gpu.gpu_id, queue_type, a.ring_base_address, size, a.read_pointer_address,
                      a.write_pointer_address, slot, k.mmap_offset(k.KFD_MMAP_TYPE_DOORBELL, gpu.gpu_id, slot * 8),
                      a.queue_priority, percentage, xcc_id, a.eop_buffer_address, a.eop_buffer_size,
                      a.ctx_save_restore_address, a.ctx_save_restore_size, a.ctl_stack_size, a.sdma_engine_id, bos)
        for bo in bos:
            bo.queue_refs += 1
        self.queues[queue_id], gpu.doorbells[slot] = q, q
        a.queue_id, a.doorbell_offset = queue_id, q.doorbell_offset

    def _destroy_queue(self, a: k.DestroyQueueArgs) -> None:
        if (q := self.queues.pop(a.queue_id, None)) is None:
            raise _fail(errno.EINVAL, f"DESTROY_QUEUE: unknown queue_id {a.queue_id}")
        del self.gpus[q.gpu_id].doorbells[q.doorbell_index]
        for bo in q.bos:
            bo.queue_refs -= 1

    def doorbell_rung(self, queue: MockQueue, value: int) -> None:
        """A doorbell store: record it and tell the fake GPU (the `on_doorbell` callbacks)."""
        with self.lock:
            queue.doorbell_value = value
            for callback in list(self.on_doorbell):
                callback(queue, value)


class GpuVm:
    """One GPU's virtual address space in the fake KFD, with the interpreter's `GlobalMemory` interface: `read` and
    `write` raise `GpuPageFault` (a `MemoryFault`) where that GPU has nothing mapped."""

    def __init__(self, fake: FakeKfd, gpu_id: int):
        self.fake, self.gpu_id = fake, gpu_id

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.fake.read(addr, nbytes, self.gpu_id)

    def write(self, addr: int, data: Any) -> None:
        try:
            raw = memoryview(data).cast("B")
        except TypeError:  # a strided NumPy view
            raw = memoryview(data.tobytes())
        self.fake.write(addr, raw, self.gpu_id)


def host_range_mapped(addr: int, size: int) -> bool:
    """Whether [addr, addr+size) is readable and writable memory of this process (from /proc/self/maps)."""
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            rng, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in rng.split("-"))
            if perms[:2] == "rw" and hi > addr and lo < addr + size:
                spans.append((lo, hi))
    pos = addr
    for lo, hi in sorted(spans):
        if lo > pos:
            return False
        pos = max(pos, hi)
    return pos >= addr + size


@dataclass(frozen=True)
class TraceEntry:
    """One call through the mock platform: op (open/close/ioctl/mmap/munmap), a name, its arguments, and for an
    ioctl the struct's fields after the call (`out`; {"errno": n} when it failed)."""

    op: str
    name: str
    args: dict[str, Any]
    out: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class _Mapping:
    addr: int
    size: int
    kind: str  # "anon", "bo", "doorbell"
    bo: MockBo | None = None
    gpu_id: int | None = None


class MockDoorbell(Doorbell):
    """A doorbell in the mock's doorbell page: the store lands in memory and wakes the fake GPU."""

    def __init__(self, addr: int, fake: FakeKfd, gpu_id: int, slot: int):
        super().__init__(addr)
        self.fake, self.gpu_id, self.slot = fake, gpu_id, slot

    def ring(self, value: int) -> None:
        queue = self.fake.gpus[self.gpu_id].doorbells.get(self.slot)
        if queue is None:
            raise _fail(errno.EFAULT, f"doorbell slot {self.slot} of gpu 0x{self.gpu_id:x} rung, but no queue owns it")
        super().ring(value)
        self.fake.doorbell_rung(queue, value)


class MockPlatform:
    """`Platform` over a fake KFD: `MockPlatform([MI300X, MI300X])` is a two-GPU machine.

    `trace` records every open, close, ioctl (by name, with the struct's fields after the call), mmap and munmap.
    """

    spin_wait_ms = 0  # the fake GPU only moves inside WAIT_EVENTS (or on a doorbell): spinning is wasted time

    def __init__(self, profiles: Sequence[TopologyProfile] = (MI300X,), kfd_version: tuple[int, int] = (1, 17)):
        self.kfd = FakeKfd(profiles, kfd_version)
        self.sysfs = self._build_sysfs()
        self.trace: list[TraceEntry] = []
        self._fds: dict[int, tuple[str, int | None]] = {}  # fd -> ("kfd", None) | ("render", gpu_id)
        self._next_fd = MOCK_FD_BASE
        self._maps: dict[int, _Mapping] = {}

    # ---- sysfs -------------------------------------------------------------------------------------------------

    def _build_sysfs(self) -> dict[str, str]:
        files = {f"{TOPOLOGY_NODES}/0/gpu_id": "0\n",
                 f"{TOPOLOGY_NODES}/0/properties": "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\n"}
        for gpu in self.kfd.gpus.values():
            base = f"{TOPOLOGY_NODES}/{gpu.node}"
            props = {**gpu.profile.properties, "drm_render_minor": gpu.render_minor,
                     "location_id": 0x100 * gpu.node, "unique_id": 0x5EED_0000_0000_0000 | gpu.gpu_id}
            files[f"{base}/gpu_id"] = f"{gpu.gpu_id}\n"
            files[f"{base}/name"] = f"{gpu.profile.name}\n"
            files[f"{base}/properties"] = "".join(f"{key} {value}\n" for key, value in props.items())
            ip = f"/sys/class/drm/renderD{gpu.render_minor}/device/ip_discovery/die/0"
            for name, hwid in (("gc", GC_HWID), ("sdma", SDMA0_HWID), ("nbio", NBIF_HWID)):
                for part, value in zip(("major", "minor", "revision"), gpu.profile.ip_versions[name]):
                    files[f"{ip}/{hwid}/0/{part}"] = f"{value}\n"
        return files

    def read_text(self, path: str) -> str:
        if path not in self.sysfs:
            raise FileNotFoundError(errno.ENOENT, f"mock sysfs: no file {path}")
        return self.sysfs[path]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        entries = {p[len(prefix):].split("/")[0] for p in self.sysfs if p.startswith(prefix)}
        if not entries:
            raise FileNotFoundError(errno.ENOENT, f"mock sysfs: no directory {path}")
        return sorted(entries)

    def exists(self, path: str) -> bool:
        prefix = path.rstrip("/") + "/"
        return path in self.sysfs or any(p.startswith(prefix) for p in self.sysfs)

    # ---- fds and ioctls ----------------------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        if path == k.KFD_PATH:
            kind: tuple[str, int | None] = ("kfd", None)
        else:
            gpu = next((g for g in self.kfd.gpus.values() if path == f"/dev/dri/renderD{g.render_minor}"), None)
            if gpu is None:
                raise FileNotFoundError(errno.ENOENT, f"mock: no device node {path}")
            kind = ("render", gpu.gpu_id)
        if flags & os.O_ACCMODE != os.O_RDWR:
            raise PermissionError(errno.EACCES, f"mock: {path} must be opened O_RDWR")
        fd, self._next_fd = self._next_fd, self._next_fd + 1
        self._fds[fd] = kind
        if kind[0] == "render":
            self.kfd.render_fds[fd] = kind[1]  # type: ignore[assignment]
        self.trace.append(TraceEntry("open", path, {"fd": fd}))
        return fd

    def close(self, fd: int) -> None:
        if self._fds.pop(fd, None) is None:
            raise OSError(errno.EBADF, f"mock: close of fd {fd}, which is not open")
        self.kfd.render_fds.pop(fd, None)
        self.trace.append(TraceEntry("close", str(fd), {"fd": fd}))

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        kind = self._fds.get(fd)
        if kind is None:
            raise OSError(errno.EBADF, f"mock: ioctl on fd {fd}, which is not open")
        if kind[0] != "kfd":
            raise _fail(errno.EINVAL, f"ioctl 0x{request:08x} on a render node fd (the mock answers no DRM ioctls)")
        name = k.IOCTL_NAMES.get(request, f"0x{request:08x}")
        fields = arg.fields if isinstance(arg, k._Args) else dict
        before = fields()
        try:
            self.kfd.ioctl(request, arg)
        except OSError as e:
            self.trace.append(TraceEntry("ioctl", name, before, {"errno": e.errno}))
            raise
        self.trace.append(TraceEntry("ioctl", name, before, fields()))

    def ioctl_names(self) -> list[str]:
        """The names of the ioctls called so far, in order (the contract tests assert these)."""
        return [t.name for t in self.trace if t.op == "ioctl"]

    # ---- memory ------------------------------------------------------------------------------------------------

    def _overlaps(self, addr: int, size: int) -> list[_Mapping]:
        return [m for m in self._maps.values() if m.addr < addr + size and addr < m.addr + m.size]

    def _claim(self, addr: int, size: int) -> None:
        """A MAP_FIXED mapping replaces what it covers; the mock tracks only whole replacements."""
        for m in self._overlaps(addr, size):
            if m.addr < addr or m.addr + m.size > addr + size:
                raise _fail(errno.EINVAL, f"MAP_FIXED [0x{addr:x}, 0x{addr + size:x}) splits a tracked "
                                          f"{m.kind} mapping [0x{m.addr:x}, 0x{m.addr + m.size:x})")
            self._drop(m)

    def _drop(self, m: _Mapping) -> None:
        del self._maps[m.addr]
        if m.kind == "bo" and m.bo is not None:
            m.bo.cpu_maps -= 1
        if m.kind == "anon":
            for bo in self.kfd.bos.values():
                if bo.backing is None and bo.mmap_offset < m.addr + m.size and m.addr < bo.mmap_offset + bo.size:
                    bo.host_gone = True

    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        with self.kfd.lock:
            return self._mmap(addr, size, prot, flags, fd, offset)

    def _mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        if size <= 0 or size % PAGE_SIZE:
            raise _fail(errno.EINVAL, f"mmap size 0x{size:x} must be a positive multiple of 0x{PAGE_SIZE:x}")
        if fd == -1:
            if not flags & MAP_ANONYMOUS:
                raise _fail(errno.EBADF, "mmap with fd -1 needs MAP_ANONYMOUS")
            if flags & MAP_FIXED:
                self._claim(addr, size)
            res = libc_mmap(addr, size, prot, flags, -1, 0)
            self._maps[res] = _Mapping(res, size, "anon")
            self.trace.append(TraceEntry("mmap", "anon", {"addr": res, "size": size, "prot": prot}))
            return res
        kind = self._fds.get(fd)
        if kind is None:
            raise OSError(errno.EBADF, f"mock: mmap of fd {fd}, which is not open")
        if not flags & MAP_SHARED:
            raise _fail(errno.EINVAL, "device mmaps must be MAP_SHARED")
        if kind[0] == "render":
            return self._mmap_bo(addr, size, prot, flags, fd, kind[1], offset)  # type: ignore[arg-type]
        return self._mmap_doorbell(addr, size, prot, flags, offset)

    def _mmap_bo(self, addr: int, size: int, prot: int, flags: int, fd: int, gpu_id: int, offset: int) -> int:
        bo = next((b for b in self.kfd.bos.values() if b.backing is not None and b.mmap_offset == offset), None)
        if bo is None:
            raise _fail(errno.EINVAL, f"render-node mmap offset 0x{offset:x} names no BO")
        if bo.gpu_id != gpu_id:
            raise _fail(errno.EINVAL, f"BO 0x{bo.handle:x} belongs to gpu 0x{bo.gpu_id:x}, mapped through the render "
                                      f"node of gpu 0x{gpu_id:x}")
        if size != bo.size or addr != bo.va or not flags & MAP_FIXED:
            raise _fail(errno.EINVAL, f"BO 0x{bo.handle:x} must be mapped whole (0x{bo.size:x} bytes) MAP_FIXED at its "
                                      f"GPU VA 0x{bo.va:x} (CPU VA == GPU VA); got 0x{size:x} bytes at 0x{addr:x}")
        self._claim(addr, size)
        assert bo.memfd is not None
        res = libc_mmap(addr, size, prot, MAP_SHARED | MAP_FIXED, bo.memfd, 0)
        self._maps[res] = _Mapping(res, size, "bo", bo=bo)
        bo.cpu_maps += 1
        self.trace.append(TraceEntry("mmap", "render", {"addr": res, "size": size, "offset": offset}))
        return res

    def _mmap_doorbell(self, addr: int, size: int, prot: int, flags: int, offset: int) -> int:
        kind, gpu_id, low = k.decode_mmap_offset(offset)
        if kind != k.KFD_MMAP_TYPE_DOORBELL:
            raise _fail(errno.EINVAL, f"/dev/kfd mmap offset 0x{offset:x} has type {kind}; the mock maps only "
                                      f"doorbells (type {k.KFD_MMAP_TYPE_DOORBELL})")
        gpu = self.kfd._gpu(gpu_id, "doorbell mmap")
        if size != k.DOORBELL_SLICE_SIZE or low:
            raise _fail(errno.EINVAL, f"doorbell mmap must cover the whole 0x{k.DOORBELL_SLICE_SIZE:x}-byte slice from "
                                      f"its base; got 0x{size:x} bytes at offset 0x{low:x}")
        if flags & MAP_FIXED:
            self._claim(addr, size)
        res = libc_mmap(addr, size, prot, MAP_SHARED | MAP_ANONYMOUS | (flags & MAP_FIXED), -1, 0)
        self._maps[res] = _Mapping(res, size, "doorbell", gpu_id=gpu.gpu_id)
        self.trace.append(TraceEntry("mmap", "doorbell", {"addr": res, "size": size, "gpu_id": gpu.gpu_id}))
        return res

    def munmap(self, addr: int, size: int) -> None:
        with self.kfd.lock:
            self._munmap(addr, size)

    def _munmap(self, addr: int, size: int) -> None:
        tracked = self._overlaps(addr, size)
        for m in tracked:
            if m.addr < addr or m.addr + m.size > addr + size:
                raise _fail(errno.EINVAL, f"munmap [0x{addr:x}, 0x{addr + size:x}) splits a tracked {m.kind} mapping "
                                          f"[0x{m.addr:x}, 0x{m.addr + m.size:x})")
        libc_munmap(addr, size)
        for m in tracked:
            self._drop(m)
        self.trace.append(TraceEntry("munmap", ",".join(m.kind for m in tracked) or "untracked",
                                     {"addr": addr, "size": size}))

    def live_mappings(self) -> list[tuple[str, int, int]]:
        """(kind, address, size) of every mapping made through this platform and not yet unmapped."""
        return sorted((m.kind, m.addr, m.size) for m in self._maps.values())

    def _mapping_at(self, addr: int, size: int) -> _Mapping:
        for m in self._maps.values():
            if m.addr <= addr and addr + size <= m.addr + m.size:
                return m
        raise _fail(errno.EFAULT, f"[0x{addr:x}, 0x{addr + size:x}) is not inside one CPU mapping")

    def mmio(self, addr: int, size: int, fmt: str = "B") -> Mmio:
        if not any(m.addr <= addr and addr + size <= m.addr + m.size for m in self._maps.values()) and \
                not host_range_mapped(addr, size):  # memory the process got elsewhere (another device's buffer)
            raise _fail(errno.EFAULT, f"[0x{addr:x}, 0x{addr + size:x}) is not mapped readable and writable")
        return Mmio(addr, size, fmt)

    def doorbell(self, addr: int) -> Doorbell:
        m = self._mapping_at(addr, 8)
        if m.kind != "doorbell":
            raise _fail(errno.EFAULT, f"0x{addr:x} is not in a doorbell mapping")
        assert m.gpu_id is not None
        return MockDoorbell(addr, self.kfd, m.gpu_id, (addr - m.addr) // 8)


__all__ = ["GpuPageFault", "GpuVm", "MockBo", "MockEvent", "MockQueue", "MockGpu", "FakeKfd", "TraceEntry",
           "MockDoorbell", "MockPlatform", "host_range_mapped", "GPU_IDS", "FIRST_RENDER_MINOR"]
