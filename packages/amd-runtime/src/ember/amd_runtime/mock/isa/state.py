"""Wave state (SGPR/VGPR/AGPR files, EXEC/VCC/SCC, MODE, LDS) and the operand readers/writers shared by all formats.

Vector values are NumPy arrays over the 64 lanes; a scalar operand read by a vector instruction is a 1-element
array that broadcasts. SGPRs are Python ints (SALU code runs on them directly). EXEC is s[126:127], VCC s[106:107],
M0 s[124], as in the operand encoding (gfx942_isa.md §1.4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.amd_runtime.mock.isa.memory import GlobalMemory

WAVE_SIZE = 64
NUM_SGPRS = 128
VCC_LO, M0, EXEC_LO = 106, 124, 126
NEXT, END, BARRIER = None, -1, -2  # an instruction's return: fall through, s_endpgm, s_barrier (then fall through)
# Aperture bases (gfx942_isa.md §4.1 leaves them to the implementation); 32-bit reads give the high dword.
SHARED_BASE = 0x0001_0000_0000_0000
PRIVATE_BASE = 0x0002_0000_0000_0000
APERTURE_SIZE = 1 << 32

LANES = np.arange(WAVE_SIZE, dtype=np.uint32)
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
INV_2PI = {"f32": 0x3E22F983, "f64": 0x3FC45F306DC9C882, "f16": 0x3118}
FLOAT_CONSTS = {  # operand code -> bits per float type (gfx942_isa.md §1.4)
    240: (0x3F000000, 0x3FE0000000000000, 0x3800), 241: (0xBF000000, 0xBFE0000000000000, 0xB800),
    242: (0x3F800000, 0x3FF0000000000000, 0x3C00), 243: (0xBF800000, 0xBFF0000000000000, 0xBC00),
    244: (0x40000000, 0x4000000000000000, 0x4000), 245: (0xC0000000, 0xC000000000000000, 0xC000),
    246: (0x40800000, 0x4010000000000000, 0x4400), 247: (0xC0800000, 0xC010000000000000, 0xC400),
    248: (0x3E22F983, 0x3FC45F306DC9C882, 0x3118),
}

_MASK_CACHE: dict[int, np.ndarray] = {}


def exec_mask(bits: int) -> np.ndarray:
    """The 64-lane bool array of a lane mask (cached, read-only)."""
    m = _MASK_CACHE.get(bits)
    if m is None:
        if len(_MASK_CACHE) > 4096:
            _MASK_CACHE.clear()
        m = np.unpackbits(np.array([bits], "<u8").view(np.uint8), bitorder="little").astype(bool)
        m.flags.writeable = False
        _MASK_CACHE[bits] = m
    return m


def mask_bits(mask: np.ndarray) -> int:
    """The 64-bit integer of a 64-lane bool array."""
    return int(np.packbits(mask, bitorder="little").view("<u8")[0])


class Wave:
    """The architectural state of one wave64."""

    __slots__ = ("s", "v", "a", "scc", "pc", "lds", "mem", "_mode", "count", "wave_id", "scratch", "done",
                 "trap_status", "workgroup", "ftz_in32", "ftz_out32", "ftz_in64", "ftz_out64")

    def __init__(self, mem: GlobalMemory, lds: np.ndarray, mode: int, wave_id: int = 0,
                 num_vgprs: int = 256, num_agprs: int = 256):
        self.s: list[int] = [0] * NUM_SGPRS
        self.v = np.zeros((num_vgprs, WAVE_SIZE), np.uint32)
        self.a = np.zeros((num_agprs, WAVE_SIZE), np.uint32)
        self.scc = 0
        self.pc = 0
        self.lds = lds
        self.mem = mem
        self.mode = mode
        self.count = 0
        self.wave_id = wave_id
        self.scratch: np.ndarray | None = None
        self.done = False
        self.trap_status = 0
        self.workgroup: tuple[int, int, int] = (0, 0, 0)

    @property
    def exec(self) -> int:
        return self.s[126] | (self.s[127] << 32)

    @exec.setter
    def exec(self, value: int) -> None:
        self.s[126], self.s[127] = value & M32, (value >> 32) & M32

    @property
    def vcc(self) -> int:
        return self.s[106] | (self.s[107] << 32)

    @vcc.setter
    def vcc(self, value: int) -> None:
        self.s[106], self.s[107] = value & M32, (value >> 32) & M32

    def mask(self) -> np.ndarray:
        """EXEC as a bool array over the lanes."""
        return exec_mask(self.s[126] | (self.s[127] << 32))

    def sget64(self, n: int) -> int:
        return self.s[n] | (self.s[n + 1] << 32)

    def sset64(self, n: int, value: int) -> None:
        self.s[n], self.s[n + 1] = value & M32, (value >> 32) & M32

    # Float mode (MODE register, gfx942_isa.md §3.1/§4.3): denorm field 0 flushes in+out, 1 out, 2 in, 3 none.
    @property
    def mode(self) -> int:
        return self._mode

    @mode.setter
    def mode(self, value: int) -> None:
        self._mode = value
        d32, d64 = (value >> 4) & 3, (value >> 6) & 3
        self.ftz_in32, self.ftz_out32 = d32 in (0, 2), d32 in (0, 1)
        self.ftz_in64, self.ftz_out64 = d64 in (0, 2), d64 in (0, 1)

    def flush(self, kind: str) -> tuple[bool, bool]:
        """(flush denormal inputs, flush denormal results) for f32, or for f16/f64 (any other kind)."""
        return (self.ftz_in32, self.ftz_out32) if kind == "f32" else (self.ftz_in64, self.ftz_out64)


# ---------------------------------------------------------------------------------------------- scalar operands
def _aperture(code: int) -> int:
    return {235: SHARED_BASE, 236: SHARED_BASE + APERTURE_SIZE - 1, 237: PRIVATE_BASE,
            238: PRIVATE_BASE + APERTURE_SIZE - 1}[code]


def constant_value(code: int, kind: str, literal: int | None) -> int | None:
    """The bits of a constant operand (inline or literal) read as `kind`; None if `code` is not a constant."""
    wide = kind in ("u64", "i64", "f64", "b64")
    if 128 <= code <= 208:
        val = code - 128 if code <= 192 else 192 - code
        if kind in ("f16", "u16", "i16", "bf16"):
            return val & 0xFFFF
        return val & (M64 if wide else M32)
    if 240 <= code <= 248:
        f32, f64, f16 = FLOAT_CONSTS[code]
        return {"f64": f64, "f16": f16, "bf16": f32 >> 16}.get(kind, f32)
    if code == 255:
        if literal is None:
            raise NotImplementedError("operand 255 (a literal) in an encoding that carries none (VOP3/VOP3P on gfx942)")
        if kind == "f64":
            return literal << 32
        if kind == "i64":
            return literal | (0xFFFFFFFF00000000 if literal & 0x80000000 else 0)
        if kind in ("f16", "u16", "i16", "bf16"):
            return literal & 0xFFFF
        return literal
    if 235 <= code <= 238:
        base = _aperture(code)
        return base if wide else base >> 32
    return None


def scalar_reader(code: int, literal: int | None, wide: bool = False, kind: str = "u32") -> Callable[[Wave], int]:
    """A function reading operand `code` (< 256) as an int of 32 or 64 bits."""
    const = constant_value(code, "b64" if wide and kind == "u32" else kind, literal)
    if const is not None:
        return lambda w: const
    if code <= 127 and code != 125:
        if wide:
            return lambda w: w.s[code] | (w.s[code + 1] << 32)
        return lambda w: w.s[code]
    if code == 251:
        return lambda w: int(w.vcc == 0)
    if code == 252:
        return lambda w: int(w.exec == 0)
    if code == 253:
        return lambda w: w.scc
    raise NotImplementedError(f"scalar operand {code} (src_pops_exiting_wave_id / lds_direct / reserved)")


def sdst_writer(code: int, wide: bool = False) -> Callable[[Wave, int], None]:
    """A function storing an int into SGPR destination `code`."""
    if code > 127 or code == 125:
        raise NotImplementedError(f"scalar destination {code}")
    if wide:
        def write64(w: Wave, value: int) -> None:
            w.s[code], w.s[code + 1] = value & M32, (value >> 32) & M32
        return write64

    def write32(w: Wave, value: int) -> None:
        w.s[code] = value & M32
    return write32


# ---------------------------------------------------------------------------------------------- vector operands
_NP_KIND = {"u32": np.uint32, "i32": np.int32, "f32": np.float32, "u64": np.uint64, "i64": np.int64,
            "f64": np.float64, "u16": np.uint16, "i16": np.int16, "f16": np.float16, "bf16": np.uint16,
            "u8": np.uint8, "i8": np.int8}
WIDE = frozenset({"u64", "i64", "f64"})
HALF = frozenset({"u16", "i16", "f16", "bf16"})


def raw_reader(code: int, kind: str, literal: int | None) -> Callable[[Wave], np.ndarray]:
    """Raw lane bits of a vector-instruction source: uint32, or uint64 for 64-bit kinds."""
    wide = kind in WIDE
    if code >= 256:
        n = code - 256
        if wide:
            return lambda w: w.v[n].astype(np.uint64) | (w.v[n + 1].astype(np.uint64) << np.uint64(32))
        return lambda w: w.v[n]
    const = constant_value(code, kind, literal)
    dt = np.uint64 if wide else np.uint32
    if const is not None:
        arr = np.array([const], dt)
        arr.flags.writeable = False
        return lambda w: arr
    get = scalar_reader(code, literal, wide)
    return lambda w: np.array([get(w)], dt)


def vsrc(code: int, kind: str, literal: int | None, hi: bool = False, neg: bool = False,
         absolute: bool = False) -> Callable[[Wave], np.ndarray]:
    """A typed vector source with the VOP3 input modifiers (abs, then neg) for float kinds."""
    raw = raw_reader(code, kind, literal)
    npk = _NP_KIND[kind]
    if code >= 256 and kind not in HALF and kind not in WIDE and not neg and not absolute:
        n = code - 256
        return lambda w: w.v[n].view(npk)
    if kind in HALF:
        if hi:
            base = lambda w: (raw(w) >> np.uint32(16)).astype(np.uint16).view(npk)
        else:
            base = lambda w: raw(w).astype(np.uint16).view(npk)
    else:
        base = lambda w: raw(w).view(npk)
    if kind not in ("f32", "f64", "f16"):
        return base
    if absolute and neg:
        return lambda w: -np.abs(base(w))
    if absolute:
        return lambda w: np.abs(base(w))
    if neg:
        return lambda w: -base(w)
    return base


def to_bits(value: Any, kind: str) -> np.ndarray:
    """Lane values of `kind` to raw uint32 bits (uint64 for 64-bit kinds; 16-bit kinds zero-extended)."""
    arr = np.asarray(value)
    if kind in WIDE:
        return arr.astype(_NP_KIND[kind], copy=False).view(np.uint64)
    if kind in HALF:
        if kind == "bf16":
            return arr.astype(np.uint16, copy=False).astype(np.uint32)
        return arr.astype(_NP_KIND[kind], copy=False).view(np.uint16).astype(np.uint32)
    if kind == "f32":
        return arr.astype(np.float32, copy=False).view(np.uint32)
    return arr.astype(np.uint32, copy=False) if arr.dtype != np.int32 else arr.view(np.uint32)


def write_vgpr(w: Wave, n: int, bits: np.ndarray, mask: np.ndarray, full: bool, agpr: bool = False) -> None:
    """Store uint32 (or uint64 -> a register pair) lane bits into VGPR (or AGPR) `n` for the lanes in `mask`."""
    regs = w.a if agpr else w.v
    if bits.dtype == np.uint64:
        lo = (bits & np.uint64(M32)).astype(np.uint32)
        hi = (bits >> np.uint64(32)).astype(np.uint32)
        if full:
            regs[n] = lo
            regs[n + 1] = hi
        else:
            np.copyto(regs[n], lo, where=mask)
            np.copyto(regs[n + 1], hi, where=mask)
        return
    if full:
        regs[n] = bits
    else:
        np.copyto(regs[n], bits, where=mask)


def ftz(x: np.ndarray) -> np.ndarray:
    """Flush denormals to signed zero."""
    tiny = np.finfo(x.dtype).tiny
    return np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x)
