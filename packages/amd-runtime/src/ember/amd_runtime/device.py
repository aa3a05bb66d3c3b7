"""The `AMD` device (`AMD`, `AMD:1`, ...): one GPU through KFD with hardware command queues, no HIP/HSA runtime.

Opening a device follows the driver contract: discover the GPUs (sysfs), open /dev/kfd once per process, open the
GPU's render node (ACQUIRE_VM), create the KFD events (the first device registers the process's event page), a
signal pool and the device timeline, then the queues: the compute queue (AQL on multi-XCC parts, as ROCr does on an
MI300X/MI350X in SPX mode; PM4 on a single XCC; `AMD_AQL` overrides) and one SDMA copy queue.

Every submission is `wait(timeline, last) ... signal(timeline, next)` on its queue, so kernels and copies of one
device run in submission order. Host copies are staged through host memory the SDMA engine reads (copyin returns once
the host bytes are staged, copyout once the bytes have arrived). A program is its code object copied into VRAM; a
launch writes its kernarg block into a host-visible arena and submits one dispatch; `wait=True` brackets it with GPU
timestamps and returns the seconds between them.

`MOCKGPU=1` runs all of it against the in-process fake driver and GPU (`ember.amd_runtime.mock`): one `MockPlatform`
of `MOCKGPU_COUNT` MI300X GPUs per process, shared by AMD:0..n, kernels executed by the gfx942 interpreter.

    dev = Device["AMD"]
    prg = dev.runtime("add", dev.compiler.compile_cached(hip_src))
    prg(out, a, b, global_size=(n // 256, 1, 1), local_size=(256, 1, 1), wait=True)
"""

from __future__ import annotations

import ctypes
import functools
import math
import operator
import struct
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.amd_runtime import aql
from ember.amd_runtime.comgr import HIPCompiler
from ember.amd_runtime.elf import CodeObject, Kernel, load_code_object
from ember.amd_runtime.kernargs import KernargLayout, kernarg_layout
from ember.amd_runtime.kfd import Kfd, QueueType
from ember.amd_runtime.kfd_queue import DoorbellPages, KfdQueue, create_queue, destroy_queue
from ember.amd_runtime.memory import GpuBuffer, GpuMemory
from ember.amd_runtime.platform import LinuxPlatform, Platform, round_up
from ember.amd_runtime.queue import IB_ARENA_SIZE, AQLQueue, HWQueue, KernelLaunch, PM4ComputeQueue, SDMAQueue
from ember.amd_runtime.signal import (
    SIGNAL_PAGE_SIZE,
    TIMELINE_WRAP,
    TIMESTAMP_DIVIDER,
    DeviceEvents,
    Signal,
    SignalPool,
    Timeline,
)
from ember.amd_runtime.topology import TOPOLOGY_NODES, GpuNode, discover_gpus
from ember.codegen import HIPRenderer
from ember.runtime import Buffer, CompiledDevice, CompileError, Compiler, LRUAllocator, Program
from ember.uops.settings import Flag


