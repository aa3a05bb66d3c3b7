"""Compiling vector memory instructions (FLAT/GLOBAL/SCRATCH, DS, MUBUF) into per-wave functions.

Global accesses go through the wave's `GlobalMemory`, coalesced: the lanes' bytes are read as one span when it is
small, and stores are written as runs of consecutive addresses (lane order is kept for overlapping stores).
LDS accesses outside the workgroup's allocation read 0 and drop writes (gfx9 LDS bounds behaviour).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.amd_runtime.mock.isa.atomics import atomic_fn
from ember.amd_runtime.mock.isa.decode import Instruction
from ember.amd_runtime.mock.isa.memory import MemoryFault
from ember.amd_runtime.mock.isa.salu import read_bytes
from ember.amd_runtime.mock.isa.state import (
    APERTURE_SIZE,
    M32,
    PRIVATE_BASE,
    SHARED_BASE,
    Wave,
    scalar_reader,
)

Fn = Callable[[Wave], None]
U32, U64 = np.uint32, np.uint64
_SPAN_LIMIT = 1 << 16


# ------------------------------------------------------------------------------------------------ global memory
def gather(w: Wave, addrs: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes at each address: (len(addrs), nbytes) uint8."""
    if addrs.size == 0:
        return np.zeros((0, nbytes), np.uint8)
    lo, hi = int(addrs.min()), int(addrs.max()) + nbytes
    if hi - lo <= _SPAN_LIMIT:
        try:
            span = read_bytes(w, lo, hi - lo)
        except MemoryFault:
            pass  # a hole between lanes, or a lane really faults: find out lane by lane
        else:
            return span[(addrs - U64(lo)).astype(np.int64)[:, None] + np.arange(nbytes)]
    return np.stack([read_bytes(w, int(a), nbytes) for a in addrs])


def scatter(w: Wave, addrs: np.ndarray, data: np.ndarray) -> None:
    """Store data[i] (nbytes each) at addrs[i], later lanes winning on overlap."""
    n, nbytes = data.shape
    if n == 0:
        return
    order = np.argsort(addrs, kind="stable")
    sa = addrs[order]
    if n > 1 and np.any(np.diff(sa) < U64(nbytes)):  # overlapping lanes: plain lane order
        for a, row in zip(addrs, data):
            w.mem.write(int(a), row.tobytes())
        return
    sd = data[order]
    breaks = np.nonzero(np.diff(sa) != U64(nbytes))[0] + 1
    start = 0
    for end in [*breaks.tolist(), n]:
        try:
            w.mem.write(int(sa[start]), sd[start:end].tobytes())
        except MemoryFault:  # report the faulting lane's own access
            for a, row in zip(sa[start:end], sd[start:end]):
                w.mem.write(int(a), row.tobytes())
            raise
        start = end


def _to_rows(values: list[np.ndarray], nbytes: int) -> np.ndarray:
    """Per-lane store data from dword registers (list of uint32 arrays over the active lanes)."""
    if nbytes < 4:
        return values[0].astype("<u4").view(np.uint8).reshape(-1, 4)[:, :nbytes]
    return np.stack(values, axis=1).astype("<u4").view(np.uint8).reshape(len(values[0]), -1)


_LOAD = {"ubyte": (1, "u"), "sbyte": (1, "s"), "ushort": (2, "u"), "sshort": (2, "s"), "dword": (4, "u"),
         "dwordx2": (8, "u"), "dwordx3": (12, "u"), "dwordx4": (16, "u")}
_D16 = {"ubyte_d16": (1, "u", False), "ubyte_d16_hi": (1, "u", True), "sbyte_d16": (1, "s", False),
        "sbyte_d16_hi": (1, "s", True), "short_d16": (2, "u", False), "short_d16_hi": (2, "u", True)}
_STORE = {"byte": (1, False), "byte_d16_hi": (1, True), "short": (2, False), "short_d16_hi": (2, True),
          "dword": (4, False), "dwordx2": (8, False), "dwordx3": (12, False), "dwordx4": (16, False)}


