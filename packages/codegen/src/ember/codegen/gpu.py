"""GPU renderers: one C++ kernel per program, for NVIDIA (`CUDARenderer`, CUDA C++ for NVRTC) and AMD (`HIPRenderer`,
HIP for clang or comgr, gfx942/gfx950), on the C-style base of cstyle.py.

`GPURenderer` holds what the two share: thread ids (`SPECIAL`) as the target's builtins, `BARRIER`, `DEFINE_LOCAL`
as shared memory, bfloat16 (and on NVIDIA float16) stored as their bits and computed in float32 (no vendor headers:
NVRTC and clang compile the source as it is), NaN-propagating max, and the kernel signature with its launch bounds.
A target sets the builtins' spellings and its prelude. The lowering that makes SPECIAL, BARRIER and shared buffers
is gpudims.py's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.codegen.cstyle import (
    C_TYPES,
    CStyleLanguage,
    RenderContext,
    base_rewrite,
    bits_const,
    gated,
    render_const,
)
from ember.codegen.gpudims import ATOMIC_ADD
from ember.uops import DType, GroupOp, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

# float16 and bfloat16 as their bits, each with its conversions to and from float32 (helpers in the preludes)
_BITS_TO_F32 = {dtypes.bfloat16: "emb_bf16_to_f32", dtypes.float16: "emb_f16_to_f32"}
_F32_TO_BITS = {dtypes.bfloat16: "emb_f32_to_bf16", dtypes.float16: "emb_f32_to_f16"}


def scalar_const(ctx: RenderContext, x: UOp) -> str:
    dt = x.dtype.scalar()
    return bits_const(x.arg, dt) if dt in ctx.renderer.bits_dtypes else render_const(x.arg, dt, ctx.ctype(dt))


def vector(ctx: RenderContext, x: UOp, lanes: list[str]) -> str:
    return f"{ctx.ctype(x.dtype)}{{{{{', '.join(lanes)}}}}}"


def special(ctx: RenderContext, x: UOp) -> str:
    kind, dim = x.arg[:4], int(x.arg[4:])
    builtin = ctx.renderer.workgroup_id if kind == "gidx" else ctx.renderer.thread_id
    return f"const {ctx.ctype(x.dtype)} {ctx[x]} = ({ctx.ctype(x.dtype)}){builtin[dim]};"


def gpu_math(ctx: RenderContext, x: UOp) -> str:
    # float16 math runs in float; the result is converted back where it is used
    name = ctx.renderer.math_names[x.op][x.dtype == dtypes.float64]
    ret = f"{name}({', '.join(ctx[s] for s in x.src)})"
    return f"(({ctx.ctype(x.dtype)}){ret})" if x.dtype == dtypes.float16 else ret


def _rebuild(uops: tuple[UOp, ...], dtype_of: Callable[[UOp], DType], tag_of: Callable[[UOp], Any]) \
        -> tuple[UOp, ...]:
    """The linear program with each UOp's dtype and tag as the functions give them, its users relinked."""
    new: dict[UOp, UOp] = {}
    for u in uops:  # (a linear program lists every node after its sources)
        src, dtype, tag = tuple(new.get(s, s) for s in u.src), dtype_of(u), tag_of(u)
        new[u] = u if src == u.src and dtype == u.dtype and tag == u.tag else UOp(u.op, dtype, src, u.arg, tag)
    return tuple(new[u] for u in uops)


