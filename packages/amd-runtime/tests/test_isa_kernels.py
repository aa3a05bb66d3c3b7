"""Whole HIP kernels compiled by clang-19 for gfx942, run on the wave64 interpreter, compared with NumPy."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from ember.amd_runtime.elf import CodeObject, load_code_object
from ember.amd_runtime.mock.isa import (
    InstructionLimitExceeded,
    KernelCode,
    MemoryFault,
    Program,
    SparseMemory,
    run_aql_dispatch,
    run_dispatch,
)

CLANG, LLD = shutil.which("clang-19"), shutil.which("ld.lld-19")
pytestmark = pytest.mark.skipif(CLANG is None or LLD is None, reason="clang-19 and ld.lld-19 are needed to build "
                                                                    "gfx942 code objects")
BASE = 0x7F00_0000_0000

PRELUDE = r"""
#define G extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1,256)))
#define TID __builtin_amdgcn_workitem_id_x()
#define BID __builtin_amdgcn_workgroup_id_x()
#define BAR __builtin_amdgcn_fence(__ATOMIC_RELEASE,"workgroup"); __builtin_amdgcn_s_barrier(); \
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE,"workgroup");
typedef _Float16 h4 __attribute__((ext_vector_type(4)));
typedef float f4 __attribute__((ext_vector_type(4)));
typedef short s4 __attribute__((ext_vector_type(4)));
"""

KERNELS = PRELUDE + r"""
G add(float* c, const float* a, const float* b, int n) { int i = BID*256+TID; if (i < n) c[i] = a[i] + b[i]; }
G mulf(float* c, const float* a, const float* b, int n) { int i = BID*256+TID; if (i < n) c[i] = a[i] * b[i]; }
G fmaf_(float* c, const float* a, const float* b) { int i = BID*256+TID; c[i] = a[i]*b[i] + a[i]; }
G trans(float* c, const float* a) { int i = BID*256+TID; float x = a[i];
  c[4*i] = __builtin_exp2f(x); c[4*i+1] = __builtin_log2f(x);
  c[4*i+2] = __builtin_sqrtf(x); c[4*i+3] = __builtin_sinf(x); }
G fdiv(float* o, const float* a, const float* b) { int i = BID*256+TID; o[i] = a[i] / b[i]; }
G idiv(int* c, const int* a, const int* b, unsigned* d) { int i = BID*256+TID;
  c[2*i] = a[i] / b[i]; c[2*i+1] = a[i] % b[i]; d[i] = ((unsigned)a[i]) / ((unsigned)b[i] | 1u); }
G casts(float* c, const int* a, const float* b, int* d, _Float16* h, unsigned char* u, long* l) { int i = BID*256+TID;
  c[i] = (float)a[i] + __builtin_truncf(b[i]); d[i] = (int)b[i]; h[i] = (_Float16)b[i] * (_Float16)2.0f;
  u[i] = (unsigned char)a[i]; l[i] = (long)a[i] * 3000000000L; }
G half(_Float16* o, const _Float16* a, const _Float16* b) { int i = BID*256+TID; o[i] = a[i]*b[i] + (_Float16)1.0f; }
G sel(int* o, const float* a, const int* b) { int i = BID*256+TID; float v = a[i]; int r = v > 0 ? (int)(v*7) : (int)-v;
  r = r < 1000 ? r : 1000; o[i] = (r >> 3) ^ (b[i] & 0xff) ^ ((unsigned)b[i] >> 5); }
G reduce(float* o, const float* a) { __attribute__((shared, aligned(16))) float sm[256]; int t = TID;
  sm[t] = a[BID*256+t]; BAR
  for (int s = 128; s > 0; s >>= 1) { if (t < s) sm[t] += sm[t+s]; BAR }
  if (t == 0) o[BID] = sm[0]; }
G matmul(float* c, const float* a, const float* b, int n) {
  __attribute__((shared, aligned(16))) float as[16][16]; __attribute__((shared, aligned(16))) float bs[16][16];
  int tx = TID, ty = __builtin_amdgcn_workitem_id_y();
  int row = __builtin_amdgcn_workgroup_id_y()*16+ty, col = BID*16+tx; float acc = 0;
  for (int k0 = 0; k0 < n; k0 += 16) { as[ty][tx] = a[row*n+k0+tx]; bs[ty][tx] = b[(k0+ty)*n+col]; BAR
    for (int k = 0; k < 16; k++) acc += as[ty][k]*bs[k][tx]; BAR }
  c[row*n+col] = acc; }
