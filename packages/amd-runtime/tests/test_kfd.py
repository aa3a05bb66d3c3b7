"""KFD ABI units: ioctl numbers, struct sizes and offsets, flags, mmap offsets, CWSR sizing, the Kfd open checks and
the real platform's memory primitives (no GPU needed)."""

import ctypes
import errno
import os

import pytest

from ember.amd_runtime import kfd as k
from ember.amd_runtime.kfd_queue import CwsrSizes, cwsr_sizes
from ember.amd_runtime.mock import MI300X, MI300X_CPX, MI350X, MI350X_CPX, MockPlatform
from ember.amd_runtime.platform import (
    MAP_ANONYMOUS,
    MAP_PRIVATE,
    PROT_READ,
    PROT_WRITE,
    LinuxPlatform,
    Mmio,
    Platform,
)
from ember.amd_runtime.topology import GpuNode

SPEC_IOCTLS = {  # spec §2.2, plus DESTROY_EVENT / SET_EVENT (_IOW, 8-byte args)
    "GET_VERSION": 0x80084B01, "CREATE_QUEUE": 0xC0604B02, "DESTROY_QUEUE": 0xC0084B03, "CREATE_EVENT": 0xC0204B08,
    "WAIT_EVENTS": 0xC0184B0C, "ACQUIRE_VM": 0x40084B15, "ALLOC_MEMORY_OF_GPU": 0xC0284B16,
    "FREE_MEMORY_OF_GPU": 0x40084B17, "MAP_MEMORY_TO_GPU": 0xC0184B18, "UNMAP_MEMORY_FROM_GPU": 0xC0184B19,
    "RUNTIME_ENABLE": 0xC0104B25, "DESTROY_EVENT": 0x40084B09, "SET_EVENT": 0x40084B0A,
}


def test_ioctl_numbers_match_the_spec_table():
    assert {name: req for req, name in k.IOCTL_NAMES.items()} == SPEC_IOCTLS
    assert k.AMDKFD_IOC_CREATE_QUEUE == 0xC0604B02 and k.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU == 0xC0284B16


def test_ioc_fields_decode_back():
    req = k.AMDKFD_IOC_MAP_MEMORY_TO_GPU
    assert (k.ioc_dir(req), k.ioc_nr(req), k.ioc_size(req)) == (k.IOC_READ | k.IOC_WRITE, 0x18, 24)
    assert (k.ioc_dir(k.AMDKFD_IOC_GET_VERSION), k.ioc_dir(k.AMDKFD_IOC_ACQUIRE_VM)) == (k.IOC_READ, k.IOC_WRITE)


@pytest.mark.parametrize("struct, size", [
    (k.GetVersionArgs, 8), (k.CreateQueueArgs, 96), (k.DestroyQueueArgs, 8), (k.CreateEventArgs, 32),
    (k.WaitEventsArgs, 24), (k.AcquireVmArgs, 8), (k.AllocMemoryArgs, 40), (k.FreeMemoryArgs, 8),
    (k.MapMemoryArgs, 24), (k.UnmapMemoryArgs, 24), (k.RuntimeEnableArgs, 16), (k.EventData, 48)])
def test_struct_sizes(struct, size):
    assert ctypes.sizeof(struct) == size