def narrow_indices(uops: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The program with its index math in int32 when every index value fits (the bounds of each UOp, vmin/vmax): GPUs
    compute 64-bit integers in two or more instructions. A kernel whose addresses may pass 2^31 keeps int64."""
    if not all(-2**31 <= u.vmin and u.vmax < 2**31 for u in uops if u.dtype == dtypes.index):
        return uops
    return _rebuild(uops, lambda u: dtypes.int32 if u.dtype == dtypes.index else u.dtype, lambda u: u.tag)


def scalarize(uops: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The program with its vector ALU ops and casts (the vectorizer's, for whole-vector loads and stores: a GPU thread
    has no vector ALU) computed lane by lane: VECTORIZE of the scalar op on each lane of the sources (a lane of a
    VECTORIZE is its source, of a vector constant a constant, else a GEP). Shuffles (GEP of several lanes) become
    VECTORIZEs of single-lane GEPs. Vector loads, stores and accumulators stay vectors."""
    if not any(u.dtype.count > 1 and (u.op in GroupOp.Elementwise or u.op is Ops.GEP) for u in uops
               if not isinstance(u.dtype, PtrDType)):
        return uops
    out: list[UOp] = []
    seen: set[UOp] = set()
    new: dict[UOp, UOp] = {}

    def emit(u: UOp) -> UOp:
        if u not in seen:
            seen.add(u)
            out.append(u)
        return u

    def lane(v: UOp, i: int) -> UOp:
        if v.op is Ops.VECTORIZE:
            return v.src[i]
        if v.op is Ops.CONST:
            return emit(UOp.const(v.dtype.scalar(), v.arg))
        return emit(UOp(Ops.GEP, v.dtype.scalar(), (v,), i))

    for u in uops:
        src = tuple(new.get(s, s) for s in u.src)
        vector = u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)
        if vector and u.op is Ops.GEP:  # lanes arg of the sources laid end to end
            w = src[0].dtype.count
            lanes = tuple(lane(src[k // w], k % w) for k in u.arg)
            new[u] = emit(UOp(Ops.VECTORIZE, u.dtype, lanes))
        elif vector and u.op in GroupOp.Elementwise and u.op is not Ops.BITCAST:
            lanes = tuple(emit(UOp(u.op, u.dtype.scalar(), tuple(lane(s, i) if s.dtype.count > 1 else s for s in src),
                                   u.arg)) for i in range(u.dtype.count))
            new[u] = emit(UOp(Ops.VECTORIZE, u.dtype, lanes))
        else:
            new[u] = emit(u if src == u.src else UOp(u.op, u.dtype, src, u.arg, u.tag))
    return tuple(out)


def vector_load(ctx: RenderContext, x: UOp, idx: UOp) -> str | None:
    # n consecutive elements: float32 x4 by one 16-byte access (emb_load4, per target: see the preludes), else by lane
    if x.dtype.count == 1:
        return None
    n, t = x.dtype.count, ctx.ctype(x.dtype)
    val = f"emb_load4(&{ctx[idx]})" if x.dtype == dtypes.float32.vec(4) else \
        f"{t}{{{{{', '.join(f'(&{ctx[idx]})[{i}]' for i in range(n))}}}}}"
    if len(idx.src) > 2:
        val = f"({ctx[idx.src[2]]}?{val}:{t}{{{{{', '.join([render_const(0, x.dtype.scalar(), '')] * n)}}}}})"
    return f"{t} {ctx[x]} = {val};"


def vector_store(ctx: RenderContext, idx: UOp, v: UOp) -> str | None:
    if v.dtype.count == 1:
        return None
    if v.dtype == dtypes.float32.vec(4):
        return gated(ctx, idx, f"emb_store4(&{ctx[idx]}, {ctx[v]});")
    return gated(ctx, idx, "{ " + " ".join(f"(&{ctx[idx]})[{i}] = {ctx[v]}.v[{i}];" for i in range(v.dtype.count))
                 + " }")


DYNAMIC = "dynamic shared"  # the tag of a shared buffer placed in dynamic shared memory: (DYNAMIC, byte offset)


def shared_bytes(uops: tuple[UOp, ...]) -> int:
    """Bytes of the program's shared buffers, each placed at a multiple of 16 bytes (the layout of `place_shared`)."""
    at = 0
    for u in uops:
        if u.op is Ops.DEFINE_LOCAL:
            at = -(-at // 16) * 16 + u.dtype.size * u.dtype.base.itemsize
    return at


def place_shared(uops: tuple[UOp, ...], static_max: int) -> tuple[tuple[UOp, ...], int]:
    """A program whose shared buffers take more than `static_max` bytes (CUDA: 48 KiB of static `__shared__`) with
    each buffer tagged (DYNAMIC, its offset) in one dynamic shared block, and that block's size; else as it is, 0."""
    if (total := shared_bytes(uops)) <= static_max:
        return uops, 0
    offsets, at = {}, 0
    for u in uops:
        if u.op is Ops.DEFINE_LOCAL:
            offsets[u] = at = -(-at // 16) * 16
            at += u.dtype.size * u.dtype.base.itemsize
    return _rebuild(uops, lambda u: u.dtype, lambda u: (DYNAMIC, offsets[u]) if u in offsets else u.tag), total


gpu_rewrite = PatternMatcher([
    (UPat(Ops.SPECIAL, name="x"), special),
    # a scatter's update (gpudims.parallel_scatter): an atomic add of the value
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("v")), allow_any_len=True, arg=ATOMIC_ADD),
     lambda ctx, idx, v: gated(ctx, idx, ctx.renderer.atomic_add.format(address=f"&{ctx[idx]}", value=ctx[v]))),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), allow_any_len=True, name="x"), vector_load),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("v")), allow_any_len=True), vector_store),
    # vectors (a tensor core's fragments and accumulators) are `emb_vec<T, n>` structs
    (UPat(Ops.CONST, name="x"), lambda ctx, x: vector(ctx, x, [scalar_const(ctx, x)] * x.dtype.count)
     if x.dtype.count > 1 else None),
    (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: vector(ctx, x, [ctx[s] for s in x.src])),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}.v[{x.arg}]"),
    (UPat(Ops.WMMA, name="x"), lambda ctx, x: f"emb_{x.arg}({', '.join(ctx[s] for s in x.src)})"),
    (UPat(Ops.BARRIER), lambda ctx: ctx.renderer.barrier),
    # a shared buffer in the dynamic block (place_shared): a pointer at its offset
    (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: f"{ctx.ctype(x.dtype.base)}* {ctx[x]} = "
     f"({ctx.ctype(x.dtype.base)}*)(emb_smem + {x.tag[1]});" if isinstance(x.tag, tuple) and x.tag[0] == DYNAMIC
     else None),
    (UPat(Ops.DEFINE_LOCAL, name="x"),
     lambda ctx, x: f"{ctx.renderer.shared_prefix}{ctx.ctype(x.dtype.base)} {ctx[x]}[{x.dtype.size}];"),
    # the dtypes kept as bits: constants, and conversions through float32
    (UPat(Ops.CONST, name="x"), lambda ctx, x: bits_const(x.arg, x.dtype) if x.dtype in ctx.renderer.bits_dtypes
     else None),
    (UPat(Ops.CAST, src=(UPat(name="y"),), name="x"),
     lambda ctx, x, y: f"(({ctx.ctype(x.dtype)}){_BITS_TO_F32[y.dtype]}({ctx[y]}))"
     if y.dtype in ctx.renderer.bits_dtypes and x.dtype not in ctx.renderer.bits_dtypes else None),
    (UPat(Ops.CAST, src=(UPat(name="y"),), name="x"),
     lambda ctx, x, y: f"{_F32_TO_BITS[x.dtype]}((float){ctx[y]})" if x.dtype in ctx.renderer.bits_dtypes and
     y.dtype not in ctx.renderer.bits_dtypes else None),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: f"emb_bitcast<{ctx.ctype(x.dtype)}>({ctx[x.src[0]]})"),
    (UPat(Ops.MAX, dtype=dtypes.floats, name="x"),  # NaN-propagating, as numpy
     lambda ctx, x: f"emb_max{'' if x.dtype == dtypes.float64 else 'f'}({ctx[x.src[0]]}, {ctx[x.src[1]]})"),
    (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.POW), name="x"), gpu_math),
    (UPat(Ops.MOD, dtype=dtypes.floats, name="x"), gpu_math),
])

