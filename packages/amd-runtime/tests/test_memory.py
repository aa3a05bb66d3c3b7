"""GPU memory against the mock KFD: the flag policy, CPU VA == GPU VA, the ioctl/mmap sequence of alloc and free,
USERPTR memory, peer mappings and the error mapping."""

import ctypes
import mmap
from dataclasses import dataclass

import pytest

from ember.amd_runtime.kfd import Kfd
from ember.amd_runtime.memory import BASE_FLAGS, GpuMemory, alloc_flags
from ember.amd_runtime.mock import MI300X, GpuPageFault, MockPlatform
from ember.amd_runtime.platform import MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE, LinuxPlatform
from ember.amd_runtime.topology import GpuNode, discover_gpus


@dataclass
class Opened:
    platform: MockPlatform
    kfd: Kfd
    nodes: list[GpuNode]
    memories: list[GpuMemory]


def open_gpus(*profiles, acquire: int | None = None) -> Opened:
    platform = MockPlatform(list(profiles or (MI300X,)))
    nodes, kfd = discover_gpus(platform, visible=()), Kfd.open(platform)
    mems = [GpuMemory(kfd, n.gpu_id, kfd.open_gpu(n.gpu_id, n.render_minor), f"AMD:{i}")
            for i, n in enumerate(nodes[:acquire])]
    return Opened(platform, kfd, nodes, mems)


def calls_since(platform: MockPlatform, mark: int) -> list[tuple[str, str]]:
    return [(t.op, t.name) for t in platform.trace[mark:]]


@pytest.mark.parametrize("request_kwargs, flags", [
    ({}, 0xD0000001),  # VRAM
    ({"cpu_access": True}, 0xF0000001),  # VRAM | PUBLIC
    ({"uncached": True}, 0xD6000002),  # GTT | COHERENT | UNCACHED
    ({"uncached": True, "cpu_access": True}, 0xF6000002),
    ({"host": True}, 0xF0000004),  # USERPTR | PUBLIC
    ({"host": True, "uncached": True}, 0xF6000002),  # uncached wins
    ({"cpu_addr": 0x7000_0000_0000}, 0xF6000004),  # USERPTR | COHERENT | UNCACHED | PUBLIC
])
def test_flag_policy(request_kwargs, flags):
    assert int(BASE_FLAGS) == 0xD0000000  # WRITABLE | EXECUTABLE | NO_SUBSTITUTE
    assert int(alloc_flags(**request_kwargs)) == flags


def test_flag_policy_rejects_uncached_cpu_memory():
    with pytest.raises(ValueError, match="cpu_addr .* cannot also be uncached"):
        alloc_flags(cpu_addr=0x1000, uncached=True)


def test_vram_alloc_sequence_and_one_address():
    o = open_gpus()
    mem, mark = o.memories[0], len(o.platform.trace)
    buf = mem.alloc(100)
    assert (buf.size, buf.kind, buf.view, buf.mapped_gpus) == (0x1000, "vram", None, [mem.gpu_id])
    assert calls_since(o.platform, mark) == [("mmap", "anon"), ("ioctl", "ALLOC_MEMORY_OF_GPU"), ("mmap", "render"),
                                             ("ioctl", "MAP_MEMORY_TO_GPU")]
    reserve, alloc, render, map_ = o.platform.trace[mark:]
    assert reserve.args == {"addr": buf.va, "size": 0x1000, "prot": 0}
    assert alloc.args == {"va_addr": buf.va, "size": 0x1000, "handle": 0, "mmap_offset": 0, "gpu_id": mem.gpu_id,
                          "flags": 0xD0000001}
    assert (alloc.out["handle"], alloc.out["mmap_offset"]) == (buf.handle, render.args["offset"])
    assert render.args["addr"] == buf.va
    assert (map_.args["handle"], map_.args["n_devices"], map_.out["n_success"]) == (buf.handle, 1, 1)
    o.platform.kfd.write(buf.va + 16, b"hello", gpu_id=mem.gpu_id)  # the GPU writes at the VA ...
    assert o.platform.mmio(buf.va + 16, 5).read() == b"hello"  # ... the CPU reads the same address


def test_uncached_buffer_cpu_view_is_gpu_memory():
    o = open_gpus()
    buf = o.memories[0].alloc(0x3000, uncached=True, cpu_access=True)
    assert buf.kind == "gtt" and buf.view is not None and buf.view.nbytes == 0x3000
    buf.view.write(0x1000, b"abc")
    assert o.platform.kfd.read(buf.va + 0x1000, 3) == b"abc"
    o.platform.kfd.write_u64(buf.va + 8, 0x1122334455667788)
    assert buf.view.view(8, 8, "Q")[0] == 0x1122334455667788


def test_free_order_and_fault_after_free():
    o = open_gpus()
    mem = o.memories[0]
    buf = mem.alloc(0x2000, cpu_access=True)
    mark = len(o.platform.trace)
    mem.free(buf)
    assert calls_since(o.platform, mark) == [("ioctl", "UNMAP_MEMORY_FROM_GPU"), ("munmap", "bo"),
                                             ("ioctl", "FREE_MEMORY_OF_GPU")]
    assert buf.freed and buf.view is None and buf.mapped_gpus == []
    with pytest.raises(GpuPageFault, match=f"read of 4 bytes at 0x{buf.va:x} is not mapped") as e:
        o.platform.kfd.read(buf.va, 4)
    assert e.value.address == buf.va
    with pytest.raises(ValueError, match="double free"):
        mem.free(buf)


