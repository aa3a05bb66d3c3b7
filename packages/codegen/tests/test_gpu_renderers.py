"""CUDARenderer and HIPRenderer: the source they write for the GPU lowering (thread ids, shared memory, barriers,
launch bounds, 16-bit floats), and gfx942 code objects that clang-19 builds from it. (That NVRTC compiles the CUDA
source, and that every kernel of the tensor suite compiles, is tests/test_gpu_kernels.py's.)"""

import shutil
import subprocess

import pytest

from ember.codegen import CUDARenderer, HIPRenderer, Opt, OptOps, to_program
from ember.uops import AxisType, Ops, UOp, dtypes


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def sum_ast(n, dt=dtypes.float32):
    r = UOp.range(n, 0, AxisType.REDUCE)
    red = UOp(Ops.REDUCE, dt, (param(1, n, dt).index(r).load(), r), Ops.ADD)
    return UOp.sink(param(0, 1, dt).index(UOp.const(dtypes.index, 0)).store(red))


def unary_ast(n, dt, fn):
    r = UOp.range(n, 0, AxisType.GLOBAL)
    return UOp.sink(param(0, n, dt).index(r).store(fn(param(1, n, dt).index(r).load())).end(r))


def test_cuda_source_of_a_grouped_reduce():
    spec = to_program(sum_ast(1024), CUDARenderer(), [Opt(OptOps.GROUP, 0, 128)])
    assert spec.local_size == (128, 1, 1) and spec.global_size == (1, 1, 1)
    src = spec.src
    assert f'extern "C" __global__ void __launch_bounds__(128) {spec.name}(' in src
    assert "__shared__ __align__(16) float local0[128];" in src and "__syncthreads();" in src
    # index math in int32: every address of this kernel fits
    assert "const int lidx0 = (int)threadIdx.x;" in src and "if ((lidx0==0)) data0[0] = " in src
    assert "local0[lidx0] = acc0;" in src  # each thread's partial sum in its slot
    assert "float* __restrict__ data0, const float* __restrict__ data1" in src


def test_hip_source_of_a_grouped_reduce():
    spec = to_program(sum_ast(1024), HIPRenderer("gfx942"), [Opt(OptOps.GROUP, 0, 64)])
    src = spec.src
    assert f"__attribute__((amdgpu_flat_work_group_size(1, 64))) {spec.name}(" in src
    assert "__attribute__((shared, aligned(16))) float local0[64];" in src
    assert "__builtin_amdgcn_s_barrier();" in src and "__builtin_amdgcn_workitem_id_x()" in src


def test_index_math_narrows_to_int32_only_where_every_address_fits():
    small = to_program(unary_ast(1 << 20, dtypes.float32, lambda x: x + 1.0), CUDARenderer(), None)
    assert "long long" not in small.src.split("#endif")[-1]
    big = to_program(unary_ast(1 << 32, dtypes.int8, lambda x: x + 1), CUDARenderer(), None)
    assert "const long long gidx0 = (long long)blockIdx.x;" in big.src


def test_16_bit_floats():
    half = to_program(unary_ast(64, dtypes.float16, lambda x: x * 2.5), CUDARenderer(), [Opt(OptOps.LOCAL, 0, 32)])
    # CUDA: float16 is its bits, computed in float32 (no cuda_fp16.h needed)
    assert "unsigned short* __restrict__ data0" in half.src and "emb_f16_to_f32" in half.src
    assert "((unsigned short)0x4100)" in half.src or "2.5f" in half.src
    hip = to_program(unary_ast(64, dtypes.float16, lambda x: x * 2.5), HIPRenderer(), [])
    assert "_Float16* __restrict__ data0" in hip.src  # native on AMD
    bf16 = to_program(unary_ast(64, dtypes.bfloat16, lambda x: x.exp2()), HIPRenderer(), [])
    assert "emb_bf16_to_f32" in bf16.src and "__builtin_exp2f" in bf16.src


def tc_matmul_ast(n, k, m, dt):
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    x, y = param(1, n * k, dt).index(r0 * k + r2).load(), param(2, k * m, dt).index(r2 * m + r1).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (x.cast(dtypes.float32) * y.cast(dtypes.float32), r2), Ops.ADD)
    return UOp.sink(param(0, n * m).index(r0 * m + r1).store(red).end(r0, r1))


def test_tensor_core_sources():
    cuda = to_program(tc_matmul_ast(32, 64, 16, dtypes.bfloat16), CUDARenderer(), None)
    assert cuda.applied_opts[0].op is OptOps.TC and cuda.local_size[0] == 32
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in cuda.src
    assert "acc0 = emb_mma_m16n8k16_bf16(" in cuda.src  # the accumulator goes through the instruction
    hip = to_program(tc_matmul_ast(32, 64, 16, dtypes.float16), HIPRenderer(), None)
    assert hip.local_size[0] == 64 and "__builtin_amdgcn_mfma_f32_16x16x16f16(A, B, C, 0, 0, 0)" in hip.src


