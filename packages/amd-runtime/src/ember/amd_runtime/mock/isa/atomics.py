"""The read-modify-write functions of the atomic instructions (global, flat, buffer, scalar and LDS), on ints."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def pk_add(old: int, v: int, bf16: bool) -> int:
    """Two 16-bit float adds (f16, or bf16 rounded to nearest even) packed in 32 bits."""
    a = np.array([old & 0xFFFF, old >> 16], np.uint16)
    b = np.array([v & 0xFFFF, (v >> 16) & 0xFFFF], np.uint16)
    if bf16:
        s = (a.astype(np.uint32) << 16).view(np.float32) + (b.astype(np.uint32) << 16).view(np.float32)
        u = s.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    else:
        r = (a.view(np.float16) + b.view(np.float16)).view(np.uint16)
    return int(r[0]) | (int(r[1]) << 16)



def atomic_fn(op: str, wide: bool) -> Callable[[int, int, int], int]:
    """`fn(old, value, compare) -> new` of an atomic op on 32- or 64-bit memory words."""
    bits = 64 if wide else 32
    mask = (1 << bits) - 1

    def sgn(x: int) -> int:
        return x - (1 << bits) if x >> (bits - 1) else x

    def fbits(x: float) -> int:
        return int(np.array([x], np.float64 if wide else np.float32).view(np.uint64 if wide else np.uint32)[0])

    def fval(x: int) -> float:
        return float(np.array([x], np.uint64 if wide else np.uint32).view(np.float64 if wide else np.float32)[0])

    table: dict[str, Callable[[int, int, int], int]] = {
        "swap": lambda old, v, c: v, "add": lambda old, v, c: (old + v) & mask,
        "sub": lambda old, v, c: (old - v) & mask, "rsub": lambda old, v, c: (v - old) & mask,
        "smin": lambda old, v, c: old if sgn(old) <= sgn(v) else v,
        "smax": lambda old, v, c: old if sgn(old) >= sgn(v) else v,
        "min_i32": lambda old, v, c: old if sgn(old) <= sgn(v) else v,
        "max_i32": lambda old, v, c: old if sgn(old) >= sgn(v) else v,
        "umin": lambda old, v, c: min(old, v), "umax": lambda old, v, c: max(old, v),
        "min_u32": lambda old, v, c: min(old, v), "max_u32": lambda old, v, c: max(old, v),
        "and": lambda old, v, c: old & v, "or": lambda old, v, c: old | v, "xor": lambda old, v, c: old ^ v,
        "inc": lambda old, v, c: 0 if old >= v else old + 1,
        "dec": lambda old, v, c: v if old == 0 or old > v else old - 1,
        "cmpswap": lambda old, v, c: v if old == c else old,
        "add_f32": lambda old, v, c: fbits(np.float32(fval(old)) + np.float32(fval(v))),
        "add_f64": lambda old, v, c: fbits(fval(old) + fval(v)),
        "min_f64": lambda old, v, c: fbits(min(fval(old), fval(v))),
        "max_f64": lambda old, v, c: fbits(max(fval(old), fval(v))),
        "min_f32": lambda old, v, c: fbits(min(fval(old), fval(v))),
        "max_f32": lambda old, v, c: fbits(max(fval(old), fval(v))),
        "mskor": lambda old, v, c: (old & ~c & mask) | v,  # ds_mskor: (old & ~data0) | data1, c = data0, v = data1
        "pk_add_f16": lambda old, v, c: pk_add(old, v, False),
        "pk_add_bf16": lambda old, v, c: pk_add(old, v, True),
    }
    if op not in table:
        raise NotImplementedError(f"atomic {op}")
    return table[op]
