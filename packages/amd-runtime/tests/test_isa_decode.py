"""The decoder against LLVM: every opcode of every format table vs llvm-mc-19's disassembler, and every instruction
of clang-19-compiled kernels vs llvm-objdump-19 (mnemonic, size and operand fields)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from ember.amd_runtime.mock.isa import UnknownInstruction, decode, tables

LLVM_MC = shutil.which("llvm-mc-19")
needs_mc = pytest.mark.skipif(LLVM_MC is None, reason="llvm-mc-19 is needed to cross-check the decoder")


def _encodings() -> list[tuple[str, list[tuple[int, ...]]]]:
    """Per (format, opcode): our mnemonic and a few encodings with different operand fields (llvm-mc rejects some
    operand choices for some opcodes; at least one must decode, and every one that does must agree)."""
    out: list[tuple[str, list[tuple[int, ...]]]] = []
    for op, name in tables.SOP2.items():
        out.append((name, [(0x80000000 | op << 23 | 6 << 16 | 4 << 8 | 2,)]))
    for op, name in tables.SOP1.items():
        out.append((name, [(0xBE800000 | d << 16 | op << 8 | s,) for d in (2, 0) for s in (4, 0)]))
    for op, name in tables.SOPC.items():
        out.append((name, [(0xBF000000 | op << 16 | b << 8 | a,) for a, b in ((2, 4), (0, 0))]))
    for op, name in tables.SOPK.items():
        out.append((name, [(0xB0000000 | op << 23 | d << 16 | 1,) + ((5,) if op == 20 else ()) for d in (2, 0)]))
    for op, name in tables.SOPP.items():
        out.append((name, [(0xBF800000 | op << 16,)]))
    for op, name in tables.SMEM.items():
        out.append((name, [(0xC0000000 | op << 18 | imm << 17 | d << 6 | b, 0)
                           for b in (1, 2, 0) for d in (8, 0) for imm in (1, 0)]))
    for op, name in tables.VOP1.items():
        out.append((name, [(0x7E000000 | d << 17 | op << 9 | s,) for d, s in ((4, 258), (0, 0), (4, 259))]))
    for op, name in tables.VOP2.items():
        lit = (0x3F800000,) if op in (23, 24, 36, 37) else ()
        out.append((name, [(op << 25 | 4 << 17 | 6 << 9 | 258,) + lit]))
    for op, name in tables.VOPC.items():
        out.append((name, [(0x7C000000 | op << 17 | 6 << 9 | 258,)]))
    for op, name in tables.VOP3.items():
        out.append((name, [(0xD0000000 | op << 16 | d, 258 | b << 9 | c << 18)
                           for d in (4, 0) for b, c in ((260, 262), (260, 0), (0, 0))] + [(0xD0000000 | op << 16, 0)]))
    for op, name in tables.VOP3P.items():
        if name.startswith("v_mfma"):
            out.append((name, [(0xD3800000 | op << 16 | 1 << 15, 256 | 258 << 9 | 128 << 18)]))
        else:
            out.append((name, [(0xD3800000 | op << 16 | 4, 258 | 260 << 9 | c << 18 | 3 << 27) for c in (262, 0)]
                        + [(0xD3800000 | op << 16 | 1 << 14 | 4, 258 | b << 9 | c << 18 | 3 << 27)
                           for b, c in ((260, 262), (260, 0), (0, 0))]))
    for op, name in tables.DS.items():
        out.append((name, [(0xD8000000 | op << 17, 1 | d0 << 8 | d1 << 16 | vd << 24)
                           for d0, d1, vd in ((2, 0, 0), (2, 4, 0), (0, 0, 8), (2, 0, 8), (2, 4, 8), (0, 0, 0))]))
    for op, name in tables.FLAT.items():
        for seg, prefix in ((0, "flat"), (2, "global"), (1, "scratch")):
            if (prefix != "global" and name.startswith("load_lds")) or (prefix == "scratch" and "atomic" in name):
                continue
            sve = 1 << 13 if prefix == "scratch" else 0
            word0 = 0xDC000000 | op << 18 | seg << 14 | sve
            out.append((f"{prefix}_{name}", [(word0 | sc, 2 | d << 8 | sa << 16 | v << 24)
                                             for sc in (0, 1 << 16) for sa in (0x7F, 0)
                                             for d, v in ((4, 0), (0, 6), (4, 6), (0, 0))]))
    for op, name in tables.MUBUF.items():
        out.append((name, [(0xE0000000 | op << 18, 2 | 4 << 8 | 1 << 16 | 128 << 24), (0xE0000000 | op << 18, 0)]))
    return out


@needs_mc
def test_every_opcode_matches_llvm_mc() -> None:
    encs = _encodings()
    flat = [e for _, variants in encs for e in variants]
    text = "\n".join(",".join(f"0x{b:02x}" for b in struct.pack(f"<{len(e)}I", *e)) for e in flat)
    res = subprocess.run([LLVM_MC, "-arch=amdgcn", "-mcpu=gfx942", "-disassemble", "-show-encoding"], input=text,
                         capture_output=True, text=True)
    llvm: dict[bytes, str] = {}
    for line in res.stdout.splitlines():
        m = re.match(r"\s*(\S+).*; encoding: \[([^\]]*)\]", line)
        if m:
            llvm[bytes(int(b, 16) for b in m.group(2).split(","))] = re.sub(r"_(e32|e64|sdwa|dpp)$", "", m.group(1))
    mismatches = []
    for ours, variants in encs:
        seen = []
        for enc in variants:
            raw = struct.pack(f"<{len(enc)}I", *enc)
            assert decode(raw, 0, 0).name == ours
            theirs = llvm.get(raw) or llvm.get(raw[:4])
            if theirs is not None:
                seen.append(theirs)
        if not seen:
            mismatches.append(f"{ours}: llvm-mc decodes none of {[[hex(w) for w in e] for e in variants]}")
        elif any(t != ours for t in seen):
            mismatches.append(f"{ours}: llvm-mc says {seen}")
    assert not mismatches, "\n".join(mismatches)


def test_unknown_opcode_is_an_error_naming_it() -> None:
    with pytest.raises(UnknownInstruction, match=r"format VOP1 opcode 99 at 0x1234 \(dwords 7E02C602\)"):
        decode(struct.pack("<I", 0x7E000000 | 1 << 17 | 99 << 9 | 2), 0, 0x1234)
    with pytest.raises(UnknownInstruction, match="MTBUF"):
        decode(struct.pack("<II", 0xE8000000, 0), 0, 0)
