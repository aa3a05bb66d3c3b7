"""SDMA 4.x packets (the copy engines of gfx942 and gfx950): pure builders to dword lists, and `decode`.

Every packet starts with a dword `op[7:0] | sub_op[15:8] | op-specific bits[31:16]` (ROCr's `sdma_registers.h`,
tinygrad `autogen/am/sdma_4_0_0.py`). The SDMA ring is addressed in bytes; a packet never straddles the end of the
ring (the queue pads the tail with 1-dword NOPs, op 0).

    sdma.copy_linear(dst, src, 10 << 20)   # 3 COPY_LINEAR packets: SDMA 4 moves at most 4 MiB per packet
    sdma.fence(sig, 7), sdma.trap(event_id), sdma.poll_regmem(sig, 7), sdma.timestamp(sig + 8)

`decode` returns frozen dataclasses with each packet's dword `offset` and `size`, and raises ValueError on a
truncated stream or an unknown op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

OP_NOP, OP_COPY, OP_WRITE, OP_INDIRECT, OP_FENCE, OP_TRAP = 0, 1, 2, 4, 5, 6
OP_POLL_REGMEM, OP_ATOMIC, OP_TIMESTAMP = 8, 10, 13
SUB_OP_COPY_LINEAR, SUB_OP_WRITE_LINEAR, SUB_OP_TIMESTAMP_GET_GLOBAL = 0, 0, 2
OP_NAMES = {OP_NOP: "NOP", OP_COPY: "COPY_LINEAR", OP_WRITE: "WRITE", OP_INDIRECT: "INDIRECT", OP_FENCE: "FENCE",
            OP_TRAP: "TRAP", OP_POLL_REGMEM: "POLL_REGMEM", OP_ATOMIC: "ATOMIC", OP_TIMESTAMP: "TIMESTAMP"}

# COPY_LINEAR count is bytes - 1 in 22 bits on SDMA 4 (gfx9): at most 4 MiB per packet (30 bits, 1 GiB, on SDMA 5+)
MAX_COPY_SIZE = 1 << 22
FUNC_ALWAYS, FUNC_LT, FUNC_LE, FUNC_EQ, FUNC_NE, FUNC_GE, FUNC_GT = 0, 1, 2, 3, 4, 5, 6
POLL_INTERVAL, POLL_RETRY_COUNT = 4, 0xFFF
ATOMIC_ADD64 = 47  # ROCr sdma_registers.h SDMA_ATOMIC_ADD64
TRAP_INT_CTX_MASK = (1 << 28) - 1
WRITE_MAX_DWORDS = 1 << 20


def _lo_hi(name: str, value: int, align: int = 1) -> list[int]:
    if not 0 <= value < 1 << 64:
        raise ValueError(f"SDMA: {name} {value:#x} does not fit in 64 bits")
    if value % align:
        raise ValueError(f"SDMA: {name} {value:#x} must be {align}-byte aligned")
    return [value & 0xFFFFFFFF, value >> 32]


def _u32(name: str, value: int) -> int:
    if not 0 <= value < 1 << 32:
        raise ValueError(f"SDMA: {name} {value:#x} does not fit in 32 bits")
    return value


def nop(dwords: int = 1) -> list[int]:
    """`dwords` dwords of padding: one NOP whose count field skips the rest (a zero dword is a 1-dword NOP)."""
    if not 1 <= dwords <= 1 << 14:
        raise ValueError(f"SDMA: nop of {dwords} dwords, accepted 1..{1 << 14}")
    return [OP_NOP | ((dwords - 1) << 16), *([0] * (dwords - 1))]


def copy_linear(dst: int, src: int, nbytes: int, max_copy: int = MAX_COPY_SIZE) -> list[int]:
    """COPY_LINEAR (7 dwords each): copy `nbytes` from `src` to `dst`, split into packets of at most `max_copy`
    bytes (4 MiB on SDMA 4)."""
    if nbytes <= 0:
        raise ValueError(f"SDMA: copy_linear of {nbytes} bytes; a copy moves at least 1 byte")
    out: list[int] = []
    for off in range(0, nbytes, max_copy):
        n = min(max_copy, nbytes - off)
        out += [OP_COPY | (SUB_OP_COPY_LINEAR << 8), n - 1, 0, *_lo_hi("src", src + off), *_lo_hi("dst", dst + off)]
    return out


def copy_packets(nbytes: int, max_copy: int = MAX_COPY_SIZE) -> int:
    """How many COPY_LINEAR packets `copy_linear` emits for `nbytes` (ring space: 7 dwords each)."""
    return -(-nbytes // max_copy)


def fence(addr: int, value: int, mtype: int = 0) -> list[int]:
    """FENCE (4 dwords): write the 32-bit `value` to `addr` (4-byte aligned) once the packets before it are done
    (mtype 0 on gfx9)."""
    return [OP_FENCE | ((mtype & 7) << 16), *_lo_hi("addr", addr, 4), _u32("value", value)]


def trap(event_id: int) -> list[int]:
    """TRAP (2 dwords): raise an interrupt carrying `event_id` (28 bits), which wakes a KFD event waiter."""
    if not 0 <= event_id <= TRAP_INT_CTX_MASK:
        raise ValueError(f"SDMA: trap int_ctx {event_id:#x} does not fit in 28 bits")
    return [OP_TRAP, event_id]


def poll_regmem(addr: int, value: int, mask: int = 0xFFFFFFFF, function: int = FUNC_GE, hdp_flush: bool = False,
                interval: int = POLL_INTERVAL, retry_count: int = POLL_RETRY_COUNT) -> list[int]:
    """POLL_REGMEM (6 dwords): wait until `(*addr & mask) <function> value` for the dword at memory `addr`
    (FUNC_GE for a timeline signal); `hdp_flush` instead flushes the HDP (addr, value, mask then 0)."""
    if function not in range(7):
        raise ValueError(f"SDMA: poll_regmem function {function} is not in 0..6")
    hdr = OP_POLL_REGMEM | (int(hdp_flush) << 26) | (function << 28) | (int(not hdp_flush) << 31)
    return [hdr, *_lo_hi("addr", addr, 4), _u32("value", value), _u32("mask", mask),
            (interval & 0xFFFF) | ((retry_count & 0xFFF) << 16)]


def atomic(addr: int, src: int, operation: int = ATOMIC_ADD64, cmp: int = 0, loop: bool = False,
           loop_interval: int = 0) -> list[int]:
    """ATOMIC (8 dwords): apply `operation` (default ATOMIC_ADD64: *addr += src) to the 8-byte aligned `addr`."""
    if not 0 <= operation < 128:
        raise ValueError(f"SDMA: atomic operation {operation} does not fit in 7 bits")
    hdr = OP_ATOMIC | (int(loop) << 16) | (operation << 25)
    return [hdr, *_lo_hi("addr", addr, 8), *_lo_hi("src", src), *_lo_hi("cmp", cmp), loop_interval & 0x1FFF]


def timestamp(addr: int) -> list[int]:
    """TIMESTAMP GET_GLOBAL (3 dwords): write the 64-bit global GPU timestamp to the 8-byte aligned `addr`."""
    return [OP_TIMESTAMP | (SUB_OP_TIMESTAMP_GET_GLOBAL << 8), *_lo_hi("addr", addr, 8)]


def write(addr: int, *data: int) -> list[int]:
    """WRITE linear (4 + n dwords): write the dwords `data` from `addr` (4-byte aligned)."""
    if not 1 <= len(data) <= WRITE_MAX_DWORDS:
        raise ValueError(f"SDMA: write of {len(data)} dwords, accepted 1..{WRITE_MAX_DWORDS}")
    return [OP_WRITE | (SUB_OP_WRITE_LINEAR << 8), *_lo_hi("addr", addr, 4), len(data) - 1,
            *(_u32("data", d) for d in data)]


def indirect(addr: int, size_dw: int, vmid: int = 0, csa: int = 0) -> list[int]:
    """INDIRECT_BUFFER (6 dwords): run `size_dw` dwords of SDMA packets at `addr` (the IB must end on an 8-dword
    boundary)."""
    if not 1 <= size_dw < 1 << 20:
        raise ValueError(f"SDMA: indirect size {size_dw} dwords, accepted 1..{(1 << 20) - 1}")
    return [OP_INDIRECT | ((vmid & 0xF) << 16), *_lo_hi("addr", addr, 32), size_dw, *_lo_hi("csa", csa)]


# --- decode
@dataclass(frozen=True)
class Packet:
    """A decoded SDMA packet: its dword `offset` in the stream and `size` in dwords."""

    offset: int
    size: int

    opcode: ClassVar[int] = -1

    @property
    def op(self) -> str:
        """The packet's name, as in OP_NAMES ('COPY_LINEAR')."""
        return OP_NAMES[self.opcode]