def _parse_bool(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _parse_count(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 8:
        raise ValueError("expected a number of GPUs from 1 to 8")
    return int(raw)


def _parse_aql(raw: str) -> str:
    if raw not in ("0", "1"):
        raise ValueError("expected 1 (AQL compute queues) or 0 (PM4 compute queues)")
    return raw


MOCKGPU = Flag("MOCKGPU", False, _parse_bool, "run the AMD device on the in-process fake KFD and GPU")
MOCKGPU_COUNT = Flag("MOCKGPU_COUNT", 4, _parse_count, "how many MI300X GPUs the fake KFD of MOCKGPU=1 has")
AMD_AQL = Flag("AMD_AQL", "", _parse_aql, "1: AQL compute queues, 0: PM4 (default: AQL on multi-XCC GPUs)")

STAGING_SIZE = 2 << 20  # bytes of each host staging buffer of the copy queue
STAGING_BUFFERS = 2
KERNARG_ARENA_SIZE = 16 << 20
MIN_SCRATCH_LANE_BYTES = 16


@functools.cache
def mock_platform(count: int | None = None) -> Any:
    """The process's fake driver with its fake GPUs attached (a MockPlatform of `count` MI300X GPUs, default
    MOCKGPU_COUNT): every AMD device of a MOCKGPU=1 process opens it."""
    from ember.amd_runtime.mock import MI300X, MockPlatform
    from ember.amd_runtime.mock.gpu import attach_fake_gpus

    platform = MockPlatform([MI300X] * (count or MOCKGPU_COUNT.value))
    platform.fake_gpus = attach_fake_gpus(platform.kfd)  # type: ignore[attr-defined]
    return platform


@dataclass(eq=False)
class _KfdProcess:
    """What one process shares between its AMD devices on one platform: /dev/kfd, the GPU list, the doorbell
    mappings and the event page."""

    platform: Platform
    kfd: Kfd
    nodes: list[GpuNode]
    doorbells: DoorbellPages
    event_page: GpuBuffer | None = None
    event_memory: GpuMemory | None = None  # the memory of the device that allocated the event page
    devices: list[AMDDevice] = field(default_factory=list)


_processes: dict[int, _KfdProcess] = {}
_processes_lock = threading.Lock()


def _kfd_process(platform: Platform) -> _KfdProcess:
    with _processes_lock:
        if (proc := _processes.get(id(platform))) is None:
            if not platform.exists(TOPOLOGY_NODES):
                raise FileNotFoundError(f"AMD: no KFD on this machine ({TOPOLOGY_NODES} is missing: the amdgpu driver "
                                        "is not loaded); MOCKGPU=1 runs the AMD device on the fake driver and GPU")
            nodes = discover_gpus(platform)
            kfd = Kfd.open(platform)
            proc = _processes[id(platform)] = _KfdProcess(platform, kfd, nodes, DoorbellPages(kfd))
        return proc


class MissingCompiler(Compiler):
    """Stands in for HIPCompiler where neither comgr nor a new enough clang targets the GPU (e.g. gfx950 with only
    clang-19): the device still allocates, copies and runs code objects built elsewhere; compiling says why not."""

    def __init__(self, arch: str, why: str):
        super().__init__(None)
        self.arch, self.why = arch, why

    def compile(self, src: str) -> bytes:
        raise CompileError(f"AMD: cannot compile for {self.arch}: {self.why}")


def hip_compiler(arch: str) -> Compiler:
    """HIPCompiler(arch), or a MissingCompiler saying what is missing."""
    try:
        return HIPCompiler(arch)
    except (FileNotFoundError, ValueError) as e:
        return MissingCompiler(arch, str(e))


def device_index(name: str) -> int:
    """The GPU number of a device name: 'AMD' -> 0, 'AMD:1' -> 1."""
    base, sep, index = name.partition(":")
    if base.upper() != "AMD" or (sep and not index.isdigit()):
        raise ValueError(f"AMDDevice: a name is 'AMD' or 'AMD:<n>', got {name!r}")
    return int(index) if sep else 0


class AMDMemory:
    """`nbytes` of GPU memory at `va`; `owner` is the allocation (a view keeps it referenced)."""

    __slots__ = ("va", "nbytes", "owner")

    def __init__(self, va: int, nbytes: int, owner: GpuBuffer):
        self.va, self.nbytes, self.owner = va, nbytes, owner

    def __repr__(self) -> str:
        return f"<AMDMemory {self.nbytes} B at {self.va:#x}>"


def _host_address(mv: memoryview) -> int:
    return int(np.frombuffer(mv, np.uint8).ctypes.data) if mv.nbytes else 0


class AMDAllocator(LRUAllocator):
    """VRAM allocations (kept by the LRU cache when freed); host copies through the copy queue and host staging
    buffers, each reused once the copy that last read or wrote it has finished."""

    def __init__(self, device: AMDDevice):
        super().__init__()
        self.device = device
        self._staging: list[tuple[GpuBuffer, int]] = []  # (buffer, timeline value of its last copy)

    def _alloc(self, nbytes: int, options: Hashable | None) -> AMDMemory:
        if options is not None:
            raise ValueError(f"{self.device.name}: allocation options {options!r} are not supported")
        buf = self.device.memory.alloc(max(nbytes, 1))
        return AMDMemory(buf.va, nbytes, buf)

    def _free(self, buf: AMDMemory, nbytes: int, options: Hashable | None) -> None:
        self.device.synchronize()  # a queued kernel or copy may still use it
        self.device.memory.free(buf.owner)

    def offset(self, buf: AMDMemory, nbytes: int, offset: int) -> AMDMemory:
        """A view of `nbytes` at byte `offset` into `buf`."""
        return AMDMemory(buf.va + offset, nbytes, buf.owner)

    def _slot(self, i: int) -> GpuBuffer:
        dev = self.device
        if not self._staging:
            self._staging = [(dev.memory.alloc(STAGING_SIZE, host=True), 0) for _ in range(STAGING_BUFFERS)]
        buf, last = self._staging[i % len(self._staging)]
        dev.wait(last)
        return buf

    def copyin(self, dest: AMDMemory, src: memoryview) -> None:
        """Copy host bytes into `dest`: chunks staged in host memory, copied by the SDMA queue after the work
        queued so far; returns once `src` may be reused."""
        assert src.nbytes == dest.nbytes, f"AMD copyin: {src.nbytes} bytes into a buffer of {dest.nbytes}"
        host, dev = _host_address(src), self.device
        for i, start in enumerate(range(0, src.nbytes, STAGING_SIZE)):
            n = min(STAGING_SIZE, src.nbytes - start)
            staging = self._slot(i)
            ctypes.memmove(staging.va, host + start, n)
            value = dev.submit(dev.sdma, lambda q, s=staging.va, d=dest.va + start, n=n: q.copy(d, s, n))
            self._staging[i % len(self._staging)] = (staging, value)

    def copyout(self, dest: memoryview, src: AMDMemory) -> None:
        """Copy `src` into host bytes after the work queued before it; returns when `dest` holds them."""
        assert dest.nbytes == src.nbytes, f"AMD copyout: a buffer of {src.nbytes} bytes into {dest.nbytes}"
        host, dev = _host_address(dest), self.device
        for i, start in enumerate(range(0, src.nbytes, STAGING_SIZE)):
            n = min(STAGING_SIZE, src.nbytes - start)
            staging = self._slot(i)
            value = dev.submit(dev.sdma, lambda q, s=staging.va, d=src.va + start, n=n: q.copy(s, d, n))
            self._staging[i % len(self._staging)] = (staging, value)
            dev.wait(value)
            ctypes.memmove(host + start, staging.va, n)

    def free_cache(self) -> None:
        """Release the cached buffers, once the queued work that may use them has finished."""
        self.device.synchronize()
        super().free_cache()


class KernargArena:
    """A host-visible buffer the kernarg blocks of launches are bump-allocated from; wrapping around waits for the
    device to finish (the blocks at the start may still be read)."""

    def __init__(self, device: AMDDevice, size: int = KERNARG_ARENA_SIZE):
        self.device, self.buffer = device, device.memory.alloc(size, cpu_access=True)
        self.put = 0

    def alloc(self, size: int, align: int) -> int:
        """The address of `size` fresh bytes at `align`."""
        off = round_up(self.put, align)
        if off + size > self.buffer.size:
            if size > self.buffer.size:
                raise ValueError(f"{self.device.name}: a kernarg block of {size} bytes exceeds the arena")
            self.device.synchronize()
            off = 0
        self.put = off + size
        return self.buffer.va + off

    def write(self, va: int, data: bytes) -> None:
        """Store `data` at `va` inside the arena."""
        assert self.buffer.view is not None
        self.buffer.view.write(va - self.buffer.va, data)


def _dims(what: str, size: tuple[int, ...], kernel: str) -> tuple[int, int, int]:
    try:
        dims = tuple(operator.index(s) for s in size)
    except TypeError:
        dims = ()
    if not 1 <= len(size) <= 3 or len(dims) != len(size) or any(d < 0 for d in dims):
        raise ValueError(f"{kernel}: {what} must be 1 to 3 ints >= 0, got {size!r}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


class AMDProgram(Program):
    """A kernel of a code object loaded into VRAM. A launch packs its kernargs (buffer addresses, then the int
    variables as int32) and submits one dispatch on the device's compute queue."""

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        assert isinstance(device, AMDDevice), f"AMDProgram needs an AMDDevice, got {device!r}"
        self.amd = device
        self.code: CodeObject = load_code_object(lib, device.arch)
        self.kernel: Kernel = self.code.kernel(name)
        self.kernel.descriptor.validate(name)
        self.image = device.memory.alloc(max(len(self.code.image), 1))
        image = self.code.relocated(self.image.va)
        staging = np.frombuffer(bytearray(image), np.uint8)
        device.allocator.copyin(AMDMemory(self.image.va, len(image), self.image), staging.data)
        self.descriptor_va = self.image.va + self.kernel.descriptor_offset
        self.entry_va = self.image.va + self.kernel.entry_offset
        self._layouts: dict[int, KernargLayout] = {}
        self._timing: tuple[Signal, Signal] | None = None

    def layout(self, n_buffers: int, n_vals: int) -> KernargLayout:
        """The kernarg layout for `n_buffers` pointers and `n_vals` int32 variables (checked against the code
        object's metadata)."""
        if (lay := self._layouts.get(n_buffers << 16 | n_vals)) is None:
            lay = self._layouts[n_buffers << 16 | n_vals] = kernarg_layout(
                n_buffers, "i" * n_vals, self.kernel.descriptor, self.code.code_object_version, self.kernel.metadata)
        return lay

    def launch_spec(self, bufs: list[Any], global_size: tuple[int, int, int], local_size: tuple[int, int, int],
                    vals: tuple[int, ...]) -> KernelLaunch:
        """Write the kernarg block of one launch; the KernelLaunch a compute queue dispatches."""
        for i, b in enumerate(bufs):
            if not isinstance(b, AMDMemory) or b.owner.gpu_id != self.amd.node.gpu_id:
                raise ValueError(f"{self.name}: buffer argument {i} ({b!r}) is not memory of {self.amd.name}")
        layout, d = self.layout(len(bufs), len(vals)), self.kernel.descriptor
        va = self.amd.kernargs.alloc(layout.alloc_size, layout.align)
        private = d.private_segment_fixed_size
        blob = layout.pack([b.va for b in bufs], vals, global_size, local_size, kernarg_address=va,
                           kernel_object=self.descriptor_va, group_segment_size=d.group_segment_fixed_size,
                           private_segment_size=private)
        self.amd.kernargs.write(va, blob)
        scratch_va, tmpring = self.amd.ensure_scratch(private) if private else (0, 0)
        return KernelLaunch(d, self.descriptor_va, self.entry_va, va, global_size, local_size,
                            d.group_segment_fixed_size, private, layout.dispatch_packet_address(va), scratch_va,
                            tmpring)

    def launch(self, bufs: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...], wait: bool) -> float | None:
        """Submit the kernel; with `wait`, wait for it and return its GPU time in seconds."""
        grid = _dims("global_size", global_size, self.name)
        block = _dims("local_size", local_size or (1,), self.name)
        if math.prod(block) > 1024:
            raise ValueError(f"{self.name}: local_size {block} is more than 1024 work-items")
        for v in vals:
            if not -2**31 <= v < 2**31:
                raise ValueError(f"{self.name}: value {v} does not fit the kernel's int32 parameter")
        if 0 in grid or 0 in block:
            return 0.0 if wait else None
        spec = self.launch_spec(bufs, grid, block, vals)
        dev = self.amd
        if not wait:  # the barrier makes the kernargs the CPU just wrote (through the BAR) visible to the GPU
            dev.submit(dev.compute, lambda q: q.memory_barrier().exec(spec))
            return None
        if self._timing is None:
            self._timing = (dev.signals.new(), dev.signals.new())
        start, end = self._timing
        value = dev.submit(dev.compute, lambda q: q.memory_barrier().timestamp(start).exec(spec).timestamp(end))
        dev.wait(value)
        return (end.timestamp_ticks - start.timestamp_ticks) / TIMESTAMP_DIVIDER / 1e6

    def __del__(self) -> None:
        try:
            if self.amd.closed:  # its memory went with the device
                return
            self.amd.synchronize()
            self.amd.memory.free(self.image)
            if self._timing is not None:
                for sig in self._timing:
                    sig.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown, or the device already closed
            pass


class AMDDevice(CompiledDevice):
    """`Device["AMD"]`, `Device["AMD:1"]`: one AMD GPU through KFD. `node` is the GPU's topology node (`node.arch`,
    `node.xccs`); `compute` and `sdma` are its queues; `timeline` orders everything submitted to them.

        dev = Device["AMD"]
        prg = dev.runtime("add", dev.compiler.compile_cached(src))
        prg(out, a, b, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)"""

    def __init__(self, name: str = "AMD", platform: Platform | None = None):
        index = device_index(name)
        self.platform = platform if platform is not None else mock_platform() if MOCKGPU.value else LinuxPlatform()
        proc = self.proc = _kfd_process(self.platform)
        if index >= len(proc.nodes):
            raise ValueError(f"AMDDevice: {name} does not exist; this machine has {len(proc.nodes)} AMD GPU(s)")
        self.node = node = proc.nodes[index]
        node.check_supported()
        self.arch = node.arch
        kfd = proc.kfd
        self._owned: list[GpuBuffer] = []
        self.memory = GpuMemory(kfd, node.gpu_id, kfd.open_gpu(node.gpu_id, node.render_minor), name)
        self.events = DeviceEvents.create(kfd, self.memory, name, proc.event_page)
        if proc.event_page is None:
            proc.event_page, proc.event_memory = self.events.event_page, self.memory
        self.signals = SignalPool(lambda: self._keep(self.memory.alloc(SIGNAL_PAGE_SIZE, uncached=True,
                                                                       cpu_access=True)))
        self.timeline = Timeline(self.signals.new(), self.signals.new())
        use_aql = AMD_AQL.value == "1" if AMD_AQL.value else node.xccs > 1
        self._kfd_queues: list[KfdQueue] = []
        self.compute: PM4ComputeQueue | AQLQueue
        if use_aql:
            arena = self._keep(self.memory.alloc(IB_ARENA_SIZE, uncached=True, cpu_access=True))
            self.compute = AQLQueue(self._queue(QueueType.COMPUTE_AQL), self.events, arena, f"{name} compute",
                                    max_cu_id=node.total_cu_count - 1, max_wave_id=node.waves_per_cu - 1)
        else:
            self.compute = PM4ComputeQueue(self._queue(QueueType.COMPUTE), self.events, f"{name} compute", node.xccs)
        self.sdma = SDMAQueue(self._queue(QueueType.SDMA), self.events, f"{name} copy")
        self._last_queue: HWQueue = self.compute
        self._ticket_base = 0  # the tickets of submissions before the last timeline wrap are <= this
        self._scratch: tuple[GpuBuffer, int, int] | None = None  # (buffer, lane bytes, tmpring)
        self.closed = False
        super().__init__(name, AMDAllocator(self), HIPRenderer(node.arch), hip_compiler(node.arch), AMDProgram)
        self.kernargs = KernargArena(self)
        self._owned.append(self.kernargs.buffer)
        proc.devices.append(self)

    def _keep(self, buf: GpuBuffer) -> GpuBuffer:
        self._owned.append(buf)
        return buf

    def _queue(self, queue_type: QueueType) -> KfdQueue:
        kq = create_queue(self.proc.kfd, self.memory, self.node, self.proc.doorbells, queue_type)
        self._kfd_queues.append(kq)
        return kq

    # ---- submission --------------------------------------------------------------------------------------------

    def reserve(self) -> int:
        """The timeline value of the next submission (the timeline is wrapped first when it is due)."""
        if self.closed:
            raise RuntimeError(f"{self.name}: the device is closed")
        if self.timeline.value >= TIMELINE_WRAP:
            self.synchronize()
        return self.timeline.next()

    def ticket(self, value: int) -> int:
        """The host-side ticket of timeline `value`: tickets keep growing across timeline wraps (`wait` takes
        them), while the GPU's 32-bit timeline restarts at 1."""
        return self._ticket_base + value

    def submit(self, queue: HWQueue, record: Callable[[Any], Any]) -> int:
        """One submission on `queue`: wait for everything before it, the commands `record(queue)` adds, then signal
        the timeline. Returns its ticket (for `wait`)."""
        value = self.reserve()
        queue.wait(self.timeline.signal, value - 1)  # type: ignore[attr-defined]
        record(queue)
        queue.signal(self.timeline.signal, value)  # type: ignore[attr-defined]
        queue.submit()
        self._last_queue = queue
        return self.ticket(value)

    def wait(self, ticket: int) -> None:
        """Wait until the submission with `ticket` (what `submit` returned) has finished."""
        if self.closed:
            raise RuntimeError(f"{self.name}: the device is closed")
        value = ticket - self._ticket_base
        if value > 0 and self.timeline.signal.value < value:
            self.timeline.signal.wait(value, waiter=self.events, queue=self._last_queue.name)

    def synchronize(self) -> None:
        """Wait until every kernel and copy submitted so far has finished (raises "hang detected" on timeout)."""
        if self.closed:
            raise RuntimeError(f"{self.name}: the device is closed")
        signal, last = self.timeline.signal, self.timeline.last
        self.timeline.synchronize(self.events, queue=self._last_queue.name)
        if self.timeline.signal is not signal:  # wrapped: every ticket so far is done
            self._ticket_base += last

    def graph(self, launches: Sequence[Any], inputs: Sequence[Buffer], profile: bool = False) -> Any:
        """A batched replay (graph.AMDGraph) of recorded `launches` — (program, Buffers, global_size, local_size,
        vals), program None for a copy — whose `inputs` Buffers are replaced at each `exec_buffers(new_inputs)`."""
        from ember.amd_runtime.graph import AMDGraph

        return AMDGraph.from_launches(self, launches, inputs, profile)

    # ---- scratch -----------------------------------------------------------------------------------------------

    def ensure_scratch(self, private_segment_size: int) -> tuple[int, int]:
        """Scratch backing memory for kernels with `private_segment_size` bytes per work-item: (address,
        COMPUTE_TMPRING_SIZE). Grows (after a synchronize) when a kernel needs more; an AQL queue's amd_queue_t
        carries the same numbers (spec §2.7)."""
        lane = round_up(max(private_segment_size, MIN_SCRATCH_LANE_BYTES), 16)
        if self._scratch is not None and self._scratch[1] >= lane:
            return self._scratch[0].va, self._scratch[2]
        node = self.node
        wave_kib = -(-64 * lane // 1024)
        slots = node.properties.get("max_slots_scratch_cu", 32)
        waves = min(slots * node.cu_count, 0xFFF)
        per_xcc = waves * wave_kib * 1024
        self.synchronize()
        if self._scratch is not None:
            self._owned.remove(self._scratch[0])
            self.memory.free(self._scratch[0])
        buf = self._keep(self.memory.alloc(per_xcc * node.xccs))
        tmpring = waves | (wave_kib << 12)
        self._scratch = (buf, lane, tmpring)
        if isinstance(self.compute, AQLQueue):
            view, q = self.compute.kq.gart.view, aql.AMD_QUEUE
            assert view is not None
            view.write(q.compute_tmpring_size, struct.pack("<I", tmpring))
            view.write(q.scratch_resource_descriptor, struct.pack(
                "<4I", buf.va & 0xFFFFFFFF, (buf.va >> 32) | (1 << 31), 0xFFFFFFFF, 0x20C14000))
            view.write(q.scratch_backing_memory_location, struct.pack("<QQ", buf.va, per_xcc * node.xccs))
            view.write(q.scratch_wave64_lane_byte_size, struct.pack("<I", lane))
        return buf.va, tmpring

    # ---- teardown ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the queued work, destroy the queues and free the device's memory (its Buffers become unusable)."""
        if self.closed:
            return
        self.synchronize()
        assert isinstance(self.allocator, AMDAllocator)
        self.allocator.free_cache()
        for buf, _ in self.allocator._staging:
            self.memory.free(buf)
        self.allocator._staging = []
        self.closed = True
        for kq in reversed(self._kfd_queues):
            destroy_queue(self.proc.kfd, self.memory, kq)
        for buf in reversed(self._owned):  # signal pages, IB arena, kernargs, scratch
            if not buf.freed:
                self.memory.free(buf)
        proc = self.proc
        proc.devices.remove(self)
        last = not proc.devices
        if last:  # the process's last device: the shared doorbell mappings, the event page, /dev/kfd
            proc.doorbells.close()
        self.events.close()
        if last:
            if proc.event_page is not None and proc.event_memory is not None:
                proc.event_memory.free(proc.event_page)
            proc.kfd.close()  # closes the render nodes too
            with _processes_lock:
                _processes.pop(id(self.platform), None)


__all__ = ["AMDDevice", "AMDAllocator", "AMDMemory", "AMDProgram", "KernargArena", "MissingCompiler", "hip_compiler",
           "MOCKGPU", "MOCKGPU_COUNT", "AMD_AQL", "device_index", "mock_platform"]
