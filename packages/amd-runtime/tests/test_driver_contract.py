"""The driver contract: the runtime's real control-plane code against the strict mock KFD. The open sequence is
recorded and asserted ioctl by ioctl; the mock's rules (ioctl dispatch, VM, allocation, n_success, queue creation,
events, doorbells) each fail with the errno and message the test names."""

import ctypes
import errno
import os
from dataclasses import dataclass

import pytest

from ember.amd_runtime import kfd as k
from ember.amd_runtime.kfd_queue import (
    DoorbellPages,
    create_queue,
    cwsr_sizes,
    destroy_queue,
)
from ember.amd_runtime.memory import GpuMemory
from ember.amd_runtime.mock import MI300X, MI300X_CPX, GpuPageFault, MockPlatform, MockQueue
from ember.amd_runtime.platform import MAP_ANONYMOUS, MAP_FIXED, MAP_NORESERVE, MAP_PRIVATE, MAP_SHARED, PROT_NONE
from ember.amd_runtime.signal import DeviceEvents
from ember.amd_runtime.topology import GpuNode, discover_gpus

UNCACHED, VRAM = 0xD6000002, 0xD0000001  # the flag policy's uncached GTT and device VRAM
UNCACHED_VISIBLE = 0xF6000002  # uncached GTT with cpu_access (rings, the rptr/wptr page, the event page)


@dataclass
class Device:
    platform: MockPlatform
    kfd: k.Kfd
    node: GpuNode
    memory: GpuMemory
    doorbells: DoorbellPages


def open_device(profile=MI300X_CPX, events: bool = False) -> Device:
    platform = MockPlatform([profile])
    node, kfd = discover_gpus(platform, visible=())[0], k.Kfd.open(platform)
    memory = GpuMemory(kfd, node.gpu_id, kfd.open_gpu(node.gpu_id, node.render_minor), "AMD:0")
    if events:
        DeviceEvents.create(kfd, memory, "AMD:0")
    return Device(platform, kfd, node, memory, DoorbellPages(kfd))


