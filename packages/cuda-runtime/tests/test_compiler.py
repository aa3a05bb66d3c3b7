"""NVRTC: hand-written kernels compile to cubins for the named architecture, errors carry NVRTC's log, the disk cache
is ember.runtime's. Needs libnvrtc (the test env installs the nvidia-cuda-nvrtc wheel), no GPU."""

import pytest

from ember.cuda_runtime import NVRTCCompiler, cubin_arch, load_nvrtc
from ember.runtime import CompileError

ADD = """extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}"""
REDUCE = """extern "C" __global__ void __launch_bounds__(256) row_sum(float* out, const float* x, int cols) {
  __shared__ float partial[8];
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += x[blockIdx.x * cols + c];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < 8; w++) s += partial[w];
    out[blockIdx.x] = exp2f(s) * __int_as_float(0x3f800000);
  }
}"""
HALF = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void to_half(__half* out, const __nv_bfloat16* x) {
  out[threadIdx.x] = __float2half(__bfloat162float(x[threadIdx.x]));
}"""


def elf_header(cubin: bytes) -> tuple[bytes, int, int]:
    return cubin[:4], int.from_bytes(cubin[18:20], "little"), int.from_bytes(cubin[48:52], "little")


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_kernels_compile_to_a_cubin_for_the_arch(arch):
    comp = NVRTCCompiler(arch)
    for src in (ADD, REDUCE):
        cubin = comp.compile(src)
        magic, machine, flags = elf_header(cubin)
        assert magic == b"\x7fELF" and cubin[4] == 2 and machine == 190  # 64-bit ELF, EM_CUDA
        assert cubin_arch(cubin) == int(arch[3:])
        if cubin[8] >= 8:  # ELF ABI 8 (NVRTC 12.8+): the SM in bits 8..15 of e_flags
            assert (flags >> 8) & 0xFF == int(arch[3:])
        assert b"add\0" in cubin or b"row_sum\0" in cubin


def test_syntax_error_raises_with_the_log_and_source():
    with pytest.raises(CompileError, match=r"nvrtcCompileProgram.*NVRTC_ERROR_COMPILATION") as e:
        NVRTCCompiler("sm_90").compile('extern "C" __global__ void broken(float* x) { x[0] = ; }')
    assert 'error: expected an expression' in str(e.value) and "--- source ---\nextern \"C\"" in str(e.value)


def test_second_compile_is_a_cache_hit(cache_dir, monkeypatch):
    comp = NVRTCCompiler("sm_90")
    runs = []
    real = comp.nvrtc.compile
    monkeypatch.setattr(comp.nvrtc, "compile", lambda *a, **k: runs.append(a) or real(*a, **k))
    first = comp.compile_cached(ADD)
    assert comp.compile_cached(ADD) == first and len(runs) == 1
    assert comp.cache_path(ADD).parent == cache_dir / "compile" and comp.cache_path(ADD).is_file()
    assert NVRTCCompiler("sm_90").compile_cached(ADD) == first  # another compiler object, same key
    assert NVRTCCompiler("sm_80").cache_path(ADD) != comp.cache_path(ADD)  # the arch is in the key
    assert comp.cachekey == f"nvrtc {comp.nvrtc.version[0]}.{comp.nvrtc.version[1]} sm_90"


def test_a_batch_is_one_nvrtc_run(monkeypatch):
    comp = NVRTCCompiler("sm_90")
    runs = []
    real = comp.nvrtc.compile
    monkeypatch.setattr(comp.nvrtc, "compile", lambda *a, **k: runs.append(a) or real(*a, **k))
    libs = comp.compile_cached_many([("add", ADD), ("row_sum", REDUCE)])
    assert len(runs) == 1 and libs[0] == libs[1] and b"add\0" in libs[0] and b"row_sum\0" in libs[0]


def test_fp16_headers():
    comp = NVRTCCompiler("sm_90")
    if not comp.bundled and not any(f.startswith("-I") for f in comp.flags):
        pytest.skip("this NVRTC bundles no headers and no toolkit include folder was found")
    assert cubin_arch(comp.compile(HALF)) == 90


def test_bad_arch_and_missing_nvrtc(tmp_path, monkeypatch):
    for arch in ("compute_90", "90", "sm90"):
        with pytest.raises(ValueError, match="arch must name a real GPU architecture like 'sm_90'"):
            NVRTCCompiler(arch)
    monkeypatch.setenv("NVRTC_PATH", str(tmp_path / "libnvrtc.so.13"))
    with pytest.raises(RuntimeError, match=r"libnvrtc was not found.*NVRTC_PATH.*Tried:\n  .*libnvrtc\.so\.13"):
        load_nvrtc()


@pytest.mark.parametrize("payload", ["cpu-elf", "sm_80-cubin", "amdgpu-elf", "junk"])
def test_a_cached_entry_that_is_no_cubin_for_the_arch_is_rebuilt(cache_dir, payload, monkeypatch):
    # a well-formed entry (right key, right checksum) holding a shared object of another machine, a cubin of another
    # SM, or junk: refused before it is loaded (a warning), compiled again, replaced
    from ember.runtime.cpu import CPUCompiler
    from ember.uops import files

    comp = NVRTCCompiler("sm_90")
    cubin = comp.compile_cached(ADD)
    planted = {"cpu-elf": CPUCompiler().compile("int f(void) { return 1; }\n"),
               "sm_80-cubin": NVRTCCompiler("sm_80").compile(ADD),
               "amdgpu-elf": cubin[:18] + (224).to_bytes(2, "little") + cubin[20:],  # e_machine EM_AMDGPU
               "junk": b"\x7fELF" + bytes(60)}[payload]
    key = comp.cache_key(ADD)
    files.write_entry(comp.cache_path(ADD), key, planted, {"kind": "library"})
    runs = []
    real = comp.nvrtc.compile
    monkeypatch.setattr(comp.nvrtc, "compile", lambda *a, **k: runs.append(a) or real(*a, **k))
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached(ADD) == cubin
    assert len(runs) == 1 and files.read_entry(comp.cache_path(ADD), key).payload == cubin


def test_a_rendered_kernel_with_dynamic_shared_memory_compiles_and_states_its_size():
    """CUDARenderer puts shared buffers past the static limit in `extern __shared__` memory and defines
    emb_dynamic_shared_<name>; NVRTC compiles it and the runtime reads the size back from the cubin."""
    from ember.codegen import CUDARenderer, Opt, OptOps, to_program
    from ember.cuda_runtime import cubin_global
    from ember.cuda_runtime.device import dynamic_shared_bytes
    from ember.uops import AxisType, Ops, UOp, dtypes

    n, f32 = 1 << 16, dtypes.float32
    r = UOp.range(n, 0, AxisType.REDUCE)
    x = UOp(Ops.PARAM, f32.ptr(n), (), 1).index(r).load()
    red = UOp(Ops.REDUCE, f32, (x, r), Ops.ADD)
    ast = UOp.sink(UOp(Ops.PARAM, f32.ptr(1), (), 0).index(UOp.const(dtypes.index, 0)).store(red))
    renderer = CUDARenderer("sm_90")
    renderer.static_shared_max = 1024  # (a grouped reduce's buffer is small: lower the static limit to pass it)
    spec = to_program(ast, renderer, [Opt(OptOps.GROUP, 0, 512)])
    assert "emb_smem" in spec.src
    cubin = NVRTCCompiler("sm_90").compile(spec.src)
    assert cubin_global(cubin, f"emb_dynamic_shared_{spec.name}") == (2048).to_bytes(4, "little")
    assert dynamic_shared_bytes(cubin, spec.name) == 2048 and dynamic_shared_bytes(cubin, "other") == 0
    static = NVRTCCompiler("sm_90").compile(to_program(ast, CUDARenderer("sm_90"), [Opt(OptOps.GROUP, 0, 512)]).src)
    assert dynamic_shared_bytes(static, spec.name) == 0


def test_rendered_vector_accesses_are_16_byte_loads_and_stores_in_ptx():
    """The GPU heuristic's register tile for a float32 matmul: NVRTC turns emb_load4/emb_store4 into
    ld.global.nc.v4.f32 / st.global.v4.f32 (on the aligned path), and the 4 x 4 tile into 16 FMAs per k step."""
    from ember.codegen import CUDARenderer, hand_coded_opts, to_program
    from ember.uops import AxisType, Ops, UOp, dtypes

    n, k, m, f32 = 256, 64, 256, dtypes.float32
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp(Ops.PARAM, f32.ptr(n * k), (), 1).index(r0 * k + r2).load()
    b = UOp(Ops.PARAM, f32.ptr(k * m), (), 2).index(r2 * m + r1).load()
    red = UOp(Ops.REDUCE, f32, (a * b, r2), Ops.ADD)
    ast = UOp.sink(UOp(Ops.PARAM, f32.ptr(n * m), (), 0).index(r0 * m + r1).store(red).end(r0, r1))
    renderer = CUDARenderer("sm_90")
    spec = to_program(ast, renderer, hand_coded_opts(ast, renderer))
    comp = NVRTCCompiler("sm_90")
    lines = [line.strip() for line in comp.nvrtc.ptx(spec.src, comp.flags).splitlines()]
    assert sum(line.startswith("ld.global.nc.v4.f32") for line in lines) >= 1  # B's row of 4
    assert sum(line.startswith("st.global.v4.f32") for line in lines) == 4  # C's 4 rows of 4
    assert sum(line.startswith("fma.rn.f32") for line in lines) >= 16