# the helpers both preludes define (after their own `DEVICE` and `INFINITY`/`NAN`)
_COMMON = """template <class T, int N> struct emb_vec { T v[N]; };
DEVICE float emb_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
DEVICE double emb_max(double a, double b) { return (a != a || a > b) ? a : b; }
template <class T, class F> DEVICE T emb_bitcast(F x) { union { F f; T t; } u; u.f = x; return u.t; }
DEVICE float emb_bf16_to_f32(unsigned short x) { return emb_bitcast<float>((unsigned int)x << 16); }
DEVICE unsigned short emb_f32_to_bf16(float f) { unsigned int u = emb_bitcast<unsigned int>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  /* NaN stays NaN */
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }  /* round to nearest even */
"""


_VECTOR_ALU = (Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.FDIV, Ops.RECIPROCAL, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.SIN,
               Ops.TRUNC, Ops.MULACC)


class GPURenderer(CStyleLanguage):
    """C++ for a GPU: one `extern "C"` kernel, workgroups (has_local), shared memory, scalar math. float32 values of
    consecutive addresses move as vectors of 4 (one 16-byte load or store: the vectorizer builds them, with the math
    between a load and a store on vectors, which `scalarize` computes lane by lane at render time)."""

    has_local = True
    max_vector = 4
    vector_dtypes = (dtypes.float32,)
    vector_alu = {op: (dtypes.float32,) for op in _VECTOR_ALU}
    type_map = {**C_TYPES, dtypes.bool: "bool", dtypes.bfloat16: "unsigned short"}
    bits_dtypes: tuple[DType, ...] = (dtypes.bfloat16,)  # stored as their 16 bits, computed in float32
    compute_via_float32 = (dtypes.bfloat16,)
    statements = CStyleLanguage.statements | {Ops.SPECIAL, Ops.BARRIER}
    fixed_names = {**CStyleLanguage.fixed_names, Ops.SPECIAL: lambda u: u.arg}
    string_rewrite = gpu_rewrite + base_rewrite
    # set by each target
    workgroup_id: tuple[str, str, str] = ("", "", "")
    thread_id: tuple[str, str, str] = ("", "", "")
    barrier = ""
    atomic_add = ""  # the statement that adds {value} to the memory at {address} atomically
    shared_prefix = ""
    math_names: dict[Ops, tuple[str, str]] = {}
    prelude = ""

    def __init__(self, arch: str):
        self.arch = arch

    def kernel_prefix(self, threads: int) -> str:
        raise NotImplementedError(f"{type(self).__name__}: the kernel signature's prefix")

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        return super().render(name, scalarize(narrow_indices(uops)))

    def render_kernel(self, name: str, body: list[str], uops: tuple[UOp, ...], ctx: RenderContext) -> str:
        bufs = [f"{'' if u in ctx.written else 'const '}{self.render_dtype(u.dtype.base)}* __restrict__ {ctx[u]}"
                for u in sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)]
        # variables are int32 arguments on every GPU (runtimes pack them so; 64-bit index math widens them)
        variables = []
        for u in sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0]):
            if not -2**31 <= u.arg[1] <= u.arg[2] < 2**31:
                raise NotImplementedError(f"{type(self).__name__}: variable {u.arg[0]} in [{u.arg[1]}, {u.arg[2]}] "
                                          "does not fit the int32 arguments of GPU kernels")
            variables.append(f"const int {ctx[u]}")
        threads = math.prod(u.src[0].arg for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx"))
        if unknown := {u.arg for u in uops if u.op is Ops.WMMA} - set(self.wmma_helpers):
            raise NotImplementedError(f"{type(self).__name__}: no tensor core {sorted(unknown)}")
        helpers = "".join(f"#ifndef EMB_{name}\n#define EMB_{name}\n{self.wmma_helpers[name]}#endif\n"
                          for name in sorted({u.arg for u in uops if u.op is Ops.WMMA}))
        return (self.prelude + helpers + f"{self.kernel_prefix(threads)} {name}({', '.join(bufs + variables)}) {{\n" +
                "\n".join(body) + "\n}\n")

    wmma_helpers: dict[str, str] = {}  # tensor core name -> the helper function that runs it

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1 and not isinstance(dt, PtrDType):
            return f"emb_vec<{self.render_dtype(dt.scalar())}, {dt.count}>"
        return super().render_dtype(dt)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.arch!r})"


