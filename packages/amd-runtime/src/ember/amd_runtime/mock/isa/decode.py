"""Decoding gfx942 machine code: one `Instruction` per address, from the formats and opcode tables of gfx942_isa.md.

`decode(code, offset, addr)` reads the instruction at byte `offset` of `code` (its address is `addr`, used for
messages and branch targets). Unknown encodings raise `UnknownInstruction` naming the format, opcode and address.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ember.amd_runtime.mock.isa import tables


class UnknownInstruction(RuntimeError):
    """An encoding the decoder does not know (or an opcode number unused on gfx942)."""

    def __init__(self, fmt: str, op: int | None, addr: int, words: tuple[int, ...]):
        self.fmt, self.op, self.addr, self.words = fmt, op, addr, words
        op_text = f" opcode {op}" if op is not None else ""
        super().__init__(f"unknown gfx942 instruction: format {fmt}{op_text} at {addr:#x} "
                         f"(dwords {' '.join(f'{w:08X}' for w in words)})")


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction: its format, opcode, base mnemonic (no _e32/_e64/_sdwa suffix), fields and size."""

    addr: int
    size: int
    fmt: str
    op: int
    name: str
    fields: dict[str, int] = field(hash=False)
    literal: int | None = None
    ext: str | None = None  # "sdwa" or "dpp" for VOP1/VOP2/VOPC with an extension dword
    words: tuple[int, ...] = ()

    def __str__(self) -> str:
        suffix = f"_{self.ext}" if self.ext else ""
        return f"{self.name}{suffix} [{self.fmt} op {self.op}] at {self.addr:#x} " \
               f"({' '.join(f'{w:08X}' for w in self.words)})"


def _bits(x: int, hi: int, lo: int) -> int:
    return (x >> lo) & ((1 << (hi - lo + 1)) - 1)


def _lookup(table: dict[int, str], fmt: str, op: int, addr: int, words: tuple[int, ...]) -> str:
    name = table.get(op)
    if name is None:
        raise UnknownInstruction(fmt, op, addr, words)
    return name