def test_open_sequence_and_clean_teardown():
    platform = MockPlatform([MI300X])
    node = discover_gpus(platform, visible=())[0]
    kfd = k.Kfd.open(platform)
    render_fd = kfd.open_gpu(node.gpu_id, node.render_minor)
    memory = GpuMemory(kfd, node.gpu_id, render_fd, "AMD:0")
    events = DeviceEvents.create(kfd, memory, "AMD:0")
    doorbells = DoorbellPages(kfd)
    queue = create_queue(kfd, memory, node, doorbells, k.QueueType.COMPUTE_AQL)

    calls = [(t.op, t.name) for t in platform.trace]
    buffer = [("mmap", "anon"), ("ioctl", "ALLOC_MEMORY_OF_GPU"), ("mmap", "render"), ("ioctl", "MAP_MEMORY_TO_GPU")]
    assert calls == [("open", "/dev/kfd"), ("ioctl", "GET_VERSION"), ("open", "/dev/dri/renderD128"),
                     ("ioctl", "ACQUIRE_VM"), ("ioctl", "RUNTIME_ENABLE"),
                     *buffer, ("ioctl", "CREATE_EVENT"), ("ioctl", "CREATE_EVENT"), ("ioctl", "CREATE_EVENT"),
                     *buffer, *buffer, *buffer, *buffer,  # ring, rptr/wptr page, EOP, CWSR
                     ("ioctl", "CREATE_QUEUE"), ("mmap", "doorbell")]
    ioctls = [t for t in platform.trace if t.op == "ioctl"]
    assert ioctls[0].out == {"major_version": 1, "minor_version": 17}
    assert ioctls[1].args == {"drm_fd": render_fd, "gpu_id": node.gpu_id}
    assert ioctls[2].args == {"r_debug": 0, "mode_mask": 0, "capabilities_mask": 0}
    allocs = [t.args for t in ioctls if t.name == "ALLOC_MEMORY_OF_GPU"]
    assert [(a["size"], a["flags"]) for a in allocs] == [
        (0x8000, UNCACHED_VISIBLE), (16 << 20, UNCACHED_VISIBLE), (0x1000, UNCACHED_VISIBLE), (0x1000, VRAM),
        (0xB167000, VRAM)]
    page_handle = next(t.out["handle"] for t in ioctls if t.name == "ALLOC_MEMORY_OF_GPU")
    assert [(t.args["event_type"], t.args["auto_reset"], t.args["event_page_offset"])
            for t in ioctls if t.name == "CREATE_EVENT"] == [(0, 1, page_handle), (8, 0, 0), (3, 0, 0)]
    create = next(t for t in ioctls if t.name == "CREATE_QUEUE")
    assert create.args == {
        "ring_base_address": queue.ring.va, "write_pointer_address": queue.gart.va + 56,
        "read_pointer_address": queue.gart.va + 128, "doorbell_offset": 0, "ring_size": 16 << 20,
        "gpu_id": node.gpu_id, "queue_type": 2, "queue_percentage": 100, "queue_priority": 7, "queue_id": 0,
        "eop_buffer_address": queue.eop.va, "eop_buffer_size": 0x1000,
        "ctx_save_restore_address": queue.cwsr.va, "ctx_save_restore_size": 0x1621000, "ctl_stack_size": 0x3000,
        "sdma_engine_id": 0}
    assert create.out["doorbell_offset"] == (3 << 62) | (node.gpu_id << 46) and create.out["queue_id"] == 0
    assert platform.trace[-1].args == {"addr": queue.doorbell_va, "size": 0x2000, "gpu_id": node.gpu_id}

    mark = len(platform.trace)
    destroy_queue(kfd, memory, queue)
    doorbells.close()
    events.close()
    memory.free(events.event_page)
    kfd.close()
    free = [("ioctl", "UNMAP_MEMORY_FROM_GPU"), ("munmap", "bo"), ("ioctl", "FREE_MEMORY_OF_GPU")]
    assert [(t.op, t.name) for t in platform.trace[mark:]] == [
        ("ioctl", "DESTROY_QUEUE"), *free, *free, *free, *free, ("munmap", "doorbell"),
        ("ioctl", "DESTROY_EVENT"), ("ioctl", "DESTROY_EVENT"), ("ioctl", "DESTROY_EVENT"), *free,
        ("close", str(render_fd)), ("close", str(kfd.fd))]
    fake = platform.kfd
    assert (fake.bos, fake.queues, fake.events, platform.live_mappings()) == ({}, {}, {}, [])


# ---- ioctl dispatch ------------------------------------------------------------------------------------------------

def test_unknown_ioctl_is_einval():
    d = open_device()
    set_memory_policy = 0x40204B04  # a real KFD ioctl the mock does not model
    with pytest.raises(OSError, match=r"unknown ioctl 0x40204b04 \(nr 0x04, size 32\)") as e:
        d.platform.ioctl(d.kfd.fd, set_memory_policy, k.CreateEventArgs())
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="unknown ioctl 0x80284b16"):  # ALLOC's nr with the wrong direction
        d.platform.ioctl(d.kfd.fd, k.ioc_r(0x16, k.AllocMemoryArgs), k.AllocMemoryArgs())


def test_argument_struct_must_match_the_request():
    d = open_device()
    with pytest.raises(OSError, match="ALLOC_MEMORY_OF_GPU: argument is GetVersionArgs of 8 bytes, the request "
                                      "encodes 40"):
        d.platform.ioctl(d.kfd.fd, k.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, k.GetVersionArgs())
    with pytest.raises(OSError, match="DESTROY_QUEUE: argument is FreeMemoryArgs, expected DestroyQueueArgs"):
        d.platform.ioctl(d.kfd.fd, k.AMDKFD_IOC_DESTROY_QUEUE, k.FreeMemoryArgs())


def test_fds_are_checked():
    d = open_device()
    with pytest.raises(OSError, match="on a render node fd") as e:
        d.platform.ioctl(d.memory.render_fd, k.AMDKFD_IOC_GET_VERSION, k.GetVersionArgs())
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="ioctl on fd 5, which is not open") as e:
        d.platform.ioctl(5, k.AMDKFD_IOC_GET_VERSION, k.GetVersionArgs())
    assert e.value.errno == errno.EBADF
    with pytest.raises(FileNotFoundError, match="no device node /dev/dri/renderD200"):
        d.platform.open("/dev/dri/renderD200", os.O_RDWR)
    with pytest.raises(PermissionError, match="must be opened O_RDWR"):
        d.platform.open("/dev/kfd", os.O_RDONLY)