_C_MATH = {Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"),
           Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc"), Ops.POW: ("powf", "pow"),
           Ops.MOD: ("fmodf", "fmod")}

_CUDA_PRELUDE = """#ifndef EMB_PRELUDE
#define EMB_PRELUDE
#define DEVICE static __device__ __forceinline__
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
""" + _COMMON + """DEVICE float emb_f16_to_f32(unsigned short x) { float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }
DEVICE unsigned short emb_f32_to_f16(float f) { unsigned short x; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
  return x; }
/* 4 floats in one 16-byte access where the address allows (the same for every thread of a buffer whose index is a
   multiple of 4: a uniform branch), else one by one */
struct __attribute__((aligned(16))) emb_f4 { float x, y, z, w; };
DEVICE emb_vec<float, 4> emb_load4(const float* p) {
  if (((unsigned long long)p & 15) == 0) {
    emb_f4 t = *(const emb_f4*)p;
    return emb_vec<float, 4>{{t.x, t.y, t.z, t.w}};
  }
  return emb_vec<float, 4>{{p[0], p[1], p[2], p[3]}};
}
DEVICE void emb_store4(float* p, emb_vec<float, 4> v) {
  if (((unsigned long long)p & 15) == 0) { emb_f4 t; t.x = v.v[0]; t.y = v.v[1]; t.z = v.v[2]; t.w = v.v[3];
    *(emb_f4*)p = t; }
  else { p[3] = v.v[3]; p[2] = v.v[2]; p[1] = v.v[1]; p[0] = v.v[0]; }  /* (reversed: else NVVM merges the two
    paths' last store and the aligned one becomes a v2 and two scalar stores) */
}
#endif
"""


