"""Single instructions and short sequences, assembled by llvm-mc-19 for gfx942, run on one wave of the interpreter
and checked against Python/NumPy arithmetic."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from ember.amd_runtime.mock.isa import (
    InstructionLimitExceeded,
    MemoryFault,
    Program,
    SparseMemory,
    UnknownInstruction,
    Wave,
    WaveTrap,
)
from ember.amd_runtime.mock.isa.state import SHARED_BASE

LLVM_MC = shutil.which("llvm-mc-19")
pytestmark = pytest.mark.skipif(LLVM_MC is None, reason="llvm-mc-19 is needed to assemble the snippets")
BASE = 0x10_0000
ALL = (1 << 64) - 1
M32 = 0xFFFFFFFF
MODE_IEEE = 0x3F0  # round nearest, no denorm flushing, DX10 clamp and IEEE on (clang's default rsrc1)
rng = np.random.default_rng(1)


def assemble(lines: list[str]) -> bytes:
    src = "\n".join(lines + ["s_endpgm"]) + "\n"
    res = subprocess.run([LLVM_MC, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-show-encoding"], input=src,
                         capture_output=True, text=True)
    assert res.returncode == 0 and "error" not in res.stderr, res.stderr
    return b"".join(bytes(int(b, 16) for b in m.split(","))
                    for m in re.findall(r"encoding: \[([^\]]*)\]", res.stdout))


def run(lines: list[str], s: dict[int, int] | None = None, v: dict[int, object] | None = None, exec_mask: int = ALL,
        mem: SparseMemory | None = None, lds: int = 0, mode: int = MODE_IEEE, scc: int = 0,
        scratch: int = 0) -> Wave:
    """Run the snippet on one wave; `v` values are per-lane arrays or scalars (broadcast)."""
    program = Program(assemble(lines), BASE)
    w = Wave(mem if mem is not None else SparseMemory(), np.zeros(lds, np.uint8), mode)
    for n, val in (s or {}).items():
        w.s[n] = val & M32
    for n, val in (v or {}).items():
        w.v[n] = np.asarray(val).astype(np.int64).astype(np.uint32) if np.asarray(val).dtype.kind in "iub" \
            else np.asarray(val, np.float32).view(np.uint32)
    if scratch:
        w.scratch = np.zeros((64, scratch), np.uint8)
    w.exec, w.scc, w.pc = exec_mask, scc, BASE
    with np.errstate(all="ignore"):
        while not program.run_wave(w, 10_000):
            pass
    return w


def f32(w: Wave, n: int) -> np.ndarray:
    return w.v[n].view(np.float32)


def u64(w: Wave, n: int) -> np.ndarray:
    return w.v[n].astype(np.uint64) | (w.v[n + 1].astype(np.uint64) << np.uint64(32))


LANE = np.arange(64)


# ---------------------------------------------------------------------------------------------- scalar ALU
def test_scalar_add_carry_chain_and_scc() -> None:
    w = run(["s_add_u32 s4, s0, s2", "s_addc_u32 s5, s1, s3"], s={0: 0xFFFFFFF0, 1: 1, 2: 0x20, 3: 2})
    assert (w.s[4], w.s[5], w.scc) == (0x10, 4, 0)
    w = run(["s_sub_u32 s4, s0, s1"], s={0: 1, 1: 2})
    assert (w.s[4], w.scc) == (M32, 1)
    w = run(["s_add_i32 s4, s0, s1"], s={0: 0x7FFFFFFF, 1: 1})
    assert (w.s[4], w.scc) == (0x80000000, 1)


def test_scalar_bit_ops() -> None:
    w = run(["s_lshl_b64 s[4:5], s[0:1], 36", "s_bfe_u32 s6, s2, 0x80004", "s_bfe_i32 s7, s2, 0x80004",
             "s_bcnt1_i32_b64 s8, s[0:1]", "s_ff1_i32_b32 s9, s3", "s_flbit_i32_b32 s10, s3", "s_brev_b32 s11, 1",
             "s_abs_i32 s12, s13", "s_movk_i32 s14, 0x8000", "s_mul_hi_i32 s15, s16, s17"],
            s={0: 0x12345678, 1: 0x9, 2: 0xABC, 3: 0x00F0_0000, 13: 0x80000000, 16: (-5) & M32, 17: 0x40000000})
    assert w.sget64(4) == (0x9_12345678 << 36) & (2**64 - 1)
    assert w.s[6] == 0xAB and w.s[7] == (0xFFFFFFAB)
    assert w.s[8] == bin(0x9_12345678).count("1")
    assert (w.s[9], w.s[10], w.s[11], w.s[12]) == (20, 8, 0x80000000, 0x80000000)
    assert w.s[14] == 0xFFFF8000 and w.s[15] == ((-5 * 0x40000000) >> 32) & M32


def test_saveexec_and_branches() -> None:
    w = run(["s_and_saveexec_b64 s[0:1], s[2:3]", "s_andn2_saveexec_b64 s[4:5], s[6:7]"],
            s={2: 0xFF00FF00, 3: 0x1, 6: 0xFFFFFFFF, 7: 0xFFFFFFFF}, exec_mask=0xF0F0F0F0_F0F0F0F0)
    assert w.sget64(0) == 0xF0F0F0F0_F0F0F0F0
    assert w.sget64(4) == 0xF000F000 | (0 << 32)
    assert w.exec == ~0xF000F000 & ALL and w.scc == 1
    # s_cmp + s_cbranch_scc1 over one instruction; a loop counted down with s_cbranch_scc0
    w = run(["s_cmp_lt_i32 s0, s1", "s_cbranch_scc1 1", "s_mov_b32 s2, 7"], s={0: (-3) & M32, 1: 5, 2: 1})
    assert w.s[2] == 1  # skipped
    w = run(["s_mov_b32 s3, 0", "s_add_i32 s3, s3, 2", "s_add_i32 s0, s0, -1", "s_cmp_eq_u32 s0, 0",
             "s_cbranch_scc0 -4"], s={0: 5})
    assert w.s[3] == 10 and w.s[0] == 0


def test_cselect_cmpk_and_getpc() -> None:
    w = run(["s_cmpk_gt_i32 s0, 0xfff0", "s_cselect_b64 s[2:3], s[4:5], 0", "s_getpc_b64 s[6:7]"],
            s={0: 1, 4: 0xAAAA, 5: 0xBBBB})
    assert w.scc == 1 and w.sget64(2) == 0xBBBB_0000AAAA
    assert w.sget64(6) == BASE + 12  # address of the instruction after s_getpc


# ---------------------------------------------------------------------------------------------- vector ALU
def test_exec_masking_and_sgpr_broadcast() -> None:
    mask = 0x00FF_0F0F_F0F0_1234
    w = run(["v_add_u32_e32 v2, s0, v1"], s={0: 1000}, v={1: LANE, 2: 7}, exec_mask=mask)
    on = ((mask >> LANE) & 1).astype(bool)
    np.testing.assert_array_equal(w.v[2], np.where(on, LANE + 1000, 7))


def test_vector_carries_into_vcc() -> None:
    a = rng.integers(0, 2**32, 64, dtype=np.uint64)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64)
    hi = rng.integers(0, 2**32, 64, dtype=np.uint64)
    w = run(["v_add_co_u32_e32 v4, vcc, v0, v1", "v_addc_co_u32_e32 v5, vcc, v2, v3, vcc"],
            v={0: a, 1: b, 2: hi, 3: hi})
    total = (a + b) + ((hi + hi) << np.uint64(32))
    np.testing.assert_array_equal(u64(w, 4), total & np.uint64(2**64 - 1))
    carry_out = ((a + b) >> np.uint64(32)) + hi + hi >= np.uint64(2**32)
    assert w.vcc == int(np.packbits(carry_out, bitorder="little").view("<u8")[0])
    w = run(["v_sub_co_u32_e64 v4, s[10:11], v0, v1"], v={0: a, 1: b}, exec_mask=M32)
    np.testing.assert_array_equal(w.v[4][:32], ((a - b) & np.uint64(M32))[:32])
    borrow = (a < b) & (LANE < 32)
    assert w.sget64(10) == int(np.packbits(borrow, bitorder="little").view("<u8")[0])  # inactive lanes read 0


def test_compares_cndmask_and_cmpx() -> None:
    x = rng.integers(-100, 100, 64)
    w = run(["v_cmp_gt_i32_e32 vcc, 0, v0", "v_cndmask_b32_e32 v1, v2, v3, vcc", "v_cmpx_lt_i32_e64 s[4:5], v0, 50"],
            v={0: x, 2: 11, 3: 22}, exec_mask=ALL >> 1)
    lt0 = (x < 0) & (LANE < 63)
    assert w.vcc == int(np.packbits(lt0, bitorder="little").view("<u8")[0])
    np.testing.assert_array_equal(w.v[1][:63], np.where(x < 0, 22, 11)[:63])
    assert w.exec == int(np.packbits((x < 50) & (LANE < 63), bitorder="little").view("<u8")[0])


def test_float_compare_nan_and_class() -> None:
    x = np.array([np.nan, 1.0, -np.inf, -0.0, 1e-40, 2.0] + [3.0] * 58, np.float32)
    w = run(["v_cmp_nlt_f32_e64 s[0:1], v0, 2.0", "v_cmp_lt_f32_e64 s[2:3], v0, 2.0",
             "v_cmp_class_f32_e64 s[4:5], v0, v1"], v={0: x, 1: 1 << 7 | 1 << 1 | 1 << 2})  # +denorm, qnan, -inf
    nlt, lt = w.sget64(0), w.sget64(2)
    assert nlt & 1 and not lt & 1  # NaN: unordered
    assert (lt >> 1) & 1 and (lt >> 2) & 1 and not (lt >> 5) & 1
    assert w.sget64(4) & 0b111111 == 0b010101


def test_integer_multiply_shift_and_bitfield() -> None:
    a = rng.integers(0, 2**32, 64, dtype=np.uint64)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64)
    c = rng.integers(0, 2**64, 64, dtype=np.uint64)
    w = run(["v_mul_hi_u32 v3, v0, v1", "v_mul_lo_u32 v4, v0, v1", "v_mad_u64_u32 v[6:7], s[0:1], v0, v1, v[8:9]",
             "v_lshlrev_b64 v[10:11], 35, v[8:9]", "v_ashrrev_i64 v[12:13], 7, v[8:9]", "v_bfe_i32 v14, v0, 4, 9",
             "v_alignbit_b32 v15, v0, v1, 12", "v_perm_b32 v16, v0, v1, s2",
             "v_lshl_add_u64 v[18:19], v[8:9], 2, v[8:9]"],
            v={0: a, 1: b, 8: c & np.uint64(M32), 9: c >> np.uint64(32)}, s={2: 0x0C050401})
    p = [int(x) * int(y) for x, y in zip(a, b)]
    np.testing.assert_array_equal(w.v[3], [q >> 32 for q in p])
    np.testing.assert_array_equal(w.v[4], [q & M32 for q in p])
    np.testing.assert_array_equal(u64(w, 6), [(q + int(z)) & (2**64 - 1) for q, z in zip(p, c)])
    assert w.sget64(0) == sum(1 << i for i, (q, z) in enumerate(zip(p, c)) if q + int(z) >= 2**64)
    np.testing.assert_array_equal(u64(w, 10), [(int(z) << 35) & (2**64 - 1) for z in c])
    np.testing.assert_array_equal(u64(w, 12), [((int(z) - (1 << 64) * (int(z) >> 63)) >> 7) & (2**64 - 1) for z in c])
    field = [(int(x) >> 4) & 0x1FF for x in a]
    np.testing.assert_array_equal(w.v[14], [(f - 512 if f & 256 else f) & M32 for f in field])
    np.testing.assert_array_equal(w.v[15], [(((int(x) << 32) | int(y)) >> 12) & M32 for x, y in zip(a, b)])
    data = [(int(x) << 32) | int(y) for x, y in zip(a, b)]
    sel = [1, 4, 5, 0xC]
    np.testing.assert_array_equal(w.v[16], [sum(((d >> (8 * s)) & 0xFF if s < 8 else 0) << (8 * i)
                                                  for i, s in enumerate(sel)) for d in data])
    np.testing.assert_array_equal(u64(w, 18), [(int(z) * 5) & (2**64 - 1) for z in c])


def test_mbcnt_and_lane_access() -> None:
    w = run(["v_mbcnt_lo_u32_b32 v1, -1, 0", "v_mbcnt_hi_u32_b32 v1, -1, v1", "v_readfirstlane_b32 s0, v2",
             "v_readlane_b32 s1, v2, 37", "v_writelane_b32 v3, s4, 5"],
            v={2: LANE * 3, 3: 0}, s={4: 99}, exec_mask=ALL & ~0b111)
    np.testing.assert_array_equal(w.v[1][3:], LANE[3:])
    assert (w.s[0], w.s[1]) == (9, 111) and w.v[3][5] == 99 and w.v[3][4] == 0


def test_f32_arithmetic_is_ieee() -> None:
    a = (rng.standard_normal(64) * 10).astype(np.float32)
    b = (rng.standard_normal(64) * 1e-3).astype(np.float32)
    c = rng.standard_normal(64).astype(np.float32)
    w = run(["v_add_f32_e32 v3, v0, v1", "v_mul_f32_e32 v4, v0, v1", "v_fma_f32 v5, v0, v1, v2",
             "v_sub_f32_e32 v6, v0, v1", "v_fmac_f32_e32 v2, v0, v1"], v={0: a, 1: b, 2: c})
    np.testing.assert_array_equal(f32(w, 3), a + b)
    np.testing.assert_array_equal(f32(w, 4), a * b)
    exact = np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)])
    np.testing.assert_array_equal(f32(w, 5), exact.astype(np.float32))
    np.testing.assert_array_equal(f32(w, 2), f32(w, 5))
    np.testing.assert_array_equal(f32(w, 6), a - b)


def test_fma_f32_single_rounding_on_a_hard_case() -> None:
    # a*b = 1 + 2^-24 + 2^-48 exactly: rounding the product first then adding -1 would lose the 2^-48 term
    a = np.float32(1 + 2**-12)
    w = run(["v_fma_f32 v3, v0, v0, v1"], v={0: a, 1: np.float32(-1.0)})
    assert f32(w, 3)[0] == np.float32(2**-11 + 2**-24)
    # a*a is exactly halfway between two f32 values: a tiny addend decides the rounding (a float64 sum loses it)
    w = run(["v_fma_f32 v3, v0, v0, v1", "v_fma_f32 v4, v0, v0, v2"],
            v={0: a, 1: np.float32(2**-70), 2: np.float32(-2**-70)})
    assert f32(w, 3)[0] == np.float32(1 + 2**-11 + 2**-23) and f32(w, 4)[0] == np.float32(1 + 2**-11)


def test_vop3_modifiers_literals_and_inline_constants() -> None:
    x = np.linspace(-2, 2, 64).astype(np.float32)
    w = run(["v_add_f32_e64 v1, -v0, |v0| mul:2", "v_mul_f32_e64 v2, v0, 0.5 clamp", "v_mov_b32_e32 v3, 0x12345678",
             "v_add_f32_e64 v4, v0, -4.0 div:2", "v_max_f32_e64 v5, -v0, -v0", "v_mov_b32_e32 v6, -16"], v={0: x})
    np.testing.assert_array_equal(f32(w, 1), (-x + np.abs(x)) * 2)
    np.testing.assert_array_equal(f32(w, 2), np.clip(x * 0.5, 0, 1))
    assert (w.v[3] == 0x12345678).all() and (w.v[6] == (-16) & M32).all()
    np.testing.assert_array_equal(f32(w, 4), (x - 4) / 2)
    np.testing.assert_array_equal(f32(w, 5), -x)


def test_f64_literal_is_the_high_dword_and_f64_ops() -> None:
    a = rng.standard_normal(64)
    w = run(["v_fmac_f64_e32 v[2:3], 0x40080000, v[0:1]", "v_add_f64 v[4:5], v[0:1], 1.0",
             "v_cvt_f32_f64_e32 v6, v[0:1]", "v_cvt_i32_f64_e32 v7, v[0:1]"],
            v={0: a.view(np.uint64) & np.uint64(M32), 1: a.view(np.uint64) >> np.uint64(32), 2: 0, 3: 0})
    np.testing.assert_array_equal(u64(w, 2).view(np.float64), a * 3.0)
    np.testing.assert_array_equal(u64(w, 4).view(np.float64), a + 1.0)
    np.testing.assert_array_equal(f32(w, 6), a.astype(np.float32))
    np.testing.assert_array_equal(w.v[7].view(np.int32), np.trunc(a).astype(np.int32))


def test_min_max_signed_zero_and_nan() -> None:
    x = np.array([0.0, -0.0, np.nan, 1.0] * 16, np.float32)
    y = np.array([-0.0, 0.0, 5.0, np.nan] * 16, np.float32)
    w = run(["v_max_f32_e32 v2, v0, v1", "v_min_f32_e32 v3, v0, v1"], v={0: x, 1: y})
    assert w.v[2][0] == 0 and w.v[2][1] == 0 and f32(w, 2)[2] == 5 and f32(w, 2)[3] == 1
    assert w.v[3][0] == 0x80000000 and w.v[3][1] == 0x80000000


def test_conversions_saturate_and_nan_is_zero() -> None:
    x = np.array([np.nan, 3e9, -3e9, -1.5, 2.5, 1e-3, -0.5, np.inf] * 8, np.float32)
    w = run(["v_cvt_i32_f32_e32 v1, v0", "v_cvt_u32_f32_e32 v2, v0", "v_rndne_f32_e32 v3, v0",
             "v_cvt_f16_f32_e32 v4, v0", "v_cvt_flr_i32_f32_e32 v5, v0"], v={0: x})
    assert list(w.v[1][:8].view(np.int32)) == [0, 2**31 - 1, -2**31, -1, 2, 0, 0, 2**31 - 1]
    assert list(w.v[2][:8]) == [0, 3000000000, 0, 0, 2, 0, 0, M32]
    assert list(f32(w, 3)[1:7]) == [3e9, -3e9, -2.0, 2.0, 0.0, -0.0]
    with np.errstate(over="ignore"):
        half = (w.v[4] & 0xFFFF).astype(np.uint16).view(np.float16)
        np.testing.assert_array_equal(half[1:], x[1:].astype(np.float16))
    assert list(w.v[5][3:7].view(np.int32)) == [-2, 2, 0, -1]


def test_transcendentals_are_correctly_rounded() -> None:
    x = rng.uniform(0.01, 10, 64).astype(np.float32)
    w = run(["v_exp_f32_e32 v1, v0", "v_log_f32_e32 v2, v0", "v_rcp_f32_e32 v3, v0", "v_rsq_f32_e32 v4, v0",
             "v_sqrt_f32_e32 v5, v0", "v_sin_f32_e32 v6, v0", "v_cos_f32_e32 v7, v0"], v={0: x})
    x64 = x.astype(np.float64)
    for reg, ref in ((1, np.exp2(x64)), (2, np.log2(x64)), (3, 1 / x64), (4, 1 / np.sqrt(x64)), (5, np.sqrt(x64)),
                     (6, np.sin(2 * np.pi * x64)), (7, np.cos(2 * np.pi * x64))):
        np.testing.assert_array_equal(f32(w, reg), ref.astype(np.float32), err_msg=str(reg))


def test_division_sequence_with_scaling() -> None:
    lines = ["v_div_scale_f32 v2, s[0:1], v1, v1, v0", "v_div_scale_f32 v3, vcc, v0, v1, v0", "v_rcp_f32_e32 v4, v2",
             "v_fma_f32 v5, -v2, v4, 1.0", "v_fmac_f32_e32 v4, v5, v4", "v_mul_f32_e32 v5, v3, v4",
             "v_fma_f32 v6, -v2, v5, v3", "v_fmac_f32_e32 v5, v6, v4", "v_fma_f32 v2, -v2, v5, v3",
             "v_div_fmas_f32 v2, v2, v4, v5", "v_div_fixup_f32 v7, v2, v1, v0"]
    num = np.concatenate([rng.standard_normal(56), [1e38, 1e-38, 3e-39, 0, 1, np.inf, 5, 1e30]]).astype(np.float32)
    den = np.concatenate([rng.standard_normal(56), [1e-5, 1e30, 3, 0, 0, 2, np.inf, 1e-30]]).astype(np.float32)
    w = run(lines, v={0: num, 1: den})
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f32(w, 7), num / den)


def test_half_precision_and_packed() -> None:
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    packed_a = a.view(np.uint16).astype(np.uint32) | (b.view(np.uint16).astype(np.uint32) << 16)
    w = run(["v_add_f16_e32 v2, 1.0, v0", "v_fma_f16 v3, v0, v1, v0", "v_pk_add_f16 v4, v5, v5",
             "v_pk_mul_f16 v6, v5, v5 op_sel:[1,0] op_sel_hi:[0,1]",
             "v_cvt_f32_f16_sdwa v7, v5 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1"],
            v={0: a.view(np.uint16), 1: b.view(np.uint16), 5: packed_a})
    np.testing.assert_array_equal(w.v[2].astype(np.uint16).view(np.float16), a + np.float16(1))
    np.testing.assert_array_equal(w.v[3].astype(np.uint16).view(np.float16),
                                  (a.astype(np.float64) * b + a).astype(np.float16))
    lo, hi = (w.v[4] & 0xFFFF).astype(np.uint16).view(np.float16), (w.v[4] >> 16).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(lo, a + a)
    np.testing.assert_array_equal(hi, b + b)
    lo, hi = (w.v[6] & 0xFFFF).astype(np.uint16).view(np.float16), (w.v[6] >> 16).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(lo, b * a)  # op_sel picks src0's high half for the low result
    np.testing.assert_array_equal(hi, a * b)  # op_sel_hi: src0 low, src1 high
    np.testing.assert_array_equal(f32(w, 7), b.astype(np.float32))


def test_16bit_destination_halves() -> None:
    one, two = np.float16(1).view(np.uint16), np.float16(2).view(np.uint16)
    w = run(["v_add_f16_e32 v1, v2, v3", "v_fma_f16 v4, v2, v3, v2", "v_fma_f16 v5, v2, v3, v2 op_sel:[0,0,0,1]"],
            v={1: 0xABCD0000, 2: one, 3: two, 4: 0xABCD0000, 5: 0xABCD1234})
    assert (w.v[1] == np.float16(3).view(np.uint16)).all()  # VOP2 f16 results zero the high half on gfx9
    assert (w.v[4] == (0xABCD0000 | int(np.float16(3).view(np.uint16)))).all()  # op_sel-capable ops keep it
    assert (w.v[5] == (int(np.float16(3).view(np.uint16)) << 16 | 0x1234)).all()


def test_packed_inline_constants_fill_both_halves() -> None:
    a = rng.standard_normal(64).astype(np.float16)
    packed = a.view(np.uint16).astype(np.uint32) * 0x10001
    w = run(["v_pk_add_f16 v1, v0, 1.0", "v_pk_add_u16 v2, v3, 2", "v_pk_mul_f32 v[4:5], v[6:7], 0.5"],
            v={0: packed, 3: 0x00050007, 6: np.float32(3.0), 7: np.float32(-8.0)})
    np.testing.assert_array_equal(w.v[1], (a + np.float16(1)).view(np.uint16).astype(np.uint32) * 0x10001)
    assert (w.v[2] == 0x00070009).all()
    assert (f32(w, 4) == 1.5).all() and (f32(w, 5) == -4.0).all()


def test_packed_f32_with_op_sel() -> None:
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    w = run(["v_pk_mul_f32 v[4:5], v[0:1], v[2:3]", "v_pk_add_f32 v[6:7], v[0:1], v[2:3] op_sel:[1,0] op_sel_hi:[0,1]",
             "v_pk_fma_f32 v[8:9], v[0:1], v[2:3], v[0:1] neg_lo:[1,0,0]"],
            v={0: a, 1: b, 2: b, 3: a})
    np.testing.assert_array_equal(f32(w, 4), a * b)
    np.testing.assert_array_equal(f32(w, 5), b * a)
    np.testing.assert_array_equal(f32(w, 6), b + b)  # lo: src0.hi + src1.lo
    np.testing.assert_array_equal(f32(w, 7), a + a)  # hi: src0.lo + src1.hi
    np.testing.assert_array_equal(f32(w, 8), (-a.astype(np.float64) * b + a).astype(np.float32))


def test_sdwa_byte_select_and_preserve() -> None:
    a = rng.integers(0, 2**32, 64, dtype=np.uint64)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64)
    w = run(["v_xor_b32_sdwa v2, v0, v1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_0",
             "v_mov_b32_sdwa v3, v0 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_2",
             "v_add_u32_sdwa v4, v0, v1 dst_sel:BYTE_1 dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:BYTE_3",
             "v_cvt_f32_i32_sdwa v5, sext(v0) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0"],
            v={0: a, 1: b, 3: 0xDEADBEEF})
    np.testing.assert_array_equal(w.v[2], (a ^ (b & np.uint64(0xFF))).astype(np.uint32))
    a, b = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(w.v[3], (((a >> 16) & 0xFF) << 16) | 0xBEEF)
    np.testing.assert_array_equal(w.v[4], (((a >> 16) + (b >> 24)) & 0xFF) << 8)
    np.testing.assert_array_equal(f32(w, 5), (a & 0xFFFF).astype(np.uint16).view(np.int16).astype(np.float32))


def test_dpp_lane_moves() -> None:
    w = run(["v_mov_b32_dpp v1, v0 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf",
             "v_mov_b32_dpp v2, v0 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0",
             "v_add_u32_dpp v3, v0, v0 row_bcast:15 row_mask:0xa bank_mask:0xf",
             "v_mov_b32_dpp v4, v0 wave_shl:1 row_mask:0xf bank_mask:0xf"],
            v={0: LANE + 100, 2: 7, 3: 5, 4: 9})
    np.testing.assert_array_equal(w.v[1], (LANE ^ 1) + 100)
    np.testing.assert_array_equal(w.v[2], np.where(LANE % 16 == 0, 0, LANE - 1 + 100))  # bound_ctrl:0 writes 0
    row = LANE // 16
    bcast = np.where(row > 0, (row - 1) * 16 + 15 + 100, 0) + LANE + 100
    np.testing.assert_array_equal(w.v[3], np.where((0xA >> row) & 1 == 1, bcast, 5))
    np.testing.assert_array_equal(w.v[4], np.where(LANE < 63, LANE + 101, 9))


def test_dot_and_accvgpr() -> None:
    a = rng.integers(-128, 128, (64, 4)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 4)).astype(np.int8)
    w = run(["v_dot4_i32_i8 v3, v0, v1, v2", "v_accvgpr_write_b32 a5, v3", "v_accvgpr_read_b32 v6, a5"],
            v={0: a.view(np.uint32).reshape(-1), 1: b.view(np.uint32).reshape(-1), 2: 1000})
    ref = (a.astype(np.int32) * b).sum(axis=1) + 1000
    np.testing.assert_array_equal(w.v[3].view(np.int32), ref)
    np.testing.assert_array_equal(w.a[5], w.v[3])
    np.testing.assert_array_equal(w.v[6], w.v[3])


def test_mfma_32x32x8_f16_layout() -> None:
    a = rng.integers(-3, 4, (32, 8)).astype(np.float16)
    b = rng.integers(-3, 4, (8, 32)).astype(np.float16)
    lane = LANE
    # A[i][k]: lane i + 32*(k//4), element k%4; B[k][j]: lane j + 32*(k//4)
    av = np.stack([a[lane % 32, 4 * (lane // 32) + t] for t in range(4)], axis=1)
    bv = np.stack([b[4 * (lane // 32) + t, lane % 32] for t in range(4)], axis=1)
    regs = {0: av.view(np.uint32)[:, 0], 1: av.view(np.uint32)[:, 1], 2: bv.view(np.uint32)[:, 0],
            3: bv.view(np.uint32)[:, 1]}
    w = run(["v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], 0", "s_nop 7", "s_nop 7"], v=regs)
    d = (a.astype(np.float32) @ b.astype(np.float32))
    for r in range(16):
        rows = (r // 4) * 8 + 4 * (lane // 32) + r % 4
        np.testing.assert_array_equal(w.a[r].view(np.float32), d[rows, lane % 32], err_msg=str(r))


def test_flush_denormals_mode_and_setreg() -> None:
    tiny = np.float32(1e-39)  # an f32 denormal
    lines = ["v_mul_f32_e32 v1, 1.0, v0", "s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3", "v_mul_f32_e32 v2, 1.0, v0",
             "s_getreg_b32 s0, hwreg(HW_REG_MODE, 0, 8)"]
    w = run(lines, v={0: tiny}, mode=0x300)  # denorm mode 0: flush inputs and outputs
    assert (f32(w, 1) == 0).all() and (f32(w, 2) == tiny).all() and w.s[0] == 0x30
    w = run(lines[:1], v={0: tiny}, mode=MODE_IEEE)
    assert (f32(w, 1) == tiny).all()


# ---------------------------------------------------------------------------------------------- memory
def test_global_load_store_offsets_and_saddr() -> None:
    mem = SparseMemory()
    buf = mem.alloc(4096)
    data = rng.integers(0, 2**32, 1024, dtype=np.uint64).astype(np.uint32)
    mem.write_array(buf, data)
    out = mem.alloc(1024)
    w = run(["global_load_dword v1, v0, s[0:1] offset:-8", "global_load_ushort v2, v0, s[0:1] offset:2",
             "global_load_dwordx4 v[4:7], v0, s[0:1]", "v_lshlrev_b32_e32 v8, 2, v9",
             "global_store_dword v8, v1, s[2:3]", "global_store_short v8, v0, s[2:3] offset:256"],
            s={0: buf + 64, 1: (buf + 64) >> 32, 2: out, 3: out >> 32}, v={0: LANE * 16, 9: LANE}, mem=mem)
    np.testing.assert_array_equal(w.v[1], data[(64 + LANE * 16 - 8) // 4])
    np.testing.assert_array_equal(w.v[2], data[(64 + LANE * 16) // 4] >> 16)
    for i in range(4):
        np.testing.assert_array_equal(w.v[4 + i], data[(64 + LANE * 16) // 4 + i])
    np.testing.assert_array_equal(mem.read_array(out, np.uint32, 64), w.v[1])
    np.testing.assert_array_equal(mem.read_array(out + 256, np.uint16, 128)[::2], (LANE * 16).astype(np.uint16))


def test_global_atomics_return_old_values() -> None:
    mem = SparseMemory()
    cnt = mem.alloc(64)
    w = run(["global_atomic_add v1, v0, v2, s[0:1] sc0", "global_atomic_cmpswap v3, v0, v[4:5], s[0:1] offset:8 sc0",
             "global_atomic_add_f32 v0, v6, s[0:1] offset:16"],
            s={0: cnt, 1: cnt >> 32}, v={0: 0, 2: 1, 4: LANE + 1, 5: LANE, 6: np.float32(0.5)}, mem=mem)
    np.testing.assert_array_equal(w.v[1], LANE)  # lanes in order see 0, 1, 2, ...
    assert mem.read_array(cnt, np.uint32, 1)[0] == 64
    # cmpswap {new, cmp}: lane l swaps when the value equals l, so the chain runs 0 -> 1 -> ... -> 64
    np.testing.assert_array_equal(w.v[3], LANE)
    assert mem.read_array(cnt + 8, np.uint32, 1)[0] == 64
    assert mem.read_array(cnt + 16, np.float32, 1)[0] == 32.0


def test_lds_read2_write2_atomics_and_bpermute() -> None:
    w = run(["v_lshlrev_b32_e32 v1, 2, v0", "ds_write2_b32 v1, v0, v2 offset1:64",
             "ds_write2st64_b32 v1, v2, v0 offset0:2",
             "ds_read2_b32 v[4:5], v1 offset1:64", "ds_read_b32 v6, v1 offset:512",
             "ds_add_rtn_u32 v7, v3, v0 offset:1024", "ds_read_b32 v8, v3 offset:1024",
             "v_xor_b32_e32 v9, 4, v1", "ds_bpermute_b32 v10, v9, v0",
             "ds_swizzle_b32 v11, v0 offset:swizzle(BROADCAST,8,3)"],
            v={0: LANE, 2: LANE + 1000, 3: 0}, lds=4096)
    np.testing.assert_array_equal(w.v[4], LANE)
    np.testing.assert_array_equal(w.v[5], LANE + 1000)
    np.testing.assert_array_equal(w.v[6], LANE + 1000)  # st64 offset0:2 = byte 512
    np.testing.assert_array_equal(w.v[7], np.concatenate([[0], np.cumsum(LANE)[:-1]]))  # lanes in order
    assert (w.v[8] == LANE.sum()).all()
    np.testing.assert_array_equal(w.v[10], LANE ^ 1)
    np.testing.assert_array_equal(w.v[11], (LANE & ~7) + 3)


def test_flat_to_lds_aperture_and_global() -> None:
    mem = SparseMemory()
    buf = mem.alloc(256)
    w = run(["s_mov_b32 s1, src_shared_base", "v_mov_b32_e32 v3, s1", "v_lshlrev_b32_e32 v2, 2, v0",
             "flat_store_dword v[2:3], v0", "flat_load_dword v3, v[2:3]", "flat_load_dword v4, v[6:7]"],
            v={0: LANE, 6: buf + 4 * LANE, 7: buf >> 32}, mem=mem, lds=256)
    assert w.s[1] == SHARED_BASE >> 32
    np.testing.assert_array_equal(w.lds.view(np.uint32), LANE)
    np.testing.assert_array_equal(w.v[3], LANE)
    np.testing.assert_array_equal(w.v[4], 0)


def test_scalar_loads_and_buffer_range_checks() -> None:
    mem = SparseMemory()
    buf = mem.alloc(256)
    mem.write_array(buf, np.arange(64, dtype=np.uint32) * 3)
    w = run(["s_load_dwordx4 s[4:7], s[0:1], 0x10", "s_load_dword s8, s[0:1], s2",
             "s_mov_b32 s11, 0x20000", "s_mov_b32 s10, 40", "s_mov_b64 s[8:9], s[0:1]",
             "v_lshlrev_b32_e32 v1, 2, v0", "buffer_load_dword v2, v1, s[8:11], 0 offen"],
            s={0: buf, 1: buf >> 32, 2: 8}, v={0: LANE}, mem=mem)
    assert w.s[4:8] == [12, 15, 18, 21]
    np.testing.assert_array_equal(w.v[2], np.where(LANE < 10, LANE * 3, 0))  # num_records 40 bytes


def test_scratch_is_private_per_lane() -> None:
    w = run(["scratch_store_dword v1, v0, off offset:8", "scratch_load_dword v2, v1, off offset:8",
             "scratch_load_dword v3, off, off offset:8"], v={0: LANE * 7, 1: 4}, scratch=64)
    np.testing.assert_array_equal(w.v[2], LANE * 7)
    np.testing.assert_array_equal(w.v[3], 0)  # address 8 was not written


def test_flat_into_the_private_aperture_and_memtime() -> None:
    w = run(["s_mov_b32 s1, src_private_base", "v_mov_b32_e32 v3, s1", "v_mov_b32_e32 v2, 16",
             "flat_store_dword v[2:3], v0", "scratch_load_dword v4, off, off offset:16", "flat_load_dword v5, v[2:3]",
             "s_memtime s[6:7]", "s_memtime s[8:9]"], v={0: LANE * 5}, scratch=32)
    np.testing.assert_array_equal(w.v[4], LANE * 5)
    np.testing.assert_array_equal(w.v[5], LANE * 5)
    assert w.sget64(8) > w.sget64(6)


def test_faults_and_limits() -> None:
    mem = SparseMemory()
    with pytest.raises(MemoryFault, match=r"read of 4 bytes at address 0xdead0000.*global_load_dword") as info:
        run(["global_load_dword v1, v[2:3], off"], v={2: 0xDEAD0000, 3: 0}, mem=mem)
    assert info.value.address == 0xDEAD0000 and info.value.pc == BASE

    class PageFault(MemoryFault):
        pass

    class FaultingMemory(SparseMemory):
        def read(self, addr: int, nbytes: int) -> np.ndarray:
            raise PageFault(addr, nbytes, False)

    with pytest.raises(PageFault, match=r"read of 4 bytes at address 0x40.* at pc 0x100008 \(global_load_dword"):
        run(["s_nop 0", "s_nop 0", "global_load_dword v1, v[2:3], off"], v={2: 0x40, 3: 0}, mem=FaultingMemory())
    with pytest.raises(InstructionLimitExceeded, match="ran 10000 instructions"):
        run(["s_branch -1"])
    with pytest.raises(WaveTrap, match="s_trap 2"):
        run(["s_trap 2"])
    with pytest.raises(NotImplementedError, match="v_cubeid_f32"):
        run(["v_cubeid_f32 v0, v1, v2, v3"])
    program = Program(struct.pack("<II", 0x7E000000 | 99 << 9, 0xBF810000), BASE)
    w = Wave(mem, np.zeros(0, np.uint8), MODE_IEEE)
    w.pc, w.exec = BASE, ALL
    with pytest.raises(UnknownInstruction, match=f"format VOP1 opcode 99 at {BASE:#x}"):
        program.run_wave(w, 100)


def _u(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) & M32


def _s(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


def _h(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.int64) & 0xFFFF).astype(np.uint16).view(np.float16)


def _pack_h(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.float16).view(np.uint16).astype(np.int64) | (hi.astype(np.float16).view(np.uint16)
                                                                     .astype(np.int64) << 16)


_F = rng.standard_normal(64).astype(np.float32) * 10
_G = rng.standard_normal(64).astype(np.float32)
_A = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.int64)
_B = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.int64)
_C = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.int64)
_HI16 = lambda x: (x >> 16) & 0xFFFF  # noqa: E731

# (instruction with v1 = dst, v2/v3/v4 = sources, expected v1 as int64 bits or float32)
INT_CASES = [
    ("v_bfi_b32 v1, v2, v3, v4", lambda a, b, c: (a & b) | (~a & c & M32)),
    ("v_bcnt_u32_b32 v1, v2, v3", lambda a, b, c: (np.array([bin(x).count("1") for x in a]) + b) & M32),
    ("v_ffbh_u32_e32 v1, v2", lambda a, b, c: np.array([32 - int(x).bit_length() if x else M32 for x in a])),
    ("v_ffbl_b32_e32 v1, v2", lambda a, b, c: np.array([(int(x) & -int(x)).bit_length() - 1 if x else M32 for x in a])),
    ("v_bfrev_b32_e32 v1, v2", lambda a, b, c: np.array([int(f"{int(x):032b}"[::-1], 2) for x in a])),
    ("v_mul_hi_i32 v1, v2, v3", lambda a, b, c: ((_s(a) * _s(b)) >> 32) & M32),
    ("v_mul_u32_u24_e32 v1, v2, v3", lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) & M32),
    ("v_mul_hi_u32_u24_e32 v1, v2, v3", lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) >> 32),
    ("v_mad_i32_i24 v1, v2, v3, v4", lambda a, b, c: (((a & 0xFFFFFF) ^ 0x800000) - 0x800000)
     * (((b & 0xFFFFFF) ^ 0x800000) - 0x800000) + c & M32),
    ("v_xad_u32 v1, v2, v3, v4", lambda a, b, c: ((a ^ b) + c) & M32),
    ("v_sad_u32 v1, v2, v3, v4", lambda a, b, c: (np.abs(a - b) + c) & M32),
    ("v_min3_i32 v1, v2, v3, v4", lambda a, b, c: np.minimum(np.minimum(_s(a), _s(b)), _s(c)) & M32),
    ("v_med3_u32 v1, v2, v3, v4", lambda a, b, c: np.median(np.stack([a, b, c]), axis=0).astype(np.int64)),
    ("v_alignbyte_b32 v1, v2, v3, v4", lambda a, b, c: (((a << 32) | b) >> (8 * (c & 3))) & M32),
    ("v_bfm_b32 v1, v2, v3", lambda a, b, c: (((1 << (a & 31)) - 1) << (b & 31)) & M32),
    ("v_and_or_b32 v1, v2, v3, v4", lambda a, b, c: (a & b) | c),
    ("v_add_lshl_u32 v1, v2, v3, v4", lambda a, b, c: (((a + b) & M32) << (c & 31)) & M32),
    ("v_lshrrev_b16_e32 v1, v2, v3", lambda a, b, c: (b & 0xFFFF) >> (a & 15)),
    ("v_ashrrev_i16_e32 v1, v2, v3", lambda a, b, c: ((((b & 0xFFFF) ^ 0x8000) - 0x8000) >> (a & 15)) & 0xFFFF),
    ("v_mul_lo_u16_e32 v1, v2, v3", lambda a, b, c: (a * b) & 0xFFFF),
    ("v_max_i16_e32 v1, v2, v3", lambda a, b, c: np.maximum(((a & 0xFFFF) ^ 0x8000) - 0x8000,
                                                            ((b & 0xFFFF) ^ 0x8000) - 0x8000) & 0xFFFF),
    ("v_pk_add_u16 v1, v2, v3", lambda a, b, c: ((a + b) & 0xFFFF) | (((_HI16(a) + _HI16(b)) & 0xFFFF) << 16)),
    ("v_pk_mad_u16 v1, v2, v3, v4", lambda a, b, c: ((a * b + c) & 0xFFFF)
     | (((_HI16(a) * _HI16(b) + _HI16(c)) & 0xFFFF) << 16)),
    ("v_cvt_pk_u16_u32 v1, v2, v3", lambda a, b, c: (a & 0xFFFF) | ((b & 0xFFFF) << 16)),
    ("v_dot2_u32_u16 v1, v2, v3, v4", lambda a, b, c: ((a & 0xFFFF) * (b & 0xFFFF) + _HI16(a) * _HI16(b) + c) & M32),
    ("v_cvt_f32_ubyte1_e32 v1, v2", lambda a, b, c: _u(((a >> 8) & 0xFF).astype(np.float32).view(np.uint32))),
    ("v_sad_u8 v1, v2, v3, v4", lambda a, b, c: (_bytes(a, b).sum(axis=1) + c) & M32),
    ("v_sad_hi_u8 v1, v2, v3, v4", lambda a, b, c: ((_bytes(a, b).sum(axis=1) << 16) + c) & M32),
    ("v_msad_u8 v1, v2, v3, v4", lambda a, b, c: (np.where(_fields(b, 8) == 0, 0, _bytes(a, b)).sum(axis=1) + c) & M32),
    ("v_sad_u16 v1, v2, v3, v4", lambda a, b, c: (np.abs(_fields(a, 16) - _fields(b, 16)).sum(axis=1) + c) & M32),
    ("v_lerp_u8 v1, v2, v3, v4", lambda a, b, c: (((_fields(a, 8) + _fields(b, 8) + (_fields(c, 8) & 1)) >> 1)
                                                    << np.array([0, 8, 16, 24])).sum(axis=1)),
    ("v_sat_pk_u8_i16_e32 v1, v2", lambda a, b, c: np.clip(_sfields(a, 16), 0, 255) @ np.array([1, 256])),
    ("v_dot2c_i32_i16_e32 v1, v2, v3", lambda a, b, c: (_sfields(a, 16) * _sfields(b, 16)).sum(axis=1) & M32),
    ("v_dot4c_i32_i8_e32 v1, v2, v3", lambda a, b, c: (_sfields(a, 8) * _sfields(b, 8)).sum(axis=1) & M32),
    ("v_dot8c_i32_i4_e32 v1, v2, v3", lambda a, b, c: (_sfields(a, 4) * _sfields(b, 4)).sum(axis=1) & M32),
    ("v_dot8_u32_u4 v1, v2, v3, v4", lambda a, b, c: ((_fields(a, 4) * _fields(b, 4)).sum(axis=1) + c) & M32),
    ("v_dot2_i32_i16 v1, v2, v3, v4", lambda a, b, c: ((_sfields(a, 16) * _sfields(b, 16)).sum(axis=1) + c) & M32),
]


def _fields(x: np.ndarray, bits: int) -> np.ndarray:
    return np.stack([(x >> (bits * i)) & ((1 << bits) - 1) for i in range(32 // bits)], axis=1)


def _sfields(x: np.ndarray, bits: int) -> np.ndarray:
    f = _fields(x, bits)
    return np.where(f >= 1 << (bits - 1), f - (1 << bits), f)


def _bytes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(_fields(a, 8) - _fields(b, 8))


@pytest.mark.parametrize("asm,ref", INT_CASES, ids=[c[0].split()[0] for c in INT_CASES])
def test_integer_op_table(asm: str, ref: Callable[..., np.ndarray]) -> None:
    w = run([asm], v={2: _A, 3: _B, 4: _C})
    np.testing.assert_array_equal(w.v[1].astype(np.int64), np.asarray(ref(_A, _B, _C)).astype(np.int64) & M32)


FLOAT_CASES = [
    ("v_med3_f32 v1, v2, v3, v4", lambda x, y, z: np.median(np.stack([x, y, z]), axis=0)),
    ("v_max3_f32 v1, v2, v3, v4", lambda x, y, z: np.maximum(np.maximum(x, y), z)),
    ("v_fract_f32_e32 v1, v2", lambda x, y, z: x - np.floor(x)),
    ("v_frexp_mant_f32_e32 v1, v2", lambda x, y, z: np.frexp(x)[0]),
    ("v_ldexp_f32 v1, v2, 5", lambda x, y, z: np.ldexp(x, 5)),
    ("v_ceil_f32_e32 v1, v2", lambda x, y, z: np.ceil(x)),
    ("v_subrev_f32_e32 v1, v2, v3", lambda x, y, z: y - x),
    ("v_mul_legacy_f32 v1, v2, v3", lambda x, y, z: x * y),
    ("v_fmaak_f32 v1, v2, v3, 0x40490fdb", lambda x, y, z: (x.astype(np.float64) * y + np.float32(np.pi))),
    ("v_fmamk_f32 v1, v2, 0x3fb8aa3b, v3", lambda x, y, z: (x.astype(np.float64) * np.float32(1.442695) + y)),
    ("v_cvt_f32_i32_e32 v1, v5", lambda x, y, z: np.arange(-32, 32).astype(np.float32)),
    ("v_rcp_iflag_f32_e32 v1, v2", lambda x, y, z: 1 / x.astype(np.float64)),
]


@pytest.mark.parametrize("asm,ref", FLOAT_CASES, ids=[c[0].split()[0] for c in FLOAT_CASES])
def test_float_op_table(asm: str, ref: Callable[..., np.ndarray]) -> None:
    w = run([asm], v={2: _F, 3: _G, 4: _F * _G, 5: np.arange(-32, 32)})
    np.testing.assert_array_equal(f32(w, 1), np.asarray(ref(_F, _G, _F * _G)).astype(np.float32))


def test_half_packing_ops() -> None:
    w = run(["v_cvt_pkrtz_f16_f32 v1, v2, v3", "v_pack_b32_f16 v6, v2, v3", "v_frexp_exp_i32_f32_e32 v7, v4"],
            v={2: _F, 3: _G, 4: _F, 5: 0})
    lo, hi = _h(w.v[1]), _h(w.v[1].astype(np.int64) >> 16)
    assert (np.abs(lo.astype(np.float32)) <= np.abs(_F)).all() and (np.abs(hi.astype(np.float32)) <= np.abs(_G)).all()
    np.testing.assert_allclose(lo, _F, rtol=2e-3)
    w2 = run(["v_pack_b32_f16 v6, v2, v3"], v={2: _F.astype(np.float16).view(np.uint16),
                                                3: _G.astype(np.float16).view(np.uint16)})
    np.testing.assert_array_equal(w2.v[6].astype(np.int64), _pack_h(_F, _G))
    np.testing.assert_array_equal(w.v[7].view(np.int32), np.frexp(_F)[1])


def test_vopc_sdwa_into_an_sgpr_pair() -> None:
    w = run(["v_cmp_gt_u32_sdwa s[4:5], v2, v3 src0_sel:BYTE_0 src1_sel:BYTE_1"], v={2: _A, 3: _B})
    expect = (_A & 0xFF) > ((_B >> 8) & 0xFF)
    assert w.sget64(4) == int(np.packbits(expect, bitorder="little").view("<u8")[0])


_SA, _SB = 0x8765_4321_F0F0_1234, 0x0000_00FF_8000_0003
_SALU_CASES = [  # (instruction; s[0:1] = _SA, s[2:3] = _SB; expected s[4] or s[4:5]; expected SCC or None)
    ("s_ashr_i64 s[4:5], s[0:1], 12", (_SA - 2**64) >> 12 & (2**64 - 1), 1),
    ("s_lshr_b64 s[4:5], s[0:1], s2", _SA >> 3, 1),
    ("s_bfe_u64 s[4:5], s[0:1], 0x200010", (_SA >> 16) & 0xFFFFFFFF, 1),
    ("s_bfe_i64 s[4:5], s[0:1], 0x80038", (0x87 - 256) & (2**64 - 1), 1),
    ("s_xnor_b64 s[4:5], s[0:1], s[2:3]", ~(_SA ^ _SB) & (2**64 - 1), 1),
    ("s_nand_b32 s4, s0, s2", ~(0xF0F01234 & 0x80000003) & M32, 1),
    ("s_andn2_b64 s[4:5], s[0:1], s[2:3]", _SA & ~_SB, 1),
    ("s_orn2_b32 s4, s2, s0", (0x80000003 | ~0xF0F01234) & M32, 1),
    ("s_min_i32 s4, s0, s2", 0x80000003, 0),
    ("s_max_u32 s4, s0, s2", 0xF0F01234, 1),
    ("s_absdiff_i32 s4, s0, s3", abs(-0x0F0FEDCC - 0xFF) & M32, 1),
    ("s_mul_hi_u32 s4, s0, s1", (0xF0F01234 * 0x87654321) >> 32, None),
    ("s_lshl2_add_u32 s4, s0, s2", ((0xF0F01234 << 2) + 0x80000003) & M32, 1),
    ("s_pack_lh_b32_b16 s4, s0, s1", 0x1234 | 0x87650000, None),
    ("s_bfm_b64 s[4:5], 40, 4", ((1 << 40) - 1) << 4, None),
    ("s_not_b64 s[4:5], s[0:1]", ~_SA & (2**64 - 1), 1),
    ("s_bcnt0_i32_b32 s4, s0", 32 - bin(0xF0F01234).count("1"), 1),
    ("s_ff0_i32_b64 s4, s[0:1]", 0, None),
    ("s_ff1_i32_b64 s4, s[2:3]", 0, None),
    ("s_flbit_i32_b64 s4, s[2:3]", 24, None),
    ("s_flbit_i32 s4, s0", 4, None),
    ("s_sext_i32_i16 s4, s0", 0x1234, None),
    ("s_sext_i32_i8 s4, s1", 0x21, None),
    ("s_wqm_b32 s4, s2", 0xF000000F, 1),
    ("s_quadmask_b32 s4, s0", 0b10101111, 1),
    ("s_bitreplicate_b64_b32 s[4:5], s2", 0xC000000000000000 | 0xF, None),
    ("s_brev_b64 s[4:5], s[2:3]", int(f"{_SB:064b}"[::-1], 2), None),
]


@pytest.mark.parametrize("asm,expect,scc", _SALU_CASES, ids=[c[0].split()[0] for c in _SALU_CASES])
def test_scalar_op_table(asm: str, expect: int, scc: int | None) -> None:
    w = run([asm], s={0: _SA & M32, 1: _SA >> 32, 2: _SB & M32, 3: _SB >> 32}, scc=7)
    got = w.sget64(4) if "s[4:5]" in asm else w.s[4]
    assert got == expect, hex(got)
    assert w.scc == (7 if scc is None else scc)


def test_scalar_calls_and_relative_moves() -> None:
    w = run(["s_getpc_b64 s[0:1]", "s_add_u32 s0, s0, 16", "s_addc_u32 s1, s1, 0", "s_swappc_b64 s[2:3], s[0:1]",
             "s_branch 2", "s_mov_b32 s6, 5", "s_setpc_b64 s[2:3]", "s_mov_b32 m0, 2", "s_movrels_b32 s7, s8",
             "s_movreld_b32 s12, s9", "s_bitset1_b32 s13, 3", "s_cmov_b32 s14, 9", "s_cmp_eq_u32 0, 0",
             "s_cmov_b32 s15, 9"], s={8: 0, 9: 42, 10: 77, 13: 1})
    assert w.s[6] == 5  # the "function" at the swappc target ran and returned
    assert w.s[7] == 77 and w.s[14] == 42 and w.s[13] == 0b1001 and w.s[15] == 9


def test_mixed_precision_fma_and_packed_fmac() -> None:
    x = rng.standard_normal(64).astype(np.float32)
    h = rng.standard_normal(64).astype(np.float16)
    hh = h.view(np.uint16).astype(np.uint32) << 16  # the f16 in the high half
    w = run(["v_fma_mix_f32 v1, v2, v3, v2 op_sel:[0,1,0] op_sel_hi:[0,1,0]",
             "v_fma_mixlo_f16 v4, v2, v3, v2 op_sel:[0,1,0] op_sel_hi:[0,1,0]",
             "v_fma_mixhi_f16 v5, -v2, v3, |v2| op_sel:[0,1,0] op_sel_hi:[0,1,0]",
             "v_pk_fmac_f16 v6, v7, v7"], v={2: x, 3: hh, 4: 0xABCD0000, 5: 0x1234, 6: 0x3C003C00, 7: 0x40004400})
    exact = x.astype(np.float64) * h.astype(np.float64) + x.astype(np.float64)
    np.testing.assert_array_equal(f32(w, 1), exact.astype(np.float32))
    np.testing.assert_array_equal(w.v[4] & 0xFFFF, exact.astype(np.float16).view(np.uint16))
    assert (w.v[4] >> 16 == 0xABCD).all() and (w.v[5] & 0xFFFF == 0x1234).all()
    np.testing.assert_array_equal((w.v[5] >> 16).astype(np.uint16),
                                  (-x.astype(np.float64) * h + np.abs(x)).astype(np.float16).view(np.uint16))
    assert (w.v[6] == (np.float16(1 + 16).view(np.uint16).astype(np.uint32) | np.uint32(
        np.float16(1 + 4).view(np.uint16)) << 16)).all()  # lo: 1 + 4*4, hi: 1 + 2*2


def test_more_lds_and_memory_atomics() -> None:
    mem = SparseMemory()
    buf = mem.alloc(64)
    mem.write_array(buf, np.array([0xFF00FF00, 5, 0, 0, 7, 0], np.uint32))
    w = run(["ds_write_b32 v0, v1", "ds_mskor_rtn_b32 v2, v0, v3, v4", "ds_read_b32 v5, v0",
             "ds_add_rtn_f64 v[6:7], v0, v[8:9] offset:16", "ds_read_u16_d16_hi v10, v0",
             "s_atomic_add s4, s[0:1], 4 glc", "s_atomic_cmpswap_x2 s[12:15], s[0:1], 16 glc",
             "s_mov_b32 s11, 0x20000", "s_mov_b32 s10, 8", "s_mov_b64 s[8:9], s[0:1]",
             "v_lshlrev_b32_e32 v11, 2, v12", "buffer_atomic_add v13, v11, s[8:11], 0 offen sc0"],
            s={0: buf, 1: buf >> 32, 4: 10, 12: 99, 13: 0, 14: 7, 15: 0}, mem=mem, lds=64, exec_mask=1,
            v={0: 0, 1: 0x12345678, 3: 0x0000FFFF, 4: 0x00000042, 8: 0, 9: np.float64(2.5).view(np.uint64) >> 32,
               10: 0x1111, 12: LANE, 13: 1})
    assert w.v[2][0] == 0x12345678 and w.v[5][0] == 0x12340042
    assert w.lds[16:24].view(np.float64)[0] == 2.5 and w.v[10][0] == 0x00421111
    assert w.s[4] == 5 and mem.read_array(buf + 4, np.uint32, 1)[0] == 15
    assert w.s[12:14] == [7, 0] and mem.read_array(buf + 16, np.uint64, 1)[0] == 99
    assert w.v[13][0] == 0xFF00FF00 and mem.read_array(buf, np.uint32, 1)[0] == 0xFF00FF01


def test_fnuz_fp8_conversions_and_mfma() -> None:
    from ember.amd_runtime.mock.isa.alu_ops import FNUZ8

    codes = rng.integers(0, 256, (64, 4)).astype(np.uint8)
    codes[codes == 0x80] = 0x81
    word = codes.view(np.uint32).reshape(-1)
    vals = np.array([1.0, -2.5, 300.0, np.nan] * 16, np.float32)
    w = run(["v_cvt_f32_fp8_sdwa v1, v0 src0_sel:BYTE_1", "v_cvt_pk_f32_bf8_e32 v[2:3], v0",
             "v_cvt_pk_fp8_f32 v4, v5, v6 op_sel:[0,0,1]", "v_cvt_pk_bf8_f32 v7, v5, v6"],
            v={0: word, 4: 0x1234, 5: vals, 6: np.float32(0.75), 7: 0xABCD0000})
    np.testing.assert_array_equal(f32(w, 1), FNUZ8["fp8"][codes[:, 1]].astype(np.float32))
    np.testing.assert_array_equal(f32(w, 2), FNUZ8["bf8"][codes[:, 0]].astype(np.float32))
    np.testing.assert_array_equal(f32(w, 3), FNUZ8["bf8"][codes[:, 1]].astype(np.float32))
    # fp8 (bias 8) 1.0 = 0x40, -2.5 = 0xCA, 300 overflows to NaN (0x80) without clamp; 0.75 = 0x3C; the low word is kept
    assert list(w.v[4][:4] >> 16) == [0x3C40, 0x3CCA, 0x3C80, 0x3C80] and (w.v[4] & 0xFFFF == 0x1234).all()
    # bf8: 1.0 = 0x40, -2.5 = 0xC5, 300 rounds to 320 = 0x61, 0.75 = 0x3E
    assert list(w.v[7][:3] & 0xFFFF) == [0x3E40, 0x3EC5, 0x3E61] and (w.v[7] >> 16 == 0xABCD).all()
    a_codes = rng.integers(0, 128, (16, 32)).astype(np.uint8)  # A is 16x32 fp8, B 32x16 bf8 (non-negative, finite)
    b_codes = rng.integers(0, 128, (32, 16)).astype(np.uint8)
    lane = LANE
    av = np.stack([a_codes[lane % 16, 8 * (lane // 16) + t] for t in range(8)], axis=1).copy().view(np.uint32)
    bv = np.stack([b_codes[8 * (lane // 16) + t, lane % 16] for t in range(8)], axis=1).copy().view(np.uint32)
    w = run(["v_mfma_f32_16x16x32_fp8_bf8 a[0:3], v[0:1], v[2:3], 0", "s_nop 7"],
            v={0: av[:, 0], 1: av[:, 1], 2: bv[:, 0], 3: bv[:, 1]})
    ref = (FNUZ8["fp8"][a_codes] @ FNUZ8["bf8"][b_codes]).astype(np.float32)
    for r in range(4):
        np.testing.assert_array_equal(w.a[r].view(np.float32), ref[4 * (lane // 16) + r, lane % 16])