# ---- VM and runtime ------------------------------------------------------------------------------------------------

def test_vm_rules():
    platform = MockPlatform([MI300X_CPX])
    node, kfd = discover_gpus(platform, visible=())[0], k.Kfd.open(platform)
    with pytest.raises(OSError, match=r"ALLOC_MEMORY_OF_GPU: gpu 0x[0-9a-f]+ has no VM in this process"):
        kfd.alloc_memory(0x7000_0000_0000, 0x1000, node.gpu_id, VRAM)
    with pytest.raises(OSError, match=f"ACQUIRE_VM: drm_fd {kfd.fd} is not an open render node"):
        kfd.acquire_vm(kfd.fd, node.gpu_id)
    fd1, fd2 = platform.open(node.render_path, os.O_RDWR), platform.open(node.render_path, os.O_RDWR)
    kfd.acquire_vm(fd1, node.gpu_id)
    kfd.acquire_vm(fd1, node.gpu_id)  # the same file again is fine
    with pytest.raises(OSError, match=f"already has a VM from drm_fd {fd1}") as e:
        kfd.acquire_vm(fd2, node.gpu_id)
    assert e.value.errno == errno.EBUSY
    with pytest.raises(OSError, match="ACQUIRE_VM: unknown gpu_id 0x1"):
        kfd.acquire_vm(fd1, 1)


def test_runtime_enable_with_the_enable_bit_is_once_per_process():
    d = open_device()
    args = k.RuntimeEnableArgs(mode_mask=1)
    d.platform.ioctl(d.kfd.fd, k.AMDKFD_IOC_RUNTIME_ENABLE, args)
    with pytest.raises(OSError, match="the runtime is already enabled") as e:
        d.platform.ioctl(d.kfd.fd, k.AMDKFD_IOC_RUNTIME_ENABLE, k.RuntimeEnableArgs(mode_mask=1))
    assert e.value.errno == errno.EBUSY


def test_runtime_enable_refuses_a_process_with_queues():
    d = open_device()
    create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.SDMA, ring_size=0x1000)
    with pytest.raises(OSError, match="the process already has queues") as e:
        d.platform.ioctl(d.kfd.fd, k.AMDKFD_IOC_RUNTIME_ENABLE, k.RuntimeEnableArgs(mode_mask=1))
    assert e.value.errno == errno.EEXIST


# ---- allocation ----------------------------------------------------------------------------------------------------

def _reserve(d: Device, size: int) -> int:
    return d.platform.mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)


@pytest.mark.parametrize("flags, size, userptr, code, message", [
    (VRAM | k.AllocFlag.GTT, 0x1000, 0, errno.EINVAL, "name 2 domains; exactly one of VRAM, GTT, USERPTR"),
    (0xD0000000, 0x1000, 0, errno.EINVAL, "name 0 domains"),
    (VRAM | (1 << 5), 0x1000, 0, errno.EINVAL, "unknown flag bits 0x20"),
    (VRAM, 0x1800, 0, errno.EINVAL, "size 0x1800 must be non-zero multiples of 0x1000"),
    (0xD0000000 | k.AllocFlag.DOORBELL, 0x1000, 0, errno.EINVAL, "DOORBELL BOs are not modelled"),
    (0xD0000000 | k.AllocFlag.USERPTR, 0x1000, 0, errno.EINVAL, "USERPTR address 0x0 must be a non-zero page-aligned"),
    (0xD0000000 | k.AllocFlag.USERPTR, 0x1000, 0x10008, errno.EINVAL, "USERPTR address 0x10008"),
    (0xD0000000 | k.AllocFlag.USERPTR, 0x1000, 0x1000, errno.EFAULT, "is not readable and writable process memory"),
])
def test_alloc_rules(flags, size, userptr, code, message):
    d = open_device()
    va = _reserve(d, 0x2000)
    with pytest.raises(OSError, match=message) as e:
        d.kfd.alloc_memory(va, size, d.node.gpu_id, flags, mmap_offset=userptr)
    assert e.value.errno == code