def _mma(kind: str) -> str:
    """mma.sync m16n8k16 with float32 accumulators: the lane's A and B halves packed in pairs, low index low."""
    return (f"DEVICE emb_vec<float, 4> emb_mma_m16n8k16_{kind}(emb_vec<unsigned short, 8> a, "
            "emb_vec<unsigned short, 4> b, emb_vec<float, 4> c) {\n"
            "  unsigned int A[4], B[2];\n"
            "  for (int i = 0; i < 4; i++) A[i] = a.v[2 * i] | ((unsigned int)a.v[2 * i + 1] << 16);\n"
            "  for (int i = 0; i < 2; i++) B[i] = b.v[2 * i] | ((unsigned int)b.v[2 * i + 1] << 16);\n"
            f'  asm("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0, %1, %2, %3}}, '
            '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n'
            '      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])\n'
            '      : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));\n'
            "  return c;\n}\n")


# shared memory per block with the opt-in, by SM (CUDA C++ Programming Guide, compute capability table; a device's
# own attribute 97 overrides): 163 KiB on A100 (8.0/8.7), 99 KiB on 8.6/8.9/12.x, 227 KiB on Hopper and Blackwell DC
_SHARED_OPTIN = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 120: 101376}


class CUDARenderer(GPURenderer):
    """CUDA C++ for NVRTC, sm_80 and newer (`arch` "sm_90" for Hopper). No headers: float16 and bfloat16 are their
    bits, converted by PTX `cvt` and integer arithmetic."""

    device = "CUDA"
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    max_workgroup_threads = 1024
    static_shared_max = 48 * 1024  # static `__shared__` per block: more goes in dynamic shared memory (opt-in)
    type_map = {**GPURenderer.type_map, dtypes.float16: "unsigned short"}
    bits_dtypes = (dtypes.bfloat16, dtypes.float16)
    compute_via_float32 = (dtypes.bfloat16, dtypes.float16)
    supports_dtypes = tuple(type_map)
    workgroup_id = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
    thread_id = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
    barrier = "__syncthreads();"
    has_atomic_add = True
    atomic_add = "atomicAdd({address}, {value});"
    shared_prefix = "__shared__ __align__(16) "
    math_names = _C_MATH
    prelude = _CUDA_PRELUDE
    tensor_cores = ("mma_m16n8k16_bf16", "mma_m16n8k16_f16")
    wmma_helpers = {"mma_m16n8k16_bf16": _mma("bf16"), "mma_m16n8k16_f16": _mma("f16")}

    def __init__(self, arch: str = "sm_90", shared_max: int | None = None):
        if not arch.startswith("sm_") or not arch[3:].isdigit() or int(arch[3:]) < 80:
            raise ValueError(f"CUDARenderer: arch {arch!r} is not supported, give 'sm_80' or newer ('sm_90': H100)")
        super().__init__(arch)
        # shared memory per block with the opt-in: the device's attribute 97 when it gives it, else the arch's
        self.shared_max = shared_max if shared_max is not None else \
            _SHARED_OPTIN.get(int(arch[3:]), _SHARED_OPTIN[max(k for k in _SHARED_OPTIN if k <= int(arch[3:]))])

    def kernel_prefix(self, threads: int) -> str:
        return f'extern "C" __global__ void __launch_bounds__({threads})'

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        placed, dynamic = place_shared(uops, self.static_shared_max)
        if dynamic > self.shared_max:
            raise ValueError(f"CUDARenderer: kernel {name} needs {dynamic} bytes of shared memory, {self.arch} allows "
                             f"{self.shared_max} per block")
        return super().render(name, placed)

    def render_kernel(self, name: str, body: list[str], uops: tuple[UOp, ...], ctx: RenderContext) -> str:
        if not any(u.op is Ops.DEFINE_LOCAL and isinstance(u.tag, tuple) and u.tag[0] == DYNAMIC for u in uops):
            return super().render_kernel(name, body, uops, ctx)
        # the dynamic block, and its size for the runtime (ember.cuda_runtime reads the variable from the cubin)
        src = super().render_kernel(name, ["  extern __shared__ __align__(16) unsigned char emb_smem[];", *body],
                                    uops, ctx)
        return src + f'extern "C" __device__ unsigned int emb_dynamic_shared_{name} = {shared_bytes(uops)}u;\n'