def decode(code: bytes | memoryview, offset: int, addr: int) -> Instruction:
    """Decode the instruction at `code[offset:]`, whose device address is `addr`."""
    if offset < 0 or offset + 4 > len(code):
        raise UnknownInstruction("(outside the code)", None, addr, ())
    w0 = struct.unpack_from("<I", code, offset)[0]

    def word(i: int) -> int:
        if offset + 4 * i + 4 > len(code):
            raise UnknownInstruction("(truncated)", None, addr, (w0,))
        return struct.unpack_from("<I", code, offset + 4 * i)[0]

    def finish(fmt: str, op: int, name: str, f: dict[str, int], nwords: int, literal_used: bool = False,
               ext: str | None = None) -> Instruction:
        words = tuple(word(i) for i in range(nwords))
        literal = None
        if literal_used:
            literal = word(nwords)
            words += (literal,)
        return Instruction(addr, 4 * len(words), fmt, op, name, f, literal, ext, words)

    top9 = w0 >> 23
    if top9 == 0x17D:  # SOP1
        op = _bits(w0, 15, 8)
        f = {"ssrc0": _bits(w0, 7, 0), "sdst": _bits(w0, 22, 16)}
        return finish("SOP1", op, _lookup(tables.SOP1, "SOP1", op, addr, (w0,)), f, 1, f["ssrc0"] == 255)
    if top9 == 0x17E:  # SOPC
        op = _bits(w0, 22, 16)
        f = {"ssrc0": _bits(w0, 7, 0), "ssrc1": _bits(w0, 15, 8)}
        return finish("SOPC", op, _lookup(tables.SOPC, "SOPC", op, addr, (w0,)), f, 1, 255 in (f["ssrc0"], f["ssrc1"]))
    if top9 == 0x17F:  # SOPP
        op = _bits(w0, 22, 16)
        return finish("SOPP", op, _lookup(tables.SOPP, "SOPP", op, addr, (w0,)), {"simm16": _bits(w0, 15, 0)}, 1)
    if w0 >> 28 == 0b1011:  # SOPK
        op = _bits(w0, 27, 23)
        f = {"simm16": _bits(w0, 15, 0), "sdst": _bits(w0, 22, 16)}
        return finish("SOPK", op, _lookup(tables.SOPK, "SOPK", op, addr, (w0,)), f, 1, op == 20)
    if w0 >> 30 == 0b10:  # SOP2
        op = _bits(w0, 29, 23)
        f = {"ssrc0": _bits(w0, 7, 0), "ssrc1": _bits(w0, 15, 8), "sdst": _bits(w0, 22, 16)}
        return finish("SOP2", op, _lookup(tables.SOP2, "SOP2", op, addr, (w0,)), f, 1, 255 in (f["ssrc0"], f["ssrc1"]))
    top6 = w0 >> 26
    if top6 == 0b110000:  # SMEM
        w1 = word(1)
        op = _bits(w0, 25, 18)
        f = {"sbase": _bits(w0, 5, 0) * 2, "sdata": _bits(w0, 12, 6), "soffset_en": _bits(w0, 14, 14),
             "glc": _bits(w0, 16, 16), "imm": _bits(w0, 17, 17), "offset": _bits(w1, 20, 0),
             "soffset": _bits(w1, 31, 25)}
        return finish("SMEM", op, _lookup(tables.SMEM, "SMEM", op, addr, (w0, w1)), f, 2)
    if top9 == 0x1A7:  # VOP3P (incl. MFMA)
        w1 = word(1)
        op = _bits(w0, 22, 16)
        name = _lookup(tables.VOP3P, "VOP3P", op, addr, (w0, w1))
        f = {"vdst": _bits(w0, 7, 0), "src0": _bits(w1, 8, 0), "src1": _bits(w1, 17, 9), "src2": _bits(w1, 26, 18),
             "neg_hi": _bits(w0, 10, 8), "opsel": _bits(w0, 13, 11),
             "opsel_hi": _bits(w1, 28, 27) | (_bits(w0, 14, 14) << 2), "clamp": _bits(w0, 15, 15),
             "neg": _bits(w1, 31, 29)}
        if name.startswith("v_mfma"):
            f.update(cbsz=_bits(w0, 10, 8), abid=_bits(w0, 14, 11), acc_cd=_bits(w0, 15, 15),
                     acc=_bits(w1, 28, 27), blgp=_bits(w1, 31, 29))
        return finish("VOP3P", op, name, f, 2)
    if top6 == 0b110100:  # VOP3A / VOP3B
        w1 = word(1)
        op = _bits(w0, 25, 16)
        name = _lookup(tables.VOP3, "VOP3", op, addr, (w0, w1))
        f = {"vdst": _bits(w0, 7, 0), "abs": _bits(w0, 10, 8), "opsel": _bits(w0, 14, 11), "clamp": _bits(w0, 15, 15),
             "src0": _bits(w1, 8, 0), "src1": _bits(w1, 17, 9), "src2": _bits(w1, 26, 18), "omod": _bits(w1, 28, 27),
             "neg": _bits(w1, 31, 29)}
        if op in tables.VOP3B_OPS:
            f["sdst"], f["abs"], f["opsel"] = _bits(w0, 14, 8), 0, 0
        return finish("VOP3", op, name, f, 2)
    if top6 == 0b110110:  # DS
        w1 = word(1)
        op = _bits(w0, 24, 17)
        f = {"offset0": _bits(w0, 7, 0), "offset1": _bits(w0, 15, 8), "gds": _bits(w0, 16, 16),
             "acc": _bits(w0, 25, 25), "addr": _bits(w1, 7, 0), "data0": _bits(w1, 15, 8), "data1": _bits(w1, 23, 16),
             "vdst": _bits(w1, 31, 24)}
        return finish("DS", op, _lookup(tables.DS, "DS", op, addr, (w0, w1)), f, 2)
    if top6 == 0b110111:  # FLAT / GLOBAL / SCRATCH
        w1 = word(1)
        op = _bits(w0, 24, 18)
        seg = _bits(w0, 15, 14)
        fmt = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}.get(seg)
        if fmt is None:
            raise UnknownInstruction("FLAT(seg=3)", op, addr, (w0, w1))
        base = _lookup(tables.FLAT, fmt, op, addr, (w0, w1))
        if (fmt != "GLOBAL" and base.startswith("load_lds")) or (fmt == "SCRATCH" and base.startswith("atomic")):
            raise UnknownInstruction(fmt, op, addr, (w0, w1))
        raw_off = _bits(w0, 12, 0)
        flat_offset = raw_off if fmt == "FLAT" else raw_off - (1 << 13) * (raw_off >> 12)
        f = {"offset": flat_offset, "sve": _bits(w0, 13, 13), "sc0": _bits(w0, 16, 16), "nt": _bits(w0, 17, 17),
             "sc1": _bits(w0, 25, 25), "addr": _bits(w1, 7, 0), "data": _bits(w1, 15, 8), "saddr": _bits(w1, 22, 16),
             "acc": _bits(w1, 23, 23), "vdst": _bits(w1, 31, 24)}
        return finish(fmt, op, f"{fmt.lower()}_{base}", f, 2)
    if top6 == 0b111000:  # MUBUF
        w1 = word(1)
        op = _bits(w0, 24, 18)
        f = {"offset": _bits(w0, 11, 0), "offen": _bits(w0, 12, 12), "idxen": _bits(w0, 13, 13),
             "sc0": _bits(w0, 14, 14), "sc1": _bits(w0, 15, 15), "lds": _bits(w0, 16, 16), "nt": _bits(w0, 17, 17),
             "vaddr": _bits(w1, 7, 0), "vdata": _bits(w1, 15, 8), "srsrc": _bits(w1, 20, 16) * 4,
             "acc": _bits(w1, 23, 23), "soffset": _bits(w1, 31, 24)}
        return finish("MUBUF", op, _lookup(tables.MUBUF, "MUBUF", op, addr, (w0, w1)), f, 2)
    if top6 == 0b111010:
        raise UnknownInstruction("MTBUF", _bits(w0, 18, 15), addr, (w0, word(1)))
    if w0 >> 25 in (0b0111111, 0b0111110) or w0 >> 31 == 0:  # VOP1 / VOPC / VOP2
        if w0 >> 25 == 0b0111111:
            fmt, op, table = "VOP1", _bits(w0, 16, 9), tables.VOP1
            f = {"src0": _bits(w0, 8, 0), "vdst": _bits(w0, 24, 17)}
        elif w0 >> 25 == 0b0111110:
            fmt, op, table = "VOPC", _bits(w0, 24, 17), tables.VOPC
            f = {"src0": _bits(w0, 8, 0), "vsrc1": _bits(w0, 16, 9)}
        else:
            fmt, op, table = "VOP2", _bits(w0, 30, 25), tables.VOP2
            f = {"src0": _bits(w0, 8, 0), "vsrc1": _bits(w0, 16, 9), "vdst": _bits(w0, 24, 17)}
        name = _lookup(table, fmt, op, addr, (w0,))
        if f["src0"] == 249:  # SDWA
            w1 = word(1)
            f.update(sdwa_src0=_bits(w1, 7, 0), dst_sel=_bits(w1, 10, 8), dst_unused=_bits(w1, 12, 11),
                     clamp=_bits(w1, 13, 13), omod=_bits(w1, 15, 14), src0_sel=_bits(w1, 18, 16),
                     src0_sext=_bits(w1, 19, 19), src0_neg=_bits(w1, 20, 20), src0_abs=_bits(w1, 21, 21),
                     s0=_bits(w1, 23, 23), src1_sel=_bits(w1, 26, 24), src1_sext=_bits(w1, 27, 27),
                     src1_neg=_bits(w1, 28, 28), src1_abs=_bits(w1, 29, 29), s1=_bits(w1, 31, 31))
            if fmt == "VOPC":
                f.update(sdst=_bits(w1, 14, 8), sd=_bits(w1, 15, 15))
            return finish(fmt, op, name, f, 2, ext="sdwa")
        if f["src0"] == 250:  # DPP
            w1 = word(1)
            f.update(dpp_src0=_bits(w1, 7, 0), dpp_ctrl=_bits(w1, 16, 8), bound_ctrl=_bits(w1, 19, 19),
                     src0_neg=_bits(w1, 20, 20), src0_abs=_bits(w1, 21, 21), src1_neg=_bits(w1, 22, 22),
                     src1_abs=_bits(w1, 23, 23), bank_mask=_bits(w1, 27, 24), row_mask=_bits(w1, 31, 28))
            return finish(fmt, op, name, f, 2, ext="dpp")
        always_literal = fmt == "VOP2" and op in (23, 24, 36, 37)
        return finish(fmt, op, name, f, 1, always_literal or f["src0"] == 255)
    raise UnknownInstruction("(no format matches)", None, addr, (w0,))
