"""KFD (/dev/kfd) ioctl ABI and thin typed calls.

The argument structs mirror `include/uapi/linux/kfd_ioctl.h` field for field (sizes asserted below); ioctl numbers are
`_IOC(dir, 'K', nr, sizeof(args))`. `Kfd` wraps one open /dev/kfd: every call goes through the injected `Platform`,
so the same code runs on Linux and on the mock driver.

    kfd = Kfd.open(platform)
    render_fd = kfd.open_gpu(gpu_id, render_minor)         # render node + ACQUIRE_VM (+ RUNTIME_ENABLE once)
    args = kfd.alloc_memory(va, size, gpu_id, flags)        # -> handle, mmap_offset
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
from dataclasses import dataclass
from typing import Any

from ember.amd_runtime.platform import Platform

KFD_PATH = "/dev/kfd"
KFD_IOCTL_BASE = ord("K")  # 0x4B

# ---------------------------------------------------------------------------------------------------------------------
# _IOC encoding (asm-generic/ioctl.h): dir[31:30] size[29:16] type[15:8] nr[7:0]

IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2


def _ioc(direction: int, nr: int, size: int) -> int:
    assert 0 <= size < (1 << 14), f"_IOC: size {size} does not fit 14 bits"
    return (direction << 30) | (size << 16) | (KFD_IOCTL_BASE << 8) | nr


def ioc_r(nr: int, struct: type[ctypes.Structure]) -> int:
    """_IOR('K', nr, struct): the kernel writes the struct."""
    return _ioc(IOC_READ, nr, ctypes.sizeof(struct))


def ioc_w(nr: int, struct: type[ctypes.Structure]) -> int:
    """_IOW('K', nr, struct): the kernel reads the struct."""
    return _ioc(IOC_WRITE, nr, ctypes.sizeof(struct))


def ioc_rw(nr: int, struct: type[ctypes.Structure]) -> int:
    """_IOWR('K', nr, struct): both ways."""
    return _ioc(IOC_READ | IOC_WRITE, nr, ctypes.sizeof(struct))


def ioc_nr(request: int) -> int:
    """The command number of a request."""
    return request & 0xFF


def ioc_size(request: int) -> int:
    """The argument size a request encodes."""
    return (request >> 16) & 0x3FFF


def ioc_dir(request: int) -> int:
    """The direction bits of a request (IOC_READ | IOC_WRITE)."""
    return (request >> 30) & 0x3


# ---------------------------------------------------------------------------------------------------------------------
# Argument structs (kfd_ioctl.h 1.17)

u32, u64 = ctypes.c_uint32, ctypes.c_uint64


class _Args(ctypes.Structure):
    def fields(self) -> dict[str, int]:
        """The fields as a dict (pads left out): what traces and error messages show."""
        return {name: getattr(self, name) for name, *_ in self._fields_ if not name.startswith("pad")}


class GetVersionArgs(_Args):
    _fields_ = [("major_version", u32), ("minor_version", u32)]


class CreateQueueArgs(_Args):
    _fields_ = [("ring_base_address", u64), ("write_pointer_address", u64), ("read_pointer_address", u64),
                ("doorbell_offset", u64), ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32),
                ("queue_percentage", u32), ("queue_priority", u32), ("queue_id", u32), ("eop_buffer_address", u64),
                ("eop_buffer_size", u64), ("ctx_save_restore_address", u64), ("ctx_save_restore_size", u32),
                ("ctl_stack_size", u32), ("sdma_engine_id", u32), ("pad", u32)]


class DestroyQueueArgs(_Args):
    _fields_ = [("queue_id", u32), ("pad", u32)]


class CreateEventArgs(_Args):
    _fields_ = [("event_page_offset", u64), ("event_trigger_data", u32), ("event_type", u32), ("auto_reset", u32),
                ("node_id", u32), ("event_id", u32), ("event_slot_index", u32)]


class DestroyEventArgs(_Args):
    _fields_ = [("event_id", u32), ("pad", u32)]


class SetEventArgs(_Args):
    _fields_ = [("event_id", u32), ("pad", u32)]


class WaitEventsArgs(_Args):
    _fields_ = [("events_ptr", u64), ("num_events", u32), ("wait_for_all", u32), ("timeout", u32),
                ("wait_result", u32)]


class AcquireVmArgs(_Args):
    _fields_ = [("drm_fd", u32), ("gpu_id", u32)]


class AllocMemoryArgs(_Args):
    _fields_ = [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64), ("gpu_id", u32),
                ("flags", u32)]


class FreeMemoryArgs(_Args):
    _fields_ = [("handle", u64)]


class MapMemoryArgs(_Args):
    _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]


UnmapMemoryArgs = MapMemoryArgs  # the same layout (kfd_ioctl_unmap_memory_from_gpu_args)


class RuntimeEnableArgs(_Args):
    _fields_ = [("r_debug", u64), ("mode_mask", u32), ("capabilities_mask", u32)]


class MemoryExceptionFailure(ctypes.Structure):
    _fields_ = [("NotPresent", u32), ("ReadOnly", u32), ("NoExecute", u32), ("imprecise", u32)]


class MemoryExceptionData(ctypes.Structure):
    _fields_ = [("failure", MemoryExceptionFailure), ("va", u64), ("gpu_id", u32), ("ErrorType", u32)]


class HwExceptionData(ctypes.Structure):
    _fields_ = [("reset_type", u32), ("reset_cause", u32), ("memory_lost", u32), ("gpu_id", u32)]


class SignalEventData(ctypes.Structure):
    _fields_ = [("last_event_age", u64)]


class _EventPayload(ctypes.Union):
    _fields_ = [("memory_exception_data", MemoryExceptionData), ("hw_exception_data", HwExceptionData),
                ("signal_event_data", SignalEventData)]


class EventData(ctypes.Structure):
    """kfd_event_data: one entry of the WAIT_EVENTS array (the payload is filled for exception events)."""

    _anonymous_ = ("payload",)
    _fields_ = [("payload", _EventPayload), ("kfd_event_data_ext", u64), ("event_id", u32), ("pad", u32)]


for _struct, _size in ((GetVersionArgs, 8), (CreateQueueArgs, 96), (DestroyQueueArgs, 8), (CreateEventArgs, 32),
                       (WaitEventsArgs, 24), (AcquireVmArgs, 8), (AllocMemoryArgs, 40), (FreeMemoryArgs, 8),
                       (MapMemoryArgs, 24), (RuntimeEnableArgs, 16), (DestroyEventArgs, 8), (SetEventArgs, 8),
                       (EventData, 48)):
    assert ctypes.sizeof(_struct) == _size, f"{_struct.__name__} is {ctypes.sizeof(_struct)} bytes, not {_size}"
assert CreateQueueArgs.queue_id.offset == 52 and CreateQueueArgs.eop_buffer_address.offset == 56
assert MemoryExceptionData.va.offset == 16 and EventData.event_id.offset == 40

# ---------------------------------------------------------------------------------------------------------------------
# Ioctl numbers (spec §2.2; the DESTROY/SET event pair from the same header)

AMDKFD_IOC_GET_VERSION = ioc_r(0x01, GetVersionArgs)
AMDKFD_IOC_CREATE_QUEUE = ioc_rw(0x02, CreateQueueArgs)
AMDKFD_IOC_DESTROY_QUEUE = ioc_rw(0x03, DestroyQueueArgs)
AMDKFD_IOC_CREATE_EVENT = ioc_rw(0x08, CreateEventArgs)
AMDKFD_IOC_DESTROY_EVENT = ioc_w(0x09, DestroyEventArgs)
AMDKFD_IOC_SET_EVENT = ioc_w(0x0A, SetEventArgs)
AMDKFD_IOC_WAIT_EVENTS = ioc_rw(0x0C, WaitEventsArgs)
AMDKFD_IOC_ACQUIRE_VM = ioc_w(0x15, AcquireVmArgs)
AMDKFD_IOC_ALLOC_MEMORY_OF_GPU = ioc_rw(0x16, AllocMemoryArgs)
AMDKFD_IOC_FREE_MEMORY_OF_GPU = ioc_w(0x17, FreeMemoryArgs)
AMDKFD_IOC_MAP_MEMORY_TO_GPU = ioc_rw(0x18, MapMemoryArgs)
AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU = ioc_rw(0x19, UnmapMemoryArgs)
AMDKFD_IOC_RUNTIME_ENABLE = ioc_rw(0x25, RuntimeEnableArgs)

IOCTL_NAMES: dict[int, str] = {
    AMDKFD_IOC_GET_VERSION: "GET_VERSION", AMDKFD_IOC_CREATE_QUEUE: "CREATE_QUEUE",
    AMDKFD_IOC_DESTROY_QUEUE: "DESTROY_QUEUE", AMDKFD_IOC_CREATE_EVENT: "CREATE_EVENT",
    AMDKFD_IOC_DESTROY_EVENT: "DESTROY_EVENT", AMDKFD_IOC_SET_EVENT: "SET_EVENT",
    AMDKFD_IOC_WAIT_EVENTS: "WAIT_EVENTS", AMDKFD_IOC_ACQUIRE_VM: "ACQUIRE_VM",
    AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: "ALLOC_MEMORY_OF_GPU", AMDKFD_IOC_FREE_MEMORY_OF_GPU: "FREE_MEMORY_OF_GPU",
    AMDKFD_IOC_MAP_MEMORY_TO_GPU: "MAP_MEMORY_TO_GPU", AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU: "UNMAP_MEMORY_FROM_GPU",
    AMDKFD_IOC_RUNTIME_ENABLE: "RUNTIME_ENABLE",
}
"""Full request number -> short name (traces, errors)."""

IOCTL_ARGS: dict[int, type[ctypes.Structure]] = {
    AMDKFD_IOC_GET_VERSION: GetVersionArgs, AMDKFD_IOC_CREATE_QUEUE: CreateQueueArgs,
    AMDKFD_IOC_DESTROY_QUEUE: DestroyQueueArgs, AMDKFD_IOC_CREATE_EVENT: CreateEventArgs,
    AMDKFD_IOC_DESTROY_EVENT: DestroyEventArgs, AMDKFD_IOC_SET_EVENT: SetEventArgs,
    AMDKFD_IOC_WAIT_EVENTS: WaitEventsArgs, AMDKFD_IOC_ACQUIRE_VM: AcquireVmArgs,
    AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: AllocMemoryArgs, AMDKFD_IOC_FREE_MEMORY_OF_GPU: FreeMemoryArgs,
    AMDKFD_IOC_MAP_MEMORY_TO_GPU: MapMemoryArgs, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU: UnmapMemoryArgs,
    AMDKFD_IOC_RUNTIME_ENABLE: RuntimeEnableArgs,
}
"""Full request number -> its argument struct."""

# ---------------------------------------------------------------------------------------------------------------------
# Flags and enums


class AllocFlag(enum.IntFlag):
    """KFD_IOC_ALLOC_MEM_FLAGS_*."""

    VRAM = 1 << 0
    GTT = 1 << 1
    USERPTR = 1 << 2
    DOORBELL = 1 << 3
    MMIO_REMAP = 1 << 4
    CONTIGUOUS = 1 << 23
    EXT_COHERENT = 1 << 24
    UNCACHED = 1 << 25
    COHERENT = 1 << 26
    AQL_QUEUE_MEM = 1 << 27
    NO_SUBSTITUTE = 1 << 28
    PUBLIC = 1 << 29
    EXECUTABLE = 1 << 30
    WRITABLE = 1 << 31


ALLOC_DOMAINS = AllocFlag.VRAM | AllocFlag.GTT | AllocFlag.USERPTR | AllocFlag.DOORBELL | AllocFlag.MMIO_REMAP
"""Exactly one of these names where an allocation lives."""


class QueueType(enum.IntEnum):
    """KFD_IOC_QUEUE_TYPE_*."""

    COMPUTE = 0  # PM4
    SDMA = 1
    COMPUTE_AQL = 2
    SDMA_XGMI = 3
    SDMA_BY_ENG_ID = 4

    @property
    def is_compute(self) -> bool:
        return self in (QueueType.COMPUTE, QueueType.COMPUTE_AQL)


class EventType(enum.IntEnum):
    """KFD_IOC_EVENT_*."""

    SIGNAL = 0
    NODECHANGE = 1
    DEVICESTATECHANGE = 2
    HW_EXCEPTION = 3
    SYSTEMEVENT = 4
    DEBUG_EVENT = 5
    PROFILE_EVENT = 6
    QUEUE_EVENT = 7
    MEMORY = 8


class WaitResult(enum.IntEnum):
    """KFD_IOC_WAIT_RESULT_*."""

    COMPLETE = 0
    TIMEOUT = 1
    FAIL = 2


KFD_MAX_QUEUE_PERCENTAGE = 100
KFD_MAX_QUEUE_PRIORITY = 15
KFD_MIN_QUEUE_RING_SIZE = 1024
KFD_SIGNAL_EVENT_LIMIT = 4096  # signal-event slots of 8 bytes: an event page of 0x8000 bytes
KFD_FIRST_NONSIGNAL_EVENT_ID = 0x80000000
UNSIGNALED_EVENT_SLOT = (1 << 64) - 1  # what an idle event mailbox slot holds

# mmap offsets KFD hands out (kfd_priv.h): type[63:62] gpu_id[61:46] offset[45:0]
KFD_MMAP_TYPE_SHIFT = 62
KFD_MMAP_TYPE_DOORBELL, KFD_MMAP_TYPE_EVENTS, KFD_MMAP_TYPE_RESERVED_MEM, KFD_MMAP_TYPE_MMIO = 3, 2, 1, 0
KFD_MMAP_GPU_ID_SHIFT = 46
KFD_MMAP_GPU_ID_MASK = 0xFFFF
KFD_MMAP_OFFSET_MASK = (1 << 46) - 1
DOORBELL_SLICE_SIZE = 0x2000  # the per-process doorbell pages of one GPU, mapped whole (kfd_doorbell_mmap)


def mmap_offset(kind: int, gpu_id: int, offset: int) -> int:
    """Encode a KFD mmap offset."""
    return (kind << KFD_MMAP_TYPE_SHIFT) | ((gpu_id & KFD_MMAP_GPU_ID_MASK) << KFD_MMAP_GPU_ID_SHIFT) | offset


def decode_mmap_offset(value: int) -> tuple[int, int, int]:
    """(type, gpu_id, offset) of a KFD mmap offset."""
    return (value >> KFD_MMAP_TYPE_SHIFT) & 3, (value >> KFD_MMAP_GPU_ID_SHIFT) & KFD_MMAP_GPU_ID_MASK, \
        value & KFD_MMAP_OFFSET_MASK


# ---------------------------------------------------------------------------------------------------------------------
# Calls


@dataclass(frozen=True, order=True)
class KfdVersion:
    """The KFD ioctl interface version."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