def test_alloc_refuses_overlapping_va():
    d = open_device()
    va = _reserve(d, 0x3000)
    d.kfd.alloc_memory(va, 0x2000, d.node.gpu_id, VRAM)
    with pytest.raises(OSError, match=rf"\[0x{va + 0x1000:x}, 0x{va + 0x3000:x}\) overlaps BO"):
        d.kfd.alloc_memory(va + 0x1000, 0x2000, d.node.gpu_id, VRAM)


def test_free_rules():
    d = open_device()
    buf = d.memory.alloc(0x1000, uncached=True, cpu_access=True)
    with pytest.raises(OSError, match=r"still mapped on gpu\(s\) 0x[0-9a-f]+ \(UNMAP first\)") as e:
        d.kfd.free_memory(buf.handle)
    assert e.value.errno == errno.EBUSY
    d.kfd.unmap_memory(buf.handle, [d.node.gpu_id])
    with pytest.raises(OSError, match=r"still has a CPU mapping at 0x[0-9a-f]+ \(munmap it first") as e:
        d.kfd.free_memory(buf.handle)
    assert e.value.errno == errno.EBUSY
    d.platform.munmap(buf.va, buf.size)
    d.kfd.free_memory(buf.handle)
    with pytest.raises(OSError, match=f"FREE_MEMORY_OF_GPU: unknown handle 0x{buf.handle:x}"):
        d.kfd.free_memory(buf.handle)


def test_render_mmap_must_be_whole_and_at_the_va():
    d = open_device()
    va = _reserve(d, 0x2000)
    args = d.kfd.alloc_memory(va, 0x2000, d.node.gpu_id, VRAM)
    with pytest.raises(OSError, match=f"must be mapped whole \\(0x2000 bytes\\) MAP_FIXED at its GPU VA 0x{va:x}"):
        d.platform.mmap(va, 0x1000, 3, MAP_SHARED | MAP_FIXED, d.memory.render_fd, args.mmap_offset)
    with pytest.raises(OSError, match="render-node mmap offset 0x1234000 names no BO"):
        d.platform.mmap(va, 0x2000, 3, MAP_SHARED | MAP_FIXED, d.memory.render_fd, 0x1234000)


# ---- MAP / UNMAP and n_success -------------------------------------------------------------------------------------

def _two_gpus():
    platform = MockPlatform([MI300X_CPX, MI300X_CPX])
    nodes, kfd = discover_gpus(platform, visible=()), k.Kfd.open(platform)
    mem = GpuMemory(kfd, nodes[0].gpu_id, kfd.open_gpu(nodes[0].gpu_id, nodes[0].render_minor))
    kfd.open_gpu(nodes[1].gpu_id, nodes[1].render_minor)
    return platform, kfd, [n.gpu_id for n in nodes], mem


def _map_args(handle: int, ids: list[int], n_success: int = 0):
    array = (ctypes.c_uint32 * len(ids))(*ids)
    return k.MapMemoryArgs(handle=handle, device_ids_array_ptr=ctypes.addressof(array), n_devices=len(ids),
                           n_success=n_success), array


def test_map_resumes_after_n_success():
    platform, kfd, (g0, g1), mem = _two_gpus()
    buf = mem.alloc(0x1000)
    args, _keep = _map_args(buf.handle, [0xBAD, g1], n_success=1)  # entry 0 is already done: never looked at
    platform.ioctl(kfd.fd, k.AMDKFD_IOC_MAP_MEMORY_TO_GPU, args)
    assert args.n_success == 2 and platform.kfd.bos[buf.handle].mapped_gpus == {g0, g1}