def _rows_to_dwords(rows: np.ndarray, nbytes: int, sign: str) -> np.ndarray:
    """Loaded bytes (n, nbytes) -> (n, ndwords) uint32, sub-dword loads zero/sign-extended."""
    if nbytes >= 4:
        return np.ascontiguousarray(rows).view("<u4").astype(U32)
    val = np.ascontiguousarray(rows).view("<u1" if nbytes == 1 else "<u2").astype(np.int64)[:, :1]
    if sign == "s":
        top = 1 << (8 * nbytes - 1)
        val = (val ^ top) - top
    return (val & M32).astype(U32)


def _atomic_lanes(w: Wave, addrs: list[int], data: list[int], cmp: list[int] | None, fn: Callable[[int, int, int], int],
                  nbytes: int) -> np.ndarray:
    """Read-modify-write each lane's address in lane order; the values before each update (uint64)."""
    old_vals = np.zeros(len(addrs), np.uint64)
    fmt = "<u8" if nbytes == 8 else "<u4"
    for i, a in enumerate(addrs):
        old = int(read_bytes(w, a, nbytes).view(fmt)[0])
        w.mem.write(a, fn(old, data[i], cmp[i] if cmp is not None else 0).to_bytes(nbytes, "little"))
        old_vals[i] = old
    return old_vals