# float64 exp2, log2, sin and pow have no gfx9 instructions (AMD's device library computes them in software): ours,
# in the prelude. exp2: 2^round(x) (two exact scalings, so subnormal results round once) times a degree-13 Taylor
# polynomial of e^(f ln 2), |f| <= 1/2. log2: the exponent plus 2 atanh((m-1)/(m+1)) / ln 2 for the mantissa m in
# [sqrt(1/2), sqrt(2)], 11 terms. sin: x - k pi/2 in three parts (Cody-Waite: exact while |x| < 2^20 pi/2, less
# precise beyond), then the sine or cosine polynomial of the quadrant. pow: exact repeated squaring for an integer
# exponent, else exp2(b log2 |a|) with C's sign rules (float32 pow too: LLVM's, with no device library, is NaN for
# negative bases). Each is within a few ulp (tests: ember.amd_runtime's ISA tests).
_HIP_F64 = """DEVICE double emb_exp2(double x) {
  if (x != x) return x;
  if (x >= 1024.0) return INFINITY;
  if (x < -1075.0) return 0.0;
  double n = __builtin_rint(x), t = (x - n) * 0.6931471805599453, p = 1.0;
  for (int k = 13; k >= 1; k--) p = 1.0 + p * t / (double)k;
  int e = (int)n, h = e / 2;
  return p * emb_bitcast<double>((long long)(h + 1023) << 52) * emb_bitcast<double>((long long)(e - h + 1023) << 52);
}
DEVICE double emb_log2(double x) {
  if (x != x || x < 0.0) return NAN;
  if (x == 0.0) return -INFINITY;
  if (x == INFINITY) return x;
  int e = 0;
  if (x < 2.2250738585072014e-308) { x *= 18014398509481984.0; e = -54; }  /* subnormal: times 2^54 */
  long long b = emb_bitcast<long long>(x);
  e += (int)((b >> 52) & 0x7ff) - 1023;
  double m = emb_bitcast<double>((b & 0xfffffffffffffll) | 0x3ff0000000000000ll);
  if (m > 1.4142135623730951) { m *= 0.5; e += 1; }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, p = 0.0;
  for (int k = 21; k >= 3; k -= 2) p = (p + 1.0 / (double)k) * s2;
  return (double)e + 2.0 * s * (1.0 + p) * 1.4426950408889634;
}
DEVICE double emb_sin(double x) {
  if (x != x || x == INFINITY || x == -INFINITY) return NAN;
  double k = __builtin_rint(x * 0.6366197723675814);
  double r = ((x - k * 1.57079632673412561417) - k * 6.07710050630396597660e-11) - k * 2.02226624871116645580e-21;
  double r2 = r * r, p = 0.0;
  long long q = (long long)k & 3;
  if (q & 1) {  /* cos r */
    for (int n = 20; n >= 2; n -= 2) p = 1.0 - p * r2 / (double)(n * (n - 1));
  } else {  /* sin r */
    for (int n = 21; n >= 3; n -= 2) p = 1.0 - p * r2 / (double)(n * (n - 1));
    p *= r;
  }
  return q >= 2 ? -p : p;
}
DEVICE double emb_pow(double a, double b) {
  if (b == 0.0 || a == 1.0) return 1.0;
  if (a != a || b != b) return NAN;
  if (b == __builtin_trunc(b) && __builtin_fabs(b) < 2147483648.0) {
    double r = 1.0, base = a;
    for (long long n = (long long)__builtin_fabs(b); n; n >>= 1) { if (n & 1) r *= base; base *= base; }
    return b < 0.0 ? 1.0 / r : r;
  }
  if (a < 0.0) return NAN;
  return emb_exp2(b * emb_log2(a));
}
DEVICE float emb_powf(float a, float b) {  /* (LLVM's own powf without device libraries is NaN for a < 0) */
  if (b == 0.0f || a == 1.0f) return 1.0f;
  if (a != a || b != b) return NAN;
  if (b == __builtin_truncf(b) && __builtin_fabsf(b) < 2147483648.0f) {
    float r = 1.0f, base = a;
    for (long long n = (long long)__builtin_fabsf(b); n; n >>= 1) { if (n & 1) r *= base; base *= base; }
    return b < 0.0f ? 1.0f / r : r;
  }
  if (a < 0.0f) return NAN;
  return __builtin_exp2f(b * __builtin_log2f(a));
}
"""