def test_map_failure_reports_partial_success():
    platform, kfd, (g0, g1), mem = _two_gpus()
    va = platform.mmap(0, 0x1000, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    handle = kfd.alloc_memory(va, 0x1000, g0, VRAM).handle
    with pytest.raises(k.KfdMapError, match=r"unknown gpu_id 0xbad .* 1 of 3 done") as e:
        kfd.map_memory(handle, [g0, 0xBAD, g1])
    assert (e.value.n_success, e.value.errno) == (1, errno.EINVAL)
    assert platform.kfd.bos[handle].mapped_gpus == {g0}
    assert kfd.map_memory(handle, [g0]) == 1  # mapping again is a no-op success


@pytest.mark.parametrize("n_devices, n_success", [(0, 0), (2, 3)])
def test_map_counts_are_checked(n_devices, n_success):
    platform, kfd, (g0, g1), mem = _two_gpus()
    buf = mem.alloc(0x1000)
    args, _keep = _map_args(buf.handle, [g0, g1][:max(n_devices, 1)], n_success)
    args.n_devices = n_devices
    with pytest.raises(OSError, match=f"n_devices {n_devices}, n_success {n_success}: need n_devices > 0"):
        platform.ioctl(kfd.fd, k.AMDKFD_IOC_MAP_MEMORY_TO_GPU, args)


def test_unmap_of_an_unmapped_gpu_is_einval():
    platform, kfd, (g0, g1), mem = _two_gpus()
    buf = mem.alloc(0x1000)
    with pytest.raises(k.KfdMapError, match=f"is not mapped on gpu 0x{g1:x}") as e:
        kfd.unmap_memory(buf.handle, [g1])
    assert e.value.n_success == 0


# ---- queues --------------------------------------------------------------------------------------------------------

@dataclass
class QueueBuffers:
    ring: object
    big_ring: object
    gart: object
    big_gart: object
    eop: object
    cwsr: object


def _valid_args(d: Device, queue_type=k.QueueType.COMPUTE_AQL) -> tuple[k.CreateQueueArgs, QueueBuffers]:
    m, sizes = d.memory, cwsr_sizes(d.node)
    b = QueueBuffers(ring=m.alloc(0x1000, uncached=True), big_ring=m.alloc(0x2000, uncached=True),
                     gart=m.alloc(0x1000, uncached=True), big_gart=m.alloc(0x2000, uncached=True),
                     eop=m.alloc(0x1000), cwsr=m.alloc(sizes.alloc_size))
    compute = queue_type.is_compute
    args = k.CreateQueueArgs(
        ring_base_address=b.ring.va, ring_size=0x1000, write_pointer_address=b.gart.va + 56,
        read_pointer_address=b.gart.va + 128, gpu_id=d.node.gpu_id, queue_type=int(queue_type),
        queue_percentage=100, queue_priority=7, eop_buffer_address=b.eop.va if compute else 0,
        eop_buffer_size=0x1000 if compute else 0, ctx_save_restore_address=b.cwsr.va if compute else 0,
        ctx_save_restore_size=sizes.ctx_save_restore_size if compute else 0,
        ctl_stack_size=sizes.ctl_stack_size if compute else 0)
    return args, b


QUEUE_ERRORS = [  # (change to valid AQL args, message); every one is EINVAL
    (lambda a, b: setattr(a, "ring_size", 0x1800), "ring_size 0x1800 must be a power of two >= 0x400"),
    (lambda a, b: setattr(a, "ring_size", 0x200), "ring_size 0x200 must be a power of two >= 0x400"),
    (lambda a, b: setattr(a, "ring_base_address", b.big_ring.va), r"ring_base_address 0x[0-9a-f]+ must start a "
                                                                   r"mapping of exactly 0x1000 bytes"),
    (lambda a, b: setattr(a, "ring_base_address", b.big_ring.va + 0x1000), "ring_base_address .* must start a mapping"),
    (lambda a, b: setattr(a, "ring_base_address", b.ring.va + 4), "must be non-zero and 256-byte aligned"),
    (lambda a, b: setattr(a, "read_pointer_address", 0x1000), "read_pointer_address 0x1000 is not mapped on gpu"),
    (lambda a, b: setattr(a, "write_pointer_address", b.big_gart.va + 56), "write_pointer_address .* exactly 0x1000"),
    (lambda a, b: setattr(a, "write_pointer_address", b.gart.va + 60), "write_pointer_address .* not 8-byte aligned"),
    (lambda a, b: (setattr(a, "eop_buffer_address", 0), setattr(a, "eop_buffer_size", 0)),
     "compute queues need an EOP buffer of exactly 0x1000 bytes"),
    (lambda a, b: setattr(a, "eop_buffer_size", 0x800), "need an EOP buffer of exactly 0x1000 bytes; got 0x800"),
    (lambda a, b: setattr(a, "ctl_stack_size", 0x2000), "ctl_stack_size 0x2000 != the node's 0x3000"),
    (lambda a, b: setattr(a, "ctx_save_restore_size", 0x1620000), "0x1620000 < the node's cwsr_size 0x1621000"),
    (lambda a, b: setattr(a, "ctx_save_restore_address", b.eop.va),
     "ctx_save_restore_address .* must start a mapping of exactly 0x162d000 bytes"),
    (lambda a, b: setattr(a, "queue_percentage", 101), "queue_percentage 101 > 100"),
    (lambda a, b: setattr(a, "queue_percentage", 100 | (1 << 8)), r"target xcc 1 \(queue_percentage bits 15:8\) >= "
                                                                   r"num_xcc 1"),
    (lambda a, b: setattr(a, "queue_priority", 16), "queue_priority 16 > 15"),
    (lambda a, b: setattr(a, "queue_type", 9), "unknown queue_type 9"),
    (lambda a, b: setattr(a, "gpu_id", 0x1), "CREATE_QUEUE: unknown gpu_id 0x1"),
    (lambda a, b: (setattr(a, "queue_type", 4), setattr(a, "sdma_engine_id", 16)), "sdma_engine_id 16 >= 16 engines"),
    (lambda a, b: setattr(a, "queue_type", 1), "SDMA queues take no EOP buffer or CWSR area"),
]


@pytest.mark.parametrize("change, message", QUEUE_ERRORS, ids=[m[:40] for _, m in QUEUE_ERRORS])
def test_create_queue_validation(change, message):
    d = open_device()
    args, bufs = _valid_args(d)
    change(args, bufs)
    with pytest.raises(OSError, match=message) as e:
        d.kfd.create_queue(args)
    assert e.value.errno == errno.EINVAL and d.platform.kfd.queues == {}


def test_create_queue_accepts_a_larger_cwsr_size_with_an_area_to_match():
    d = open_device()
    args, _ = _valid_args(d)
    args.ctx_save_restore_size += 0x1000  # kernels since 6.12 accept >= the node's size ...
    with pytest.raises(OSError, match="ctx_save_restore_address .* must start a mapping of exactly 0x162e000 bytes"):
        d.kfd.create_queue(args)  # ... and then want the area sized from the queue's own size
    args.ctx_save_restore_address = d.memory.alloc(0x162E000).va  # (0x1622000 + 0xBE00) * 1 XCC, page-rounded
    d.kfd.create_queue(args)
    assert list(d.platform.kfd.queues) == [args.queue_id]


def test_queue_buffers_are_pinned_until_destroy():
    d = open_device()
    q = create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.COMPUTE_AQL, ring_size=0x1000)
    with pytest.raises(RuntimeError, match=r"is in use by a queue \(DESTROY_QUEUE first\)"):
        d.memory.free(q.ring)
    assert q.ring.mapped_gpus == [d.node.gpu_id] and not q.ring.freed
    destroy_queue(d.kfd, d.memory, q)
    assert q.ring.freed and q.cwsr.freed
    with pytest.raises(ValueError, match="already destroyed"):
        destroy_queue(d.kfd, d.memory, q)


