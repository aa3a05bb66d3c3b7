"""Lane-wise semantics of the vector ALU opcodes: `VOPS[name] = VOp(source kinds, result kind, function)`.

Functions take and return NumPy arrays over the lanes (a 1-element array stands for a uniform value). Kinds:
u32/i32/f32, u16/i16/f16, u64/i64/f64. Precision (gfx942_isa.md §4.3): add/sub/mul/fma/sqrt/conversions f32 are
correctly rounded (fma through float64 with round-to-odd); v_rcp/v_rsq/v_exp/v_log/v_sin/v_cos are correctly
rounded host results of the exact function (hardware is within 1 ulp); f64 fma comes from error-free
transformations (a wrong last bit only in rare ties); f16 add/sub/mul/fma round once (exact in float64 first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

U32, I32, F32, U64, I64, F64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64
LANE = np.arange(64, dtype=np.uint32)
_ONE_BELOW_1_F32 = np.nextafter(F32(1), F32(0))
_ONE_BELOW_1_F64 = np.nextafter(F64(1), F64(0))
_ONE_BELOW_1_F16 = np.nextafter(np.float16(1), np.float16(0))
_F32_TINY = F64(np.finfo(F32).tiny)


@dataclass(frozen=True)
class VOp:
    """A vector op: its source kinds, its result kind, and the lane function."""

    srcs: tuple[str, ...]
    dst: str
    fn: Callable[..., np.ndarray]
    float_op: bool = True  # subject to denorm flushing / omod / clamp when its kinds are float


def popcount(x: np.ndarray) -> np.ndarray:
    """Bits set per element of a uint32/uint64 array."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(U32)
    x = x.astype(U64)
    x = x - ((x >> U64(1)) & U64(0x5555555555555555))
    x = (x & U64(0x3333333333333333)) + ((x >> U64(2)) & U64(0x3333333333333333))
    x = (x + (x >> U64(4))) & U64(0x0F0F0F0F0F0F0F0F)
    return ((x * U64(0x0101010101010101)) >> U64(56)).astype(U32)


def bit_length32(x: np.ndarray) -> np.ndarray:
    """Index of the highest set bit + 1 (0 for 0) of uint32 values."""
    return np.frexp(x.astype(F64))[1].astype(I32)


def clz32(x: np.ndarray) -> np.ndarray:
    """v_ffbh_u32: leading zeros, -1 (0xFFFFFFFF) for 0."""
    return np.where(x == 0, U32(0xFFFFFFFF), (32 - bit_length32(x)).astype(U32))


def ctz32(x: np.ndarray) -> np.ndarray:
    """v_ffbl_b32: trailing zeros, -1 for 0."""
    low = x & (~x + U32(1))
    return np.where(x == 0, U32(0xFFFFFFFF), (bit_length32(low) - 1).astype(U32))


_BREV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


def brev32(x: np.ndarray) -> np.ndarray:
    b = _BREV8[np.ascontiguousarray(x, dtype=U32).view(np.uint8)].reshape(-1, 4)[:, ::-1]
    return np.ascontiguousarray(b).view(U32).reshape(-1)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Single-rounding f32 fma: the product is exact in float64, the sum is rounded to odd, then to float32."""
    p = a.astype(F64) * b.astype(F64)
    c64 = c.astype(F64)
    s = p + c64
    # Rounding the f64 sum to f32 can only go wrong (double rounding) when it lands exactly halfway between two f32
    # values, or in the f32 subnormal range; otherwise the f64 sum's rounding is already the right one.
    halfway = (s.view(U64) & U64(0x1FFFFFFF)) == U64(0x10000000)
    if not (halfway.any() or ((np.abs(s) < _F32_TINY) & (s != 0)).any()):
        return s.astype(F32)
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    with np.errstate(invalid="ignore"):
        fix = (err != 0) & np.isfinite(s) & ((s.view(U64) & U64(1)) == 0)
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = x * F64(134217729.0)  # Veltkamp split: 2^27 + 1
    hi = t - (t - x)
    return hi, x - hi


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """f64 fma from error-free transformations (Dekker product, TwoSum): exact product and sum terms, one final
    addition of the small terms (a wrong last bit only in rare double-rounding ties)."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    with np.errstate(all="ignore"):
        p = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s = p + c
        bb = s - p
        t = (p - (s - bb)) + (c - bb)
        r = s + (t + e)
        naive = p + c
    return np.where(np.isfinite(r) & np.isfinite(p), r, naive)


