"""The gfx942 interpreter of the mock AMD GPU (ember.amd_runtime.mock.isa): wave-instructions per second on a few
clang-19-compiled kernels, with NumPy computing the same result in the same run as the reference (the ratio says how
much slower emulation is than NumPy doing the math directly).

Run: python tools/bench/bench_amd_emulator.py [--reps N]   (needs clang-19 and ld.lld-19)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = r"""
#define G extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1,256)))
#define TID __builtin_amdgcn_workitem_id_x()
#define BID __builtin_amdgcn_workgroup_id_x()
#define BAR __builtin_amdgcn_fence(__ATOMIC_RELEASE,"workgroup"); __builtin_amdgcn_s_barrier(); \
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE,"workgroup");
typedef _Float16 h4 __attribute__((ext_vector_type(4)));
typedef float f4 __attribute__((ext_vector_type(4)));
G add(float* c, const float* a, const float* b, int n) { int i = BID*256+TID; if (i < n) c[i] = a[i] + b[i]; }
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
G mfma(float* d, const _Float16* a, const _Float16* b, int reps) { int l = TID; h4 av, bv;
  for (int q = 0; q < 4; q++) { av[q] = a[(l%16)*16 + 4*(l/16)+q]; bv[q] = b[(4*(l/16)+q)*16 + l%16]; }
  f4 c = {0,0,0,0}; for (int r = 0; r < reps; r++) c = __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
  for (int q = 0; q < 4; q++) d[BID*256 + (4*(l/16)+q)*16 + l%16] = c[q]; }
G expdiv(float* o, const float* a) { int i = BID*256+TID; float x = a[i];
  o[i] = __builtin_exp2f(x) / (1.0f + __builtin_sqrtf(x * x)); }
"""


def median_time(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    clang = shutil.which("clang-19")
    if clang is None:
        sys.exit("bench_amd_emulator: clang-19 is needed to build the gfx942 kernels")
    from ember.amd_runtime.elf import load_code_object
    from ember.amd_runtime.mock.isa import KernelCode, Program, SparseMemory, run_dispatch

    with tempfile.TemporaryDirectory() as tmp:
        hip, obj = Path(tmp) / "k.hip", Path(tmp) / "k.o"
        hip.write_text(SRC)
        subprocess.run([clang, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                        "-nogpulib", "-nogpuinc", "-O3", "-c", str(hip), "-o", str(obj)], check=True)
        code = load_code_object(obj.read_bytes(), arch="gfx942")
    base = 0x7F00_0000_0000
    mem = SparseMemory()
    program = Program.from_code_object(code, base)
    rng = np.random.default_rng(0)

    def buf(values: np.ndarray) -> int:
        addr = mem.alloc(values.nbytes)
        mem.write_array(addr, values)
        return addr

    def kernargs(*vals: int | np.generic) -> int:
        blob = b""
        for v in vals:
            v = np.uint64(v) if isinstance(v, int) else v
            blob += bytes(-len(blob) % v.nbytes) + v.tobytes()
        return buf(np.frombuffer(blob + bytes(8), np.uint8).copy())

    n = 1 << 14
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    pa, pb, pc = buf(a), buf(b), mem.alloc(4 * n)
    m = 64
    ma, mb = rng.standard_normal((m, m)).astype(np.float32), rng.standard_normal((m, m)).astype(np.float32)
    ha, hb = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
    cases = [
        ("add 16k", "add", kernargs(pc, pa, pb, np.int32(n)), (n,), (256,), lambda: a + b),
        ("reduce 16k (LDS, barriers)", "reduce", kernargs(pc, pa), (n,), (256,),
         lambda: a.reshape(-1, 256).sum(axis=1)),
        ("matmul 64x64 (LDS tiles)", "matmul", kernargs(pc, buf(ma), buf(mb), np.int32(m)), (m, m), (16, 16),
         lambda: ma @ mb),
        ("mfma 16x16x16 x64, 16 waves", "mfma", kernargs(pc, buf(ha), buf(hb), np.int32(64)), (64 * 16,), (64,),
         lambda: [ha.astype(np.float32) @ hb.astype(np.float32) for _ in range(64 * 16)]),
        ("exp2/div/sqrt 16k", "expdiv", kernargs(pc, pa), (n,), (256,),
         lambda: np.exp2(a) / (1 + np.sqrt(a * a))),
    ]
    print(f"{'kernel':32} {'waves':>6} {'wave-instr':>11} {'emulated s':>11} {'wave-instr/s':>13} {'numpy s':>9} "
          f"{'ratio':>8}")
    for label, name, karg, grid, block, ref in cases:
        kernel = KernelCode.from_code_object(code, name, base)
        stats = run_dispatch(program, kernel, memory=mem, kernarg_addr=karg, grid=grid, workgroup_size=block)
        t = median_time(lambda k=kernel, ka=karg, g=grid, b=block: run_dispatch(
            program, k, memory=mem, kernarg_addr=ka, grid=g, workgroup_size=b), args.reps)
        t_ref = median_time(ref, max(args.reps, 5))
        print(f"{label:32} {stats.waves:6d} {stats.instructions:11d} {t:11.4f} {stats.instructions / t:13.0f} "
              f"{t_ref:9.6f} {t / t_ref:8.0f}x")


if __name__ == "__main__":
    main()