def test_doorbells_reach_the_fake_gpu_with_the_queue():
    d = open_device()
    rung: list[tuple[MockQueue, int]] = []
    d.platform.kfd.on_doorbell.append(lambda queue, value: rung.append((queue, value)))
    compute = create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.COMPUTE_AQL, ring_size=0x1000)
    sdma = create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.SDMA, ring_size=0x4000)
    assert [t.name for t in d.platform.trace if t.op == "mmap"].count("doorbell") == 1  # one slice per GPU
    assert (compute.unit, sdma.unit, sdma.eop, sdma.cwsr) == ("packet", "byte", None, None)
    sdma.wptr_view[0] = 0x40
    sdma.doorbell.ring(0x40)
    compute.doorbell.ring(3)
    (q1, v1), (q2, v2) = rung
    assert (q1.queue_id, q1.queue_type, v1) == (sdma.queue_id, k.QueueType.SDMA, 0x40)
    assert (q1.ring_va, q1.ring_size, q1.rptr_va, q1.wptr_va) == (sdma.ring_va, 0x4000, sdma.rptr_va, sdma.wptr_va)
    assert d.platform.kfd.read_u64(q1.wptr_va) == 0x40 and q1.doorbell_index >= 0x100
    assert (q2.queue_id, q2.queue_type, v2, q2.doorbell_index) == (compute.queue_id, k.QueueType.COMPUTE_AQL, 3, 0)
    assert d.platform.kfd.read_u64(q2.eop_va) == 0 and q2.eop_size == 0x1000
    destroy_queue(d.kfd, d.memory, sdma)
    with pytest.raises(OSError, match="doorbell slot 256 of gpu 0x[0-9a-f]+ rung, but no queue owns it"):
        sdma.doorbell.ring(0x80)


