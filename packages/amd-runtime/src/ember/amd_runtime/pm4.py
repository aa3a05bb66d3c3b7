"""PM4 type-3 packets for the gfx9 (soc15) compute queue: pure builders to dword lists, and `decode`, their inverse.

A packet is `PACKET3(op, n) = 3<<30 | n<<16 | op<<8` followed by n+1 body dwords. Register packets take absolute
dword register addresses (SET_SH_REG from 0x2C00, SET_UCONFIG_REG from 0xC000). Field layouts are those of the
gfx9 MEC firmware (amdgpu `soc15d.h`, tinygrad `autogen/am/pm4_soc15.py`); gfx942 and gfx950 share them.

    q = [*pm4.wait_reg_mem(mem=sig, reference=5), *pm4.release_mem(sig, 6, data_sel=pm4.DATA_SEL_32BIT_LOW)]
    [p.op for p in pm4.decode(q)]    # ['WAIT_REG_MEM', 'RELEASE_MEM']

`decode` returns frozen dataclasses (one per packet kind, each with its dword `offset` and `size`), and raises
ValueError on a truncated stream, a packet that is not type 3, or an opcode it does not know: the mock command
processor executes exactly what this module can build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

# opcodes (PACKET3_*)
NOP, DISPATCH_DIRECT, PRED_EXEC, WRITE_DATA, WAIT_REG_MEM = 0x10, 0x15, 0x23, 0x37, 0x3C
INDIRECT_BUFFER, EVENT_WRITE, RELEASE_MEM, ACQUIRE_MEM, SET_SH_REG, SET_UCONFIG_REG = 0x3F, 0x46, 0x49, 0x58, 0x76, 0x79
OPCODE_NAMES = {NOP: "NOP", DISPATCH_DIRECT: "DISPATCH_DIRECT", PRED_EXEC: "PRED_EXEC", WRITE_DATA: "WRITE_DATA",
                WAIT_REG_MEM: "WAIT_REG_MEM", INDIRECT_BUFFER: "INDIRECT_BUFFER", EVENT_WRITE: "EVENT_WRITE",
                RELEASE_MEM: "RELEASE_MEM", ACQUIRE_MEM: "ACQUIRE_MEM", SET_SH_REG: "SET_SH_REG",
                SET_UCONFIG_REG: "SET_UCONFIG_REG"}

SH_REG_START, SH_REG_END = 0x2C00, 0x3000
UCONFIG_REG_START, UCONFIG_REG_END = 0xC000, 0xC400
MAX_COUNT = 0x3FFF  # the header's count field (body dwords - 1); a 1-dword NOP uses it with no body

# ACQUIRE_MEM CP_COHER_CNTL bits (gfx9)
COHER_TC_WB_ACTION_ENA = 1 << 18  # write back L2 (gl2)
COHER_TCL1_ACTION_ENA = 1 << 22  # invalidate L1 (gl1)
COHER_TC_ACTION_ENA = 1 << 23  # invalidate L2 (gl2)
COHER_SH_KCACHE_ACTION_ENA = 1 << 27  # scalar cache (glk)
COHER_SH_ICACHE_ACTION_ENA = 1 << 29  # instruction cache (gli)
ACQUIRE_MEM_POLL_INTERVAL = 0x0A

# RELEASE_MEM / EVENT_WRITE
CACHE_FLUSH_AND_INV_TS_EVENT = 0x14
CS_PARTIAL_FLUSH = 0x07
EVENT_INDEX_END_OF_PIPE, EVENT_INDEX_CS_PARTIAL_FLUSH = 5, 4
EOP_TC_WB_ACTION_EN, EOP_TC_NC_ACTION_EN = 1 << 15, 1 << 19
DATA_SEL_NONE, DATA_SEL_32BIT_LOW, DATA_SEL_64BIT, DATA_SEL_GPU_CLOCK = 0, 1, 2, 3
INT_SEL_NONE, INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM = 0, 2
DST_SEL_MEMORY = 0

# WAIT_REG_MEM
FUNC_ALWAYS, FUNC_LT, FUNC_LE, FUNC_EQ, FUNC_NE, FUNC_GE, FUNC_GT = 0, 1, 2, 3, 4, 5, 6
MEM_SPACE_REGISTER, MEM_SPACE_MEMORY = 0, 1
OPERATION_WAIT, OPERATION_WRITE_WAIT = 0, 1
WAIT_REG_MEM_POLL_INTERVAL = 4

# DISPATCH_DIRECT initiator: COMPUTE_SHADER_EN | FORCE_START_AT_000
DISPATCH_INITIATOR_GFX9 = 0x5
# INDIRECT_BUFFER
IB_VALID, IB_CHAIN, IB_MAX_DWORDS = 1 << 23, 1 << 20, (1 << 20) - 1
# WRITE_DATA
WRITE_DATA_DST_SEL_REGISTER, WRITE_DATA_DST_SEL_TC_L2, WRITE_DATA_DST_SEL_MEMORY = 0, 2, 5


def _u32(name: str, value: int) -> int:
    if not 0 <= value < 1 << 32:
        raise ValueError(f"PM4: {name} {value:#x} does not fit in 32 bits")
    return value


def _lo_hi(name: str, value: int, align: int = 1) -> list[int]:
    if not 0 <= value < 1 << 64:
        raise ValueError(f"PM4: {name} {value:#x} does not fit in 64 bits")
    if value % align:
        raise ValueError(f"PM4: {name} {value:#x} must be {align}-byte aligned")
    return [value & 0xFFFFFFFF, value >> 32]


def header(op: int, body_dwords: int, shader_type_compute: bool = False) -> int:
    """The type-3 header of a packet of `op` with `body_dwords` dwords after it (1 to 0x4000); bit 1 marks a
    compute-shader-type packet (PACKET3_COMPUTE)."""
    if not 1 <= body_dwords <= MAX_COUNT + 1:
        raise ValueError(f"PM4: a packet body has 1 to {MAX_COUNT + 1} dwords, got {body_dwords}")
    return (3 << 30) | ((body_dwords - 1) << 16) | ((op & 0xFF) << 8) | (int(shader_type_compute) << 1)


def packet3(op: int, *body: int) -> list[int]:
    """`PACKET3(op, len(body)-1)` then the body dwords."""
    return [header(op, len(body)), *(_u32("body dword", v) for v in body)]


def nop(dwords: int = 1) -> list[int]:
    """Padding of exactly `dwords` dwords: a lone header (count 0x3FFF) for 1, else a header and zeros."""
    if dwords < 1:
        raise ValueError(f"PM4: nop needs at least 1 dword, got {dwords}")
    if dwords == 1:
        return [(3 << 30) | (MAX_COUNT << 16) | (NOP << 8)]
    return packet3(NOP, *([0] * (dwords - 1)))


def acquire_mem(gli: bool = True, glk: bool = True, gl1: bool = True, gl2: bool = True, base: int = 0,
                size: int = (1 << 64) - 1) -> list[int]:
    """ACQUIRE_MEM (gfx9, 7 dwords): invalidate the instruction (gli), scalar (glk), L1 (gl1) caches and write back
    and invalidate L2 (gl2) over [base, base+size) (the default: everything); poll interval 0xA."""
    cntl = (COHER_SH_ICACHE_ACTION_ENA * gli | COHER_SH_KCACHE_ACTION_ENA * glk | COHER_TCL1_ACTION_ENA * gl1 |
            (COHER_TC_ACTION_ENA | COHER_TC_WB_ACTION_ENA) * gl2)
    return packet3(ACQUIRE_MEM, cntl, *_lo_hi("size", size), *_lo_hi("base", base), ACQUIRE_MEM_POLL_INTERVAL)


def release_mem(addr: int, value: int = 0, data_sel: int = DATA_SEL_32BIT_LOW, int_sel: int = INT_SEL_NONE,
                ctxid: int = 0, cache_flush: bool = False, event_type: int = CACHE_FLUSH_AND_INV_TS_EVENT,
                event_index: int = EVENT_INDEX_END_OF_PIPE) -> list[int]:
    """RELEASE_MEM (gfx9, 8 dwords): at the end of pipe, optionally write back L2 (`cache_flush`), then write to
    memory at `addr` per `data_sel` (0 nothing, 1 the low 32 bits of `value`, 2 all 64 bits, 3 the 64-bit GPU clock
    counter) and raise an interrupt per `int_sel` (2: after the write is confirmed) carrying `ctxid`.

    A timeline signal is `release_mem(sig.value_addr, v)`; a KFD event adds `release_mem(mailbox, event_id,
    int_sel=2, ctxid=event_id)`; a timestamp is `release_mem(sig.timestamp_addr, data_sel=DATA_SEL_GPU_CLOCK)`."""
    if data_sel not in (DATA_SEL_NONE, DATA_SEL_32BIT_LOW, DATA_SEL_64BIT, DATA_SEL_GPU_CLOCK):
        raise ValueError(f"PM4: release_mem data_sel {data_sel} is not 0 (none), 1 (32-bit), 2 (64-bit) or 3 (clock)")
    if int_sel not in range(7):
        raise ValueError(f"PM4: release_mem int_sel {int_sel} is not in 0..6")
    event = (event_type & 0x3F) | ((event_index & 0xF) << 8) | (EOP_TC_WB_ACTION_EN | EOP_TC_NC_ACTION_EN) * cache_flush
    memsel = (data_sel << 29) | (int_sel << 24) | (DST_SEL_MEMORY << 16)
    align = 8 if data_sel in (DATA_SEL_64BIT, DATA_SEL_GPU_CLOCK) else 4
    return packet3(RELEASE_MEM, event, memsel, *_lo_hi("addr", addr, align), *_lo_hi("value", value),
                   _u32("ctxid", ctxid))


def wait_reg_mem(mem: int | None = None, reference: int = 0, mask: int = 0xFFFFFFFF, function: int = FUNC_GE,
                 reg_req: int | None = None, reg_done: int | None = None,
                 poll_interval: int = WAIT_REG_MEM_POLL_INTERVAL) -> list[int]:
    """WAIT_REG_MEM (7 dwords): wait until `(*mem & mask) <function> reference` for the dword at memory address
    `mem` (FUNC_GE for a timeline signal), or, with `reg_req`/`reg_done` instead of `mem`, write `reg_req` and wait
    on `reg_done` (the HDP flush of a memory barrier)."""
    if (mem is None) == (reg_req is None and reg_done is None):
        raise ValueError("PM4: wait_reg_mem takes either mem= or reg_req= and reg_done=")
    if function not in range(7):
        raise ValueError(f"PM4: wait_reg_mem function {function} is not in 0..6")
    if mem is not None:
        info, addr = function | (MEM_SPACE_MEMORY << 4) | (OPERATION_WAIT << 6), _lo_hi("mem", mem, 4)
    else:
        if reg_req is None or reg_done is None:
            raise ValueError("PM4: wait_reg_mem on registers needs both reg_req and reg_done")
        info, addr = function | (MEM_SPACE_REGISTER << 4) | (OPERATION_WRITE_WAIT << 6), [_u32("reg_req", reg_req),
                                                                                           _u32("reg_done", reg_done)]
    return packet3(WAIT_REG_MEM, info, *addr, _u32("reference", reference), _u32("mask", mask), poll_interval)


def _set_reg(op: int, start: int, end: int, what: str, reg: int, values: Sequence[int]) -> list[int]:
    if not values:
        raise ValueError(f"PM4: {what} of register {reg:#x} needs at least one value")
    if not start <= reg or reg + len(values) > end:
        raise ValueError(f"PM4: {what} registers {reg:#x}..{reg + len(values) - 1:#x} are outside "
                         f"{start:#x}..{end - 1:#x}")
    return packet3(op, reg - start, *values)


def set_sh_reg(reg: int, *values: int) -> list[int]:
    """SET_SH_REG: write `values` to the consecutive SH registers from absolute address `reg` (0x2C00..0x2FFF),
    e.g. COMPUTE_PGM_LO 0x2E0C, COMPUTE_USER_DATA_0 0x2E40."""
    return _set_reg(SET_SH_REG, SH_REG_START, SH_REG_END, "set_sh_reg", reg, values)


def set_uconfig_reg(reg: int, *values: int) -> list[int]:
    """SET_UCONFIG_REG: write `values` to the consecutive UCONFIG registers from `reg` (0xC000..0xC3FF), e.g.
    GRBM_GFX_INDEX 0xC200."""
    return _set_reg(SET_UCONFIG_REG, UCONFIG_REG_START, UCONFIG_REG_END, "set_uconfig_reg", reg, values)


def dispatch_direct(x: int, y: int = 1, z: int = 1, initiator: int = DISPATCH_INITIATOR_GFX9) -> list[int]:
    """DISPATCH_DIRECT: launch x*y*z *workgroups* (not work-items; the workgroup shape is in
    COMPUTE_NUM_THREAD_X..Z)."""
    for name, v in (("x", x), ("y", y), ("z", z)):
        if not 1 <= v < 1 << 32:
            raise ValueError(f"PM4: dispatch_direct {name} = {v} workgroups, accepted 1..2**32-1")
    return packet3(DISPATCH_DIRECT, x, y, z, initiator)


def indirect_buffer(addr: int, size_dw: int, chain: bool = False) -> list[int]:
    """INDIRECT_BUFFER (4 dwords): run `size_dw` dwords (1..0xFFFFF) of PM4 at `addr` (4-byte aligned), then come
    back (or, with `chain`, continue there)."""
    if not 1 <= size_dw <= IB_MAX_DWORDS:
        raise ValueError(f"PM4: indirect_buffer size {size_dw} dwords, accepted 1..{IB_MAX_DWORDS}")
    return packet3(INDIRECT_BUFFER, *_lo_hi("addr", addr, 4), size_dw | IB_VALID | IB_CHAIN * chain)


def event_write(event_type: int = CS_PARTIAL_FLUSH, event_index: int = EVENT_INDEX_CS_PARTIAL_FLUSH,
                addr: int | None = None) -> list[int]:
    """EVENT_WRITE: `event_type` with `event_index` (default CS_PARTIAL_FLUSH, index 4: wait for the dispatches
    before it to finish); events that report to memory take an 8-byte aligned `addr`."""
    dw = (event_type & 0x3F) | ((event_index & 0xF) << 8)
    return packet3(EVENT_WRITE, dw) if addr is None else packet3(EVENT_WRITE, dw, *_lo_hi("addr", addr, 8))


def write_data(addr: int, *data: int, dst_sel: int = WRITE_DATA_DST_SEL_MEMORY, wr_confirm: bool = True,
               one_addr: bool = False, cache_policy: int = 0, engine_sel: int = 0) -> list[int]:
    """WRITE_DATA: write the dwords `data` from `addr` (a 4-byte aligned memory address for dst_sel 5 or 2, a
    register for dst_sel 0), waiting for the write to be confirmed; `one_addr` writes them all to the same place."""
    if not data:
        raise ValueError("PM4: write_data needs at least one data dword")
    if dst_sel not in (WRITE_DATA_DST_SEL_REGISTER, WRITE_DATA_DST_SEL_TC_L2, WRITE_DATA_DST_SEL_MEMORY):
        raise ValueError(f"PM4: write_data dst_sel {dst_sel} is not 0 (register), 2 (L2) or 5 (memory)")
    info = (dst_sel << 8) | (int(one_addr) << 16) | (int(wr_confirm) << 20) | ((cache_policy & 3) << 25) | \
        ((engine_sel & 3) << 30)
    where = [_u32("register", addr), 0] if dst_sel == WRITE_DATA_DST_SEL_REGISTER else _lo_hi("addr", addr, 4)
    return packet3(WRITE_DATA, info, *where, *data)


def pred_exec(xcc_mask: int, body: Sequence[int]) -> list[int]:
    """PRED_EXEC: the packets in `body` run only on the XCCs in `xcc_mask` (8 bits); valid only inside an IB."""
    if not 0 < xcc_mask < 256:
        raise ValueError(f"PM4: pred_exec xcc_mask {xcc_mask:#x}, accepted 0x01..0xFF")
    if not 1 <= len(body) < 1 << 14:
        raise ValueError(f"PM4: pred_exec body of {len(body)} dwords, accepted 1..{(1 << 14) - 1}")
    return [*packet3(PRED_EXEC, (xcc_mask << 24) | len(body)), *body]


# --- decode
@dataclass(frozen=True)
class Packet:
    """A decoded packet: its dword `offset` in the stream and `size` in dwords (header included)."""

    offset: int
    size: int

    opcode: ClassVar[int] = -1

    @property
    def op(self) -> str:
        """The packet's name, as in OPCODE_NAMES ('RELEASE_MEM')."""
        return OPCODE_NAMES[self.opcode]