# no device libraries (ockl/ocml): clang lowers these builtins to gfx9 instructions itself (float64 exp2/log2/sin/pow
# are the prelude's)
_HIP_MATH = {op: (f"__builtin_{f}", f"__builtin_{d}") for op, (f, d) in _C_MATH.items()}
_HIP_MATH.update({Ops.EXP2: ("__builtin_exp2f", "emb_exp2"), Ops.LOG2: ("__builtin_log2f", "emb_log2"),
                  Ops.SIN: ("__builtin_sinf", "emb_sin"), Ops.POW: ("emb_powf", "emb_pow")})

_HIP_PRELUDE = """#ifndef EMB_PRELUDE
#define EMB_PRELUDE
#define DEVICE static __attribute__((device)) inline
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
""" + _COMMON + _HIP_F64 + """/* 4 floats in one 16-byte access (gfx9 global memory takes them at any 4-byte
   alignment) */
DEVICE emb_vec<float, 4> emb_load4(const float* p) {
  emb_vec<float, 4> v;
  __builtin_memcpy(&v, p, 16);
  return v;
}
DEVICE void emb_store4(float* p, emb_vec<float, 4> v) { __builtin_memcpy(p, &v, 16); }
#endif
"""

def _mfma(kind: str, lanes: str, builtin: str) -> str:
    """v_mfma_f32_16x16x16: the fragments as clang's vector types, in and out."""
    return (f"typedef {lanes} emb_{kind}x4 __attribute__((ext_vector_type(4)));\n"
            "typedef float emb_f32x4 __attribute__((ext_vector_type(4)));\n"
            f"DEVICE emb_vec<float, 4> emb_mfma_16x16x16_{kind}(emb_vec<{'unsigned short' if kind == 'bf16' else lanes}"
            f", 4> a, emb_vec<{'unsigned short' if kind == 'bf16' else lanes}, 4> b, emb_vec<float, 4> c) {{\n"
            f"  emb_{kind}x4 A = {{({lanes})a.v[0], ({lanes})a.v[1], ({lanes})a.v[2], ({lanes})a.v[3]}};\n"
            f"  emb_{kind}x4 B = {{({lanes})b.v[0], ({lanes})b.v[1], ({lanes})b.v[2], ({lanes})b.v[3]}};\n"
            "  emb_f32x4 C = {c.v[0], c.v[1], c.v[2], c.v[3]};\n"
            f"  emb_f32x4 D = {builtin}(A, B, C, 0, 0, 0);\n"
            "  return emb_vec<float, 4>{{D[0], D[1], D[2], D[3]}};\n}\n")