def test_pm4_queue_on_an_xcc():
    d = open_device(MI300X)
    q = create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.COMPUTE, ring_size=0x1000, xcc_id=3)
    create = next(t for t in d.platform.trace if t.name == "CREATE_QUEUE")
    assert (create.args["queue_percentage"], create.args["read_pointer_address"]) == (100 | (3 << 8),
                                                                                      q.gart.va + 128 + 24)
    fake = d.platform.kfd.queues[q.queue_id]
    assert (fake.xcc_id, fake.percentage, q.unit) == (3, 100, "dword")


def test_doorbell_mmap_must_be_the_whole_slice():
    d = open_device()
    offset = k.mmap_offset(k.KFD_MMAP_TYPE_DOORBELL, d.node.gpu_id, 0)
    with pytest.raises(OSError, match="doorbell mmap must cover the whole 0x2000-byte slice"):
        d.platform.mmap(0, 0x1000, 3, MAP_SHARED, d.kfd.fd, offset)
    with pytest.raises(OSError, match="has type 2; the mock maps only doorbells"):
        d.platform.mmap(0, 0x2000, 3, MAP_SHARED, d.kfd.fd, k.mmap_offset(k.KFD_MMAP_TYPE_EVENTS, 0, 0))


def test_create_queue_argument_errors():
    d = open_device()
    with pytest.raises(ValueError, match="ring_size 3000 must be a power of two >= 1024"):
        create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.SDMA, ring_size=3000)
    with pytest.raises(ValueError, match=r"priority 16 is outside 0\.\.15"):
        create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.SDMA, priority=16)
    with pytest.raises(ValueError, match=r"xcc_id 1 is outside 0\.\.0"):
        create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.COMPUTE, xcc_id=1)


def test_refused_queue_frees_its_buffers():
    d = open_device(MI300X_CPX.with_(ctl_stack_size=0x4000))  # a kernel that sizes the control stack differently
    before = set(d.platform.kfd.bos)
    with pytest.raises(RuntimeError, match=r"AMD:0: CREATE_QUEUE \(COMPUTE_AQL, ring 0x1000 bytes\) failed: .*"
                                           r"ctl_stack_size 0x3000 != the node's 0x4000"):
        create_queue(d.kfd, d.memory, d.node, d.doorbells, k.QueueType.COMPUTE_AQL, ring_size=0x1000)
    assert set(d.platform.kfd.bos) == before


# ---- events --------------------------------------------------------------------------------------------------------