@dataclass(frozen=True)
class Nop(Packet):
    opcode: ClassVar[int] = OP_NOP


@dataclass(frozen=True)
class CopyLinear(Packet):
    opcode: ClassVar[int] = OP_COPY
    nbytes: int
    src: int
    dst: int
    dst_swap: int
    src_swap: int


@dataclass(frozen=True)
class Write(Packet):
    opcode: ClassVar[int] = OP_WRITE
    addr: int
    data: tuple[int, ...]


@dataclass(frozen=True)
class Indirect(Packet):
    opcode: ClassVar[int] = OP_INDIRECT
    vmid: int
    addr: int
    size_dw: int
    csa: int


@dataclass(frozen=True)
class Fence(Packet):
    opcode: ClassVar[int] = OP_FENCE
    mtype: int
    addr: int
    value: int


@dataclass(frozen=True)
class Trap(Packet):
    opcode: ClassVar[int] = OP_TRAP
    int_ctx: int


@dataclass(frozen=True)
class PollRegmem(Packet):
    opcode: ClassVar[int] = OP_POLL_REGMEM
    hdp_flush: bool
    function: int
    mem_poll: bool
    addr: int
    value: int
    mask: int
    interval: int
    retry_count: int


@dataclass(frozen=True)
class Atomic(Packet):
    opcode: ClassVar[int] = OP_ATOMIC
    operation: int
    loop: bool
    addr: int
    src: int
    cmp: int
    loop_interval: int