def fma_round_once(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: type) -> np.ndarray:
    """fma of f16/f32 values (held in any float type) rounded once to `dtype`: the float64 product is exact, the
    sum is rounded to odd, so the final rounding is the only one."""
    a, b, c = (np.asarray(x).astype(F64) for x in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    with np.errstate(invalid="ignore"):
        fix = (err != 0) & np.isfinite(s) & ((s.view(U64) & U64(1)) == 0)
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(dtype)


def fma_f16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return fma_round_once(a, b, c, np.float16)


def f16_exact(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """An f16 add/sub/mul computed exactly in float64 (f16 sums and products fit), then rounded once to f16."""
    return lambda *args: fn(*[x.astype(F64) for x in args]).astype(np.float16)


def _zero_sign_fix(r: np.ndarray, a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    # IEEE maxNum/minNum with +0 > -0: equal inputs (only zeros differ in bits) combine their bits.
    ua, ub = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    both = (ua & ub) if is_max else (ua | ub)
    return np.where(a == b, both.view(a.dtype), r)


def fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    return _zero_sign_fix(np.fmax(a, b), a, b, True)


def fmin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    return _zero_sign_fix(np.fmin(a, b), a, b, False)


def med3(a: np.ndarray, b: np.ndarray, c: np.ndarray, mx: Callable, mn: Callable) -> np.ndarray:
    return mx(mn(a, b), mn(mx(a, b), c))


def cvt_int(x: np.ndarray, lo: float, hi: float, dtype: type, rnd: Callable = np.trunc) -> np.ndarray:
    """Float to integer: round, saturate, NaN -> 0."""
    x64 = x.astype(F64)
    return np.where(np.isnan(x64), 0, np.clip(rnd(x64), lo, hi)).astype(dtype)


def ldexp(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    return np.ldexp(x, np.clip(n.astype(np.int64), -1100, 1100).astype(np.int32)).astype(x.dtype)


def fract(x: np.ndarray) -> np.ndarray:
    below1 = {4: _ONE_BELOW_1_F32, 8: _ONE_BELOW_1_F64, 2: _ONE_BELOW_1_F16}[x.itemsize]
    r = np.minimum(x - np.floor(x), below1)
    return np.where(np.isinf(x), np.array(np.nan, x.dtype), r).astype(x.dtype)


def frexp_mant(x: np.ndarray) -> np.ndarray:
    m = np.frexp(x)[0].astype(x.dtype)
    return np.where(np.isfinite(x), m, x)


def frexp_exp(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), np.frexp(x)[1], 0).astype(I32)


def via64(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A transcendental evaluated in float64 and rounded once to the argument's type."""
    return lambda x: fn(x.astype(F64)).astype(x.dtype)


def _div_scale(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, mant_bits: int, emax_gap: int,
               tiny: float) -> tuple[np.ndarray, np.ndarray]:
    """v_div_scale_*: scale an operand of the division sequence by 2^+-64 near the range limits; the mask says
    the quotient must be rescaled by v_div_fmas."""
    e1, e2 = np.frexp(s1)[1], np.frexp(s2)[1]
    vcc = np.zeros(np.broadcast(s0, s1, s2).shape, bool)
    d = np.broadcast_to(s0, vcc.shape).copy()
    with np.errstate(all="ignore"):
        inv_den_tiny = np.abs(1.0 / s1.astype(F64)) < tiny
        quot_tiny = np.abs(s2.astype(F64) / s1.astype(F64)) < tiny
    nan = (s2 == 0) | (s1 == 0)
    big = ~nan & (e2 - e1 >= emax_gap)
    den_denorm = ~nan & ~big & (np.abs(s1) < tiny)
    both = ~nan & ~big & ~den_denorm & inv_den_tiny & quot_tiny
    inv_only = ~nan & ~big & ~den_denorm & ~both & inv_den_tiny
    q_only = ~nan & ~big & ~den_denorm & ~both & ~inv_only & quot_tiny
    num_tiny = ~nan & ~big & ~den_denorm & ~both & ~inv_only & ~q_only & (e2 <= mant_bits - 126 + 127 - 127)
    up = np.ldexp(d, 64).astype(d.dtype)
    down = np.ldexp(d, -64).astype(d.dtype)
    s0b = np.broadcast_to(s0, vcc.shape)
    d = np.where(nan, np.array(np.nan, d.dtype), d)
    d = np.where((big | both) & (s0b == s1), up, d)
    d = np.where(den_denorm | num_tiny, up, d)
    d = np.where(inv_only, down, d)
    d = np.where(q_only & (s0b == s2), up, d)
    vcc |= big | both | q_only
    return d, vcc


def div_scale_f32(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _div_scale(s0, s1, s2, 23, 96, float(np.finfo(F32).tiny))


def div_scale_f64(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _div_scale(s0, s1, s2, 52, 768, float(np.finfo(F64).tiny))


def div_fixup(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
    """v_div_fixup_*: the sequence's final step. Returns the IEEE quotient num/den (the value the sequence
    refines `q` to, correctly rounded), which also covers the NaN/Inf/zero special cases of the pseudocode."""
    with np.errstate(all="ignore"):
        if q.dtype == np.float16:
            return (num.astype(F32) / den.astype(F32)).astype(np.float16)
        return (num / den).astype(q.dtype)


def cvt_f16_rtz(x: np.ndarray) -> np.ndarray:
    """f32 -> f16 rounding toward zero (v_cvt_pkrtz_f16_f32)."""
    h = x.astype(np.float16)
    over = np.abs(h.astype(F32)) > np.abs(x)
    stepped = np.nextafter(h, np.float16(0))
    return np.where(over & np.isfinite(x), stepped, h).astype(np.float16)


def perm_b32(s0: np.ndarray, s1: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """v_perm_b32: each selector byte picks a byte of {s0:s1} (s1 low), a sign fill, 0x00 or 0xFF."""
    s0, s1, sel = np.broadcast_arrays(s0.astype(U64), s1.astype(U64), sel.astype(U32))
    data = (s0 << U64(32)) | s1
    out = np.zeros(data.shape, U32)
    for i in range(4):
        b = (sel >> U32(8 * i)) & U32(0xFF)
        byte = ((data >> (U64(8) * np.minimum(b, 7).astype(U64))) & U64(0xFF)).astype(U32)
        sign_bit = np.array([15, 31, 47, 63], U64)[np.clip(b.astype(np.int64) - 8, 0, 3)]
        sign = np.where((data >> sign_bit) & U64(1), U32(0xFF), U32(0))
        v = np.where(b < 8, byte, np.where(b < 12, sign, np.where(b == 12, U32(0), U32(0xFF))))
        out |= v << U32(8 * i)
    return out


def lanes_of(x: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """The `32 // bits` packed fields of uint32 values as int64 columns (low field first)."""
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    n = 32 // bits
    fields = np.stack([(x >> (bits * i)) & ((1 << bits) - 1) for i in range(n)], axis=-1)
    return np.where(fields >= (1 << (bits - 1)), fields - (1 << bits), fields) if signed else fields


def dot(bits: int, signed: bool) -> Callable[..., np.ndarray]:
    """v_dot*: the packed fields of a and b multiplied pairwise and summed, plus c (32-bit wrap)."""
    def fn(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        acc = (lanes_of(a, bits, signed) * lanes_of(b, bits, signed)).sum(axis=-1) + np.asarray(c).astype(np.int64)
        return (acc & 0xFFFFFFFF).astype(U32)
    return fn


def dot2_f16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """v_dot2(c)_f32_f16: two f16 products summed into an f32 accumulator, rounded once."""
    ah = lanes_of(a, 16, False).astype(np.uint16).view(np.float16).astype(F64)
    bh = lanes_of(b, 16, False).astype(np.uint16).view(np.float16).astype(F64)
    return ((ah * bh).sum(axis=-1) + np.asarray(c).astype(F64)).astype(F32)


def sad(bits: int, masked: bool = False, shift: int = 0) -> Callable[..., np.ndarray]:
    """v_sad_u8/u16 (sum of absolute differences of packed fields), v_msad_u8 (fields where b is 0 skipped),
    v_sad_hi_u8 (the sum shifted into the high half), plus c."""
    def fn(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        fa, fb = lanes_of(a, bits, False), lanes_of(b, bits, False)
        diff = np.abs(fa - fb)
        if masked:
            diff = np.where(fb == 0, 0, diff)
        return (((diff.sum(axis=-1) << shift) + np.asarray(c).astype(np.int64)) & 0xFFFFFFFF).astype(U32)
    return fn


def lerp_u8(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    avg = (lanes_of(a, 8, False) + lanes_of(b, 8, False) + (lanes_of(c, 8, False) & 1)) >> 1
    return (avg << np.array([0, 8, 16, 24])).sum(axis=-1).astype(U32)


def norm16(x: np.ndarray, signed: bool) -> np.ndarray:
    """f16 -> snorm16 / unorm16 (clamped, rounded to nearest even; NaN -> 0)."""
    lo, scale = (-1.0, 32767.0) if signed else (0.0, 65535.0)
    v = np.rint(np.clip(np.nan_to_num(x.astype(F64), nan=0.0), lo, 1.0) * scale).astype(np.int64)
    return (v & 0xFFFF).astype(U32)


def sat_pk_u8_i16(a: np.ndarray) -> np.ndarray:
    f = np.clip(lanes_of(a, 16, True), 0, 255)
    return (f[..., 0] | (f[..., 1] << 8)).astype(U32)


def _fnuz_table(exp_bits: int, bias: int) -> np.ndarray:
    """The 256 values of an FNUZ 8-bit float (gfx942's fp8 = E4M3 bias 8, bf8 = E5M2 bias 16): no infinities, no
    negative zero, 0x80 is the only NaN."""
    mant_bits = 7 - exp_bits
    out = np.zeros(256)
    for code in range(256):
        e, mnt = (code >> mant_bits) & ((1 << exp_bits) - 1), code & ((1 << mant_bits) - 1)
        frac = mnt / (1 << mant_bits)
        mag = frac * 2.0 ** (1 - bias) if e == 0 else (1 + frac) * 2.0 ** (e - bias)
        out[code] = -mag if code & 0x80 else mag
    out[0x80] = np.nan
    return out


FNUZ8 = {"fp8": _fnuz_table(4, 8), "bf8": _fnuz_table(5, 16)}


def to_fnuz8(x: np.ndarray, kind: str, saturate: bool) -> np.ndarray:
    """f32 -> FNUZ 8-bit codes, rounding to nearest even; NaN, and (unless `saturate`) overflow, give 0x80."""
    table = FNUZ8[kind][:128]  # the non-negative values, increasing with the code
    mag = np.abs(np.asarray(x, np.float64))
    hi = np.clip(np.searchsorted(table, mag), 1, 127)
    lo = hi - 1
    d_lo, d_hi = mag - table[lo], table[hi] - mag
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    top = table[127]
    halfway_past_top = top + (top - table[126]) / 2
    over = mag > top
    code = np.where(over, 127 if saturate else 0x80, code)
    if not saturate:
        code = np.where(over & (mag < halfway_past_top), 127, code)
    code = np.where((code != 0) & (code != 0x80) & np.signbit(x), code | 0x80, code)
    return np.where(np.isnan(mag), 0x80, code).astype(U32)


def _pk_f32(table: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Bytes 0 and 1 of `a` decoded to two f32 values packed into one u64 (a VGPR pair)."""
    lo = table[a & U32(0xFF)].astype(F32).view(U32).astype(U64)
    hi = table[(a >> U32(8)) & U32(0xFF)].astype(F32).view(U32).astype(U64)
    return lo | (hi << U64(32))


def _sext(x: np.ndarray, bits: int) -> np.ndarray:
    x = x.astype(np.int64) & ((1 << bits) - 1)
    return np.where(x >= (1 << (bits - 1)), x - (1 << bits), x)


def bfe_i32(a: np.ndarray, off: np.ndarray, width: np.ndarray) -> np.ndarray:
    w = (width & U32(31)).astype(np.int64)
    field = (a.astype(np.int64) >> (off & U32(31)).astype(np.int64)) & ((np.int64(1) << w) - 1)
    signed = np.where((w > 0) & ((field >> np.maximum(w - 1, 0)) & 1 == 1), field - (np.int64(1) << w), field)
    return signed.astype(I32)


def _u(fn: Callable[..., np.ndarray], n: int) -> VOp:
    return VOp(("u32",) * n, "u32", fn, False)


def _f(kind: str, fn: Callable[..., np.ndarray], n: int) -> VOp:
    return VOp((kind,) * n, kind, fn)


def _mul24(signed: bool, hi: bool) -> Callable[..., np.ndarray]:
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x, y = ((_sext(a, 24), _sext(b, 24)) if signed else
                ((a & U32(0xFFFFFF)).astype(np.int64), (b & U32(0xFFFFFF)).astype(np.int64)))
        p = x * y
        return ((p >> 32) if hi else p).astype(U32)
    return fn


VOPS: dict[str, VOp] = {
    # -------------------------------------------------------------- 32-bit integer / bitwise
    "v_mov_b32": _u(lambda a: a, 1),
    "v_add_u32": _u(lambda a, b: a + b, 2), "v_sub_u32": _u(lambda a, b: a - b, 2),
    "v_subrev_u32": _u(lambda a, b: b - a, 2),
    "v_add_i32": _u(lambda a, b: a + b, 2), "v_sub_i32": _u(lambda a, b: a - b, 2),
    "v_mul_lo_u32": _u(lambda a, b: a * b, 2),
    "v_mul_hi_u32": _u(lambda a, b: ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), 2),
    "v_mul_hi_i32": VOp(("i32", "i32"), "i32", lambda a, b: ((a.astype(I64) * b.astype(I64)) >> 32).astype(I32),
                        False),
    "v_mul_u32_u24": _u(_mul24(False, False), 2), "v_mul_hi_u32_u24": _u(_mul24(False, True), 2),
    "v_mul_i32_i24": _u(_mul24(True, False), 2), "v_mul_hi_i32_i24": _u(_mul24(True, True), 2),
    "v_min_i32": VOp(("i32", "i32"), "i32", np.minimum, False),
    "v_max_i32": VOp(("i32", "i32"), "i32", np.maximum, False),
    "v_min_u32": _u(np.minimum, 2), "v_max_u32": _u(np.maximum, 2),
    "v_lshrrev_b32": _u(lambda a, b: b >> (a & U32(31)), 2),
    "v_lshlrev_b32": _u(lambda a, b: b << (a & U32(31)), 2),
    "v_ashrrev_i32": _u(lambda a, b: (b.view(I32) >> (a & U32(31)).astype(I32)).view(U32), 2),
    "v_and_b32": _u(np.bitwise_and, 2), "v_or_b32": _u(np.bitwise_or, 2), "v_xor_b32": _u(np.bitwise_xor, 2),
    "v_xnor_b32": _u(lambda a, b: ~(a ^ b), 2), "v_not_b32": _u(np.invert, 1),
    "v_bfrev_b32": _u(brev32, 1), "v_ffbh_u32": _u(clz32, 1), "v_ffbl_b32": _u(ctz32, 1),
    "v_ffbh_i32": _u(lambda a: np.where((a == 0) | (a == U32(0xFFFFFFFF)), U32(0xFFFFFFFF),
                                         clz32(a ^ (a.view(I32) >> 31).view(U32))), 1),
    "v_bfe_u32": _u(lambda a, o, w: (a >> (o & U32(31))) & ((U32(1) << (w & U32(31))) - U32(1)), 3),
    "v_bfe_i32": VOp(("u32", "u32", "u32"), "i32", bfe_i32, False),
    "v_bfi_b32": _u(lambda a, b, c: (a & b) | (~a & c), 3),
    "v_bfm_b32": _u(lambda a, b: ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31)), 2),
    "v_alignbit_b32": _u(lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64))
                                          >> (c & U32(31)).astype(U64)).astype(U32), 3),
    "v_alignbyte_b32": _u(lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64))
                                           >> (U32(8) * (c & U32(3))).astype(U64)).astype(U32), 3),
    "v_perm_b32": _u(perm_b32, 3),
    "v_lshl_add_u32": _u(lambda a, b, c: (a << (b & U32(31))) + c, 3),
    "v_add_lshl_u32": _u(lambda a, b, c: (a + b) << (c & U32(31)), 3),
    "v_lshl_or_b32": _u(lambda a, b, c: (a << (b & U32(31))) | c, 3),
    "v_and_or_b32": _u(lambda a, b, c: (a & b) | c, 3), "v_or3_b32": _u(lambda a, b, c: a | b | c, 3),
    "v_add3_u32": _u(lambda a, b, c: a + b + c, 3), "v_xad_u32": _u(lambda a, b, c: (a ^ b) + c, 3),
    "v_mad_u32_u24": _u(lambda a, b, c: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)) + c, 3),
    "v_mad_i32_i24": _u(lambda a, b, c: (_sext(a, 24) * _sext(b, 24)).astype(U32) + c, 3),
    "v_mad_u32_u16": _u(lambda a, b, c: (a & U32(0xFFFF)) * (b & U32(0xFFFF)) + c, 3),
    "v_mad_i32_i16": _u(lambda a, b, c: (_sext(a, 16) * _sext(b, 16)).astype(U32) + c, 3),
    "v_min3_i32": VOp(("i32",) * 3, "i32", lambda a, b, c: np.minimum(np.minimum(a, b), c), False),
    "v_max3_i32": VOp(("i32",) * 3, "i32", lambda a, b, c: np.maximum(np.maximum(a, b), c), False),
    "v_med3_i32": VOp(("i32",) * 3, "i32", lambda a, b, c: med3(a, b, c, np.maximum, np.minimum), False),
    "v_min3_u32": _u(lambda a, b, c: np.minimum(np.minimum(a, b), c), 3),
    "v_max3_u32": _u(lambda a, b, c: np.maximum(np.maximum(a, b), c), 3),
    "v_med3_u32": _u(lambda a, b, c: med3(a, b, c, np.maximum, np.minimum), 3),
    "v_bcnt_u32_b32": _u(lambda a, b: popcount(a) + b, 2),
    "v_mbcnt_lo_u32_b32": _u(lambda a, b: popcount(a & np.where(LANE >= 32, U32(0xFFFFFFFF),
                                                                  (U32(1) << (LANE & U32(31))) - U32(1))) + b, 2),
    "v_mbcnt_hi_u32_b32": _u(lambda a, b: popcount(a & np.where(LANE < 32, U32(0),
                                                                 (U32(1) << (LANE & U32(31))) - U32(1))) + b, 2),
    "v_cvt_pk_u16_u32": _u(lambda a, b: (a & U32(0xFFFF)) | (b << U32(16)), 2),
    "v_cvt_pk_i16_i32": VOp(("i32", "i32"), "u32", lambda a, b: (np.clip(a, -32768, 32767).astype(U32) & U32(0xFFFF))
                            | (np.clip(b, -32768, 32767).astype(U32) << U32(16)), False),
    "v_sad_u32": _u(lambda a, b, c: np.where(a > b, a - b, b - a) + c, 3),
    "v_sad_u8": _u(sad(8), 3), "v_sad_hi_u8": _u(sad(8, shift=16), 3), "v_sad_u16": _u(sad(16), 3),
    "v_msad_u8": _u(sad(8, masked=True), 3), "v_lerp_u8": _u(lerp_u8, 3),
    "v_sat_pk_u8_i16": _u(sat_pk_u8_i16, 1),
    "v_dot2c_i32_i16": _u(dot(16, True), 3), "v_dot4c_i32_i8": _u(dot(8, True), 3),
    "v_dot8c_i32_i4": _u(dot(4, True), 3),
    "v_dot2c_f32_f16": VOp(("u32", "u32", "f32"), "f32", dot2_f16),
    "v_cvt_f32_fp8": VOp(("u32",), "f32", lambda a: FNUZ8["fp8"][a & U32(0xFF)].astype(F32), False),
    "v_cvt_f32_bf8": VOp(("u32",), "f32", lambda a: FNUZ8["bf8"][a & U32(0xFF)].astype(F32), False),
    "v_cvt_pk_f32_fp8": VOp(("u32",), "u64", lambda a: _pk_f32(FNUZ8["fp8"], a), False),
    "v_cvt_pk_f32_bf8": VOp(("u32",), "u64", lambda a: _pk_f32(FNUZ8["bf8"], a), False),
    "v_cvt_norm_i16_f16": VOp(("f16",), "u32", lambda a: norm16(a, True), False),
    "v_cvt_norm_u16_f16": VOp(("f16",), "u32", lambda a: norm16(a, False), False),
    "v_cvt_pknorm_i16_f16": VOp(("f16", "f16"), "u32", lambda a, b: norm16(a, True) | (norm16(b, True) << U32(16)),
                                False),
    "v_cvt_pknorm_u16_f16": VOp(("f16", "f16"), "u32", lambda a, b: norm16(a, False) | (norm16(b, False) << U32(16)),
                                False),
    # -------------------------------------------------------------- 64-bit integer
    "v_mov_b64": VOp(("u64",), "u64", lambda a: a, False),
    "v_lshlrev_b64": VOp(("u32", "u64"), "u64", lambda a, b: b << (a & U32(63)).astype(U64), False),
    "v_lshrrev_b64": VOp(("u32", "u64"), "u64", lambda a, b: b >> (a & U32(63)).astype(U64), False),
    "v_ashrrev_i64": VOp(("u32", "i64"), "i64", lambda a, b: b >> (a & U32(63)).astype(I64), False),
    "v_lshl_add_u64": VOp(("u64", "u32", "u64"), "u64", lambda a, b, c: (a << (b & U32(7)).astype(U64)) + c, False),
    # -------------------------------------------------------------- 16-bit integer
    "v_add_u16": VOp(("u16", "u16"), "u16", lambda a, b: a + b, False),
    "v_sub_u16": VOp(("u16", "u16"), "u16", lambda a, b: a - b, False),
    "v_subrev_u16": VOp(("u16", "u16"), "u16", lambda a, b: b - a, False),
    "v_add_i16": VOp(("u16", "u16"), "u16", lambda a, b: a + b, False),
    "v_sub_i16": VOp(("u16", "u16"), "u16", lambda a, b: a - b, False),
    "v_mul_lo_u16": VOp(("u16", "u16"), "u16", lambda a, b: a * b, False),
    "v_lshlrev_b16": VOp(("u16", "u16"), "u16", lambda a, b: b << (a & np.uint16(15)), False),
    "v_lshrrev_b16": VOp(("u16", "u16"), "u16", lambda a, b: b >> (a & np.uint16(15)), False),
    "v_ashrrev_i16": VOp(("u16", "i16"), "i16", lambda a, b: b >> (a & np.uint16(15)).astype(np.int16), False),
    "v_max_u16": VOp(("u16", "u16"), "u16", np.maximum, False),
    "v_min_u16": VOp(("u16", "u16"), "u16", np.minimum, False),
    "v_max_i16": VOp(("i16", "i16"), "i16", np.maximum, False),
    "v_min_i16": VOp(("i16", "i16"), "i16", np.minimum, False),
    "v_mad_u16": VOp(("u16",) * 3, "u16", lambda a, b, c: a * b + c, False),
    "v_mad_i16": VOp(("i16",) * 3, "i16", lambda a, b, c: a * b + c, False),
    "v_mad_legacy_u16": VOp(("u16",) * 3, "u16", lambda a, b, c: a * b + c, False),
    "v_mad_legacy_i16": VOp(("i16",) * 3, "i16", lambda a, b, c: a * b + c, False),
    "v_min3_u16": VOp(("u16",) * 3, "u16", lambda a, b, c: np.minimum(np.minimum(a, b), c), False),
    "v_max3_u16": VOp(("u16",) * 3, "u16", lambda a, b, c: np.maximum(np.maximum(a, b), c), False),
    "v_min3_i16": VOp(("i16",) * 3, "i16", lambda a, b, c: np.minimum(np.minimum(a, b), c), False),
    "v_max3_i16": VOp(("i16",) * 3, "i16", lambda a, b, c: np.maximum(np.maximum(a, b), c), False),
    "v_med3_u16": VOp(("u16",) * 3, "u16", lambda a, b, c: med3(a, b, c, np.maximum, np.minimum), False),
    "v_med3_i16": VOp(("i16",) * 3, "i16", lambda a, b, c: med3(a, b, c, np.maximum, np.minimum), False),
    # -------------------------------------------------------------- f32
    "v_add_f32": _f("f32", np.add, 2), "v_sub_f32": _f("f32", np.subtract, 2),
    "v_subrev_f32": _f("f32", lambda a, b: b - a, 2), "v_mul_f32": _f("f32", np.multiply, 2),
    "v_mul_legacy_f32": _f("f32", lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b), 2),
    "v_fma_f32": _f("f32", fma_f32, 3), "v_fmac_f32": _f("f32", fma_f32, 3),
    "v_fmamk_f32": _f("f32", fma_f32, 3), "v_fmaak_f32": _f("f32", fma_f32, 3),
    "v_min_f32": _f("f32", fmin, 2), "v_max_f32": _f("f32", fmax, 2),
    "v_min3_f32": _f("f32", lambda a, b, c: fmin(fmin(a, b), c), 3),
    "v_max3_f32": _f("f32", lambda a, b, c: fmax(fmax(a, b), c), 3),
    "v_med3_f32": _f("f32", lambda a, b, c: med3(a, b, c, fmax, fmin), 3),
    "v_ldexp_f32": VOp(("f32", "i32"), "f32", ldexp),
    "v_rcp_f32": _f("f32", via64(lambda x: 1.0 / x), 1), "v_rcp_iflag_f32": _f("f32", via64(lambda x: 1.0 / x), 1),
    "v_rsq_f32": _f("f32", via64(lambda x: 1.0 / np.sqrt(x)), 1), "v_sqrt_f32": _f("f32", np.sqrt, 1),
    "v_exp_f32": _f("f32", via64(np.exp2), 1), "v_log_f32": _f("f32", via64(np.log2), 1),
    "v_exp_legacy_f32": _f("f32", via64(np.exp2), 1), "v_log_legacy_f32": _f("f32", via64(np.log2), 1),
    "v_sin_f32": _f("f32", via64(lambda x: np.sin(x * (2 * np.pi))), 1),
    "v_cos_f32": _f("f32", via64(lambda x: np.cos(x * (2 * np.pi))), 1),
    "v_fract_f32": _f("f32", fract, 1), "v_trunc_f32": _f("f32", np.trunc, 1), "v_ceil_f32": _f("f32", np.ceil, 1),
    "v_floor_f32": _f("f32", np.floor, 1), "v_rndne_f32": _f("f32", np.rint, 1),
    "v_frexp_mant_f32": _f("f32", frexp_mant, 1),
    "v_frexp_exp_i32_f32": VOp(("f32",), "i32", frexp_exp),
    "v_div_fixup_f32": _f("f32", div_fixup, 3),
    "v_cvt_f32_i32": VOp(("i32",), "f32", lambda a: a.astype(F32)),
    "v_cvt_f32_u32": VOp(("u32",), "f32", lambda a: a.astype(F32)),
    "v_cvt_i32_f32": VOp(("f32",), "i32", lambda a: cvt_int(a, -2**31, 2**31 - 1, I32)),
    "v_cvt_u32_f32": VOp(("f32",), "u32", lambda a: cvt_int(a, 0, 2**32 - 1, U32)),
    "v_cvt_rpi_i32_f32": VOp(("f32",), "i32",
                             lambda a: cvt_int(a, -2**31, 2**31 - 1, I32, lambda x: np.floor(x + 0.5))),
    "v_cvt_flr_i32_f32": VOp(("f32",), "i32", lambda a: cvt_int(a, -2**31, 2**31 - 1, I32, np.floor)),
    "v_cvt_f16_f32": VOp(("f32",), "f16", lambda a: a.astype(np.float16)),
    "v_cvt_f32_f16": VOp(("f16",), "f32", lambda a: a.astype(F32)),
    "v_cvt_f32_f64": VOp(("f64",), "f32", lambda a: a.astype(F32)),
    "v_cvt_f64_f32": VOp(("f32",), "f64", lambda a: a.astype(F64)),
    "v_cvt_f32_ubyte0": VOp(("u32",), "f32", lambda a: (a & U32(0xFF)).astype(F32)),
    "v_cvt_f32_ubyte1": VOp(("u32",), "f32", lambda a: ((a >> U32(8)) & U32(0xFF)).astype(F32)),
    "v_cvt_f32_ubyte2": VOp(("u32",), "f32", lambda a: ((a >> U32(16)) & U32(0xFF)).astype(F32)),
    "v_cvt_f32_ubyte3": VOp(("u32",), "f32", lambda a: (a >> U32(24)).astype(F32)),
    "v_cvt_off_f32_i4": VOp(("u32",), "f32", lambda a: (_sext(a, 4).astype(F32) / F32(16))),
    "v_cvt_pkrtz_f16_f32": VOp(("f32", "f32"), "u32", lambda a, b: cvt_f16_rtz(a).view(np.uint16).astype(U32)
                               | (cvt_f16_rtz(b).view(np.uint16).astype(U32) << U32(16))),
    "v_cvt_pknorm_i16_f32": VOp(("f32", "f32"), "u32", lambda a, b: (cvt_int(a * 32767, -32767, 32767, I32, np.rint)
                                & 0xFFFF).astype(U32) | ((cvt_int(b * 32767, -32767, 32767, I32, np.rint)
                                                        & 0xFFFF).astype(U32) << U32(16))),
    "v_cvt_pknorm_u16_f32": VOp(("f32", "f32"), "u32", lambda a, b: cvt_int(a * 65535, 0, 65535, U32, np.rint)
                                | (cvt_int(b * 65535, 0, 65535, U32, np.rint) << U32(16))),
    "v_cvt_pk_u8_f32": VOp(("f32", "u32", "u32"), "u32",
                           lambda a, sel, c: (c & ~(U32(0xFF) << (U32(8) * (sel & U32(3)))))
                           | (cvt_int(a, 0, 255, U32, np.rint) << (U32(8) * (sel & U32(3))))),
    # -------------------------------------------------------------- f64
    "v_add_f64": _f("f64", np.add, 2), "v_mul_f64": _f("f64", np.multiply, 2),
    "v_min_f64": _f("f64", fmin, 2), "v_max_f64": _f("f64", fmax, 2),
    "v_fma_f64": _f("f64", fma_f64, 3), "v_fmac_f64": _f("f64", fma_f64, 3),
    "v_ldexp_f64": VOp(("f64", "i32"), "f64", ldexp),
    "v_rcp_f64": _f("f64", lambda x: 1.0 / x, 1), "v_rsq_f64": _f("f64", lambda x: 1.0 / np.sqrt(x), 1),
    "v_sqrt_f64": _f("f64", np.sqrt, 1),
    "v_trunc_f64": _f("f64", np.trunc, 1), "v_ceil_f64": _f("f64", np.ceil, 1), "v_floor_f64": _f("f64", np.floor, 1),
    "v_rndne_f64": _f("f64", np.rint, 1), "v_fract_f64": _f("f64", fract, 1),
    "v_frexp_mant_f64": _f("f64", frexp_mant, 1), "v_frexp_exp_i32_f64": VOp(("f64",), "i32", frexp_exp),
    "v_div_fixup_f64": _f("f64", div_fixup, 3),
    "v_cvt_i32_f64": VOp(("f64",), "i32", lambda a: cvt_int(a, -2**31, 2**31 - 1, I32)),
    "v_cvt_u32_f64": VOp(("f64",), "u32", lambda a: cvt_int(a, 0, 2**32 - 1, U32)),
    "v_cvt_f64_i32": VOp(("i32",), "f64", lambda a: a.astype(F64)),
    "v_cvt_f64_u32": VOp(("u32",), "f64", lambda a: a.astype(F64)),
    # -------------------------------------------------------------- f16
    "v_add_f16": _f("f16", f16_exact(np.add), 2), "v_sub_f16": _f("f16", f16_exact(np.subtract), 2),
    "v_subrev_f16": _f("f16", f16_exact(lambda a, b: b - a), 2), "v_mul_f16": _f("f16", f16_exact(np.multiply), 2),
    "v_fma_f16": _f("f16", fma_f16, 3), "v_mac_f16": _f("f16", fma_f16, 3), "v_mad_f16": _f("f16", fma_f16, 3),
    "v_mad_legacy_f16": _f("f16", fma_f16, 3), "v_fma_legacy_f16": _f("f16", fma_f16, 3),
    "v_madmk_f16": _f("f16", fma_f16, 3), "v_madak_f16": _f("f16", fma_f16, 3),
    "v_max_f16": _f("f16", fmax, 2), "v_min_f16": _f("f16", fmin, 2),
    "v_min3_f16": _f("f16", lambda a, b, c: fmin(fmin(a, b), c), 3),
    "v_max3_f16": _f("f16", lambda a, b, c: fmax(fmax(a, b), c), 3),
    "v_med3_f16": _f("f16", lambda a, b, c: med3(a, b, c, fmax, fmin), 3),
    "v_ldexp_f16": VOp(("f16", "i16"), "f16", ldexp),
    "v_rcp_f16": _f("f16", via64(lambda x: 1.0 / x), 1), "v_rsq_f16": _f("f16", via64(lambda x: 1.0 / np.sqrt(x)), 1),
    "v_sqrt_f16": _f("f16", via64(np.sqrt), 1), "v_exp_f16": _f("f16", via64(np.exp2), 1),
    "v_log_f16": _f("f16", via64(np.log2), 1), "v_sin_f16": _f("f16", via64(lambda x: np.sin(x * (2 * np.pi))), 1),
    "v_cos_f16": _f("f16", via64(lambda x: np.cos(x * (2 * np.pi))), 1),
    "v_floor_f16": _f("f16", np.floor, 1), "v_ceil_f16": _f("f16", np.ceil, 1), "v_trunc_f16": _f("f16", np.trunc, 1),
    "v_rndne_f16": _f("f16", np.rint, 1), "v_fract_f16": _f("f16", fract, 1),
    "v_frexp_mant_f16": _f("f16", frexp_mant, 1),
    "v_frexp_exp_i16_f16": VOp(("f16",), "i16", lambda a: frexp_exp(a).astype(np.int16)),
    "v_div_fixup_f16": _f("f16", div_fixup, 3), "v_div_fixup_legacy_f16": _f("f16", div_fixup, 3),
    "v_cvt_f16_u16": VOp(("u16",), "f16", lambda a: a.astype(np.float16)),
    "v_cvt_f16_i16": VOp(("i16",), "f16", lambda a: a.astype(np.float16)),
    "v_cvt_u16_f16": VOp(("f16",), "u16", lambda a: cvt_int(a, 0, 65535, np.uint16)),
    "v_cvt_i16_f16": VOp(("f16",), "i16", lambda a: cvt_int(a, -32768, 32767, np.int16)),
    "v_pack_b32_f16": VOp(("f16", "f16"), "u32", lambda a, b: a.view(np.uint16).astype(U32)
                          | (b.view(np.uint16).astype(U32) << U32(16)), False),
}

FLOAT_CMP = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
    "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}
INT_CMP = {
    "f": FLOAT_CMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal,
    "ge": np.greater_equal, "t": FLOAT_CMP["tru"],
}


def float_class(x: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """v_cmp_class_*: bit i of `classes` selects sNaN, qNaN, -inf, -normal, -denorm, -0, +0, +denorm, +normal, +inf."""
    ubits = x.view(f"u{x.itemsize}")
    quiet_bit = {2: 0x200, 4: 0x400000, 8: 0x8000000000000}[x.itemsize]
    tiny = np.finfo(x.dtype).tiny
    neg = np.signbit(x)
    isnan = np.isnan(x)
    quiet = (ubits & type(ubits.flat[0])(quiet_bit)) != 0
    mag = np.abs(x)
    cls = np.select(
        [isnan & ~quiet, isnan, np.isinf(x) & neg, (mag >= tiny) & neg & ~np.isinf(x), (mag > 0) & (mag < tiny) & neg,
         (mag == 0) & neg, mag == 0, (mag > 0) & (mag < tiny), (mag >= tiny) & ~np.isinf(x)],
        [0, 1, 2, 3, 4, 5, 6, 7, 8], 9)
    return ((classes.astype(U32) >> cls.astype(U32)) & U32(1)).astype(bool)