@pytest.mark.parametrize("struct, offsets", [
    (k.CreateQueueArgs, {"ring_base_address": 0, "write_pointer_address": 8, "read_pointer_address": 16,
                         "doorbell_offset": 24, "ring_size": 32, "gpu_id": 36, "queue_type": 40,
                         "queue_percentage": 44, "queue_priority": 48, "queue_id": 52, "eop_buffer_address": 56,
                         "eop_buffer_size": 64, "ctx_save_restore_address": 72, "ctx_save_restore_size": 80,
                         "ctl_stack_size": 84, "sdma_engine_id": 88}),
    (k.CreateEventArgs, {"event_page_offset": 0, "event_trigger_data": 8, "event_type": 12, "auto_reset": 16,
                         "node_id": 20, "event_id": 24, "event_slot_index": 28}),
    (k.WaitEventsArgs, {"events_ptr": 0, "num_events": 8, "wait_for_all": 12, "timeout": 16, "wait_result": 20}),
    (k.AllocMemoryArgs, {"va_addr": 0, "size": 8, "handle": 16, "mmap_offset": 24, "gpu_id": 32, "flags": 36}),
    (k.MapMemoryArgs, {"handle": 0, "device_ids_array_ptr": 8, "n_devices": 16, "n_success": 20}),
    (k.RuntimeEnableArgs, {"r_debug": 0, "mode_mask": 8, "capabilities_mask": 12}),
    (k.MemoryExceptionData, {"failure": 0, "va": 16, "gpu_id": 24, "ErrorType": 28}),
    (k.EventData, {"payload": 0, "kfd_event_data_ext": 32, "event_id": 40}),
])
def test_struct_offsets(struct, offsets):
    assert {name: getattr(struct, name).offset for name in offsets} == offsets


def test_alloc_flag_bits_and_enums():
    assert (k.AllocFlag.VRAM, k.AllocFlag.GTT, k.AllocFlag.USERPTR) == (1, 2, 4)
    assert (k.AllocFlag.UNCACHED, k.AllocFlag.COHERENT, k.AllocFlag.NO_SUBSTITUTE) == (1 << 25, 1 << 26, 1 << 28)
    assert (k.AllocFlag.PUBLIC, k.AllocFlag.EXECUTABLE, k.AllocFlag.WRITABLE) == (1 << 29, 1 << 30, 1 << 31)
    assert [int(t) for t in k.QueueType] == [0, 1, 2, 3, 4]
    assert (k.EventType.SIGNAL, k.EventType.HW_EXCEPTION, k.EventType.MEMORY) == (0, 3, 8)


def test_mmap_offset_encoding():
    off = k.mmap_offset(k.KFD_MMAP_TYPE_DOORBELL, 0x8C31, 0x18)
    assert off == (3 << 62) | (0x8C31 << 46) | 0x18
    assert k.decode_mmap_offset(off) == (3, 0x8C31, 0x18)


def _node(profile) -> GpuNode:
    return GpuNode(1, 0x1234, dict(profile.properties))


def test_cwsr_sizes_mi300x():
    sizes = cwsr_sizes(_node(MI300X))
    assert sizes == CwsrSizes(wg_data_size=0x161E000, ctl_stack_size=0x3000, debug_memory_size=0xBE00,
                              wave_count=1520, xccs=8)
    assert sizes.ctx_save_restore_size == 0x1621000
    assert sizes.alloc_size == 0xB167000  # (0x1621000 + 0xBE00) * 8, page-rounded: 177.4 MiB
    assert round(sizes.alloc_size / 2**20, 1) == 177.4


def test_cwsr_sizes_mi350x():
    sizes = cwsr_sizes(_node(MI350X))
    assert sizes.ctx_save_restore_size == 0x15A3000  # 32 CUs * (0x80000+0x4000+160 KiB LDS+0x1000) + 0x3000
    assert (sizes.ctl_stack_size, sizes.debug_memory_size, sizes.wave_count) == (0x3000, 0xA000, 1280)
    assert sizes.alloc_size == 0xAD68000 and round(sizes.alloc_size / 2**20, 1) == 173.4


@pytest.mark.parametrize("profile", [MI300X, MI350X, MI300X_CPX, MI350X_CPX], ids=lambda p: p.name)
def test_mock_profile_cwsr_literals_agree_with_the_formula(profile):
    sizes = cwsr_sizes(_node(profile))
    assert (sizes.ctx_save_restore_size, sizes.ctl_stack_size, sizes.debug_memory_size) == \
        (profile.cwsr_size, profile.ctl_stack_size, profile.debug_memory_size)