G addr64(double* y, const double* x, long stride, long n, int* cnt) { long i = BID*256+TID; long j = i*stride;
  if (j < n) y[j] = x[j]*3.0 + (double)i;
  if (TID == 0) __hip_atomic_fetch_add(cnt, 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
G wavesum(int* o, const int* a) { int t = TID; int v = a[BID*256+t];
  for (int s = 1; s < 64; s <<= 1) v += __builtin_amdgcn_ds_bpermute(((t ^ s) & 63) << 2, v);
  o[BID*256+t] = v; }
G loop(int* o, int n) { int s = 0; for (int i = 0; i < n; i++) { s = s*3 + i; if (s == 12345678) break; } o[TID] = s; }
G fault(float* o) { o[TID + 0x100000] = 1.0f; }
G mfma(float* d, const _Float16* a, const _Float16* b) { int l = TID; h4 av, bv;
  for (int q = 0; q < 4; q++) { av[q] = a[(l%16)*16 + 4*(l/16)+q]; bv[q] = b[(4*(l/16)+q)*16 + l%16]; }
  f4 c = {0,0,0,0}; c = __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
  for (int q = 0; q < 4; q++) d[(4*(l/16)+q)*16 + l%16] = c[q]; }
G mfmab(float* d, const short* a, const short* b) { int l = TID; s4 av, bv;
  for (int q = 0; q < 4; q++) { av[q] = a[(l%16)*16 + 4*(l/16)+q]; bv[q] = b[(4*(l/16)+q)*16 + l%16]; }
  f4 c = {1,1,1,1}; c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
  for (int q = 0; q < 4; q++) d[(4*(l/16)+q)*16 + l%16] = c[q]; }
G grid3d(int* o) { int x = TID, y = __builtin_amdgcn_workitem_id_y(), z = __builtin_amdgcn_workitem_id_z();
  int gx = BID, gy = __builtin_amdgcn_workgroup_id_y(), gz = __builtin_amdgcn_workgroup_id_z();
  int X = gx*4 + x, Y = gy*4 + y, Z = gz*2 + z; o[(Z*8 + Y)*8 + X] = X*10000 + Y*100 + Z; }
G blockdim(int* o) { const unsigned short* p = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
  int bs = p[2]; o[BID*bs + TID] = bs * 1000 + TID; }
G collatz(int* o, const int* a) { int i = BID*256+TID; unsigned x = a[i]; int steps = 0;
  while (x > 1) { x = (x & 1) ? 3*x + 1 : x / 2; steps++; } o[i] = steps; }
G histo(int* o, const int* a) { __attribute__((shared)) int h[16]; int t = TID; if (t < 16) h[t] = 0; BAR
  __hip_atomic_fetch_add(&h[a[BID*256+t] & 15], 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP); BAR
  if (t < 16) o[BID*16+t] = h[t]; }
G priv(float* o, const float* a, const int* idx) { float arr[96]; int i = BID*256+TID;
  for (int k = 0; k < 96; k++) arr[k] = a[i] * k; o[i] = arr[idx[i] % 96] + arr[(idx[i] * 7) % 96]; }
G dpp(int* o, const int* a) { int i = BID*256+TID; int v = a[i];
  o[i] = __builtin_amdgcn_update_dpp(-1, v, 0x111, 0xf, 0xf, false)
       + __builtin_amdgcn_mov_dpp(v, 0xb1, 0xf, 0xf, true); }
G generic(float* o) { __attribute__((shared, aligned(16))) float sm[256]; int t = TID;
  float* p = (t & 1) ? &sm[t] : &o[BID*256 + t]; *p = (float)t; BAR
  if (t & 1) o[BID*256 + t] = sm[t] * 2.0f; }
G div64(long* q, long* r, const long* a, const long* b) { int i = BID*256+TID; q[i] = a[i] / b[i]; r[i] = a[i] % b[i]; }
G dmath(double* o, const double* a, const double* b) { int i = BID*256+TID;
  o[2*i] = a[i] / b[i]; o[2*i+1] = __builtin_sqrt(a[i]); }
G atoms(float* f, int* i, unsigned long long* u, double* d, float* out) {
  __attribute__((shared)) float sf[4]; __attribute__((shared)) int si[4];
  int t = TID; if (t < 4) { sf[t] = 0; si[t] = -1000; } BAR
  __hip_atomic_fetch_add(&f[0], 1.5f, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  __hip_atomic_fetch_max(&i[0], t, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  __hip_atomic_fetch_min(&i[1], -t, __ATOMIC_SEQ_CST, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_fetch_add(&u[0], 3ull, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  __hip_atomic_fetch_add(&d[0], 0.25, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  int old = __hip_atomic_exchange(&i[2], t, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
  float cur = f[1]; float want;
  do { want = __builtin_fmaxf(cur, (float)t); } while (!__hip_atomic_compare_exchange_strong(&f[1], &cur, want,
       __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT));
  __hip_atomic_fetch_add(&sf[t & 3], 0.5f, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __hip_atomic_fetch_max(&si[t & 3], t, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __atomic_thread_fence(__ATOMIC_SEQ_CST); BAR
  if (t < 4) { out[BID*8 + t] = sf[t]; out[BID*8 + 4 + t] = (float)si[t]; }
  if (old < 0) out[16] = (float)t; }
G minmax(float* o, const float* a, const float* b) { int i = BID*256+TID; float x = a[i], y = b[i];
  o[3*i] = __builtin_fmaxf(x, y); o[3*i+1] = __builtin_fminf(x, y); o[3*i+2] = __builtin_floorf(x * 10.0f); }
"""


def build(src: str, cache: Path) -> Path:
    """Compile HIP source for gfx942 (cached by source hash in the session's tmp dir)."""
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    out = cache / f"{key}.hsaco"
    if not out.exists():
        hip, obj = cache / f"{key}.hip", cache / f"{key}.o"
        hip.write_text(src)
        subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                        "-nogpulib", "-nogpuinc", "-O3", "-c", str(hip), "-o", str(obj)], check=True)
        if obj.read_bytes()[16] == 3:  # clang already linked a shared object
            shutil.copy(obj, out)
        else:
            subprocess.run([LLD, "-shared", str(obj), "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def hsaco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(KERNELS, tmp_path_factory.mktemp("isa_kernels"))


@pytest.fixture(scope="session")
def code(hsaco: Path) -> CodeObject:
    return load_code_object(hsaco.read_bytes(), arch="gfx942")


class Gpu:
    """A sparse memory with the code object loaded, buffers and a launcher."""

    def __init__(self, code: CodeObject):
        self.code = code
        self.mem = SparseMemory()
        self.program = Program.from_code_object(code, BASE)

    def buf(self, values: np.ndarray) -> int:
        addr = self.mem.alloc(max(values.nbytes, 4))
        self.mem.write_array(addr, values)
        return addr

    def empty(self, n: int, dtype: type) -> int:
        return self.mem.alloc(max(n * np.dtype(dtype).itemsize, 4))

    def read(self, addr: int, dtype: type, n: int) -> np.ndarray:
        return self.mem.read_array(addr, dtype, n)

    def run(self, name: str, *args: int | np.generic, grid: tuple[int, ...], block: tuple[int, ...] = (256,),
            **kw: object) -> object:
        blob = b""
        for a in args:
            v = np.uint64(a) if isinstance(a, int) else a  # plain ints are pointers
            blob += bytes(-len(blob) % v.nbytes) + v.tobytes()
        kernarg = self.buf(np.frombuffer(blob + bytes(8), np.uint8))
        return run_dispatch(self.program, KernelCode.from_code_object(self.code, name, BASE), memory=self.mem,
                            kernarg_addr=kernarg, grid=grid, workgroup_size=block, **kw)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) * b + c).astype(np.float32)


def ulps(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distance in f32 units in the last place."""
    xi, ri = x.view(np.int32).astype(np.int64), ref.view(np.int32).astype(np.int64)
    xi = np.where(xi < 0, -(xi & 0x7FFFFFFF), xi)
    ri = np.where(ri < 0, -(ri & 0x7FFFFFFF), ri)
    return np.abs(xi - ri)


rng = np.random.default_rng(0)


def test_add_mul_partial_grid(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    pa, pb, pc = gpu.buf(a), gpu.buf(b), gpu.empty(n, np.float32)
    gpu.run("add", pc, pa, pb, np.int32(n), grid=(n,))  # 4 workgroups, the last one partial
    np.testing.assert_array_equal(gpu.read(pc, np.float32, n), a + b)
    gpu.run("mulf", pc, pa, pb, np.int32(n), grid=(1024,))
    np.testing.assert_array_equal(gpu.read(pc, np.float32, n), a * b)
    gpu.run("fmaf_", pc, pa, pb, grid=(n,))
    np.testing.assert_array_equal(gpu.read(pc, np.float32, n), fma32(a, b, a))


def test_transcendentals_within_ulps(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 512
    x = np.concatenate([rng.uniform(0.001, 20, n - 4), [1e-30, 1.0, 4.0, 100.0]]).astype(np.float32)
    px, po = gpu.buf(x), gpu.empty(4 * n, np.float32)
    gpu.run("trans", po, px, grid=(n,))
    out = gpu.read(po, np.float32, 4 * n).reshape(n, 4)
    x64 = x.astype(np.float64)
    for col, ref, tol in ((0, np.exp2(x64), 2), (1, np.log2(x64), 2), (2, np.sqrt(x64), 1)):
        assert ulps(out[:, col], ref.astype(np.float32)).max() <= tol, col
    # llvm.sin lowers to v_sin_f32(x * 1/(2 pi)): the f32 product's rounding dominates (as on the hardware)
    np.testing.assert_allclose(out[:, 3], np.sin(x64), rtol=0, atol=4e-6)


def test_float_division(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 256
    a = rng.standard_normal(n).astype(np.float32) * 1e3
    b = rng.standard_normal(n).astype(np.float32)
    b[:3] = [0.0, np.inf, -2.0]
    a[3] = 0.0
    pa, pb, po = gpu.buf(a), gpu.buf(b), gpu.empty(n, np.float32)
    gpu.run("fdiv", po, pa, pb, grid=(n,))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(gpu.read(po, np.float32, n), a / b)


def test_integer_division_and_modulo(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 512
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-1000, 1000, n).astype(np.int32)
    b[b == 0] = 7
    b[:4] = [1, -1, 2**31 - 1, 3]
    a[:4] = [5, 2**31 - 1, -2**31, -7]
    pa, pb, pc, pd = gpu.buf(a), gpu.buf(b), gpu.empty(2 * n, np.int32), gpu.empty(n, np.uint32)
    gpu.run("idiv", pc, pa, pb, pd, grid=(n,))
    c = gpu.read(pc, np.int32, 2 * n).reshape(n, 2)
    q = np.trunc(a.astype(np.float64) / b).astype(np.int64)
    np.testing.assert_array_equal(c[:, 0], q.astype(np.int32))
    np.testing.assert_array_equal(c[:, 1], (a - q * b).astype(np.int32))
    np.testing.assert_array_equal(gpu.read(pd, np.uint32, n), a.view(np.uint32) // (b.view(np.uint32) | 1))


def test_casts_and_half(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 256
    a = rng.integers(-100000, 100000, n).astype(np.int32)
    b = (rng.standard_normal(n) * 1000).astype(np.float32)
    b[:3] = [np.nan, 3e9, -3e9]
    pc, pd, ph = gpu.empty(n, np.float32), gpu.empty(n, np.int32), gpu.empty(n, np.float16)
    pu, pl = gpu.empty(n, np.uint8), gpu.empty(n, np.int64)
    gpu.run("casts", pc, gpu.buf(a), gpu.buf(b), pd, ph, pu, pl, grid=(n,))
    np.testing.assert_array_equal(gpu.read(pc, np.float32, n), a.astype(np.float32) + np.trunc(b))
    np.testing.assert_array_equal(gpu.read(pd, np.int32, n)[3:], b[3:].astype(np.int32))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(gpu.read(ph, np.float16, n)[3:], b[3:].astype(np.float16) * np.float16(2))
    np.testing.assert_array_equal(gpu.read(pu, np.uint8, n), a.astype(np.uint8))
    np.testing.assert_array_equal(gpu.read(pl, np.int64, n), a.astype(np.int64) * 3000000000)
    x, y = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    po = gpu.empty(n, np.float16)
    gpu.run("half", po, gpu.buf(x), gpu.buf(y), grid=(n,))
    ref = (x.astype(np.float64) * y + 1).astype(np.float16)  # v_fma_f16: one rounding
    np.testing.assert_array_equal(gpu.read(po, np.float16, n), ref)


def test_select_min_and_bit_ops(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 256
    a = (rng.standard_normal(n) * 300).astype(np.float32)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    po = gpu.empty(n, np.int32)
    gpu.run("sel", po, gpu.buf(a), gpu.buf(b), grid=(n,))
    r = np.where(a > 0, (a * np.float32(7)).astype(np.int32), (-a).astype(np.int32))
    r = np.minimum(r, 1000)
    ref = (r >> 3) ^ (b & 0xFF) ^ (b.view(np.uint32) >> 5).view(np.int32)
    np.testing.assert_array_equal(gpu.read(po, np.int32, n), ref)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x[:2], y[:2] = [np.nan, 1.0], [2.0, np.nan]
    po = gpu.empty(3 * n, np.float32)
    gpu.run("minmax", po, gpu.buf(x), gpu.buf(y), grid=(n,))
    out = gpu.read(po, np.float32, 3 * n).reshape(n, 3)
    np.testing.assert_array_equal(out[:, 0], np.fmax(x, y))
    np.testing.assert_array_equal(out[:, 1], np.fmin(x, y))
    np.testing.assert_array_equal(out[:, 2], np.floor(x * np.float32(10)))


def test_reduce_with_lds_and_barriers(code: CodeObject) -> None:
    gpu = Gpu(code)
    groups = 4
    a = rng.integers(-1000, 1000, 256 * groups).astype(np.float32)  # exact sums in any order
    po = gpu.empty(groups, np.float32)
    stats = gpu.run("reduce", po, gpu.buf(a), grid=(256 * groups,))
    np.testing.assert_array_equal(gpu.read(po, np.float32, groups), a.reshape(groups, 256).sum(axis=1))
    assert stats.waves == 4 * groups


def test_tiled_matmul_with_lds(code: CodeObject) -> None:
    gpu = Gpu(code)
    n = 32
    a = rng.integers(-8, 8, (n, n)).astype(np.float32)
    b = rng.integers(-8, 8, (n, n)).astype(np.float32)
    pc = gpu.empty(n * n, np.float32)
    gpu.run("matmul", pc, gpu.buf(a), gpu.buf(b), np.int32(n), grid=(n, n), block=(16, 16))
    np.testing.assert_array_equal(gpu.read(pc, np.float32, n * n).reshape(n, n), a @ b)


def test_64bit_addressing_and_atomic(code: CodeObject) -> None:
    gpu = Gpu(code)
    stride, groups = 3, 2
    n = 256 * groups * stride
    x = rng.standard_normal(n)
    py, pcnt = gpu.buf(np.zeros(n)), gpu.buf(np.zeros(1, np.int32))
    gpu.run("addr64", py, gpu.buf(x), np.int64(stride), np.int64(n - 5), pcnt, grid=(256 * groups,))
    y = gpu.read(py, np.float64, n)
    j = np.arange(256 * groups) * stride
    keep = j < n - 5
    ref = [float(Fraction(v) * 3 + i) for v, i in zip(x[j[keep]], np.arange(256 * groups)[keep])]  # one rounding
    np.testing.assert_array_equal(y[j[keep]], ref)
    assert gpu.read(pcnt, np.int32, 1)[0] == groups  # thread 0 of each workgroup


def test_wave_butterfly_with_bpermute(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(-1000, 1000, 256).astype(np.int32)
    po = gpu.empty(256, np.int32)
    gpu.run("wavesum", po, gpu.buf(a), grid=(256,))
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), np.repeat(a.reshape(4, 64).sum(axis=1), 64))


def test_mfma_16x16x16_f16_and_bf16(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(-4, 4, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 4, (16, 16)).astype(np.float16)
    pd = gpu.empty(256, np.float32)
    gpu.run("mfma", pd, gpu.buf(a), gpu.buf(b), grid=(64,), block=(64,))
    np.testing.assert_array_equal(gpu.read(pd, np.float32, 256).reshape(16, 16),
                                  a.astype(np.float32) @ b.astype(np.float32))
    af, bf = a.astype(np.float32), b.astype(np.float32)
    abf, bbf = (af.view(np.uint32) >> 16).astype(np.uint16), (bf.view(np.uint32) >> 16).astype(np.uint16)
    gpu.run("mfmab", pd, gpu.buf(abf), gpu.buf(bbf), grid=(64,), block=(64,))
    np.testing.assert_array_equal(gpu.read(pd, np.float32, 256).reshape(16, 16), af @ bf + 1)


def test_fault_reports_address_and_pc(code: CodeObject) -> None:
    gpu = Gpu(code)
    po = gpu.empty(64, np.float32)
    with pytest.raises(MemoryFault, match=f"write of 4 bytes at address {po + 4 * 0x100000:#x}") as info:
        gpu.run("fault", po, grid=(64,), block=(64,))
    assert info.value.address == po + 4 * 0x100000 and info.value.write
    assert info.value.pc is not None and "global_store_dword" in (info.value.instruction or "")


def test_runaway_loop_hits_the_cap(code: CodeObject) -> None:
    gpu = Gpu(code)
    po = gpu.empty(64, np.int32)
    gpu.run("loop", po, np.int32(10), grid=(64,), block=(64,))
    s = 0
    for i in range(10):
        s = (s * 3 + i) & 0xFFFFFFFF
    assert gpu.read(po, np.int32, 1)[0] == np.uint32(s).view(np.int32)
    with pytest.raises(InstructionLimitExceeded, match="without reaching s_endpgm"):
        gpu.run("loop", po, np.int32(2**30), grid=(64,), block=(64,), max_instructions_per_wave=20_000)


@pytest.mark.skipif(shutil.which("llvm-objdump-19") is None, reason="llvm-objdump-19 is needed for the cross-check")
def test_decoder_agrees_with_objdump_on_compiled_code(code: CodeObject, hsaco: Path) -> None:
    dis = subprocess.run(["llvm-objdump-19", "-d", "--triple=amdgcn-amd-amdhsa", "--mcpu=gfx942", str(hsaco)],
                         capture_output=True, text=True, check=True).stdout
    program = Program(code.image, 0)
    checked = 0
    for line in dis.splitlines():
        m = re.match(r"\s+(\w+).*// ([0-9A-F]+): ((?:[0-9A-F]{8} ?)+)", line)
        if not m:
            continue
        addr, words = int(m.group(2), 16), m.group(3).split()
        ins = program.decode(addr)
        assert ins.name == re.sub(r"_(e32|e64|sdwa|dpp)$", "", m.group(1)), line
        assert ins.size == 4 * len(words), line
        checked += 1
    assert checked > 500


def test_3d_grid_ids(code: CodeObject) -> None:
    gpu = Gpu(code)
    po = gpu.empty(8 * 8 * 4, np.int32)
    gpu.run("grid3d", po, grid=(8, 8, 4), block=(4, 4, 2))
    z, y, x = np.meshgrid(np.arange(4), np.arange(8), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), (x * 10000 + y * 100 + z).reshape(-1))


def test_dispatch_packet_pointer(code: CodeObject) -> None:
    gpu = Gpu(code)
    packet = np.zeros(64, np.uint8)
    packet[4:10] = np.array([128, 1, 1], np.uint16).view(np.uint8)  # workgroup_size_x/y/z
    po = gpu.empty(256, np.int32)
    gpu.run("blockdim", po, grid=(256,), block=(128,), dispatch_ptr=gpu.buf(packet))
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), 128000 + np.arange(256) % 128)
    with pytest.raises(ValueError, match="pass dispatch_ptr"):
        gpu.run("blockdim", po, grid=(256,), block=(128,))


def test_divergent_loop(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(1, 5000, 256).astype(np.int32)
    po = gpu.empty(256, np.int32)
    gpu.run("collatz", po, gpu.buf(a), grid=(256,))
    ref = []
    for x in a.tolist():
        n = 0
        while x > 1:
            x, n = (3 * x + 1 if x & 1 else x // 2), n + 1
        ref.append(n)
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), ref)


def test_lds_atomics_histogram(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(0, 1000, 512).astype(np.int32)
    po = gpu.empty(32, np.int32)
    gpu.run("histo", po, gpu.buf(a), grid=(512,))
    ref = [np.bincount(part & 15, minlength=16) for part in a.reshape(2, 256)]
    np.testing.assert_array_equal(gpu.read(po, np.int32, 32), np.concatenate(ref))


def test_private_array_in_scratch(code: CodeObject) -> None:
    assert code.kernel("priv").descriptor.private_segment_fixed_size > 0
    gpu = Gpu(code)
    a = rng.standard_normal(256).astype(np.float32)
    idx = rng.integers(0, 10000, 256).astype(np.int32)
    po = gpu.empty(256, np.float32)
    gpu.run("priv", po, gpu.buf(a), gpu.buf(idx), grid=(256,))
    ref = a * (idx % 96).astype(np.float32) + a * ((idx * 7) % 96).astype(np.float32)
    np.testing.assert_array_equal(gpu.read(po, np.float32, 256), ref)


def test_dpp_builtins(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(-1000, 1000, 256).astype(np.int32)
    po = gpu.empty(256, np.int32)
    gpu.run("dpp", po, gpu.buf(a), grid=(256,))
    lane = np.arange(256)
    shr = np.where(lane % 16 == 0, -1, a[lane - 1])  # row_shr:1 keeps `old` (-1) where there is no source
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), shr + a[lane ^ 1])


def test_generic_pointer_into_lds(code: CodeObject) -> None:
    gpu = Gpu(code)
    po = gpu.empty(256, np.float32)
    gpu.run("generic", po, grid=(256,))
    t = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(gpu.read(po, np.float32, 256), np.where(t % 2 == 1, 2 * t, t))


def test_64bit_integer_division(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = rng.integers(-2**62, 2**62, 256, dtype=np.int64)
    b = rng.integers(-2**40, 2**40, 256, dtype=np.int64)
    b[:128] = rng.integers(-1000, 1000, 128)
    b[b == 0] = 3
    pq, pr = gpu.empty(256, np.int64), gpu.empty(256, np.int64)
    gpu.run("div64", pq, pr, gpu.buf(a), gpu.buf(b), grid=(256,))
    q = [int(x / y) if abs(x) < 2**52 else (abs(int(x)) // abs(int(y))) * (1 if (x < 0) == (y < 0) else -1)
         for x, y in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(gpu.read(pq, np.int64, 256), q)
    np.testing.assert_array_equal(gpu.read(pr, np.int64, 256), a - np.array(q) * b)


def test_double_division_and_sqrt(code: CodeObject) -> None:
    gpu = Gpu(code)
    a = np.abs(rng.standard_normal(256)) * 1e3
    b = rng.standard_normal(256)
    po = gpu.empty(512, np.float64)
    gpu.run("dmath", po, gpu.buf(a), gpu.buf(b), grid=(256,))
    out = gpu.read(po, np.float64, 512).reshape(256, 2)
    np.testing.assert_array_equal(out[:, 0], a / b)
    np.testing.assert_array_equal(out[:, 1], np.sqrt(a))


def test_flush_denormals_kernel(tmp_path_factory: pytest.TempPathFactory) -> None:
    src = PRELUDE + "G mul(float* c, const float* a, const float* b) { int i = TID; c[i] = a[i] * b[i]; }\n"
    cache = tmp_path_factory.mktemp("ftz")
    key = cache / "ftz.hip"
    key.write_text(src)
    out = cache / "ftz.o"
    subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-nogpulib", "-nogpuinc", "-O3", "-fgpu-flush-denormals-to-zero", "-c", str(key), "-o", str(out)],
                   check=True)
    code = load_code_object(out.read_bytes(), arch="gfx942")
    assert code.kernel("mul").descriptor.float_denorm_mode_32 == 0
    gpu = Gpu(code)
    a = np.array([1e-39, 1e-20, 3.0, -1e-39] * 16, np.float32)
    b = np.array([1.0, 1e-20, 2.0, 1.0] * 16, np.float32)
    pc = gpu.empty(64, np.float32)
    gpu.run("mul", pc, gpu.buf(a), gpu.buf(b), grid=(64,), block=(64,))
    c = gpu.read(pc, np.float32, 64)
    assert list(c[:4]) == [0.0, 0.0, 6.0, 0.0] and np.signbit(c[3])


def test_aql_packet_dispatch_from_memory(code: CodeObject) -> None:
    gpu = Gpu(code)
    image = code.relocated(BASE)
    gpu.mem.map(BASE, len(image) + 4096)
    gpu.mem.write(BASE, image)  # the code object loaded in device memory, as the mock GPU holds it
    packet = np.zeros(64, np.uint8)
    hdr = np.frombuffer(np.array([0x1502, 1, 128, 1, 1, 0], np.uint16).tobytes(), np.uint8)
    packet[:12] = hdr
    packet[12:24] = np.array([256, 1, 1], np.uint32).view(np.uint8)
    po = gpu.empty(256, np.int32)
    karg = gpu.buf(np.array([po], np.uint64))
    packet[32:48] = np.array([BASE + code.kernel("blockdim").descriptor_offset, karg], np.uint64).view(np.uint8)
    stats = run_aql_dispatch(gpu.mem, gpu.buf(packet))
    assert stats.workgroups == 2 and stats.waves == 4
    np.testing.assert_array_equal(gpu.read(po, np.int32, 256), 128000 + np.arange(256) % 128)
    packet[0] = 3  # AGENT_DISPATCH
    with pytest.raises(ValueError, match="not KERNEL_DISPATCH"):
        run_aql_dispatch(gpu.mem, gpu.buf(packet))
    empty = gpu.run("blockdim", po, grid=(0,), block=(128,), dispatch_ptr=gpu.buf(packet))
    assert empty.waves == 0  # an empty grid launches nothing
    with pytest.raises(ValueError, match="workgroup_size must be 1 to 3 sizes of at least 1"):
        gpu.run("blockdim", po, grid=(64,), block=(0,))


def test_global_and_lds_atomics_with_fences(code: CodeObject) -> None:
    gpu = Gpu(code)
    pf, pi = gpu.buf(np.zeros(2, np.float32)), gpu.buf(np.array([-1, 0, -1], np.int32))
    pu, pd, po = gpu.buf(np.zeros(1, np.uint64)), gpu.buf(np.zeros(1)), gpu.buf(np.full(17, -7, np.float32))
    gpu.run("atoms", pf, pi, pu, pd, po, grid=(512,))
    assert list(gpu.read(pf, np.float32, 2)) == [768.0, 255.0]
    assert list(gpu.read(pi, np.int32, 2)) == [255, -255]
    assert gpu.read(pu, np.uint64, 1)[0] == 1536 and gpu.read(pd, np.float64, 1)[0] == 128.0
    out = gpu.read(po, np.float32, 17)
    np.testing.assert_array_equal(out[:16], np.tile([32, 32, 32, 32, 252, 253, 254, 255], 2))
    assert out[16] == 0  # exactly one exchange saw the initial -1: thread 0 of workgroup 0 (lanes run in order)


def test_trace_sees_every_instruction_of_every_wave(code: CodeObject) -> None:
    gpu = Gpu(code)
    seen: list[tuple[tuple[int, int, int], int, int, str]] = []
    po = gpu.empty(128, np.int32)
    stats = gpu.run("blockdim", po, grid=(128,), block=(64,), dispatch_ptr=gpu.buf(np.zeros(64, np.uint8)),
                    trace=lambda w, ins: seen.append((w.workgroup, w.wave_id, w.pc, ins.name)))
    assert len(seen) == stats.instructions and seen[-1][3] == "s_endpgm"
    assert {s[0] for s in seen} == {(0, 0, 0), (1, 0, 0)}
    assert seen[0][2] == BASE + code.kernel("blockdim").entry_offset and seen[0][3].startswith("s_load_dword")
