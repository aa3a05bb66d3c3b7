"""Compiling vector ALU instructions (VOP1/VOP2/VOPC/VOP3/VOP3P, SDWA, DPP, MFMA) into per-wave functions.

`compile_valu(ins)` returns `fn(wave) -> None`. Results are written to active lanes only; lane-mask results (VOPC,
carries) write 0 for inactive lanes (gfx942_isa.md §2.2/§6).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.amd_runtime.mock.isa import alu_ops as ops
from ember.amd_runtime.mock.isa.decode import Instruction
from ember.amd_runtime.mock.isa.state import (
    HALF,
    M32,
    WIDE,
    Wave,
    constant_value,
    exec_mask,
    ftz,
    mask_bits,
    raw_reader,
    scalar_reader,
    sdst_writer,
    to_bits,
    vsrc,
    write_vgpr,
)

Fn = Callable[[Wave], None]
Reader = Callable[[Wave], np.ndarray]
U32, U64 = np.uint32, np.uint64
_FLOAT = frozenset({"f32", "f64", "f16"})
_MAC = frozenset({"v_fmac_f32", "v_fmac_f64", "v_mac_f16", "v_dot2c_f32_f16", "v_dot2c_i32_i16", "v_dot4c_i32_i8",
                  "v_dot8c_i32_i4"})
# gfx9's op_sel-capable 16-bit VOP3 ops write only their half of the destination; other 16-bit ops zero the high
# half (LLVM's AMDGPUDAGToDAGISel::fp16SrcZerosHighBits relies on exactly this split for GFX9).
_OPSEL_DST_OPS = frozenset({"v_fma_f16", "v_mad_f16", "v_mad_u16", "v_mad_i16", "v_div_fixup_f16"})


def _full(w: Wave) -> bool:
    return w.s[126] == M32 and w.s[127] == M32


# ------------------------------------------------------------------------------------------------ sources
_SEL_SHIFT = {0: 0, 1: 8, 2: 16, 3: 24, 4: 0, 5: 16}
_SEL_BITS = {0: 8, 1: 8, 2: 8, 3: 8, 4: 16, 5: 16}


def _sdwa_select(raw: Reader, sel: int, sext: bool) -> Reader:
    if sel == 6:
        return raw
    shift, bits = U32(_SEL_SHIFT[sel]), _SEL_BITS[sel]
    fmask = U32((1 << bits) - 1)
    if not sext:
        return lambda w: (raw(w) >> shift) & fmask
    sign = U32(1 << (bits - 1))
    return lambda w: (((raw(w) >> shift) & fmask) ^ sign) - sign


def _dpp_lanes(ctrl: int) -> np.ndarray:
    """Source lane per lane for a DPP control (-1: no source lane)."""
    lane = np.arange(64)
    row, pos = lane // 16, lane % 16
    if ctrl <= 0xFF:
        return (lane & ~3) + ((ctrl >> (2 * (lane & 3))) & 3)
    if 0x101 <= ctrl <= 0x10F:  # row_shl
        src = pos + (ctrl - 0x100)
        return np.where(src < 16, row * 16 + src, -1)
    if 0x111 <= ctrl <= 0x11F:  # row_shr
        src = pos - (ctrl - 0x110)
        return np.where(src >= 0, row * 16 + src, -1)
    if 0x121 <= ctrl <= 0x12F:  # row_ror
        return row * 16 + (pos - (ctrl - 0x120)) % 16
    if ctrl == 0x130:  # wave_shl:1
        return np.where(lane < 63, lane + 1, -1)
    if ctrl == 0x134:  # wave_rol:1
        return (lane + 1) % 64
    if ctrl == 0x138:  # wave_shr:1
        return np.where(lane > 0, lane - 1, -1)
    if ctrl == 0x13C:  # wave_ror:1
        return (lane - 1) % 64
    if ctrl == 0x140:  # row_mirror
        return row * 16 + 15 - pos
    if ctrl == 0x141:  # row_half_mirror
        return row * 16 + (pos & 8) + 7 - (pos & 7)
    if ctrl == 0x142:  # row_bcast:15
        return np.where(row > 0, (row - 1) * 16 + 15, -1)
    if ctrl == 0x143:  # row_bcast:31
        return np.where(row > 1, 31, -1)
    if 0x150 <= ctrl <= 0x15F:  # row_newbcast:n
        return row * 16 + (ctrl - 0x150)
    raise NotImplementedError(f"DPP control {ctrl:#x}")


class _Operands:
    """Sources, destination and modifiers of one VOP1/VOP2/VOPC/VOP3 instruction, format-independent."""

    def __init__(self, ins: Instruction):
        f = ins.fields
        self.ins = ins
        self.codes: list[int] = []
        self.neg = self.abs = self.opsel = 0
        self.clamp = self.omod = 0
        self.sdwa = ins.ext == "sdwa"
        self.dpp = ins.ext == "dpp"
        if ins.fmt == "VOP3":
            self.codes = [f["src0"], f["src1"], f["src2"]]
            self.neg, self.abs, self.opsel = f["neg"], f["abs"], f["opsel"]
            self.clamp, self.omod = f["clamp"], f["omod"]
        else:
            src0 = f["src0"]
            if self.sdwa:
                src0 = f["sdwa_src0"] + (0 if f["s0"] else 256)
                self.neg = f["src0_neg"] | (f["src1_neg"] << 1)
                self.abs = f["src0_abs"] | (f["src1_abs"] << 1)
                self.clamp, self.omod = f["clamp"], f["omod"]
            elif self.dpp:
                src0 = f["dpp_src0"] + 256
                self.neg = f["src0_neg"] | (f["src1_neg"] << 1)
                self.abs = f["src0_abs"] | (f["src1_abs"] << 1)
            self.codes = [src0]
            if ins.fmt in ("VOP2", "VOPC"):
                vs1 = f["vsrc1"]
                self.codes.append(vs1 if (self.sdwa and f.get("s1")) else vs1 + 256)

    def reader(self, i: int, kind: str) -> Reader:
        """Typed source `i` with its modifiers (and SDWA selection / DPP lane permutation)."""
        code, lit = self.codes[i], self.ins.literal
        neg, ab, hi = bool(self.neg >> i & 1), bool(self.abs >> i & 1), bool(self.opsel >> i & 1)
        if self.sdwa and i < 2 and kind not in WIDE:
            f = self.ins.fields
            sel, sext = (f["src0_sel"], f["src0_sext"]) if i == 0 else (f["src1_sel"], f["src1_sext"])
            raw = _sdwa_select(raw_reader(code, "u32", lit), sel, bool(sext))
            return _typed(raw, kind, neg, ab)
        if self.dpp and i == 0:
            f = self.ins.fields
            src_lane = _dpp_lanes(f["dpp_ctrl"])
            valid = src_lane >= 0
            idx = np.where(valid, src_lane, 0)
            raw0 = raw_reader(code, kind, lit)

            def dpp_read(w: Wave) -> np.ndarray:
                r = raw0(w)
                ok = valid & w.mask()[idx]
                return np.where(ok, r[idx], r.dtype.type(0))
            return _typed(dpp_read, kind, neg, ab)
        return vsrc(code, kind, lit, hi=hi and kind in HALF, neg=neg, absolute=ab)

    def write_enable(self) -> np.ndarray | None:
        """DPP row/bank masks and bound_ctrl as a lane mask (None: every active lane)."""
        if not self.dpp:
            return None
        f = self.ins.fields
        lane = np.arange(64)
        en = (((f["row_mask"] >> (lane // 16)) & 1).astype(bool)
              & ((f["bank_mask"] >> ((lane % 16) // 4)) & 1).astype(bool))
        if not f["bound_ctrl"]:
            en &= _dpp_lanes(f["dpp_ctrl"]) >= 0
        return en


def _typed(raw: Reader, kind: str, neg: bool, ab: bool) -> Reader:
    npk = {"u32": U32, "i32": np.int32, "f32": np.float32, "u16": np.uint16, "i16": np.int16, "f16": np.float16,
           "u64": U64, "i64": np.int64, "f64": np.float64, "bf16": np.uint16}[kind]
    if kind in HALF:
        base = lambda w: raw(w).astype(np.uint16).view(npk)
    else:
        base = lambda w: raw(w).view(npk)
    if kind not in _FLOAT:
        return base
    if ab and neg:
        return lambda w: -np.abs(base(w))
    if ab:
        return lambda w: np.abs(base(w))
    if neg:
        return lambda w: -base(w)
    return base


# ------------------------------------------------------------------------------------------------ destinations
def _dst_writer(opd: _Operands, kind: str, agpr: bool = False) -> Callable[[Wave, np.ndarray, np.ndarray | None], None]:
    ins, f = opd.ins, opd.ins.fields
    d = f["vdst"]
    en = opd.write_enable()
    if opd.sdwa and kind not in WIDE:
        sel, unused = f["dst_sel"], f["dst_unused"]
        if sel != 6:
            shift, bits = U32(_SEL_SHIFT[sel]), _SEL_BITS[sel]
            fmask = U32(((1 << bits) - 1) << _SEL_SHIFT[sel])

            def sdwa_write(w: Wave, value: np.ndarray, extra: np.ndarray | None) -> None:
                bits32 = (to_bits(value, kind) << shift) & fmask
                if unused == 2:
                    bits32 = bits32 | (w.v[d] & ~fmask)
                elif unused == 1:
                    top = U32(1 << (_SEL_SHIFT[sel] + _SEL_BITS[sel] - 1))
                    neg = (bits32 & top) != 0
                    above = U32((0xFFFFFFFF << (_SEL_SHIFT[sel] + _SEL_BITS[sel])) & M32)
                    bits32 = np.where(neg, bits32 | above, bits32)
                m = w.mask() if extra is None else w.mask() & extra
                write_vgpr(w, d, bits32.astype(U32), m, False)
            return sdwa_write
    hi_half = ins.fmt == "VOP3" and kind in HALF and bool(opd.opsel & 8)
    keep_hi = ins.name in _OPSEL_DST_OPS and not hi_half

    def write(w: Wave, value: np.ndarray, extra: np.ndarray | None) -> None:
        bits = to_bits(value, kind)
        if hi_half:
            bits = (w.v[d] & U32(0xFFFF)) | (bits << U32(16))
        elif keep_hi:
            bits = (w.v[d] & U32(0xFFFF0000)) | bits
        if en is not None:
            extra = en if extra is None else extra & en
        if extra is None:
            full = _full(w)
            write_vgpr(w, d, bits, w.mask(), full, agpr)
        else:
            write_vgpr(w, d, bits, w.mask() & extra, False, agpr)
    return write


def _post(opd: _Operands, kind: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """Output modifiers (omod, then clamp to [0, 1]) for float results."""
    if kind not in _FLOAT or (not opd.omod and not opd.clamp):
        return None
    scale = {0: None, 1: 2.0, 2: 4.0, 3: 0.5}[opd.omod]
    clamp = opd.clamp

    def post(x: np.ndarray) -> np.ndarray:
        if scale is not None:
            x = (x * x.dtype.type(scale)).astype(x.dtype)
        if clamp:
            x = np.clip(x, 0, 1).astype(x.dtype)
        return x
    return post


# ------------------------------------------------------------------------------------------------ generic ops
def _compile_generic(ins: Instruction, vop: ops.VOp) -> Fn:
    opd = _Operands(ins)
    name = ins.name
    kinds = vop.srcs
    if ins.fmt == "VOP3" and opd.clamp and not (vop.float_op and vop.dst in _FLOAT):
        raise NotImplementedError(f"{name} with clamp (integer saturation) at {ins.addr:#x}")
    if name in ("v_fmamk_f32", "v_madmk_f16"):  # d = src0 * K + vsrc1
        opd.codes = [opd.codes[0], 255, opd.codes[1]]
    elif name in ("v_fmaak_f32", "v_madak_f16"):  # d = src0 * vsrc1 + K
        opd.codes = [opd.codes[0], opd.codes[1], 255]
    elif name in _MAC and ins.fmt != "VOP3":
        opd.codes = [opd.codes[0], opd.codes[1], ins.fields["vdst"] + 256]
    elif name in _MAC:
        opd.codes[2] = ins.fields["vdst"] + 256
    readers = [opd.reader(i, kind) for i, kind in enumerate(kinds)]
    write = _dst_writer(opd, vop.dst)
    post = _post(opd, vop.dst)
    fn = vop.fn
    float_in = vop.float_op and any(k in _FLOAT for k in kinds)
    float_out = vop.float_op and vop.dst in _FLOAT
    in_attr = "ftz_in32" if next((k for k in kinds if k in _FLOAT), "f32") == "f32" else "ftz_in64"
    out_attr = "ftz_out32" if vop.dst == "f32" else "ftz_out64"

    if len(readers) == 1:
        r0 = readers[0]

        def run1(w: Wave) -> None:
            a = r0(w)
            if float_in and getattr(w, in_attr):
                a = ftz(a)
            res = fn(a)
            if post is not None:
                res = post(res)
            if float_out and getattr(w, out_attr):
                res = ftz(res)
            write(w, res, None)
        return run1

    def run(w: Wave) -> None:
        args = [r(w) for r in readers]
        if float_in and getattr(w, in_attr):
            args = [ftz(a) if a.dtype.kind == "f" else a for a in args]
        res = fn(*args)
        if post is not None:
            res = post(res)
        if float_out and getattr(w, out_attr):
            res = ftz(res)
        write(w, res, None)
    return run


# ------------------------------------------------------------------------------------------------ lane-mask results
def _mask_dst(ins: Instruction) -> Callable[[Wave, int], None]:
    """Where a VOPC/VOP3 compare or a VOP2 carry puts its lane mask."""
    f = ins.fields
    if ins.fmt == "VOP3":
        code = f["sdst"] if "sdst" in f else f["vdst"]
        return sdst_writer(code, wide=True)
    if ins.ext == "sdwa" and ins.fmt == "VOPC" and f["sd"]:
        return sdst_writer(f["sdst"], wide=True)
    return sdst_writer(106, wide=True)


def _compile_cmp(ins: Instruction) -> Fn:
    name = ins.name
    parts = name.split("_")  # v, cmp|cmpx, op, type
    cmpx = parts[1] == "cmpx"
    kind = parts[-1]
    opd = _Operands(ins)
    if parts[2] == "class":
        ra, rb = opd.reader(0, kind), opd.reader(1, "u32")
        test = ops.float_class
    else:
        table = ops.FLOAT_CMP if kind.startswith("f") else ops.INT_CMP
        test = table[parts[2]]
        ra, rb = opd.reader(0, kind), opd.reader(1, kind)
    dst = _mask_dst(ins)

    def run(w: Wave) -> None:
        with np.errstate(invalid="ignore"):
            res = np.broadcast_to(test(ra(w), rb(w)), (64,))
        bits = mask_bits(res & w.mask())
        dst(w, bits)
        if cmpx:
            w.exec = bits
    return run


def _compile_cndmask(ins: Instruction) -> Fn:
    opd = _Operands(ins)
    kind = "f32" if (opd.neg or opd.abs) else "u32"
    r0, r1 = opd.reader(0, kind), opd.reader(1, kind)
    sel = scalar_reader(ins.fields["src2"], None, wide=True) if ins.fmt == "VOP3" else (lambda w: w.vcc)
    write = _dst_writer(opd, kind)

    def run(w: Wave) -> None:
        write(w, np.where(exec_mask(sel(w)), r1(w), r0(w)), None)
    return run


def _compile_carry(ins: Instruction) -> Fn:
    """v_add_co/sub_co/subrev_co (carry out), v_addc_co/subb_co/subbrev_co (carry in and out)."""
    name = ins.name
    opd = _Operands(ins)
    r0, r1 = opd.reader(0, "u32"), opd.reader(1, "u32")
    if name in ("v_subrev_co_u32", "v_subbrev_co_u32"):
        r0, r1 = r1, r0
    carry_in = None
    if name.startswith(("v_addc", "v_subb")):
        carry_in = scalar_reader(ins.fields["src2"], None, wide=True) if ins.fmt == "VOP3" else (lambda w: w.vcc)
    sub = "sub" in name
    dst = _mask_dst(ins)
    write = _dst_writer(opd, "u32")
    lanes = np.arange(64, dtype=U64)

    def run(w: Wave) -> None:
        a, b = r0(w).astype(np.int64), r1(w).astype(np.int64)
        c = 0 if carry_in is None else ((np.uint64(carry_in(w)) >> lanes) & U64(1)).astype(np.int64)
        r = a - b - c if sub else a + b + c
        out = (r < 0) if sub else (r > M32)
        m = w.mask()
        write(w, (r & M32).astype(U32), None)
        dst(w, mask_bits(np.broadcast_to(out, (64,)) & m))
    return run


def _compile_div_scale(ins: Instruction) -> Fn:
    kind = "f64" if ins.name.endswith("f64") else "f32"
    opd = _Operands(ins)
    rs = [opd.reader(i, kind) for i in range(3)]
    fn = ops.div_scale_f64 if kind == "f64" else ops.div_scale_f32
    dst = _mask_dst(ins)
    write = _dst_writer(opd, kind)

    def run(w: Wave) -> None:
        with np.errstate(all="ignore"):
            d, vcc = fn(*np.broadcast_arrays(*[r(w) for r in rs]))
        write(w, d, None)
        dst(w, mask_bits(np.broadcast_to(vcc, (64,)) & w.mask()))
    return run


def _compile_div_fmas(ins: Instruction) -> Fn:
    kind = "f64" if ins.name.endswith("f64") else "f32"
    opd = _Operands(ins)
    rs = [opd.reader(i, kind) for i in range(3)]
    fma = ops.fma_f64 if kind == "f64" else ops.fma_f32
    write = _dst_writer(opd, kind)
    one = 1.0

    def run(w: Wave) -> None:
        a, b, c = (r(w) for r in rs)
        with np.errstate(all="ignore"):
            r = fma(a, b, c)
            vcc = exec_mask(w.vcc)
            if (vcc & w.mask()).any():
                # The quotient was computed 2^64 too large (numerator scaled up) or too small (denominator).
                big = np.abs(np.broadcast_to(c, r.shape)) >= one
                scaled = np.where(big, np.ldexp(r, -64), np.ldexp(r, 64)).astype(r.dtype)
                r = np.where(vcc, scaled, r)
        write(w, r, None)
    return run


def _compile_mad64(ins: Instruction) -> Fn:
    signed = ins.name == "v_mad_i64_i32"
    opd = _Operands(ins)
    ra, rb = opd.reader(0, "i32" if signed else "u32"), opd.reader(1, "i32" if signed else "u32")
    rc = opd.reader(2, "i64" if signed else "u64")
    dst = _mask_dst(ins)
    write = _dst_writer(opd, "u64")

    def run(w: Wave) -> None:
        a, b, c = ra(w), rb(w), rc(w)
        if signed:
            p = a.astype(np.int64) * b.astype(np.int64)  # exact: |p| < 2^62
            with np.errstate(over="ignore"):
                r = p + c  # wraps mod 2^64
            carry = np.broadcast_to(((p < 0) == (c < 0)) & ((r < 0) != (p < 0)), (64,))
            res = r.view(U64)
        else:
            p = a.astype(U64) * b.astype(U64)
            res = p + c
            carry = np.broadcast_to(res < c, (64,))
        write(w, res, None)
        dst(w, mask_bits(carry & w.mask()))
    return run


def _compile_readlane(ins: Instruction) -> Fn:
    f = ins.fields
    src = raw_reader(f["src0"], "u32", ins.literal)
    dst = sdst_writer(f["vdst"])
    if ins.name == "v_readfirstlane_b32":
        def first(w: Wave) -> None:
            ex = w.exec
            lane = (ex & -ex).bit_length() - 1 if ex else 0
            r = src(w)
            dst(w, int(r[lane if r.size > 1 else 0]))
        return first
    lane_sel = scalar_reader(f["src1"], None)

    def read(w: Wave) -> None:
        r = src(w)
        dst(w, int(r[(lane_sel(w) & 63) if r.size > 1 else 0]))
    return read


def _compile_writelane(ins: Instruction) -> Fn:
    f = ins.fields
    val = scalar_reader(f["src0"], ins.literal) if f["src0"] < 256 else None
    if val is None:
        raise NotImplementedError(f"v_writelane_b32 with a VGPR source at {ins.addr:#x}")
    lane_sel = scalar_reader(f["src1"], None)
    d = f["vdst"]

    def run(w: Wave) -> None:
        w.v[d, lane_sel(w) & 63] = val(w)
    return run


def _compile_swap(ins: Instruction) -> Fn:
    a, b = ins.fields["vdst"], ins.fields["src0"] - 256

    def run(w: Wave) -> None:
        m = w.mask()
        va, vb = w.v[a].copy(), w.v[b].copy()
        np.copyto(w.v[a], vb, where=m)
        np.copyto(w.v[b], va, where=m)
    return run


def _compile_accvgpr(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    d = f["vdst"]
    if name == "v_accvgpr_mov_b32":
        s = f["src0"] - 256
        return lambda w: write_vgpr(w, d, w.a[s], w.mask(), _full(w), agpr=True)
    if name == "v_accvgpr_read_b32":
        s = f["src0"] - 256
        return lambda w: write_vgpr(w, d, w.a[s], w.mask(), _full(w))
    src = raw_reader(f["src0"], "u32", ins.literal)
    return lambda w: write_vgpr(w, d, src(w), w.mask(), _full(w), agpr=True)


def _compile_pk_fmac(ins: Instruction) -> Fn:
    """v_pk_fmac_f16: both f16 halves of vdst += src0 * src1 (one rounding each)."""
    opd = _Operands(ins)
    if opd.sdwa or opd.dpp:
        raise NotImplementedError(f"v_pk_fmac_f16 with SDWA/DPP at {ins.addr:#x}")
    r0, r1 = raw_reader(opd.codes[0], "u32", ins.literal), raw_reader(opd.codes[1], "u32", None)
    d = ins.fields["vdst"]

    def halves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x.astype(np.uint16).view(np.float16), (x >> U32(16)).astype(np.uint16).view(np.float16)

    def run(w: Wave) -> None:
        (a0, a1), (b0, b1), (c0, c1) = halves(r0(w)), halves(r1(w)), halves(w.v[d])
        lo, hi = ops.fma_f16(a0, b0, c0), ops.fma_f16(a1, b1, c1)
        bits = lo.view(np.uint16).astype(U32) | (hi.view(np.uint16).astype(U32) << U32(16))
        write_vgpr(w, d, np.broadcast_to(bits, (64,)), w.mask(), _full(w))
    return run


def _compile_cvt_pk_fnuz8(ins: Instruction) -> Fn:
    """v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32: two f32 to two FNUZ bytes in the destination word op_sel[3] picks (the
    other word kept); clamp saturates out-of-range values instead of making them NaN."""
    opd = _Operands(ins)
    kind = "fp8" if "fp8" in ins.name else "bf8"
    r0, r1 = opd.reader(0, "f32"), opd.reader(1, "f32")
    hi_word, saturate, d = bool(opd.opsel & 8), bool(opd.clamp), ins.fields["vdst"]

    def run(w: Wave) -> None:
        pair = ops.to_fnuz8(r0(w), kind, saturate) | (ops.to_fnuz8(r1(w), kind, saturate) << U32(8))
        old = w.v[d]
        bits = (old & U32(0xFFFF)) | (pair << U32(16)) if hi_word else (old & U32(0xFFFF0000)) | pair
        write_vgpr(w, d, np.broadcast_to(bits, (64,)).astype(U32), w.mask(), _full(w))
    return run


def _nop(ins: Instruction) -> Fn:
    return lambda w: None


_SPECIAL: dict[str, Callable[[Instruction], Fn]] = {
    "v_cndmask_b32": _compile_cndmask, "v_nop": _nop, "v_clrexcp": _nop,
    "v_div_scale_f32": _compile_div_scale, "v_div_scale_f64": _compile_div_scale,
    "v_div_fmas_f32": _compile_div_fmas, "v_div_fmas_f64": _compile_div_fmas,
    "v_mad_u64_u32": _compile_mad64, "v_mad_i64_i32": _compile_mad64,
    "v_readfirstlane_b32": _compile_readlane, "v_readlane_b32": _compile_readlane,
    "v_writelane_b32": _compile_writelane, "v_swap_b32": _compile_swap, "v_accvgpr_mov_b32": _compile_accvgpr,
    "v_pk_fmac_f16": _compile_pk_fmac, "v_cvt_pk_fp8_f32": _compile_cvt_pk_fnuz8,
    "v_cvt_pk_bf8_f32": _compile_cvt_pk_fnuz8,
    **{n: _compile_carry for n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32",
                                   "v_subb_co_u32", "v_subbrev_co_u32")},
}


# ------------------------------------------------------------------------------------------------ VOP3P
_PK16: dict[str, tuple[str, Callable[..., np.ndarray], int]] = {
    "v_pk_mad_i16": ("i16", lambda a, b, c: a * b + c, 3),
    "v_pk_mul_lo_u16": ("u16", lambda a, b: a * b, 2),
    "v_pk_add_i16": ("i16", lambda a, b: a + b, 2), "v_pk_sub_i16": ("i16", lambda a, b: a - b, 2),
    "v_pk_lshlrev_b16": ("u16", lambda a, b: b << (a & np.uint16(15)), 2),
    "v_pk_lshrrev_b16": ("u16", lambda a, b: b >> (a & np.uint16(15)), 2),
    "v_pk_ashrrev_i16": ("i16", lambda a, b: b >> (a & np.int16(15)), 2),
    "v_pk_max_i16": ("i16", np.maximum, 2), "v_pk_min_i16": ("i16", np.minimum, 2),
    "v_pk_mad_u16": ("u16", lambda a, b, c: a * b + c, 3),
    "v_pk_add_u16": ("u16", lambda a, b: a + b, 2), "v_pk_sub_u16": ("u16", lambda a, b: a - b, 2),
    "v_pk_max_u16": ("u16", np.maximum, 2), "v_pk_min_u16": ("u16", np.minimum, 2),
    "v_pk_fma_f16": ("f16", ops.fma_f16, 3), "v_pk_add_f16": ("f16", ops.f16_exact(np.add), 2),
    "v_pk_mul_f16": ("f16", ops.f16_exact(np.multiply), 2), "v_pk_min_f16": ("f16", ops.fmin, 2),
    "v_pk_max_f16": ("f16", ops.fmax, 2),
}
_PK32: dict[str, tuple[Callable[..., np.ndarray], int]] = {
    "v_pk_fma_f32": (ops.fma_f32, 3), "v_pk_mul_f32": (np.multiply, 2), "v_pk_add_f32": (np.add, 2),
}


def _packed_reader(code: int, kind: str, half_bits: int) -> Reader:
    """A VOP3P source: a register (pair) as is; an inline constant (in the element type) in both halves."""
    const = constant_value(code, kind, None) if 128 <= code <= 255 else None
    if const is None:
        return raw_reader(code, "u64" if half_bits == 32 else "u32", None)
    mask = (1 << half_bits) - 1
    arr = np.array([(const & mask) | ((const & mask) << half_bits)], U64 if half_bits == 32 else U32)
    return lambda w: arr


def _compile_vop3p(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    if name.startswith("v_mfma"):
        return _compile_mfma(ins)
    if name in ("v_accvgpr_read_b32", "v_accvgpr_write_b32"):
        return _compile_accvgpr(ins)
    codes = [f["src0"], f["src1"], f["src2"]]
    opsel, opsel_hi, neg, neg_hi = f["opsel"], f["opsel_hi"], f["neg"], f["neg_hi"]
    d = f["vdst"]
    if name in _PK16:
        kind, fn, n = _PK16[name]
        raws = [_packed_reader(codes[i], kind, 16) for i in range(n)]
        npk = {"i16": np.int16, "u16": np.uint16, "f16": np.float16}[kind]

        def half(x: np.ndarray, hi: bool, negate: bool) -> np.ndarray:
            h = ((x >> U32(16)) if hi else x).astype(np.uint16).view(npk)
            return -h if negate and kind == "f16" else h

        def run16(w: Wave) -> None:
            vals = [r(w) for r in raws]
            lo = fn(*[half(v, bool(opsel >> i & 1), bool(neg >> i & 1)) for i, v in enumerate(vals)])
            hi = fn(*[half(v, bool(opsel_hi >> i & 1), bool(neg_hi >> i & 1)) for i, v in enumerate(vals)])
            if f["clamp"] and kind == "f16":
                lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            bits = (np.asarray(lo).astype(npk).view(np.uint16).astype(U32)
                    | (np.asarray(hi).astype(npk).view(np.uint16).astype(U32) << U32(16)))
            write_vgpr(w, d, bits, w.mask(), _full(w))
        return run16
    if name in _PK32 or name == "v_pk_mov_b32":
        fn, n = _PK32.get(name, (None, 2))
        raws = [_packed_reader(codes[i], "f32" if fn is not None else "u32", 32) for i in range(n)]

        def pick(x: np.ndarray, hi: bool, negate: bool) -> np.ndarray:
            v = ((x >> U64(32)) if hi else x).astype(U32)
            return v if fn is None else (-v.view(np.float32) if negate else v.view(np.float32))

        def run32(w: Wave) -> None:
            vals = [r(w) for r in raws]
            if fn is None:  # v_pk_mov_b32: lo from src0 (opsel[0] picks its half), hi from src1 (opsel[1])
                lo, hi = pick(vals[0], bool(opsel & 1), False), pick(vals[1], bool(opsel & 2), False)
            else:
                lo = fn(*[pick(v, bool(opsel >> i & 1), bool(neg >> i & 1)) for i, v in enumerate(vals)])
                hi = fn(*[pick(v, bool(opsel_hi >> i & 1), bool(neg_hi >> i & 1)) for i, v in enumerate(vals)])
                lo, hi = np.asarray(lo, np.float32).view(U32), np.asarray(hi, np.float32).view(U32)
            m, full = w.mask(), _full(w)
            write_vgpr(w, d, np.broadcast_to(lo, (64,)).astype(U32), m, full)
            write_vgpr(w, d + 1, np.broadcast_to(hi, (64,)).astype(U32), m, full)
        return run32
    if name in _DOTS:
        return _compile_dot(ins)
    if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return _compile_fma_mix(ins)
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


_DOTS: dict[str, Callable[..., np.ndarray]] = {
    "v_dot2_f32_f16": lambda a, b, c: ops.dot2_f16(a, b, c.view(np.float32)).view(U32),
    "v_dot2_i32_i16": ops.dot(16, True), "v_dot2_u32_u16": ops.dot(16, False), "v_dot4_i32_i8": ops.dot(8, True),
    "v_dot4_u32_u8": ops.dot(8, False), "v_dot8_i32_i4": ops.dot(4, True), "v_dot8_u32_u4": ops.dot(4, False),
}


def _compile_dot(ins: Instruction) -> Fn:
    """VOP3P v_dot*: packed fields of src0 and src1 multiplied and summed into src2 (op_sel/neg not modelled)."""
    f = ins.fields
    if f["clamp"] or f["opsel"] or f["neg"] or f["neg_hi"]:
        raise NotImplementedError(f"{ins.name} with clamp/op_sel/neg modifiers at {ins.addr:#x}")
    ra, rb, rc = (raw_reader(f[k], "u32", None) for k in ("src0", "src1", "src2"))
    fn, d = _DOTS[ins.name], f["vdst"]

    def run(w: Wave) -> None:
        res = np.broadcast_to(fn(ra(w), rb(w), rc(w)), (64,)).astype(U32)
        write_vgpr(w, d, res, w.mask(), _full(w))
    return run


def _compile_fma_mix(ins: Instruction) -> Fn:
    """v_fma_mix_f32 / v_fma_mixlo_f16 / v_fma_mixhi_f16: fma of sources that are each f32 (op_sel_hi bit 0) or an
    f16 half (op_sel_hi bit 1, op_sel picks the half); neg_hi acts as abs. Single rounding to f32 or f16."""
    f = ins.fields
    name = ins.name
    raws = [raw_reader(f[k], "u32", None) for k in ("src0", "src1", "src2")]
    opsel, opsel_hi, neg, absolute = f["opsel"], f["opsel_hi"], f["neg"], f["neg_hi"]
    d, clamp = f["vdst"], f["clamp"]

    def source(i: int, x: np.ndarray) -> np.ndarray:
        if opsel_hi >> i & 1:
            v = ((x >> U32(16)) if opsel >> i & 1 else x).astype(np.uint16).view(np.float16).astype(np.float64)
        else:
            v = x.view(np.float32).astype(np.float64)
        if absolute >> i & 1:
            v = np.abs(v)
        return -v if neg >> i & 1 else v

    def run(w: Wave) -> None:
        a, b, c = (source(i, r(w)) for i, r in enumerate(raws))
        if name == "v_fma_mix_f32":
            res = ops.fma_round_once(a, b, c, np.float32)
            if clamp:
                res = np.clip(res, 0, 1).astype(np.float32)
            bits = np.broadcast_to(res.view(U32), (64,))
        else:
            half = ops.fma_round_once(a, b, c, np.float16)
            if clamp:
                half = np.clip(half, 0, 1).astype(np.float16)
            h = np.broadcast_to(half.view(np.uint16).astype(U32), (64,))
            if name == "v_fma_mixlo_f16":
                bits = (w.v[d] & U32(0xFFFF0000)) | h
            else:
                bits = (w.v[d] & U32(0xFFFF)) | (h << U32(16))
        write_vgpr(w, d, bits, w.mask(), _full(w))
    return run


# ------------------------------------------------------------------------------------------------ MFMA
# name -> (M, N, K, A element type, B element type, result kind); single-block shapes only.
_MFMA: dict[str, tuple[int, int, int, str, str, str]] = {
    "v_mfma_f32_16x16x16_f16": (16, 16, 16, "f16", "f16", "f32"),
    "v_mfma_f32_32x32x8_f16": (32, 32, 8, "f16", "f16", "f32"),
    "v_mfma_f32_16x16x16_bf16": (16, 16, 16, "bf16", "bf16", "f32"),
    "v_mfma_f32_32x32x8_bf16": (32, 32, 8, "bf16", "bf16", "f32"),
    "v_mfma_f32_16x16x4_f32": (16, 16, 4, "f32", "f32", "f32"),
    "v_mfma_f32_32x32x2_f32": (32, 32, 2, "f32", "f32", "f32"),
    "v_mfma_i32_16x16x32_i8": (16, 16, 32, "i8", "i8", "i32"),
    "v_mfma_i32_32x32x16_i8": (32, 32, 16, "i8", "i8", "i32"),
}
for _a, _b in (("bf8", "bf8"), ("bf8", "fp8"), ("fp8", "bf8"), ("fp8", "fp8")):  # gfx942's FNUZ 8-bit floats
    _MFMA[f"v_mfma_f32_16x16x32_{_a}_{_b}"] = (16, 16, 32, _a, _b, "f32")
    _MFMA[f"v_mfma_f32_32x32x16_{_a}_{_b}"] = (32, 32, 16, _a, _b, "f32")
_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "fp8": 1, "bf8": 1}


def _mfma_elements(raw: np.ndarray, etype: str) -> np.ndarray:
    """(64 lanes, registers) uint32 -> (64, elements) float64 (int64 for i8)."""
    if etype == "f16":
        return raw.view(np.float16).astype(np.float64)
    if etype == "bf16":
        return (raw.view(np.uint16).astype(U32) << U32(16)).view(np.float32).astype(np.float64)
    if etype == "f32":
        return raw.view(np.float32).astype(np.float64)
    if etype in ("fp8", "bf8"):
        return ops.FNUZ8[etype][raw.view(np.uint8)]
    return raw.view(np.int8).astype(np.int64)


def mfma_layout(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lane layouts of a single-block MFMA (CDNA3): A[i][k] is element k%kper of lane i + M*(k//kper), B[k][j] of
    lane j + N*(k//kper); result element r of lane l is D[(r//4)*(4*G) + 4*(l//N) + r%4][l%N] with G = 64/N."""
    kper = k // (64 // m)
    lane = np.arange(64)
    a_row, a_k0 = lane % m, (lane // m) * kper
    b_col, b_k0 = lane % n, (lane // n) * kper
    groups = 64 // n
    items = m * n // 64
    r = np.arange(items)
    d_row = (r[None, :] // 4) * (4 * groups) + 4 * (lane[:, None] // n) + r[None, :] % 4
    d_col = np.broadcast_to((lane % n)[:, None], d_row.shape)
    return np.stack([a_row, a_k0]), np.stack([b_col, b_k0]), d_row, d_col


def _compile_mfma(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    if name not in _MFMA:
        raise NotImplementedError(f"{name} (MFMA shape/type not implemented) at {ins.addr:#x}")
    if f["cbsz"] or f["abid"] or f["blgp"]:
        raise NotImplementedError(f"{name} with cbsz/abid/blgp broadcast modifiers at {ins.addr:#x}")
    m, n, k, a_type, b_type, rkind = _MFMA[name]
    kper = k // (64 // m)
    nregs_ab = max(1, kper * _ELEMENT_BYTES[a_type] // 4)
    items = m * n // 64
    (a_row, a_k0), (b_col, b_k0), d_row, d_col = mfma_layout(m, n, k)
    a_src, b_src, c_src = f["src0"], f["src1"], f["src2"]
    a_acc, b_acc, acc_cd = bool(f["acc"] & 1), bool(f["acc"] & 2), bool(f["acc_cd"])
    d = f["vdst"]

    def regs(w: Wave, code: int, count: int, acc: bool) -> np.ndarray:
        if code < 256:
            raise NotImplementedError(f"{name} with a non-VGPR matrix operand at {ins.addr:#x}")
        base = code - 256
        file = w.a if acc else w.v
        return np.ascontiguousarray(file[base:base + count].T)  # (64 lanes, count) uint32

    def run(w: Wave) -> None:
        av = _mfma_elements(regs(w, a_src, nregs_ab, a_acc), a_type)
        bv = _mfma_elements(regs(w, b_src, nregs_ab, b_acc), b_type)
        amat = np.zeros((m, k), av.dtype)
        bmat = np.zeros((k, n), bv.dtype)
        for t in range(kper):
            amat[a_row, a_k0 + t] = av[:, t]
            bmat[b_k0 + t, b_col] = bv[:, t]
        prod = amat @ bmat
        if c_src >= 256:
            cfile = w.a if acc_cd else w.v
            craw = cfile[c_src - 256:c_src - 256 + items].T
        else:
            craw = np.broadcast_to(raw_reader(c_src, "u32", None)(w)[0], (64, items))
        if rkind == "f32":
            out = (prod[d_row, d_col] + craw.view(np.float32).astype(np.float64)).astype(np.float32).view(U32)
        else:
            out = (prod[d_row, d_col] + craw.view(np.int32).astype(np.int64)).astype(np.int64).astype(U32)
        dfile = w.a if acc_cd else w.v
        mask = w.mask()
        if mask.all():
            dfile[d:d + items] = out.T
        else:  # MFMA ignores EXEC on hardware only when all lanes are on; partial EXEC is not meaningful
            raise NotImplementedError(f"{name} with a partial EXEC mask at {ins.addr:#x}")
    return run


# ------------------------------------------------------------------------------------------------ entry point
def compile_valu(ins: Instruction) -> Fn:
    """A function executing the vector ALU instruction `ins` on a wave."""
    name = ins.name
    if ins.fmt == "VOP3P":
        return _compile_vop3p(ins)
    if name in _SPECIAL:
        return _SPECIAL[name](ins)
    if name.startswith(("v_cmp_", "v_cmpx_")):
        return _compile_cmp(ins)
    vop = ops.VOPS.get(name)
    if vop is None:
        raise NotImplementedError(f"{name} [{ins.fmt}] is decoded but not implemented (at {ins.addr:#x})")
    return _compile_generic(ins, vop)