MIN_KFD_VERSION = KfdVersion(1, 14)  # RUNTIME_ENABLE and the CWSR/queue-buffer rules we size for


class KfdMapError(OSError):
    """MAP/UNMAP failed part way: `n_success` devices (in array order) were done before the error."""

    def __init__(self, code: int, message: str, n_success: int):
        super().__init__(code, message)
        self.n_success = n_success


class Kfd:
    """One open /dev/kfd (a process has one). Each method is one ioctl; errors are the driver's OSError."""

    def __init__(self, platform: Platform, fd: int):
        self.platform, self.fd = platform, fd
        self.version = self.get_version()
        self.runtime_enabled = False
        self.render_fds: dict[int, int] = {}  # gpu_id -> the render node fd its VM was acquired with

    @classmethod
    def open(cls, platform: Platform) -> Kfd:
        """Open /dev/kfd and check the interface version (major 1, minor >= 14)."""
        fd = platform.open(KFD_PATH, os.O_RDWR)
        try:
            kfd = cls(platform, fd)
        except BaseException:
            platform.close(fd)
            raise
        if kfd.version.major != 1 or kfd.version < MIN_KFD_VERSION:
            platform.close(fd)
            raise RuntimeError(f"KFD interface {kfd.version} is not supported: need 1.x with x >= "
                               f"{MIN_KFD_VERSION.minor} (Linux 6.x amdgpu)")
        return kfd

    def close(self) -> None:
        """Close every render node this process opened, then /dev/kfd (KFD tears the process down)."""
        for fd in self.render_fds.values():
            self.platform.close(fd)
        self.render_fds.clear()
        self.platform.close(self.fd)

    def _call(self, request: int, args: ctypes.Structure) -> Any:
        self.platform.ioctl(self.fd, request, args)
        return args

    def get_version(self) -> KfdVersion:
        """GET_VERSION."""
        args = self._call(AMDKFD_IOC_GET_VERSION, GetVersionArgs())
        return KfdVersion(args.major_version, args.minor_version)

    def open_gpu(self, gpu_id: int, render_minor: int) -> int:
        """Open /dev/dri/renderD<minor>, ACQUIRE_VM with it, and RUNTIME_ENABLE once per process. Returns the
        render fd (buffers are mmapped through it). Opening the same GPU again returns the same fd."""
        if gpu_id in self.render_fds:
            return self.render_fds[gpu_id]
        render_fd = self.platform.open(f"/dev/dri/renderD{render_minor}", os.O_RDWR)
        try:
            self.acquire_vm(render_fd, gpu_id)
            if not self.runtime_enabled:
                self.runtime_enable()
        except BaseException:
            self.platform.close(render_fd)
            raise
        self.render_fds[gpu_id] = render_fd
        return render_fd

    def acquire_vm(self, drm_fd: int, gpu_id: int) -> None:
        """ACQUIRE_VM: bind this process's GPU VM of `gpu_id` to the render node fd."""
        self._call(AMDKFD_IOC_ACQUIRE_VM, AcquireVmArgs(drm_fd=drm_fd, gpu_id=gpu_id))

    def runtime_enable(self) -> int:
        """RUNTIME_ENABLE with mode_mask 0, as the spec's open sequence does (KFD >= 1.14). Without the ENABLE bit the
        kernel takes its runtime-disable path: no debug runtime, no trap handler setup; harmless to repeat. Returns
        the capabilities mask (0 unless the runtime was enabled)."""
        args = self._call(AMDKFD_IOC_RUNTIME_ENABLE, RuntimeEnableArgs(r_debug=0, mode_mask=0))
        self.runtime_enabled = True
        return int(args.capabilities_mask)

    def alloc_memory(self, va_addr: int, size: int, gpu_id: int, flags: int, mmap_offset: int = 0) -> AllocMemoryArgs:
        """ALLOC_MEMORY_OF_GPU at `va_addr`. For USERPTR `mmap_offset` is the CPU address. Returns the args with
        `handle` and `mmap_offset` (the render-node offset) filled."""
        return self._call(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, AllocMemoryArgs(
            va_addr=va_addr, size=size, gpu_id=gpu_id, flags=int(flags), mmap_offset=mmap_offset))  # type: ignore

    def free_memory(self, handle: int) -> None:
        """FREE_MEMORY_OF_GPU."""
        self._call(AMDKFD_IOC_FREE_MEMORY_OF_GPU, FreeMemoryArgs(handle=handle))

    def _map_call(self, request: int, handle: int, gpu_ids: list[int]) -> int:
        if not gpu_ids:
            raise ValueError("map/unmap: gpu_ids is empty; name at least one GPU")
        ids = (ctypes.c_uint32 * len(gpu_ids))(*gpu_ids)
        args = MapMemoryArgs(handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=len(gpu_ids))
        try:
            self._call(request, args)
        except OSError as e:
            raise KfdMapError(e.errno or errno.EINVAL, f"{IOCTL_NAMES[request]}(handle=0x{handle:x}, gpu_ids="
                              f"{gpu_ids}): {e.strerror}; {args.n_success} of {len(gpu_ids)} done",
                              args.n_success) from e
        return int(args.n_success)

    def map_memory(self, handle: int, gpu_ids: list[int]) -> int:
        """MAP_MEMORY_TO_GPU on every GPU in `gpu_ids`; returns n_success (== len(gpu_ids)) or raises KfdMapError."""
        return self._map_call(AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle, gpu_ids)

    def unmap_memory(self, handle: int, gpu_ids: list[int]) -> int:
        """UNMAP_MEMORY_FROM_GPU on every GPU in `gpu_ids`; returns n_success or raises KfdMapError."""
        return self._map_call(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle, gpu_ids)

    def create_queue(self, args: CreateQueueArgs) -> CreateQueueArgs:
        """CREATE_QUEUE with fully built args (see kfd_queue.create_queue); returns them with queue_id and
        doorbell_offset filled."""
        return self._call(AMDKFD_IOC_CREATE_QUEUE, args)  # type: ignore[no-any-return]

    def destroy_queue(self, queue_id: int) -> None:
        """DESTROY_QUEUE."""
        self._call(AMDKFD_IOC_DESTROY_QUEUE, DestroyQueueArgs(queue_id=queue_id))

    def create_event(self, event_type: EventType, auto_reset: bool = False, node_id: int = 0,
                     event_page_offset: int = 0) -> CreateEventArgs:
        """CREATE_EVENT; `event_page_offset` is the handle of the event page the first time one is set. Returns the
        args with event_id, event_slot_index and event_trigger_data filled."""
        return self._call(AMDKFD_IOC_CREATE_EVENT, CreateEventArgs(  # type: ignore[no-any-return]
            event_page_offset=event_page_offset, event_type=int(event_type), auto_reset=int(auto_reset),
            node_id=node_id))

    def destroy_event(self, event_id: int) -> None:
        """DESTROY_EVENT."""
        self._call(AMDKFD_IOC_DESTROY_EVENT, DestroyEventArgs(event_id=event_id))

    def set_event(self, event_id: int) -> None:
        """SET_EVENT: signal a SIGNAL event from the CPU."""
        self._call(AMDKFD_IOC_SET_EVENT, SetEventArgs(event_id=event_id))

    def wait_events(self, events: ctypes.Array[EventData], timeout_ms: int, wait_for_all: bool = False) -> WaitResult:
        """WAIT_EVENTS on an array of EventData (event_id set); the driver fills exception payloads in place."""
        args = self._call(AMDKFD_IOC_WAIT_EVENTS, WaitEventsArgs(
            events_ptr=ctypes.addressof(events), num_events=len(events), wait_for_all=int(wait_for_all),
            timeout=timeout_ms))
        return WaitResult(args.wait_result)