def test_event_rules():
    d = open_device()
    with pytest.raises(OSError, match="SIGNAL event without an event page"):
        d.kfd.create_event(k.EventType.SIGNAL)
    vram = d.memory.alloc(0x8000)
    with pytest.raises(OSError, match="the event page BO 0x[0-9a-f]+ is VRAM, KFD maps only GTT BOs"):
        d.kfd.create_event(k.EventType.SIGNAL, event_page_offset=vram.handle)
    page = d.memory.alloc(0x8000, uncached=True, cpu_access=True)
    ev = d.kfd.create_event(k.EventType.SIGNAL, auto_reset=True, event_page_offset=page.handle)
    assert (ev.event_id, ev.event_slot_index, ev.event_trigger_data) == (0, 0, 0)
    with pytest.raises(OSError, match="the event page is already set"):
        d.kfd.create_event(k.EventType.SIGNAL, event_page_offset=page.handle)
    mem_event = d.kfd.create_event(k.EventType.MEMORY).event_id
    with pytest.raises(OSError, match="only SIGNAL events can be set from the CPU"):
        d.kfd.set_event(mem_event)
    with pytest.raises(OSError, match=r"WAIT_EVENTS \(entry 0\): unknown event_id 77"):
        d.kfd.wait_events((k.EventData * 1)(k.EventData(event_id=77)), 0)
    with pytest.raises(OSError, match="CREATE_EVENT: unknown event_type 99"):
        d.kfd.create_event(99)  # type: ignore[arg-type]


def test_set_event_wakes_a_wait_once_with_auto_reset():
    d = open_device()
    page = d.memory.alloc(0x8000, uncached=True, cpu_access=True)
    ev = d.kfd.create_event(k.EventType.SIGNAL, auto_reset=True, event_page_offset=page.handle).event_id
    waits = (k.EventData * 1)(k.EventData(event_id=ev))
    assert d.kfd.wait_events(waits, 0) == k.WaitResult.TIMEOUT
    d.kfd.set_event(ev)
    assert d.kfd.wait_events(waits, 0) == k.WaitResult.COMPLETE
    assert d.kfd.wait_events(waits, 0) == k.WaitResult.TIMEOUT  # auto-reset consumed it


def test_interrupt_without_a_written_mailbox_does_not_fire():
    d = open_device(events=True)
    fake = d.platform.kfd
    fake.signal_interrupt(d.node.gpu_id)  # the slot still holds UNSIGNALED
    assert not fake.events[0].signaled
    fake.write_u64(fake.event_page.va, 0)
    fake.signal_interrupt(d.node.gpu_id, context_id=0)
    assert fake.events[0].signaled and fake.read_u64(fake.event_page.va) == (1 << 64) - 1


def test_gpu_writes_fault_on_read_only_memory():
    d = open_device()
    va = _reserve(d, 0x1000)
    d.kfd.alloc_memory(va, 0x1000, d.node.gpu_id, k.AllocFlag.VRAM | k.AllocFlag.NO_SUBSTITUTE)
    handle = d.platform.kfd.bo_list[-1].handle
    d.kfd.map_memory(handle, [d.node.gpu_id])
    assert d.platform.kfd.read(va, 4) == b"\0\0\0\0"
    with pytest.raises(GpuPageFault, match=f"write of 4 bytes at 0x{va:x} is not mapped writable"):
        d.platform.kfd.write(va, b"abcd")


def test_userptr_pages_unmapped_under_the_bo_fault_on_the_gpu():
    d = open_device()
    buf = d.memory.alloc(0x1000, host=True)
    assert d.platform.kfd.read(buf.va, 4) == b"\0\0\0\0"
    d.platform.munmap(buf.va, buf.size)  # the CPU pages go away while KFD still maps them
    with pytest.raises(GpuPageFault, match=f"read of 4 bytes at 0x{buf.va:x} is not mapped") as e:
        d.platform.kfd.read(buf.va, 4)
    assert e.value.address == buf.va


def test_gpu_vm_is_the_interpreters_global_memory():
    import numpy as np

    from ember.amd_runtime.mock.isa import GlobalMemory, MemoryFault
    d = open_device()
    buf = d.memory.alloc(0x1000)
    vm = d.platform.kfd.gpu_vm(d.node.gpu_id)
    assert isinstance(vm, GlobalMemory)
    vm.write(buf.va + 8, np.arange(4, dtype=np.uint32)[::2])  # a strided view is written as its elements
    assert vm.read(buf.va + 8, 8) == bytes.fromhex("0000000002000000")
    with pytest.raises(MemoryFault, match="read of 4 bytes at 0x1000 is not mapped") as e:
        vm.read(0x1000, 4)
    assert isinstance(e.value, GpuPageFault) and (e.value.address, e.value.gpu_id) == (0x1000, d.node.gpu_id)