def test_cwsr_sizes_refuses_non_gfx9():
    node = GpuNode(1, 1, {**MI300X.properties, "gfx_target_version": 110000})
    with pytest.raises(NotImplementedError, match="CWSR sizing for gfx1100: only gfx9"):
        cwsr_sizes(node)


@pytest.mark.parametrize("version", [(1, 13), (2, 0)])
def test_kfd_open_refuses_old_or_foreign_interfaces(version):
    platform = MockPlatform([MI300X], kfd_version=version)
    with pytest.raises(RuntimeError, match=rf"KFD interface {version[0]}\.{version[1]} is not supported"):
        k.Kfd.open(platform)
    assert [t.op for t in platform.trace] == ["open", "ioctl", "close"]  # the fd is not leaked


def test_open_gpu_acquires_each_vm_once_and_enables_the_runtime_once():
    platform = MockPlatform([MI300X, MI300X])
    kfd = k.Kfd.open(platform)
    gpus = list(platform.kfd.gpus.values())
    fd0 = kfd.open_gpu(gpus[0].gpu_id, gpus[0].render_minor)
    assert kfd.open_gpu(gpus[0].gpu_id, gpus[0].render_minor) == fd0
    kfd.open_gpu(gpus[1].gpu_id, gpus[1].render_minor)
    assert platform.ioctl_names() == ["GET_VERSION", "ACQUIRE_VM", "RUNTIME_ENABLE", "ACQUIRE_VM"]
    runtime = next(t for t in platform.trace if t.name == "RUNTIME_ENABLE")
    assert runtime.args == {"r_debug": 0, "mode_mask": 0, "capabilities_mask": 0}
    kfd.close()
    assert [t.op for t in platform.trace[-3:]] == ["close", "close", "close"]


def test_map_memory_needs_a_device():
    kfd = k.Kfd.open(MockPlatform([MI300X]))
    with pytest.raises(ValueError, match="gpu_ids is empty"):
        kfd.map_memory(0x1, [])


def test_platforms_satisfy_the_protocol():
    assert isinstance(LinuxPlatform(), Platform) and isinstance(MockPlatform(), Platform)


def test_linux_platform_anonymous_mmap_and_mmio_views():
    platform = LinuxPlatform()
    addr = platform.mmap(0, 0x2000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    try:
        assert addr % 0x1000 == 0
        words = platform.mmio(addr, 0x2000, "I")
        words[3] = 0xDEADBEEF
        assert platform.mmio(addr + 12, 4, "I")[0] == 0xDEADBEEF
        assert words.view(8, 8, "Q")[0] == 0xDEADBEEF << 32
        assert words.read(12, 4) == bytes.fromhex("efbeadde")
        with pytest.raises(ValueError, match=r"bytes \[8, 8200\) are outside this 8192-byte view"):
            words.view(8, 0x2000)
        with pytest.raises(ValueError, match="fmt 'd' is not one of"):
            Mmio(addr, 8, "d")
        db = platform.doorbell(addr + 0x1000)
        db.ring(7)
        assert db.value == 7 and platform.mmio(addr + 0x1000, 8, "Q")[0] == 7
    finally:
        platform.munmap(addr, 0x2000)


def test_linux_platform_mmap_errors_carry_errno():
    with pytest.raises(OSError) as e:
        LinuxPlatform().mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, 987654, 0)  # not an fd
    assert e.value.errno == errno.EBADF


def test_linux_platform_ioctl_passes_structs_and_full_request_numbers():
    platform = LinuxPlatform()
    fd = platform.open("/dev/null", os.O_RDWR)
    try:
        with pytest.raises(OSError) as e:  # /dev/null has no ioctls: the call itself got through
            platform.ioctl(fd, k.AMDKFD_IOC_CREATE_QUEUE, k.CreateQueueArgs())
        assert e.value.errno == errno.ENOTTY
    finally:
        platform.close(fd)
