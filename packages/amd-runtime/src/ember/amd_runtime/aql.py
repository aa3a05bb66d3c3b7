"""AQL (HSA Architected Queuing Language) packets, 64 bytes each, and the `amd_queue_t` fields the runtime uses.

The compute queue of an MI300X/MI350X in SPX mode is an AQL queue: its ring holds 64-byte packets whose first u16
is the header `type[7:0] | barrier b8 | acquire fence scope [10:9] | release fence scope [12:11]`. The runtime
writes the packet body first and the header last (the packet becomes valid when its type stops being INVALID:
`publish_order`).

    pkt = aql.kernel_dispatch(kd_addr, kernarg_addr, global_size=(256, 1, 1), local_size=(64, 1, 1))
    aql.decode(pkt).grid_size            # (256, 1, 1), in work-items

Layouts: `hsa_kernel_dispatch_packet_t` and `hsa_barrier_and_packet_t` (hsa.h), `amd_aql_pm4_ib` (ROCr
amd_aql_queue.cpp), `amd_queue_t` (ROCr amd_hsa_queue.h).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ember.amd_runtime import pm4

PACKET_SIZE = 64

# packet types (hsa_packet_type_t)
PACKET_TYPE_VENDOR_SPECIFIC, PACKET_TYPE_INVALID, PACKET_TYPE_KERNEL_DISPATCH = 0, 1, 2
PACKET_TYPE_BARRIER_AND, PACKET_TYPE_AGENT_DISPATCH, PACKET_TYPE_BARRIER_OR = 3, 4, 5
# header bit positions (hsa_packet_header_t) and fence scopes (hsa_fence_scope_t)
HEADER_TYPE, HEADER_BARRIER, HEADER_ACQUIRE_FENCE_SCOPE, HEADER_RELEASE_FENCE_SCOPE = 0, 8, 9, 11
FENCE_SCOPE_NONE, FENCE_SCOPE_AGENT, FENCE_SCOPE_SYSTEM = 0, 1, 2
SETUP_DIMENSIONS_SHIFT = 0
AMD_AQL_FORMAT_PM4_IB = 1  # the vendor packet's ven_hdr
PM4_IB_DW_CNT_REMAIN = 0xA


def make_header(packet_type: int, barrier: bool = True, acquire: int = FENCE_SCOPE_SYSTEM,
                release: int = FENCE_SCOPE_SYSTEM) -> int:
    """The 16-bit packet header: 0x1502 for a kernel dispatch with barrier and system-scope fences."""
    if packet_type not in range(6):
        raise ValueError(f"AQL: packet type {packet_type} is not 0..5")
    for name, scope in (("acquire", acquire), ("release", release)):
        if scope not in (FENCE_SCOPE_NONE, FENCE_SCOPE_AGENT, FENCE_SCOPE_SYSTEM):
            raise ValueError(f"AQL: {name} fence scope {scope} is not 0 (none), 1 (agent) or 2 (system)")
    return (packet_type << HEADER_TYPE) | (int(barrier) << HEADER_BARRIER) | (acquire << HEADER_ACQUIRE_FENCE_SCOPE) | \
        (release << HEADER_RELEASE_FENCE_SCOPE)


# hsa_kernel_dispatch_packet_t: header, setup, workgroup_size_xyz u16, reserved0 u16, grid_size_xyz u32,
# private_segment_size u32, group_segment_size u32, kernel_object u64, kernarg_address u64, reserved2 u64,
# completion_signal u64
_DISPATCH = struct.Struct("<HHHHHHIIIIIQQQQ")
# hsa_barrier_and_packet_t: header, reserved0 u16, reserved1 u32, dep_signal[5] u64, reserved2 u64, completion u64
_BARRIER = struct.Struct("<HHI5QQQ")
# amd_aql_pm4_ib: header, ven_hdr, ib_jump_cmd[4] u32, dw_cnt_remain u32, reserved[8] u32, completion_signal u64
_PM4_IB = struct.Struct("<HH4II8IQ")
assert _DISPATCH.size == _BARRIER.size == _PM4_IB.size == PACKET_SIZE


def _dims(name: str, size: Sequence[int], limit: int) -> tuple[int, int, int]:
    if not 1 <= len(size) <= 3 or any(not 1 <= s <= limit for s in size):
        raise ValueError(f"AQL: {name} {tuple(size)} must be 1 to 3 sizes, each 1..{limit}")
    return (*size, *([1] * (3 - len(size))))  # type: ignore[return-value]


def kernel_dispatch(kernel_object: int, kernarg_address: int, global_size: Sequence[int],
                    local_size: Sequence[int], group_segment_size: int = 0, private_segment_size: int = 0,
                    completion_signal: int = 0, dims: int | None = None, barrier: bool = True,
                    acquire: int = FENCE_SCOPE_SYSTEM, release: int = FENCE_SCOPE_SYSTEM) -> bytes:
    """A KERNEL_DISPATCH packet. `global_size` counts *workgroups* per dimension (as PM4's DISPATCH_DIRECT does);
    the packet's grid_size is in work-items (global*local). `kernel_object` is the 64-byte aligned address of the
    kernel descriptor, `kernarg_address` 16-byte aligned; `dims` defaults to the highest dimension above 1."""
    local = _dims("local_size", local_size, 1024)
    groups = _dims("global_size", global_size, 1 << 32)
    grid = tuple(g * loc for g, loc in zip(groups, local))
    if any(g >= 1 << 32 for g in grid):
        raise ValueError(f"AQL: grid {grid} work-items does not fit in 32 bits per dimension")
    if kernel_object % 64 or kernarg_address % 16:
        raise ValueError(f"AQL: kernel_object {kernel_object:#x} must be 64-byte and kernarg_address "
                         f"{kernarg_address:#x} 16-byte aligned")
    if dims is None:
        dims = max((i + 1 for i in range(3) if grid[i] > 1), default=1)
    if dims not in (1, 2, 3):
        raise ValueError(f"AQL: dims {dims} is not 1, 2 or 3")
    return _DISPATCH.pack(make_header(PACKET_TYPE_KERNEL_DISPATCH, barrier, acquire, release),
                          dims << SETUP_DIMENSIONS_SHIFT, *local, 0, *grid, private_segment_size, group_segment_size,
                          kernel_object, kernarg_address, 0, completion_signal)


def barrier_and(dep_signals: Sequence[int] = (), completion_signal: int = 0, barrier: bool = True,
                acquire: int = FENCE_SCOPE_SYSTEM, release: int = FENCE_SCOPE_SYSTEM) -> bytes:
    """A BARRIER_AND packet: waits until every one of up to 5 HSA signals (their addresses; 0 = none) reaches 0."""
    if len(dep_signals) > 5:
        raise ValueError(f"AQL: barrier_and takes at most 5 dependency signals, got {len(dep_signals)}")
    deps = [*dep_signals, *([0] * (5 - len(dep_signals)))]
    return _BARRIER.pack(make_header(PACKET_TYPE_BARRIER_AND, barrier, acquire, release), 0, 0, *deps, 0,
                         completion_signal)


def pm4_ib(ib_addr: int, ib_size_dw: int, completion_signal: int = 0, barrier: bool = True,
           acquire: int = FENCE_SCOPE_SYSTEM, release: int = FENCE_SCOPE_SYSTEM) -> bytes:
    """The AMD vendor packet that runs `ib_size_dw` dwords of PM4 at `ib_addr` through an INDIRECT_BUFFER (the way
    signals, waits and timestamps reach an AQL queue)."""
    ib = pm4.indirect_buffer(ib_addr, ib_size_dw)
    return _PM4_IB.pack(make_header(PACKET_TYPE_VENDOR_SPECIFIC, barrier, acquire, release), AMD_AQL_FORMAT_PM4_IB,
                        *ib, PM4_IB_DW_CNT_REMAIN, *([0] * 8), completion_signal)


def publish_order(packet: bytes) -> tuple[bytes, int]:
    """How to write `packet` into the ring so the packet processor never sees half of it: first its bytes 4..63,
    then (after a store fence) the 32-bit `header | setup << 16` in one store; returns (body, first dword)."""
    if len(packet) != PACKET_SIZE:
        raise ValueError(f"AQL: a packet is {PACKET_SIZE} bytes, got {len(packet)}")
    return packet[4:], int.from_bytes(packet[:4], "little")


def invalid() -> bytes:
    """An INVALID packet (header type 1, the rest zero): what the ring holds where nothing was written yet."""
    return struct.pack("<H", PACKET_TYPE_INVALID) + bytes(PACKET_SIZE - 2)


# --- decode
@dataclass(frozen=True)
class Header:
    """The fields of a packet header."""

    type: int
    barrier: bool
    acquire_fence_scope: int
    release_fence_scope: int

    @classmethod
    def from_int(cls, value: int) -> Header:
        return cls(value & 0xFF, bool(value >> HEADER_BARRIER & 1), (value >> HEADER_ACQUIRE_FENCE_SCOPE) & 3,
                   (value >> HEADER_RELEASE_FENCE_SCOPE) & 3)


@dataclass(frozen=True)
class KernelDispatch:
    header: Header
    dims: int
    workgroup_size: tuple[int, int, int]
    grid_size: tuple[int, int, int]  # work-items
    private_segment_size: int
    group_segment_size: int
    kernel_object: int
    kernarg_address: int
    completion_signal: int

    @property
    def workgroups(self) -> tuple[int, int, int]:
        """Workgroups per dimension (ceil(grid / workgroup); a partial last workgroup counts)."""
        return tuple(-(-g // w) for g, w in zip(self.grid_size, self.workgroup_size))  # type: ignore[return-value]


@dataclass(frozen=True)
class BarrierAnd:
    header: Header
    dep_signals: tuple[int, ...]
    completion_signal: int


@dataclass(frozen=True)
class Pm4Ib:
    header: Header
    ib: pm4.IndirectBuffer
    dw_cnt_remain: int
    completion_signal: int


@dataclass(frozen=True)
class Invalid:
    header: Header


def decode(packet: bytes | bytearray | memoryview) -> KernelDispatch | BarrierAnd | Pm4Ib | Invalid:
    """The packet in the 64 bytes of `packet`; ValueError for a packet type or vendor format this runtime never
    writes (AGENT_DISPATCH, BARRIER_OR, other vendor formats)."""
    data = bytes(packet)
    if len(data) != PACKET_SIZE:
        raise ValueError(f"AQL: a packet is {PACKET_SIZE} bytes, got {len(data)}")
    header = Header.from_int(int.from_bytes(data[:2], "little"))
    if header.type == PACKET_TYPE_INVALID:
        return Invalid(header)
    if header.type == PACKET_TYPE_KERNEL_DISPATCH:
        f = _DISPATCH.unpack(data)
        return KernelDispatch(header, f[1] & 3, (f[2], f[3], f[4]), (f[6], f[7], f[8]), f[9], f[10], f[11], f[12],
                              f[14])
    if header.type == PACKET_TYPE_BARRIER_AND:
        f = _BARRIER.unpack(data)
        return BarrierAnd(header, tuple(f[3:8]), f[9])
    if header.type == PACKET_TYPE_VENDOR_SPECIFIC:
        f = _PM4_IB.unpack(data)
        if f[1] != AMD_AQL_FORMAT_PM4_IB:
            raise ValueError(f"AQL: vendor packet format {f[1]} is not AMD_AQL_FORMAT_PM4_IB (1)")
        ib = pm4.decode_one(f[2:6])
        if not isinstance(ib, pm4.IndirectBuffer):
            raise ValueError(f"AQL: the PM4-IB vendor packet holds {ib.op}, not INDIRECT_BUFFER")
        return Pm4Ib(header, ib, f[6], f[15])
    raise ValueError(f"AQL: packet type {header.type} is not supported (dispatch 2, barrier-and 3, vendor 0)")


# --- amd_queue_t
@dataclass(frozen=True)
class AmdQueueOffsets:
    """Byte offsets of the `amd_queue_t` fields the runtime reads or writes (the 256-byte block that KFD's AQL queue
    takes as its read/write pointer page)."""

    write_dispatch_id: int = 56  # u64: the packet index the host has written up to (the wptr)
    max_cu_id: int = 72  # u32
    max_wave_id: int = 76  # u32
    read_dispatch_id: int = 128  # u64: the packet index the CP has consumed (the rptr)
    read_dispatch_id_field_base_byte_offset: int = 136  # u32: = 128
    compute_tmpring_size: int = 140  # u32: WAVES[11:0] | WAVESIZE[24:12] (1 KiB units)
    scratch_resource_descriptor: int = 144  # u32[4]
    scratch_backing_memory_location: int = 160  # u64
    scratch_backing_memory_byte_size: int = 168  # u64
    scratch_wave64_lane_byte_size: int = 176  # u32
    queue_properties: int = 180  # u32
    size: int = 256


AMD_QUEUE = AmdQueueOffsets()
AMD_QUEUE_PROPERTIES_ENABLE_TRAP_HANDLER, AMD_QUEUE_PROPERTIES_IS_PTR64 = 1 << 0, 1 << 1
AMD_QUEUE_PROPERTIES_ENABLE_TRAP_HANDLER_DEBUG_SGPRS, AMD_QUEUE_PROPERTIES_ENABLE_PROFILING = 1 << 2, 1 << 3


def amd_queue(max_cu_id: int, max_wave_id: int,
              properties: int = AMD_QUEUE_PROPERTIES_IS_PTR64 | AMD_QUEUE_PROPERTIES_ENABLE_PROFILING) -> bytes:
    """The initial 256-byte `amd_queue_t`: dispatch ids 0, read_dispatch_id_field_base_byte_offset = 128, the CU and
    wave limits, and `properties` (64-bit pointers and profiling by default); scratch fields are zero until scratch
    is set up."""
    out = bytearray(AMD_QUEUE.size)
    struct.pack_into("<II", out, AMD_QUEUE.max_cu_id, max_cu_id, max_wave_id)
    struct.pack_into("<I", out, AMD_QUEUE.read_dispatch_id_field_base_byte_offset, AMD_QUEUE.read_dispatch_id)
    struct.pack_into("<I", out, AMD_QUEUE.queue_properties, properties)
    return bytes(out)