@dataclass(frozen=True)
class Nop(Packet):
    opcode: ClassVar[int] = NOP


@dataclass(frozen=True)
class AcquireMem(Packet):
    opcode: ClassVar[int] = ACQUIRE_MEM
    cp_coher_cntl: int
    coher_size: int
    coher_base: int
    poll_interval: int


@dataclass(frozen=True)
class ReleaseMem(Packet):
    opcode: ClassVar[int] = RELEASE_MEM
    event_type: int
    event_index: int
    cache_flags: int
    data_sel: int
    int_sel: int
    dst_sel: int
    addr: int
    data: int
    ctxid: int


@dataclass(frozen=True)
class WaitRegMem(Packet):
    opcode: ClassVar[int] = WAIT_REG_MEM
    function: int
    mem_space: int
    operation: int
    engine: int
    addr: int  # memory address (mem_space 1); for registers, reg_req | reg_done << 32
    reference: int
    mask: int
    poll_interval: int

    @property
    def reg_req(self) -> int:
        return self.addr & 0xFFFFFFFF

    @property
    def reg_done(self) -> int:
        return self.addr >> 32


@dataclass(frozen=True)
class SetShReg(Packet):
    opcode: ClassVar[int] = SET_SH_REG
    reg: int  # absolute register address of the first value
    values: tuple[int, ...]