@dataclass(frozen=True)
class Timestamp(Packet):
    opcode: ClassVar[int] = OP_TIMESTAMP
    addr: int


def _q(lo: int, hi: int) -> int:
    return lo | (hi << 32)


# op -> (fixed size in dwords, or None when it depends on the packet)
_SIZES = {OP_COPY: 7, OP_INDIRECT: 6, OP_FENCE: 4, OP_TRAP: 2, OP_POLL_REGMEM: 6, OP_ATOMIC: 8, OP_TIMESTAMP: 3}


def decode_one(dwords: Sequence[int], offset: int = 0) -> Packet:
    """The packet starting at `dwords[offset]` (see `decode`)."""
    hdr = int(dwords[offset])
    op, sub_op = hdr & 0xFF, (hdr >> 8) & 0xFF
    if op == OP_NOP:
        size = ((hdr >> 16) & 0x3FFF) + 1
    elif op == OP_WRITE:
        size = 4 + ((int(dwords[offset + 3]) & 0xFFFFF) + 1 if offset + 3 < len(dwords) else 0)
    elif op in _SIZES:
        size = _SIZES[op]
    else:
        raise ValueError(f"SDMA: unknown op {op} (sub_op {sub_op}) at dword {offset} (header {hdr:#010x})")
    if offset + size > len(dwords):
        raise ValueError(f"SDMA: {OP_NAMES[op]} at dword {offset} needs {size} dwords, only {len(dwords) - offset} "
                         "left (truncated stream)")
    d = [int(x) for x in dwords[offset:offset + size]]
    if op == OP_NOP:
        return Nop(offset, size)
    if op == OP_COPY:
        if sub_op != SUB_OP_COPY_LINEAR:
            raise ValueError(f"SDMA: COPY sub_op {sub_op} at dword {offset} is not COPY_LINEAR (0)")
        return CopyLinear(offset, size, (d[1] & (MAX_COPY_SIZE - 1)) + 1, _q(d[3], d[4]), _q(d[5], d[6]),
                          (d[2] >> 16) & 3, (d[2] >> 24) & 3)
    if op == OP_WRITE:
        return Write(offset, size, _q(d[1], d[2]), tuple(d[4:]))
    if op == OP_INDIRECT:
        return Indirect(offset, size, (hdr >> 16) & 0xF, _q(d[1], d[2]), d[3] & 0xFFFFF, _q(d[4], d[5]))
    if op == OP_FENCE:
        return Fence(offset, size, (hdr >> 16) & 7, _q(d[1], d[2]), d[3])
    if op == OP_TRAP:
        return Trap(offset, size, d[1] & TRAP_INT_CTX_MASK)
    if op == OP_POLL_REGMEM:
        return PollRegmem(offset, size, bool(hdr >> 26 & 1), (hdr >> 28) & 7, bool(hdr >> 31), _q(d[1], d[2]), d[3],
                          d[4], d[5] & 0xFFFF, (d[5] >> 16) & 0xFFF)
    if op == OP_ATOMIC:
        return Atomic(offset, size, (hdr >> 25) & 0x7F, bool(hdr >> 16 & 1), _q(d[1], d[2]), _q(d[3], d[4]),
                      _q(d[5], d[6]), d[7] & 0x1FFF)
    if sub_op != SUB_OP_TIMESTAMP_GET_GLOBAL:
        raise ValueError(f"SDMA: TIMESTAMP sub_op {sub_op} at dword {offset} is not GET_GLOBAL (2)")
    return Timestamp(offset, size, _q(d[1], d[2]))


def decode(dwords: Sequence[int]) -> list[Packet]:
    """Every packet in `dwords`, in order (the zero dwords of a padded ring tail are 1-dword NOPs)."""
    out: list[Packet] = []
    offset = 0
    while offset < len(dwords):
        pkt = decode_one(dwords, offset)
        out.append(pkt)
        offset += pkt.size
    return out