HIP_ARCHS = ("gfx942", "gfx950")


class HIPRenderer(GPURenderer):
    """HIP for AMD CDNA3/CDNA4 (`arch` "gfx942": MI300X, "gfx950": MI350X), compiled by clang or comgr without HIP
    headers or device libraries: thread ids and barriers are amdgcn builtins, float16 is `_Float16`."""

    device = "AMD"
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 1024)
    max_workgroup_threads = 1024
    shared_max = 64 * 1024
    type_map = {**GPURenderer.type_map, dtypes.float16: "_Float16"}
    supports_dtypes = tuple(type_map)
    workgroup_id = tuple(f"__builtin_amdgcn_workgroup_id_{d}()" for d in "xyz")  # type: ignore[assignment]
    thread_id = tuple(f"__builtin_amdgcn_workitem_id_{d}()" for d in "xyz")  # type: ignore[assignment]
    barrier = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
               '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')
    shared_prefix = "__attribute__((shared, aligned(16))) "
    math_names = _HIP_MATH
    prelude = _HIP_PRELUDE
    tensor_cores = ("mfma_16x16x16_bf16", "mfma_16x16x16_f16")
    wmma_helpers = {"mfma_16x16x16_bf16": _mfma("bf16", "short", "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k"),
                    "mfma_16x16x16_f16": _mfma("f16", "_Float16", "__builtin_amdgcn_mfma_f32_16x16x16f16")}

    def __init__(self, arch: str = "gfx942"):
        if arch.split(":")[0] not in HIP_ARCHS:
            raise ValueError(f"HIPRenderer: arch {arch!r} is not supported, give one of {HIP_ARCHS}")
        super().__init__(arch)

    def kernel_prefix(self, threads: int) -> str:
        return f'extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, {threads})))'