@dataclass(frozen=True)
class SetUconfigReg(Packet):
    opcode: ClassVar[int] = SET_UCONFIG_REG
    reg: int
    values: tuple[int, ...]


@dataclass(frozen=True)
class DispatchDirect(Packet):
    opcode: ClassVar[int] = DISPATCH_DIRECT
    x: int
    y: int
    z: int
    initiator: int


@dataclass(frozen=True)
class IndirectBuffer(Packet):
    opcode: ClassVar[int] = INDIRECT_BUFFER
    addr: int
    size_dw: int
    valid: bool
    chain: bool


@dataclass(frozen=True)
class EventWrite(Packet):
    opcode: ClassVar[int] = EVENT_WRITE
    event_type: int
    event_index: int
    addr: int | None


@dataclass(frozen=True)
class WriteData(Packet):
    opcode: ClassVar[int] = WRITE_DATA
    dst_sel: int
    one_addr: bool
    wr_confirm: bool
    cache_policy: int
    engine_sel: int
    addr: int
    data: tuple[int, ...]


@dataclass(frozen=True)
class PredExec(Packet):
    opcode: ClassVar[int] = PRED_EXEC
    xcc_mask: int
    dword_count: int  # the predicated packets follow (decoded as ordinary packets)


def _q(lo: int, hi: int) -> int:
    return lo | (hi << 32)