def test_userptr_host_memory():
    o = open_gpus()
    mem, mark = o.memories[0], len(o.platform.trace)
    buf = mem.alloc(5000, host=True)
    assert (buf.size, buf.kind, int(buf.flags)) == (0x2000, "userptr", 0xF0000004)
    assert calls_since(o.platform, mark) == [("mmap", "anon"), ("ioctl", "ALLOC_MEMORY_OF_GPU"),
                                             ("ioctl", "MAP_MEMORY_TO_GPU")]
    assert o.platform.trace[mark].args["prot"] == PROT_READ | PROT_WRITE
    assert o.platform.trace[mark + 1].args["mmap_offset"] == buf.va  # the CPU pointer travels in mmap_offset
    buf.view.write(0x1FFC, b"\x01\x02\x03\x04")
    assert o.platform.kfd.read(buf.va + 0x1FFC, 4, gpu_id=mem.gpu_id) == b"\x01\x02\x03\x04"
    mark = len(o.platform.trace)
    mem.free(buf)
    assert calls_since(o.platform, mark) == [("ioctl", "UNMAP_MEMORY_FROM_GPU"), ("munmap", "anon"),
                                             ("ioctl", "FREE_MEMORY_OF_GPU")]


def test_mapping_existing_cpu_memory_leaves_it_to_its_owner():
    o = open_gpus()
    mem = o.memories[0]
    host = mmap.mmap(-1, 0x2000)  # memory the CPU side owns (another device's buffer)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
    host[0x1000:0x1004] = b"data"
    buf = mem.alloc(0x2000, cpu_addr=addr)
    assert buf.va == addr and int(buf.flags) == 0xF6000004 and not buf.owns_cpu_pages
    assert o.platform.kfd.read(addr + 0x1000, 4) == b"data"
    mark = len(o.platform.trace)
    mem.free(buf)
    assert calls_since(o.platform, mark) == [("ioctl", "UNMAP_MEMORY_FROM_GPU"), ("ioctl", "FREE_MEMORY_OF_GPU")]
    assert host[0x1000:0x1004] == b"data"  # still mapped and intact
    with pytest.raises(ValueError, match="must be page-aligned"):
        mem.alloc(0x1000, cpu_addr=addr + 8)


def test_mapping_unmapped_cpu_memory_fails():
    o = open_gpus()
    linux = LinuxPlatform()
    addr = linux.mmap(0, 0x1000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    linux.munmap(addr, 0x1000)
    with pytest.raises(RuntimeError, match=r"ALLOC_MEMORY_OF_GPU of 4096 bytes .* is not readable and writable "
                                           r"process memory \(EFAULT\)"):
        o.memories[0].alloc(0x1000, cpu_addr=addr)


def test_peer_mapping_and_free_unmaps_everywhere():
    o = open_gpus(MI300X, MI300X)
    mem0, gpu1 = o.memories[0], o.nodes[1].gpu_id
    buf = mem0.alloc(0x1000, uncached=True, cpu_access=True)
    with pytest.raises(GpuPageFault, match=f"on gpu 0x{gpu1:x}") as e:
        o.platform.kfd.read(buf.va, 8, gpu_id=gpu1)
    assert e.value.gpu_id == gpu1
    mem0.map_to(buf, [gpu1])
    buf.view.write(0, b"peer")
    assert o.platform.kfd.read(buf.va, 4, gpu_id=gpu1) == b"peer"
    mark = len(o.platform.trace)
    mem0.map_to(buf, [gpu1])  # already mapped: no ioctl
    assert len(o.platform.trace) == mark
    with pytest.raises(ValueError, match="cannot remove .* from its owner"):
        mem0.unmap_from(buf, [mem0.gpu_id])
    mem0.free(buf)
    unmap = o.platform.trace[mark]
    assert unmap.name == "UNMAP_MEMORY_FROM_GPU" and (unmap.args["n_devices"], unmap.out["n_success"]) == (2, 2)


def test_peer_without_a_vm_is_refused():
    o = open_gpus(MI300X, MI300X, acquire=1)
    buf = o.memories[0].alloc(0x1000)
    with pytest.raises(RuntimeError, match=r"has no VM in this process \(ACQUIRE_VM first\)"):
        o.memories[0].map_to(buf, [o.nodes[1].gpu_id])
    assert buf.mapped_gpus == [o.memories[0].gpu_id]


def test_host_visible_vram_without_large_bar_is_a_memory_error():
    o = open_gpus(MI300X.with_(large_bar=False))
    mark = len(o.platform.trace)
    with pytest.raises(MemoryError, match="host-visible VRAM: .* enable Resizable BAR"):
        o.memories[0].alloc(0x1000, cpu_access=True)
    assert calls_since(o.platform, mark) == [("mmap", "anon"), ("ioctl", "ALLOC_MEMORY_OF_GPU"), ("munmap", "anon")]
    assert o.platform.trace[mark + 1].out == {"errno": 22}
    assert o.memories[0].alloc(0x1000).kind == "vram"  # device-only VRAM still works


def test_out_of_vram_is_a_memory_error():
    o = open_gpus(MI300X.with_(vram_size=1 << 20))
    mem = o.memories[0]
    with pytest.raises(MemoryError, match="cannot allocate 2097152 bytes of VRAM: out of memory"):
        mem.alloc(2 << 20)
    buf = mem.alloc(1 << 20)
    with pytest.raises(MemoryError, match="out of memory"):
        mem.alloc(0x1000)
    mem.free(buf)
    mem.free(mem.alloc(0x1000))


def test_alloc_rejects_a_non_positive_size():
    with pytest.raises(ValueError, match="alloc size must be positive, got 0"):
        open_gpus().memories[0].alloc(0)