def _flat_like(ins: Instruction) -> Fn:
    f = ins.fields
    fmt = ins.fmt
    op = ins.name.split("_", 1)[1]
    offset = f["offset"]
    va, saddr, data_reg, vdst = f["addr"], f["saddr"], f["data"], f["vdst"]
    acc = bool(f["acc"])
    if fmt == "SCRATCH":
        sve = bool(f["sve"])
        soff = scalar_reader(saddr, None) if saddr != 0x7F else (lambda w: 0)

        def lane_addrs(w: Wave, m: np.ndarray) -> np.ndarray:
            base = np.full(int(m.sum()), soff(w) + offset, np.int64)
            if sve:
                base = base + w.v[va][m].astype(np.int64)
            return base.astype(U64)
    elif fmt == "GLOBAL" and saddr != 0x7F:
        sbase = scalar_reader(saddr, None, wide=True)

        def lane_addrs(w: Wave, m: np.ndarray) -> np.ndarray:
            return U64(sbase(w)) + w.v[va][m].astype(U64) + U64(offset & 0xFFFFFFFFFFFFFFFF) if offset >= 0 else \
                U64(sbase(w)) + w.v[va][m].astype(U64) - U64(-offset)
    else:
        def lane_addrs(w: Wave, m: np.ndarray) -> np.ndarray:
            a = w.v[va][m].astype(U64) | (w.v[va + 1][m].astype(U64) << U64(32))
            return a + U64(offset) if offset >= 0 else a - U64(-offset)

    def regs(w: Wave) -> np.ndarray:
        return w.a if acc else w.v

    # memory access by segment: global memory, LDS (flat aperture), private (scratch)
    def apertures(addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lds = (addrs >= U64(SHARED_BASE)) & (addrs < U64(SHARED_BASE + APERTURE_SIZE))
        priv = (addrs >= U64(PRIVATE_BASE)) & (addrs < U64(PRIVATE_BASE + APERTURE_SIZE))
        return lds, priv

    def load_rows(w: Wave, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        lanes = np.nonzero(m_cache[0])[0]
        if fmt == "SCRATCH":
            return _scratch_rows(w, addrs, nbytes, lanes)
        if fmt == "FLAT":
            lds, priv = apertures(addrs)
            if lds.any() or priv.any():
                rows = np.zeros((addrs.size, nbytes), np.uint8)
                rows[lds] = _lds_rows(w, (addrs[lds] - U64(SHARED_BASE)).astype(np.int64), nbytes)
                rows[priv] = _scratch_rows(w, addrs[priv] - U64(PRIVATE_BASE), nbytes, lanes[priv])
                rest = ~(lds | priv)
                if rest.any():
                    rows[rest] = gather(w, addrs[rest], nbytes)
                return rows
        return gather(w, addrs, nbytes)

    def store_rows(w: Wave, addrs: np.ndarray, rows: np.ndarray) -> None:
        lanes = np.nonzero(m_cache[0])[0]
        if fmt == "SCRATCH":
            _scratch_store(w, addrs, rows, lanes)
            return
        if fmt == "FLAT":
            lds, priv = apertures(addrs)
            if lds.any() or priv.any():
                _lds_store(w, (addrs[lds] - U64(SHARED_BASE)).astype(np.int64), rows[lds])
                _scratch_store(w, addrs[priv] - U64(PRIVATE_BASE), rows[priv], lanes[priv])
                rest = ~(lds | priv)
                addrs, rows = addrs[rest], rows[rest]
        scatter(w, addrs, rows)

    m_cache: list[np.ndarray] = [np.zeros(64, bool)]

    if op.startswith("load_lds"):
        raise NotImplementedError(f"{ins.name} (global load to LDS) at {ins.addr:#x}")
    if op.startswith("load_") and op[5:] in _LOAD:
        nbytes, sign = _LOAD[op[5:]]
        ndw = max(1, nbytes // 4)

        def load(w: Wave) -> None:
            m = w.mask()
            m_cache[0] = m
            if not m.any():
                return
            dw = _rows_to_dwords(load_rows(w, lane_addrs(w, m), nbytes), nbytes, sign)
            r = regs(w)
            for i in range(ndw):
                r[vdst + i, m] = dw[:, i]
        return load
    if op.startswith("load_") and op[5:] in _D16:
        nbytes, sign, hi = _D16[op[5:]]

        def load_d16(w: Wave) -> None:
            m = w.mask()
            m_cache[0] = m
            if not m.any():
                return
            val = _rows_to_dwords(load_rows(w, lane_addrs(w, m), nbytes), nbytes, sign)[:, 0] & U32(0xFFFF)
            r = regs(w)
            old = r[vdst, m]
            r[vdst, m] = (old & U32(0xFFFF)) | (val << U32(16)) if hi else (old & U32(0xFFFF0000)) | val
        return load_d16
    if op.startswith("store_"):
        nbytes, hi = _STORE[op[6:]]
        ndw = max(1, nbytes // 4)

        def store(w: Wave) -> None:
            m = w.mask()
            m_cache[0] = m
            if not m.any():
                return
            r = regs(w)
            vals = [r[data_reg + i, m] for i in range(ndw)]
            if hi:
                vals = [vals[0] >> U32(16)]
            store_rows(w, lane_addrs(w, m), _to_rows(vals, nbytes))
        return store
    if op.startswith("atomic_"):
        name = op[len("atomic_"):]
        wide = name.endswith("_x2") or name in ("add_f64", "min_f64", "max_f64")
        base = name[:-3] if name.endswith("_x2") else name
        fn = atomic_fn(base, wide)
        nb = 8 if wide else 4
        ret = bool(f["sc0"])
        cmpswap = base == "cmpswap"

        def atomic(w: Wave) -> None:
            m = w.mask()
            if not m.any():
                return
            addrs = lane_addrs(w, m)
            r = regs(w)

            def reg_val(reg: int) -> np.ndarray:
                v = r[reg, m].astype(np.uint64)
                return v | (r[reg + 1, m].astype(np.uint64) << U64(32)) if wide else v
            data = reg_val(data_reg)
            cmp = reg_val(data_reg + (2 if wide else 1)) if cmpswap else None
            if fmt == "FLAT" and (apertures(addrs)[0].any() or apertures(addrs)[1].any()):
                raise NotImplementedError(f"{ins.name} on an LDS or private address at {ins.addr:#x}")
            old_vals = _atomic_lanes(w, addrs.tolist(), data.tolist(), None if cmp is None else cmp.tolist(), fn, nb)
            if ret:
                r[vdst, m] = (old_vals & U64(M32)).astype(U32)
                if wide:
                    r[vdst + 1, m] = (old_vals >> U64(32)).astype(U32)
        return atomic
    raise NotImplementedError(f"{ins.name} is decoded but not implemented (at {ins.addr:#x})")


# ------------------------------------------------------------------------------------------------ scratch
def _scratch_index(w: Wave, addrs: np.ndarray, nbytes: int, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-lane private memory: (lane, byte) index arrays for the lanes' private addresses."""
    if addrs.size == 0:
        return np.zeros((0, 1), np.int64), np.zeros((0, nbytes), np.int64)
    if w.scratch is None or w.scratch.shape[1] == 0:
        raise NotImplementedError("scratch access in a kernel without a private segment")
    size = w.scratch.shape[1]
    a = addrs.astype(np.int64)
    if (a < 0).any() or (a + nbytes > size).any():
        bad = int(a[(a < 0) | (a + nbytes > size)][0])
        raise MemoryFault(PRIVATE_BASE + bad, nbytes, False)
    return lanes[:, None], a[:, None] + np.arange(nbytes)


def _scratch_rows(w: Wave, addrs: np.ndarray, nbytes: int, lanes: np.ndarray) -> np.ndarray:
    if addrs.size == 0:
        return np.zeros((0, nbytes), np.uint8)
    lane_idx, idx = _scratch_index(w, addrs, nbytes, lanes)
    assert w.scratch is not None
    return w.scratch[lane_idx, idx]


def _scratch_store(w: Wave, addrs: np.ndarray, rows: np.ndarray, lanes: np.ndarray) -> None:
    if addrs.size == 0:
        return
    lane_idx, idx = _scratch_index(w, addrs, rows.shape[1], lanes)
    assert w.scratch is not None
    w.scratch[lane_idx, idx] = rows


# ------------------------------------------------------------------------------------------------ LDS
def _lds_rows(w: Wave, addrs: np.ndarray, nbytes: int) -> np.ndarray:
    idx = addrs.astype(np.int64)[:, None] + np.arange(nbytes)
    ok = (idx >= 0) & (idx < w.lds.size)
    if ok.all():
        return w.lds[idx]
    return np.where(ok, w.lds[np.where(ok, idx, 0)], np.uint8(0))


def _lds_dwords(w: Wave, addrs: np.ndarray, ndw: int) -> np.ndarray:
    """`ndw` dwords at each LDS byte address: (n, ndw) uint32 (a word-indexed fast path when all are aligned)."""
    if addrs.size and not (addrs & 3).any() and addrs.min() >= 0 and int(addrs.max()) + 4 * ndw <= w.lds.size:
        words = w.lds[:w.lds.size & ~3].view(np.uint32)
        return words[(addrs >> 2)[:, None] + np.arange(ndw)]
    return _rows_to_dwords(_lds_rows(w, addrs, 4 * ndw), 4 * ndw, "u")


def _lds_store_dwords(w: Wave, addrs: np.ndarray, values: list[np.ndarray]) -> None:
    ndw = len(values)
    if addrs.size and not (addrs & 3).any() and addrs.min() >= 0 and int(addrs.max()) + 4 * ndw <= w.lds.size:
        words = w.lds[:w.lds.size & ~3].view(np.uint32)
        if ndw == 1:
            words[addrs >> 2] = values[0]
        else:
            words[(addrs >> 2)[:, None] + np.arange(ndw)] = np.stack(values, axis=1)
        return
    _lds_store(w, addrs, _to_rows(values, 4 * ndw))


def _lds_store(w: Wave, addrs: np.ndarray, rows: np.ndarray) -> None:
    idx = addrs.astype(np.int64)[:, None] + np.arange(rows.shape[1])
    ok = (idx >= 0) & (idx < w.lds.size)
    if ok.all():
        w.lds[idx] = rows
    else:
        w.lds[idx[ok]] = rows[ok]


def _ds_cross_lane(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    va, data, vdst = f["addr"], f["data0"], f["vdst"]
    offset = f["offset0"] | (f["offset1"] << 8)
    lane = np.arange(64)
    if name == "ds_swizzle_b32":
        if offset & 0x8000:
            src_lane = (lane & ~3) + ((offset >> (2 * (lane & 3))) & 3)
        else:
            and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
            src_lane = (lane & ~0x1F) | (((lane & and_m) | or_m) ^ xor_m)

        def swizzle(w: Wave) -> None:
            m = w.mask()
            val = np.where(m[src_lane], w.v[data][src_lane], U32(0))
            np.copyto(w.v[vdst], val, where=m)
        return swizzle
    if name == "ds_bpermute_b32":
        def bpermute(w: Wave) -> None:
            m = w.mask()
            src = ((w.v[va].astype(np.int64) + offset) // 4) % 64
            val = np.where(m[src], w.v[data][src], U32(0))
            np.copyto(w.v[vdst], val, where=m)
        return bpermute

    def permute(w: Wave) -> None:
        m = w.mask()
        dst_lane = ((w.v[va].astype(np.int64) + offset) // 4) % 64
        tmp = np.zeros(64, U32)
        for ln in np.nonzero(m)[0]:
            tmp[dst_lane[ln]] = w.v[data, ln]
        np.copyto(w.v[vdst], tmp, where=m)
    return permute


_DS_ATOMIC32 = {"mskor_b32": "mskor", "pk_add_f16": "pk_add_f16", "pk_add_bf16": "pk_add_bf16",
                "add_u32": "add", "sub_u32": "sub", "rsub_u32": "rsub", "inc_u32": "inc", "dec_u32": "dec",
                "min_i32": "smin", "max_i32": "smax", "min_u32": "umin", "max_u32": "umax", "and_b32": "and",
                "or_b32": "or", "xor_b32": "xor", "wrxchg_b32": "swap", "add_f32": "add_f32",
                "min_f32": "min_f32", "max_f32": "max_f32", "cmpst_b32": "cmpswap", "cmpst_f32": "cmpswap"}


def _compile_ds(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    if f["gds"]:
        raise NotImplementedError(f"{name} with GDS at {ins.addr:#x}")
    if name in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32"):
        return _ds_cross_lane(ins)
    va, d0, d1, vdst = f["addr"], f["data0"], f["data1"], f["vdst"]
    off16 = f["offset0"] | (f["offset1"] << 8)
    acc = bool(f["acc"])
    op = name[3:]

    def regs(w: Wave) -> np.ndarray:
        return w.a if acc else w.v

    single_read = {"read_b32": (4, "u"), "read_b64": (8, "u"), "read_b96": (12, "u"), "read_b128": (16, "u"),
                   "read_u8": (1, "u"), "read_i8": (1, "s"), "read_u16": (2, "u"), "read_i16": (2, "s")}
    single_write = {"write_b32": 4, "write_b64": 8, "write_b96": 12, "write_b128": 16, "write_b8": 1,
                    "write_b16": 2}
    if op in single_read:
        nbytes, sign = single_read[op]
        ndw = max(1, nbytes // 4)

        def read(w: Wave) -> None:
            m = w.mask()
            addrs = w.v[va][m].astype(np.int64) + off16
            dw = _lds_dwords(w, addrs, ndw) if nbytes >= 4 else _rows_to_dwords(_lds_rows(w, addrs, nbytes), nbytes,
                                                                                  sign)
            r = regs(w)
            for i in range(ndw):
                r[vdst + i, m] = dw[:, i]
        return read
    if op in single_write:
        nbytes = single_write[op]
        ndw = max(1, nbytes // 4)

        def write(w: Wave) -> None:
            m = w.mask()
            r = regs(w)
            addrs = w.v[va][m].astype(np.int64) + off16
            if nbytes >= 4:
                _lds_store_dwords(w, addrs, [r[d0 + i, m] for i in range(ndw)])
            else:
                _lds_store(w, addrs, _to_rows([r[d0, m]], nbytes))
        return write
    if op in ("read_u8_d16", "read_u8_d16_hi", "read_i8_d16", "read_i8_d16_hi", "read_u16_d16", "read_u16_d16_hi"):
        nbytes, sign, hi = (1 if "8" in op else 2), ("s" if "_i8" in op else "u"), op.endswith("_hi")

        def read_d16(w: Wave) -> None:
            m = w.mask()
            rows = _lds_rows(w, w.v[va][m].astype(np.int64) + off16, nbytes)
            val = _rows_to_dwords(rows, nbytes, sign)[:, 0] & U32(0xFFFF)
            r = regs(w)
            old = r[vdst, m]
            r[vdst, m] = (old & U32(0xFFFF)) | (val << U32(16)) if hi else (old & U32(0xFFFF0000)) | val
        return read_d16
    if op in ("write_b8_d16_hi", "write_b16_d16_hi"):
        nbytes = 1 if "b8" in op else 2

        def write_hi(w: Wave) -> None:
            m = w.mask()
            rows = _to_rows([regs(w)[d0, m] >> U32(16)], nbytes)
            _lds_store(w, w.v[va][m].astype(np.int64) + off16, rows)
        return write_hi
    if op in ("read2_b32", "read2st64_b32", "read2_b64", "read2st64_b64"):
        nbytes = 8 if op.endswith("b64") else 4
        stride = nbytes * (64 if "st64" in op else 1)
        o0, o1 = f["offset0"] * stride, f["offset1"] * stride
        ndw = nbytes // 4

        def read2(w: Wave) -> None:
            m = w.mask()
            base = w.v[va][m].astype(np.int64)
            a, b = _lds_dwords(w, base + o0, ndw), _lds_dwords(w, base + o1, ndw)
            r = regs(w)
            for i in range(ndw):
                r[vdst + i, m] = a[:, i]
                r[vdst + ndw + i, m] = b[:, i]
        return read2
    if op in ("write2_b32", "write2st64_b32", "write2_b64", "write2st64_b64"):
        nbytes = 8 if op.endswith("b64") else 4
        stride = nbytes * (64 if "st64" in op else 1)
        o0, o1 = f["offset0"] * stride, f["offset1"] * stride
        ndw = nbytes // 4

        def write2(w: Wave) -> None:
            m = w.mask()
            base = w.v[va][m].astype(np.int64)
            r = regs(w)
            _lds_store_dwords(w, base + o0, [r[d0 + i, m] for i in range(ndw)])
            _lds_store_dwords(w, base + o1, [r[d1 + i, m] for i in range(ndw)])
        return write2
    rtn = "_rtn_" in op
    key = op.replace("rtn_", "")
    wide = key.endswith(("_u64", "_i64", "_b64", "_f64"))
    key32 = key.replace("u64", "u32").replace("i64", "i32").replace("b64", "b32").replace("f64", "f32")
    if key32 in _DS_ATOMIC32:
        atom = _DS_ATOMIC32[key32]
        if wide and atom in ("add_f32", "min_f32", "max_f32"):
            atom = atom.replace("f32", "f64")
        fn = atomic_fn(atom, wide)
        nb = 8 if wide else 4
        cmpswap = atom in ("cmpswap", "mskor")  # both take data0 and data1

        def ds_atomic(w: Wave) -> None:
            m = w.mask()
            r = regs(w)
            lanes = np.nonzero(m)[0]
            for ln in lanes.tolist():
                a = int(w.v[va, ln]) + off16
                if a < 0 or a + nb > w.lds.size:
                    old = 0
                else:
                    old = int(w.lds[a:a + nb].view("<u8" if wide else "<u4")[0])
                    v = int(r[d0, ln]) | ((int(r[d0 + 1, ln]) << 32) if wide else 0)
                    # ds_cmpst: data0 is the compare value, data1 the new value
                    c = v
                    if cmpswap:
                        v = int(r[d1, ln]) | ((int(r[d1 + 1, ln]) << 32) if wide else 0)
                    new = fn(old, v, c)
                    w.lds[a:a + nb] = np.frombuffer(new.to_bytes(nb, "little"), np.uint8)
                if rtn:
                    r[vdst, ln] = old & M32
                    if wide:
                        r[vdst + 1, ln] = old >> 32
        return ds_atomic
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


# ------------------------------------------------------------------------------------------------ MUBUF
def _compile_mubuf(ins: Instruction) -> Fn:
    f = ins.fields
    name = ins.name
    op = name[len("buffer_"):]
    if f["lds"]:
        raise NotImplementedError(f"{name} with lds at {ins.addr:#x}")
    if op in ("wbl2", "inv", "wbinvl1", "wbinvl1_vol"):
        return lambda w: None
    srsrc, vaddr, vdata = f["srsrc"], f["vaddr"], f["vdata"]
    soff = scalar_reader(f["soffset"], None)
    inst_off, offen, idxen = f["offset"], bool(f["offen"]), bool(f["idxen"])
    acc = bool(f["acc"])

    def addresses(w: Wave, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = w.s
        base = s[srsrc] | ((s[srsrc + 1] & 0xFFFF) << 32)
        stride = (s[srsrc + 1] >> 16) & 0x3FFF
        num_records = s[srsrc + 2]
        if (s[srsrc + 3] >> 23) & 1:  # ADD_TID_ENABLE / swizzled buffers
            raise NotImplementedError(f"{name} with a swizzled buffer resource at {ins.addr:#x}")
        vi = 0
        index = np.zeros(int(m.sum()), np.int64)
        voff = np.zeros(int(m.sum()), np.int64)
        if idxen:
            index = w.v[vaddr][m].astype(np.int64)
            vi = 1
        if offen:
            voff = w.v[vaddr + vi][m].astype(np.int64)
        offset = voff + inst_off
        if idxen and stride:
            in_range = index < num_records
            addr = base + soff(w) + index * stride + offset
        else:
            in_range = offset + (index * stride) < num_records
            addr = base + soff(w) + offset + index * stride
        return addr.astype(U64), in_range

    def regs(w: Wave) -> np.ndarray:
        return w.a if acc else w.v

    if op.startswith("load_") and op[5:] in _LOAD:
        nbytes, sign = _LOAD[op[5:]]
        ndw = max(1, nbytes // 4)

        def load(w: Wave) -> None:
            m = w.mask()
            addrs, ok = addresses(w, m)
            rows = np.zeros((addrs.size, nbytes), np.uint8)
            rows[ok] = gather(w, addrs[ok], nbytes)
            dw = _rows_to_dwords(rows, nbytes, sign)
            r = regs(w)
            for i in range(ndw):
                r[vdata + i, m] = dw[:, i]
        return load
    if op.startswith("load_") and op[5:] in _D16:
        nbytes, sign, hi = _D16[op[5:]]

        def load_d16(w: Wave) -> None:
            m = w.mask()
            addrs, ok = addresses(w, m)
            rows = np.zeros((addrs.size, nbytes), np.uint8)
            rows[ok] = gather(w, addrs[ok], nbytes)
            val = _rows_to_dwords(rows, nbytes, sign)[:, 0] & U32(0xFFFF)
            r = regs(w)
            old = r[vdata, m]
            r[vdata, m] = (old & U32(0xFFFF)) | (val << U32(16)) if hi else (old & U32(0xFFFF0000)) | val
        return load_d16
    if op.startswith("atomic_"):
        name = op[len("atomic_"):]
        wide = name.endswith("_x2") or name in ("add_f64", "min_f64", "max_f64")
        base = name[:-3] if name.endswith("_x2") else name
        fn = atomic_fn(base, wide)
        nb, ret, cmpswap = 8 if wide else 4, bool(f["sc0"]), base == "cmpswap"

        def atomic(w: Wave) -> None:
            m = w.mask()
            addrs, ok = addresses(w, m)
            r = regs(w)

            def reg_val(reg: int) -> np.ndarray:
                v = r[reg, m].astype(np.uint64)
                return v | (r[reg + 1, m].astype(np.uint64) << U64(32)) if wide else v
            data = reg_val(vdata)
            cmp = reg_val(vdata + (2 if wide else 1)) if cmpswap else None
            old = np.zeros(addrs.size, np.uint64)  # out-of-range lanes do nothing and return 0
            old[ok] = _atomic_lanes(w, addrs[ok].tolist(), data[ok].tolist(),
                                    None if cmp is None else cmp[ok].tolist(), fn, nb)
            if ret:
                r[vdata, m] = (old & U64(M32)).astype(U32)
                if wide:
                    r[vdata + 1, m] = (old >> U64(32)).astype(U32)
        return atomic
    if op.startswith("store_") and op[6:] in _STORE:
        nbytes, hi = _STORE[op[6:]]
        ndw = max(1, nbytes // 4)

        def store(w: Wave) -> None:
            m = w.mask()
            addrs, ok = addresses(w, m)
            r = regs(w)
            vals = [r[vdata + i, m] for i in range(ndw)]
            if hi:
                vals = [vals[0] >> U32(16)]
            rows = _to_rows(vals, nbytes)
            scatter(w, addrs[ok], rows[ok])
        return store
    raise NotImplementedError(f"{name} is decoded but not implemented (at {ins.addr:#x})")


def compile_vmem(ins: Instruction) -> Fn:
    """A function executing the FLAT/GLOBAL/SCRATCH, DS or MUBUF instruction `ins` on a wave."""
    if ins.fmt == "DS":
        return _compile_ds(ins)
    if ins.fmt == "MUBUF":
        return _compile_mubuf(ins)
    return _flat_like(ins)