__all__ = [
    "KFD_PATH", "ioc_r", "ioc_w", "ioc_rw", "ioc_nr", "ioc_size", "ioc_dir", "IOC_NONE", "IOC_READ", "IOC_WRITE",
    "GetVersionArgs", "CreateQueueArgs", "DestroyQueueArgs", "CreateEventArgs", "DestroyEventArgs", "SetEventArgs",
    "WaitEventsArgs", "AcquireVmArgs", "AllocMemoryArgs", "FreeMemoryArgs", "MapMemoryArgs", "UnmapMemoryArgs",
    "RuntimeEnableArgs", "MemoryExceptionData", "HwExceptionData", "EventData", "AMDKFD_IOC_GET_VERSION",
    "AMDKFD_IOC_CREATE_QUEUE", "AMDKFD_IOC_DESTROY_QUEUE", "AMDKFD_IOC_CREATE_EVENT", "AMDKFD_IOC_DESTROY_EVENT",
    "AMDKFD_IOC_SET_EVENT", "AMDKFD_IOC_WAIT_EVENTS", "AMDKFD_IOC_ACQUIRE_VM", "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU",
    "AMDKFD_IOC_FREE_MEMORY_OF_GPU", "AMDKFD_IOC_MAP_MEMORY_TO_GPU", "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU",
    "AMDKFD_IOC_RUNTIME_ENABLE", "IOCTL_NAMES", "IOCTL_ARGS", "AllocFlag", "ALLOC_DOMAINS", "QueueType", "EventType",
    "WaitResult", "KFD_MAX_QUEUE_PERCENTAGE", "KFD_MAX_QUEUE_PRIORITY", "KFD_MIN_QUEUE_RING_SIZE",
    "KFD_SIGNAL_EVENT_LIMIT", "KFD_FIRST_NONSIGNAL_EVENT_ID", "UNSIGNALED_EVENT_SLOT", "KFD_MMAP_TYPE_DOORBELL",
    "KFD_MMAP_TYPE_EVENTS", "KFD_MMAP_TYPE_RESERVED_MEM", "KFD_MMAP_TYPE_MMIO", "DOORBELL_SLICE_SIZE", "mmap_offset",
    "decode_mmap_offset", "KfdVersion", "MIN_KFD_VERSION", "KfdMapError", "Kfd",
]