def test_tensor_core_layouts_cover_each_matrix_once_and_the_reference_is_a_matmul():
    import numpy as np

    from ember.codegen import TENSOR_CORES, wmma_reference

    rng = np.random.default_rng(0)
    for tc in TENSOR_CORES:
        m, n, k = tc.dims
        shapes = {"a": (m, k), "b": (k, n), "c": (m, n)}
        layouts = {"a": tc.a_at, "b": tc.b_at, "c": tc.c_at}
        for which, count in zip("abc", tc.elements):
            cells = {layouts[which](lane, e) for lane in range(tc.threads) for e in range(count)}
            rows, cols = shapes[which]
            assert len(cells) == tc.threads * count == rows * cols, (tc.name, which)
            assert all(0 <= i < rows and 0 <= j < cols for i, j in cells)
        A, B, C = (rng.standard_normal(shapes[w]) for w in "abc")
        frag = {w: [[M[layouts[w](lane, e)] for e in range(count)] for lane in range(tc.threads)]
                for (w, M), count in zip(zip("abc", (A, B, C)), tc.elements)}
        d = wmma_reference(tc, frag["a"], frag["b"], frag["c"])
        D = A @ B + C
        assert all(abs(d[lane][e] - D[tc.c_at(lane, e)]) < 1e-9 for lane in range(tc.threads)
                   for e in range(tc.elements[2]))


def test_arch_and_capability_errors():
    with pytest.raises(ValueError, match="CUDARenderer: arch 'sm_70' is not supported"):
        CUDARenderer("sm_70")
    with pytest.raises(ValueError, match="HIPRenderer: arch 'gfx1100' is not supported"):
        HIPRenderer("gfx1100")
    with pytest.raises(ValueError, match="threads in a workgroup"):
        to_program(sum_ast(4096), CUDARenderer(), [Opt(OptOps.GROUP, 0, 2048)])


HIP_KERNELS = {
    "grouped_sum": (sum_ast(4096), [Opt(OptOps.GROUP, 0, 256)]),
    "grouptop_sum": (sum_ast(4096), [Opt(OptOps.GROUPTOP, 0, 64)]),
    "half_math": (unary_ast(256, dtypes.float16, lambda x: (x * 3.0).exp2().sqrt()), [Opt(OptOps.LOCAL, 0, 64)]),
    "bf16_math": (unary_ast(256, dtypes.bfloat16, lambda x: x.log2().sin().maximum(x)), None),
    "int_math": (unary_ast(256, dtypes.int32, lambda x: (x // 7) % 5 + (x << 2)), None),
    "double_max": (unary_ast(256, dtypes.float64, lambda x: x.maximum(x * x).trunc()), None),
    "mfma_bf16": (tc_matmul_ast(64, 32, 32, dtypes.bfloat16), [Opt(OptOps.TC, 2, 2), Opt(OptOps.LOCAL, 0, 2)]),
    "mfma_f16": (tc_matmul_ast(16, 16, 16, dtypes.float16), [Opt(OptOps.TC, 2, 3)]),
    # (no gfx9 instructions: the prelude's software versions)
    "double_transcendentals": (unary_ast(256, dtypes.float64, lambda x: x.exp2().log2().sin() ** x), None),
}


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 (apt: clang-19) builds the gfx942 code objects")
def test_clang_builds_gfx942_code_objects(tmp_path):
    src = ""
    for name, (ast, opts) in HIP_KERNELS.items():
        spec = to_program(ast, HIPRenderer("gfx942"), opts)
        src += spec.src.replace(f" {spec.name}(", f" {name}(")
    (tmp_path / "k.hip").write_text(src)
    out = tmp_path / "k.hsaco"
    subprocess.run(["clang-19", "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-nogpulib", "-nogpuinc",
                    "-O3", "-c", str(tmp_path / "k.hip"), "-o", str(out)], check=True, capture_output=True)
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and data[18] == 0xE0  # EM_AMDGPU
    assert int.from_bytes(data[48:52], "little") & 0xFF == 0x4C  # e_flags mach: gfx942
    for name in HIP_KERNELS:  # each kernel and its descriptor are in the code object
        assert f"{name}.kd".encode() in data


def test_cuda_shared_memory_over_the_static_limit_is_dynamic():
    """Shared buffers past the static limit (48 KiB; lowered here to 256 bytes to make one with a small kernel) are
    pointers into one `extern __shared__` block, each at a multiple of 16 bytes, and the kernel defines
    emb_dynamic_shared_<name> = the block's size, which the CUDA runtime reads from the cubin."""
    renderer = CUDARenderer("sm_90")
    assert renderer.shared_max == 232448 and CUDARenderer("sm_89").shared_max == 101376
    assert CUDARenderer("sm_90", shared_max=1000).shared_max == 1000  # (the device's attribute 97)
    static = to_program(sum_ast(1024), renderer, [Opt(OptOps.GROUP, 0, 128)])
    assert "emb_smem" not in static.src and "emb_dynamic_shared" not in static.src
    renderer.static_shared_max = 256
    spec = to_program(sum_ast(1024), renderer, [Opt(OptOps.GROUP, 0, 128)])
    src = spec.src
    assert "extern __shared__ __align__(16) unsigned char emb_smem[];" in src
    assert "float* local0 = (float*)(emb_smem + 0);" in src and "__shared__ __align__(16) float local0" not in src
    assert f'extern "C" __device__ unsigned int emb_dynamic_shared_{spec.name} = 512u;' in src
    assert src.index(" emb_smem[];") > src.index(f" {spec.name}(")  # (declared in the kernel)
    with pytest.raises(ValueError, match=r"kernel's shared buffers take 512 bytes, the target has 256"):
        to_program(sum_ast(1024), CUDARenderer("sm_90", shared_max=256), [Opt(OptOps.GROUP, 0, 128)])
    # (that NVRTC compiles it and the runtime finds the size: packages/cuda-runtime/tests/test_compiler.py)