def _expect(name: str, body: Sequence[int], n: int | tuple[int, ...], offset: int) -> None:
    ok = len(body) == n if isinstance(n, int) else len(body) in n
    if not ok:
        raise ValueError(f"PM4: {name} at dword {offset} has {len(body)} body dwords, expected {n}")


def decode_one(dwords: Sequence[int], offset: int = 0) -> Packet:
    """The packet starting at `dwords[offset]` (see `decode`)."""
    hdr = dwords[offset]
    if hdr >> 30 != 3:
        raise ValueError(f"PM4: dword {offset} ({hdr:#010x}) is a type-{hdr >> 30} packet; only type 3 is supported")
    op, count = (hdr >> 8) & 0xFF, (hdr >> 16) & MAX_COUNT
    if op == NOP and count == MAX_COUNT:
        return Nop(offset, 1)
    size = count + 2
    if offset + size > len(dwords):
        raise ValueError(f"PM4: {OPCODE_NAMES.get(op, hex(op))} at dword {offset} needs {size} dwords, only "
                         f"{len(dwords) - offset} left (truncated stream)")
    b = [int(d) for d in dwords[offset + 1:offset + size]]
    if op == NOP:
        return Nop(offset, size)
    if op == ACQUIRE_MEM:
        _expect("ACQUIRE_MEM", b, 6, offset)
        return AcquireMem(offset, size, b[0], _q(b[1], b[2]), _q(b[3], b[4]), b[5])
    if op == RELEASE_MEM:
        _expect("RELEASE_MEM", b, 7, offset)
        return ReleaseMem(offset, size, b[0] & 0x3F, (b[0] >> 8) & 0xF, b[0] & ~0xF3F & 0xFFFFFFFF, (b[1] >> 29) & 7,
                          (b[1] >> 24) & 7, (b[1] >> 16) & 3, _q(b[2], b[3]), _q(b[4], b[5]), b[6])
    if op == WAIT_REG_MEM:
        _expect("WAIT_REG_MEM", b, 6, offset)
        return WaitRegMem(offset, size, b[0] & 7, (b[0] >> 4) & 1, (b[0] >> 6) & 3, (b[0] >> 8) & 3, _q(b[1], b[2]),
                          b[3], b[4], b[5])
    if op in (SET_SH_REG, SET_UCONFIG_REG):
        if len(b) < 2:
            raise ValueError(f"PM4: {OPCODE_NAMES[op]} at dword {offset} writes no register")
        cls, start = (SetShReg, SH_REG_START) if op == SET_SH_REG else (SetUconfigReg, UCONFIG_REG_START)
        return cls(offset, size, start + (b[0] & 0xFFFF), tuple(b[1:]))
    if op == DISPATCH_DIRECT:
        _expect("DISPATCH_DIRECT", b, 4, offset)
        return DispatchDirect(offset, size, b[0], b[1], b[2], b[3])
    if op == INDIRECT_BUFFER:
        _expect("INDIRECT_BUFFER", b, 3, offset)
        return IndirectBuffer(offset, size, _q(b[0] & ~3, b[1] & 0xFFFF), b[2] & IB_MAX_DWORDS, bool(b[2] & IB_VALID),
                              bool(b[2] & IB_CHAIN))
    if op == EVENT_WRITE:
        _expect("EVENT_WRITE", b, (1, 3), offset)
        return EventWrite(offset, size, b[0] & 0x3F, (b[0] >> 8) & 0xF, _q(b[1], b[2]) if len(b) == 3 else None)
    if op == WRITE_DATA:
        if len(b) < 4:
            raise ValueError(f"PM4: WRITE_DATA at dword {offset} has no data")
        return WriteData(offset, size, (b[0] >> 8) & 0xF, bool(b[0] >> 16 & 1), bool(b[0] >> 20 & 1),
                         (b[0] >> 25) & 3, (b[0] >> 30) & 3, _q(b[1], b[2]), tuple(b[3:]))
    if op == PRED_EXEC:
        _expect("PRED_EXEC", b, 1, offset)
        return PredExec(offset, size, b[0] >> 24, b[0] & 0x3FFF)
    raise ValueError(f"PM4: unknown opcode {op:#04x} at dword {offset} (header {hdr:#010x})")


def decode(dwords: Sequence[int]) -> list[Packet]:
    """Every packet in `dwords`, in order (the body of a PRED_EXEC is decoded as the packets that follow it)."""
    out: list[Packet] = []
    offset = 0
    while offset < len(dwords):
        pkt = decode_one(dwords, offset)
        out.append(pkt)
        offset += pkt.size
    return out
