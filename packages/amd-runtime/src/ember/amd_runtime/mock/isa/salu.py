"""Compiling scalar instructions (SOP1/SOP2/SOPC/SOPK/SOPP, SMEM) into per-wave functions.

A compiled function returns None to fall through, a byte address to jump to, `END` (s_endpgm) or `BARRIER`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from ember.amd_runtime.mock.isa.atomics import atomic_fn
from ember.amd_runtime.mock.isa.decode import Instruction
from ember.amd_runtime.mock.isa.state import (
    BARRIER,
    END,
    M32,
    M64,
    Wave,
    scalar_reader,
    sdst_writer,
)

Fn = Callable[[Wave], int | None]


_CLOCK = itertools.count(1)


class WaveTrap(RuntimeError):
    """The wave executed s_trap (e.g. `__builtin_trap()`, an assertion) or an unsupported trap condition."""


def _s32(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def _s64(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _sext(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _ovf_add(a: int, b: int, d: int) -> int:
    return int((a >> 31) == (b >> 31) and (d >> 31) != (a >> 31))


def _ovf_sub(a: int, b: int, d: int) -> int:
    return int((a >> 31) != (b >> 31) and (d >> 31) != (a >> 31))


def _bfe(a: int, b: int, bits: int, signed: bool) -> int:
    off, width = b & (bits - 1), (b >> 16) & 0x7F
    field = (a >> off) & ((1 << width) - 1) if width else 0
    if signed and width:
        field = _sext(field, min(width, bits)) & ((1 << bits) - 1)
    return field & ((1 << bits) - 1)


def _ff(x: int, bits: int, one: bool) -> int:
    if not one:
        x = ~x & ((1 << bits) - 1)
    return (x & -x).bit_length() - 1 if x else M32


def _flbit(x: int, bits: int) -> int:
    return bits - x.bit_length() if x else M32


def _flbit_signed(x: int, bits: int) -> int:
    if x >> (bits - 1):
        x = ~x & ((1 << bits) - 1)
    return bits - x.bit_length() if x and x != (1 << bits) - 1 else M32


def _wqm(x: int, bits: int) -> int:
    out = 0
    for q in range(0, bits, 4):
        if (x >> q) & 0xF:
            out |= 0xF << q
    return out


def _quadmask(x: int, bits: int) -> int:
    return sum(1 << q for q in range(bits // 4) if (x >> (4 * q)) & 0xF)


def _bitreplicate(x: int) -> int:
    return sum(3 << (2 * i) for i in range(32) if (x >> i) & 1)


def _brev(x: int, bits: int) -> int:
    return int(f"{x:0{bits}b}"[::-1], 2)


# SOP2: name -> (wide a, wide b, wide d, fn(a, b, scc) -> (d, new scc or None))
_SOP2: dict[str, tuple[bool, bool, bool, Callable[[int, int, int], tuple[int, int | None]]]] = {
    "s_add_u32": (False, False, False, lambda a, b, c: ((a + b) & M32, (a + b) >> 32)),
    "s_sub_u32": (False, False, False, lambda a, b, c: ((a - b) & M32, int(b > a))),
    "s_add_i32": (False, False, False, lambda a, b, c: ((a + b) & M32, _ovf_add(a, b, (a + b) & M32))),
    "s_sub_i32": (False, False, False, lambda a, b, c: ((a - b) & M32, _ovf_sub(a, b, (a - b) & M32))),
    "s_addc_u32": (False, False, False, lambda a, b, c: ((a + b + c) & M32, (a + b + c) >> 32)),
    "s_subb_u32": (False, False, False, lambda a, b, c: ((a - b - c) & M32, int(b + c > a))),
    "s_min_i32": (False, False, False, lambda a, b, c: (a if _s32(a) < _s32(b) else b, int(_s32(a) < _s32(b)))),
    "s_min_u32": (False, False, False, lambda a, b, c: (min(a, b), int(a < b))),
    "s_max_i32": (False, False, False, lambda a, b, c: (a if _s32(a) > _s32(b) else b, int(_s32(a) > _s32(b)))),
    "s_max_u32": (False, False, False, lambda a, b, c: (max(a, b), int(a > b))),
    "s_cselect_b32": (False, False, False, lambda a, b, c: (a if c else b, None)),
    "s_cselect_b64": (True, True, True, lambda a, b, c: (a if c else b, None)),
    "s_mul_i32": (False, False, False, lambda a, b, c: ((a * b) & M32, None)),
    "s_mul_hi_u32": (False, False, False, lambda a, b, c: ((a * b) >> 32, None)),
    "s_mul_hi_i32": (False, False, False, lambda a, b, c: (((_s32(a) * _s32(b)) >> 32) & M32, None)),
    "s_bfm_b32": (False, False, False, lambda a, b, c: ((((1 << (a & 31)) - 1) << (b & 31)) & M32, None)),
    "s_bfm_b64": (False, False, True, lambda a, b, c: ((((1 << (a & 63)) - 1) << (b & 63)) & M64, None)),
    "s_absdiff_i32": (False, False, False, lambda a, b, c: (abs(_s32(a) - _s32(b)) & M32,
                                                           int(abs(_s32(a) - _s32(b)) & M32 != 0))),
    "s_pack_ll_b32_b16": (False, False, False, lambda a, b, c: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None)),
    "s_pack_lh_b32_b16": (False, False, False, lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None)),
    "s_pack_hh_b32_b16": (False, False, False, lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), None)),
}
for _w, _m, _sh in ((False, M32, 31), (True, M64, 63)):
    _sfx = "b64" if _w else "b32"
    for _n, _fn in (("and", lambda a, b, m: a & b), ("or", lambda a, b, m: a | b), ("xor", lambda a, b, m: a ^ b),
                    ("andn2", lambda a, b, m: a & ~b & m), ("orn2", lambda a, b, m: (a | ~b) & m),
                    ("nand", lambda a, b, m: ~(a & b) & m), ("nor", lambda a, b, m: ~(a | b) & m),
                    ("xnor", lambda a, b, m: ~(a ^ b) & m)):
        _SOP2[f"s_{_n}_{_sfx}"] = (_w, _w, _w, lambda a, b, c, fn=_fn, m=_m: (fn(a, b, m), int(fn(a, b, m) != 0)))
    _SOP2[f"s_lshl_{_sfx}"] = (_w, False, _w, lambda a, b, c, m=_m, sh=_sh: ((a << (b & sh)) & m,
                                                                            int((a << (b & sh)) & m != 0)))
    _SOP2[f"s_lshr_{_sfx}"] = (_w, False, _w, lambda a, b, c, sh=_sh: (a >> (b & sh), int(a >> (b & sh) != 0)))
_SOP2["s_ashr_i32"] = (False, False, False,
                      lambda a, b, c: ((_s32(a) >> (b & 31)) & M32, int(_s32(a) >> (b & 31) != 0)))
_SOP2["s_ashr_i64"] = (True, False, True, lambda a, b, c: ((_s64(a) >> (b & 63)) & M64, int(_s64(a) >> (b & 63) != 0)))
for _n, _bits, _signed in (("s_bfe_u32", 32, False), ("s_bfe_i32", 32, True), ("s_bfe_u64", 64, False),
                           ("s_bfe_i64", 64, True)):
    _SOP2[_n] = (_bits == 64, False, _bits == 64,
                 lambda a, b, c, bits=_bits, sg=_signed: (_bfe(a, b, bits, sg), int(_bfe(a, b, bits, sg) != 0)))
for _k in range(1, 5):
    _SOP2[f"s_lshl{_k}_add_u32"] = (False, False, False, lambda a, b, c, k=_k: ((((a << k) & M32) + b) & M32,
                                                                               (((a << k) & M32) + b) >> 32))

# SOP1 pure functions: name -> (wide src, wide dst, fn(a) -> d, sets scc = d != 0)
_SOP1: dict[str, tuple[bool, bool, Callable[[int], int], bool]] = {
    "s_mov_b32": (False, False, lambda a: a, False), "s_mov_b64": (True, True, lambda a: a, False),
    "s_not_b32": (False, False, lambda a: ~a & M32, True), "s_not_b64": (True, True, lambda a: ~a & M64, True),
    "s_wqm_b32": (False, False, lambda a: _wqm(a, 32), True), "s_wqm_b64": (True, True, lambda a: _wqm(a, 64), True),
    "s_brev_b32": (False, False, lambda a: _brev(a, 32), False),
    "s_brev_b64": (True, True, lambda a: _brev(a, 64), False),
    "s_bcnt0_i32_b32": (False, False, lambda a: 32 - bin(a).count("1"), True),
    "s_bcnt0_i32_b64": (True, False, lambda a: 64 - bin(a).count("1"), True),
    "s_bcnt1_i32_b32": (False, False, lambda a: bin(a).count("1"), True),
    "s_bcnt1_i32_b64": (True, False, lambda a: bin(a).count("1"), True),
    "s_ff0_i32_b32": (False, False, lambda a: _ff(a, 32, False), False),
    "s_ff0_i32_b64": (True, False, lambda a: _ff(a, 64, False), False),
    "s_ff1_i32_b32": (False, False, lambda a: _ff(a, 32, True), False),
    "s_ff1_i32_b64": (True, False, lambda a: _ff(a, 64, True), False),
    "s_flbit_i32_b32": (False, False, lambda a: _flbit(a, 32), False),
    "s_flbit_i32_b64": (True, False, lambda a: _flbit(a, 64), False),
    "s_flbit_i32": (False, False, lambda a: _flbit_signed(a, 32), False),
    "s_flbit_i32_i64": (True, False, lambda a: _flbit_signed(a, 64), False),
    "s_sext_i32_i8": (False, False, lambda a: _sext(a, 8) & M32, False),
    "s_sext_i32_i16": (False, False, lambda a: _sext(a, 16) & M32, False),
    "s_abs_i32": (False, False, lambda a: abs(_s32(a)) & M32, True),
    "s_quadmask_b32": (False, False, lambda a: _quadmask(a, 32), True),
    "s_quadmask_b64": (True, True, lambda a: _quadmask(a, 64), True),
    "s_bitreplicate_b64_b32": (False, True, _bitreplicate, False),
}
# saveexec: name -> fn(s0, exec) -> new exec
_SAVEEXEC: dict[str, Callable[[int, int], int]] = {
    "s_and_saveexec_b64": lambda s, e: s & e, "s_or_saveexec_b64": lambda s, e: s | e,
    "s_xor_saveexec_b64": lambda s, e: s ^ e, "s_andn2_saveexec_b64": lambda s, e: s & ~e & M64,
    "s_orn2_saveexec_b64": lambda s, e: (s | ~e) & M64, "s_nand_saveexec_b64": lambda s, e: ~(s & e) & M64,
    "s_nor_saveexec_b64": lambda s, e: ~(s | e) & M64, "s_xnor_saveexec_b64": lambda s, e: ~(s ^ e) & M64,
    "s_andn1_saveexec_b64": lambda s, e: ~s & e & M64, "s_orn1_saveexec_b64": lambda s, e: (~s | e) & M64,
}

_SOPC: dict[str, Callable[[int, int], bool]] = {
    "s_cmp_eq_i32": lambda a, b: a == b, "s_cmp_lg_i32": lambda a, b: a != b,
    "s_cmp_gt_i32": lambda a, b: _s32(a) > _s32(b), "s_cmp_ge_i32": lambda a, b: _s32(a) >= _s32(b),
    "s_cmp_lt_i32": lambda a, b: _s32(a) < _s32(b), "s_cmp_le_i32": lambda a, b: _s32(a) <= _s32(b),
    "s_cmp_eq_u32": lambda a, b: a == b, "s_cmp_lg_u32": lambda a, b: a != b, "s_cmp_gt_u32": lambda a, b: a > b,
    "s_cmp_ge_u32": lambda a, b: a >= b, "s_cmp_lt_u32": lambda a, b: a < b, "s_cmp_le_u32": lambda a, b: a <= b,
    "s_bitcmp0_b32": lambda a, b: not (a >> (b & 31)) & 1, "s_bitcmp1_b32": lambda a, b: bool((a >> (b & 31)) & 1),
    "s_bitcmp0_b64": lambda a, b: not (a >> (b & 63)) & 1, "s_bitcmp1_b64": lambda a, b: bool((a >> (b & 63)) & 1),
    "s_cmp_eq_u64": lambda a, b: a == b, "s_cmp_lg_u64": lambda a, b: a != b,
}


def _compile_sop2(ins: Instruction) -> Fn:
    entry = _SOP2.get(ins.name)
    if entry is None:
        raise NotImplementedError(f"{ins.name} is decoded but not implemented (at {ins.addr:#x})")
    wa, wb, wd, fn = entry
    f = ins.fields
    ra, rb = scalar_reader(f["ssrc0"], ins.literal, wa), scalar_reader(f["ssrc1"], ins.literal, wb)
    dst = sdst_writer(f["sdst"], wd)

    def run(w: Wave) -> None:
        d, scc = fn(ra(w), rb(w), w.scc)
        dst(w, d)
        if scc is not None:
            w.scc = scc
    return run


def _compile_sop1(ins: Instruction) -> Fn:
    name, f = ins.name, ins.fields
    if name in _SOP1:
        ws, wd, fn, sets_scc = _SOP1[name]
        ra = scalar_reader(f["ssrc0"], ins.literal, ws)
        dst = sdst_writer(f["sdst"], wd)
        if sets_scc:
            def run_scc(w: Wave) -> None:
                d = fn(ra(w))
                dst(w, d)
                w.scc = int(d != 0)
            return run_scc
        return lambda w: dst(w, fn(ra(w)))
    if name in _SAVEEXEC:
        op = _SAVEEXEC[name]
        ra = scalar_reader(f["ssrc0"], ins.literal, True)
        dst = sdst_writer(f["sdst"], True)

        def saveexec(w: Wave) -> None:
            s0, old = ra(w), w.exec
            dst(w, old)
            w.exec = op(s0, old)
            w.scc = int(w.exec != 0)
        return saveexec
    if name in ("s_andn1_wrexec_b64", "s_andn2_wrexec_b64"):
        ra = scalar_reader(f["ssrc0"], ins.literal, True)
        dst = sdst_writer(f["sdst"], True)
        inv_src = name == "s_andn1_wrexec_b64"

        def wrexec(w: Wave) -> None:
            s0, e = ra(w), w.exec
            new = (~s0 & e if inv_src else s0 & ~e) & M64
            w.exec = new
            dst(w, new)
            w.scc = int(new != 0)
        return wrexec
    if name in ("s_cmov_b32", "s_cmov_b64"):
        wide = name.endswith("64")
        ra, dst = scalar_reader(f["ssrc0"], ins.literal, wide), sdst_writer(f["sdst"], wide)
        return lambda w: dst(w, ra(w)) if w.scc else None
    if name in ("s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"):
        wide, one = name.endswith("64"), "bitset1" in name
        ra, d = scalar_reader(f["ssrc0"], ins.literal), f["sdst"]
        rd, dst = scalar_reader(d, None, wide), sdst_writer(d, wide)
        sh = 63 if wide else 31
        return lambda w: dst(w, rd(w) | (1 << (ra(w) & sh)) if one else rd(w) & ~(1 << (ra(w) & sh)))
    if name == "s_getpc_b64":
        dst, nxt = sdst_writer(f["sdst"], True), ins.addr + ins.size
        return lambda w: dst(w, nxt)
    if name == "s_setpc_b64":
        ra = scalar_reader(f["ssrc0"], None, True)
        return lambda w: ra(w)
    if name == "s_swappc_b64":
        ra, dst, nxt = scalar_reader(f["ssrc0"], None, True), sdst_writer(f["sdst"], True), ins.addr + ins.size

        def swappc(w: Wave) -> int:
            target = ra(w)
            dst(w, nxt)
            return target
        return swappc
    if name in ("s_movrels_b32", "s_movrels_b64", "s_movreld_b32", "s_movreld_b64"):
        wide = name.endswith("64")
        src, d = f["ssrc0"], f["sdst"]
        rel_src = "movrels" in name

        def movrel(w: Wave) -> None:
            m0 = w.s[124]
            s_idx, d_idx = (src + m0, d) if rel_src else (src, d + m0)
            for i in range(2 if wide else 1):
                w.s[d_idx + i] = w.s[s_idx + i] if s_idx + i < 128 else scalar_reader(s_idx + i, ins.literal)(w)
        return movrel
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


def _compile_sopc(ins: Instruction) -> Fn:
    fn = _SOPC.get(ins.name)
    if fn is None:
        raise NotImplementedError(f"{ins.name} is decoded but not implemented (at {ins.addr:#x})")
    wide = ins.name.endswith("u64")
    f = ins.fields
    ra, rb = scalar_reader(f["ssrc0"], ins.literal, wide), scalar_reader(f["ssrc1"], ins.literal, wide)

    def run(w: Wave) -> None:
        w.scc = int(fn(ra(w), rb(w)))
    return run


HW_REG_MODE, HW_REG_STATUS, HW_REG_HW_ID = 1, 2, 4


def read_hwreg(w: Wave, reg: int) -> int:
    if reg == HW_REG_MODE:
        return w.mode
    if reg == HW_REG_STATUS:
        return w.scc | (int(w.exec == 0) << 9) | (int(w.vcc == 0) << 10)
    if reg == HW_REG_HW_ID:
        return w.wave_id & 0xF
    raise NotImplementedError(f"s_getreg of hardware register {reg}")


def write_hwreg(w: Wave, reg: int, offset: int, size: int, value: int) -> None:
    if reg != HW_REG_MODE:
        raise NotImplementedError(f"s_setreg of hardware register {reg} (only HW_REG_MODE is modelled)")
    field = ((1 << size) - 1) << offset
    w.mode = (w.mode & ~field) | ((value << offset) & field)
    if w.mode & 0xF:
        raise NotImplementedError(f"float rounding mode {w.mode & 0xF:#x} set by s_setreg (only round-to-nearest-even)")


def _compile_sopk(ins: Instruction) -> Fn:
    name, f = ins.name, ins.fields
    imm, d = f["simm16"], f["sdst"]
    simm = _sext(imm, 16)
    if name == "s_movk_i32":
        dst = sdst_writer(d)
        val = simm & M32
        return lambda w: dst(w, val)
    if name == "s_cmovk_i32":
        dst = sdst_writer(d)
        val = simm & M32
        return lambda w: dst(w, val) if w.scc else None
    if name.startswith("s_cmpk_"):
        cmp = _SOPC["s_cmp_" + name[len("s_cmpk_"):]]
        operand = (simm & M32) if name.endswith("i32") else imm

        def cmpk(w: Wave) -> None:
            w.scc = int(cmp(w.s[d], operand))
        return cmpk
    if name == "s_addk_i32":
        def addk(w: Wave) -> None:
            a = w.s[d]
            r = (a + simm) & M32
            w.s[d] = r
            w.scc = _ovf_add(a, simm & M32, r)
        return addk
    if name == "s_mulk_i32":
        def mulk(w: Wave) -> None:
            w.s[d] = (w.s[d] * simm) & M32
        return mulk
    if name in ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32"):
        reg, offset, size = imm & 0x3F, (imm >> 6) & 0x1F, ((imm >> 11) & 0x1F) + 1
        if name == "s_getreg_b32":
            def getreg(w: Wave) -> None:
                w.s[d] = (read_hwreg(w, reg) >> offset) & ((1 << size) - 1)
            return getreg
        lit = ins.literal

        def setreg(w: Wave) -> None:
            write_hwreg(w, reg, offset, size, lit if lit is not None else w.s[d])
        return setreg
    if name == "s_call_b64":
        dst, nxt = sdst_writer(d, True), ins.addr + 4
        target = ins.addr + 4 + simm * 4

        def call(w: Wave) -> int:
            dst(w, nxt)
            return target
        return call
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


_SOPP_NOOPS = frozenset({"s_nop", "s_waitcnt", "s_wakeup", "s_setkill", "s_sleep", "s_setprio", "s_icache_inv",
                         "s_incperflevel", "s_decperflevel", "s_ttracedata", "s_sendmsg", "s_sethalt",
                         "s_cbranch_cdbgsys", "s_cbranch_cdbguser", "s_cbranch_cdbgsys_or_user",
                         "s_cbranch_cdbgsys_and_user"})
_BRANCH_CONDS: dict[str, Callable[[Wave], bool]] = {
    "s_branch": lambda w: True, "s_cbranch_scc0": lambda w: w.scc == 0, "s_cbranch_scc1": lambda w: w.scc == 1,
    "s_cbranch_vccz": lambda w: w.vcc == 0, "s_cbranch_vccnz": lambda w: w.vcc != 0,
    "s_cbranch_execz": lambda w: w.exec == 0, "s_cbranch_execnz": lambda w: w.exec != 0,
}


def _compile_sopp(ins: Instruction) -> Fn:
    name = ins.name
    imm = ins.fields["simm16"]
    if name in _SOPP_NOOPS:
        return lambda w: None
    if name in ("s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done"):
        return lambda w: END
    if name == "s_barrier":
        return lambda w: BARRIER
    if name in _BRANCH_CONDS:
        cond = _BRANCH_CONDS[name]
        target = ins.addr + 4 + _sext(imm, 16) * 4
        if name == "s_branch":
            return lambda w: target
        return lambda w: target if cond(w) else None
    if name == "s_trap":
        def trap(w: Wave) -> None:
            raise WaveTrap(f"s_trap {imm & 0xFF} at {ins.addr:#x} (wave {w.wave_id} of workgroup {w.workgroup})")
        return trap
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


# ------------------------------------------------------------------------------------------------ SMEM
def read_bytes(w: Wave, addr: int, nbytes: int) -> np.ndarray:
    data = w.mem.read(addr, nbytes)
    return data.view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else np.frombuffer(bytes(data), np.uint8)


def _compile_smem(ins: Instruction) -> Fn:
    name, f = ins.name, ins.fields
    sbase, sdata = f["sbase"], f["sdata"]
    if name in ("s_dcache_inv", "s_dcache_wb", "s_dcache_inv_vol", "s_dcache_wb_vol", "s_atc_probe",
                "s_atc_probe_buffer", "s_dcache_discard", "s_dcache_discard_x2"):
        return lambda w: None
    if name in ("s_memtime", "s_memrealtime"):
        dst = sdst_writer(sdata, True)
        return lambda w: dst(w, next(_CLOCK) * 4)  # a synthetic clock: strictly increasing across reads
    if f["imm"]:
        off = f["offset"] - (1 << 21) * (f["offset"] >> 20)
        offset = lambda w: off
    else:
        off_reg = scalar_reader(f["offset"] & 0xFF, None)
        offset = off_reg
    if f["soffset_en"]:
        soff = scalar_reader(f["soffset"], None)
        base_off = offset
        offset = lambda w: base_off(w) + soff(w)
    count = {"dword": 1, "dwordx2": 2, "dwordx4": 4, "dwordx8": 8, "dwordx16": 16}.get(name.rsplit("_", 1)[-1])
    if name.startswith("s_load_") and count:
        def load(w: Wave) -> None:
            addr = ((w.s[sbase] | (w.s[sbase + 1] << 32)) + offset(w)) & M64 & ~3
            w.s[sdata:sdata + count] = read_bytes(w, addr, 4 * count).view("<u4").tolist()
        return load
    if name.startswith("s_buffer_load_") and count:
        def buffer_load(w: Wave) -> None:
            base = w.s[sbase] | ((w.s[sbase + 1] & 0xFFFF) << 32)
            num_records = w.s[sbase + 2]
            off = offset(w) & ~3
            vals = []
            for i in range(count):
                o = off + 4 * i
                vals.append(int(read_bytes(w, base + o, 4).view("<u4")[0]) if o < num_records else 0)
            w.s[sdata:sdata + count] = vals
        return buffer_load
    if name.startswith("s_store_") and count:
        def store(w: Wave) -> None:
            addr = ((w.s[sbase] | (w.s[sbase + 1] << 32)) + offset(w)) & M64 & ~3
            w.mem.write(addr, np.array(w.s[sdata:sdata + count], "<u4").tobytes())
        return store
    if name.startswith("s_buffer_store_") and count:
        def buffer_store(w: Wave) -> None:
            base = w.s[sbase] | ((w.s[sbase + 1] & 0xFFFF) << 32)
            off = offset(w) & ~3
            for i in range(count):
                if off + 4 * i < w.s[sbase + 2]:  # num_records bounds each dword
                    w.mem.write(base + off + 4 * i, w.s[sdata + i].to_bytes(4, "little"))
        return buffer_store
    if name.startswith(("s_atomic_", "s_buffer_atomic_")):
        return _compile_smem_atomic(ins, offset)
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


def _compile_smem_atomic(ins: Instruction, offset: Callable[[Wave], int]) -> Fn:
    """s_atomic_* (64-bit address in an SGPR pair) and s_buffer_atomic_* (buffer resource): data in sdata (a pair for
    _x2; cmpswap takes {new, compare}); the old value comes back in sdata when glc is set."""
    name, f = ins.name, ins.fields
    sbase, sdata, glc = f["sbase"], f["sdata"], bool(f["glc"])
    wide = name.endswith("_x2")
    op = name.split("atomic_", 1)[1].removesuffix("_x2")
    fn = atomic_fn(op, wide)
    nb, nregs = (8, 2) if wide else (4, 1)
    buffer = name.startswith("s_buffer_")

    def run(w: Wave) -> None:
        if buffer:
            addr = (w.s[sbase] | ((w.s[sbase + 1] & 0xFFFF) << 32)) + offset(w)
            if offset(w) >= w.s[sbase + 2]:
                return
        else:
            addr = ((w.s[sbase] | (w.s[sbase + 1] << 32)) + offset(w)) & M64
        regs = w.s[sdata:sdata + 2 * nregs]
        value = regs[0] | (regs[1] << 32 if wide else 0)
        cmp = (regs[nregs] | (regs[nregs + 1] << 32 if wide else 0)) if op == "cmpswap" else 0
        old = int(read_bytes(w, addr, nb).view("<u8" if wide else "<u4")[0])
        w.mem.write(addr, fn(old, value, cmp).to_bytes(nb, "little"))
        if glc:
            w.s[sdata] = old & M32
            if wide:
                w.s[sdata + 1] = old >> 32
    return run


def compile_salu(ins: Instruction) -> Fn:
    """A function executing the scalar or SMEM instruction `ins` on a wave."""
    return {"SOP2": _compile_sop2, "SOP1": _compile_sop1, "SOPC": _compile_sopc, "SOPK": _compile_sopk,
            "SOPP": _compile_sopp, "SMEM": _compile_smem}[ins.fmt](ins)
