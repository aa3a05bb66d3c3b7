"""C-style renderers: a linear program becomes one C function, each UOp's text given by a rule table.

`CStyleLanguage` is generic C: `base_rewrite`, a PatternMatcher over linear UOps, gives each op's text from the names
of its sources (`ctx[u]`), and `render` walks the program once. A rule returns, for a value, the expression its users
read (`render` inlines it, or declares a variable when it is used more than once or in another loop); for a statement
(STORE, RANGE, END, DEFINE_LOCAL, a LOAD from memory), its lines. A target subclasses it and puts its own rules in
front: `string_rewrite = PatternMatcher([...]) + base_rewrite`. `CRenderer` (the CPU) adds GCC vector extensions,
OpenMP for THREAD loops, bfloat16 as bits, and the helpers it calls, each guarded so that sources concatenate.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable

from ember.codegen.renderer import Renderer
from ember.uops import AxisType, DType, GroupOp, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes, settings

C_TYPES = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
           dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
           dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.index: "long long",
           dtypes.float32: "float", dtypes.float64: "double"}


class RenderContext:
    """What a rule sees: the renderer, the names (or inlined expressions) of the UOps rendered so far (`ctx[u]`), and
    the facts about the whole program that decide inlining."""

    def __init__(self, renderer: CStyleLanguage, uops: tuple[UOp, ...]):
        self.renderer = renderer
        self.names: dict[UOp, str] = {}
        self.counter = 0
        self.uses: dict[UOp, int] = {}
        self.loop_of: dict[UOp, UOp | None] = {}
        self.users_loop: dict[UOp, UOp | None] = {}  # (the loop of the last user)
        self.bitcast_srcs: set[UOp] = set()
        self.written: set[UOp] = set()
        # one pass: a program is in order, each user after its sources
        uses, loop_of, users_loop = self.uses, self.loop_of, self.users_loop
        stack: list[UOp] = []
        loop: UOp | None = None
        for u in uops:
            loop_of[u] = loop
            for s in u.src:
                uses[s] = uses.get(s, 0) + 1
                users_loop[s] = loop
            op = u.op
            if op is Ops.RANGE:
                stack.append(u)
                loop = u
            elif op is Ops.END:
                stack.pop()
                loop = stack[-1] if stack else None
            elif op is Ops.BITCAST:
                self.bitcast_srcs.add(u.src[0])
            elif op is Ops.STORE and u.src[0].op is Ops.INDEX:
                self.written.add(u.src[0].src[0])

    def __getitem__(self, u: UOp) -> str:
        return self.names[u]

    def ctype(self, dt: DType) -> str:
        return self.renderer.render_dtype(dt)

    def declared(self, u: UOp) -> bool:
        """Whether a value gets a variable: always for a load from memory; for ALU ops and casts, unless used once in
        the loop they sit in (no work moves into an inner loop) and not bitcast (that takes its address)."""
        op = u.op
        if op is Ops.LOAD:
            return u.src[0].op is not Ops.DEFINE_REG
        if op not in GroupOp.Elementwise:
            return False
        return op is Ops.BITCAST or u in self.bitcast_srcs or self.uses.get(u, 0) != 1 or \
            self.users_loop.get(u) is not self.loop_of[u]

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter - 1}"


def render_const(value: int | float | bool, dtype: DType, ctype: str) -> str:
    """A scalar constant in C (`ctype`: the C type of dtype, for the small types that need a cast)."""
    if dtype == dtypes.bool:
        return "1" if value else "0"
    if dtypes.is_float(dtype):
        v = float(value)
        if math.isnan(v):
            txt = "NAN"
        elif math.isinf(v):
            txt = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            txt = repr(v) + ("f" if dtype != dtypes.float64 else "")
        return txt if dtype in (dtypes.float32, dtypes.float64) else f"(({ctype}){txt})"
    v = int(value)
    if dtype in (dtypes.int64, dtypes.index) and v == dtypes.min(dtypes.int64):
        return "(-9223372036854775807ll-1)"
    if dtype == dtypes.int32 and v == dtypes.min(dtypes.int32):
        return "(-2147483647-1)"
    suffix = {dtypes.int64: "ll", dtypes.index: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dtype, "")
    return f"{v}{suffix}" if dtype in (dtypes.int32, dtypes.int64, dtypes.index, dtypes.uint32, dtypes.uint64) \
        else f"(({ctype}){v})"


# *** generic C: scalars ***

# the math library's functions for float (float16 computes in float) and double
_MATH = {Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"),
         Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc"), Ops.POW: ("powf", "pow"),
         Ops.MOD: ("fmodf", "fmod"), Ops.MAX: ("fmaxf", "fmax")}
_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.FDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
          Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}


def math_fn(op: Ops, dt: DType) -> str:
    return _MATH[op][dt == dtypes.float64]


def infix(ctx: RenderContext, x: UOp, sym: str) -> str:
    return f"({ctx[x.src[0]]}{sym}{ctx[x.src[1]]})"


def call(ctx: RenderContext, fn: str, x: UOp) -> str:
    return f"{fn}({', '.join(ctx[s] for s in x.src)})"


def unary_math(ctx: RenderContext, x: UOp) -> str:
    # float16 math runs in float; the result is converted back where it is stored
    ret = f"{math_fn(x.op, x.dtype)}({ctx[x.src[0]]})"
    return f"(({ctx.ctype(x.dtype)}){ret})" if x.dtype == dtypes.float16 else ret


def render_range(ctx: RenderContext, x: UOp) -> str:
    r = ctx[x]
    return f"for ({ctx.ctype(x.dtype)} {r} = 0; {r} < {ctx[x.src[0]]}; {r}++) {{"


def gated(ctx: RenderContext, idx: UOp, statement: str) -> str:
    return statement if len(idx.src) == 2 else f"if ({ctx[idx.src[2]]}) {statement}"


def load(ctx: RenderContext, x: UOp, idx: UOp) -> str:
    val = ctx[idx] if len(idx.src) == 2 else f"({ctx[idx.src[2]]}?{ctx[idx]}:0)"
    return f"{ctx.ctype(x.dtype)} {ctx[x]} = {val};"


def store_reg(ctx: RenderContext, x: UOp, acc: UOp) -> str:
    # the STORE of the identity starts a reduce: it declares the accumulator
    return f"{ctx.ctype(acc.dtype)} {ctx[acc]} = {ctx[x.src[1]]};" if x.src[1] is acc.src[0] else \
        f"{ctx[acc]} = {ctx[x.src[1]]};"


base_rewrite = PatternMatcher([
    (UPat((Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG), name="x"), lambda ctx, x: ctx[x]),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: render_const(x.arg, x.dtype, ctx.ctype(x.dtype))),
    (UPat(Ops.INDEX, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}[{ctx[x.src[1]]}]"),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}[{x.arg}]"),
    (UPat(Ops.RANGE, name="x"), render_range),
    (UPat(Ops.END), lambda ctx: "}"),
    (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: f"{ctx.ctype(x.dtype.base)} {ctx[x]}[{x.dtype.size}];"),
    (UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_REG, name="acc"),), allow_any_len=True), lambda ctx, acc: ctx[acc]),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), allow_any_len=True, name="x"), load),
    (UPat(Ops.STORE, src=(UPat(Ops.DEFINE_REG, name="acc"),), allow_any_len=True, name="x"), store_reg),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("v")), allow_any_len=True),
     lambda ctx, idx, v: gated(ctx, idx, f"{ctx[idx]} = {ctx[v]};")),
    # bool arithmetic stays bool: or, and
    (UPat(Ops.ADD, dtype=dtypes.bool, name="x"), lambda ctx, x: infix(ctx, x, "|")),
    (UPat(Ops.MUL, dtype=dtypes.bool, name="x"), lambda ctx, x: infix(ctx, x, "&")),
    (UPat((Ops.MOD, Ops.MAX), dtype=dtypes.floats, name="x"), lambda ctx, x: call(ctx, math_fn(x.op, x.dtype), x)),
    (UPat(Ops.MAX, name="x"), lambda ctx, x: f"(({ctx[x.src[0]]}>{ctx[x.src[1]]})?{ctx[x.src[0]]}:{ctx[x.src[1]]})"),
    (UPat(Ops.POW, name="x"), lambda ctx, x: call(ctx, math_fn(x.op, x.dtype), x)),
    (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC), name="x"), unary_math),
    (UPat(tuple(_INFIX), name="x"), lambda ctx, x: infix(ctx, x, _INFIX[x.op])),
    (UPat(Ops.NEG, name="x"), lambda ctx, x: f"(-{ctx[x.src[0]]})"),
    (UPat(Ops.RECIPROCAL, name="x"),
     lambda ctx, x: f"({'1.0' if x.dtype == dtypes.float64 else '1.0f'}/{ctx[x.src[0]]})"),
    (UPat(Ops.WHERE, name="x"), lambda ctx, x: f"({ctx[x.src[0]]}?{ctx[x.src[1]]}:{ctx[x.src[2]]})"),
    (UPat(Ops.MULACC, name="x"), lambda ctx, x: f"(({ctx[x.src[0]]}*{ctx[x.src[1]]})+{ctx[x.src[2]]})"),
    (UPat(Ops.CAST, name="x"), lambda ctx, x: f"(({ctx.ctype(x.dtype)}){ctx[x.src[0]]})"),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: f"(*(({ctx.ctype(x.dtype)}*)&{ctx[x.src[0]]}))"),
])

class CStyleLanguage(Renderer):
    """Generic C: one function per kernel, `restrict` buffer pointers, scalar code. Subclasses add rules in front of
    `string_rewrite` and override `render_dtype` / `render_kernel` for their types and function signature."""

    string_rewrite: PatternMatcher = base_rewrite
    type_map: dict[DType, str] = C_TYPES
    supports_dtypes = tuple(C_TYPES)
    # statements: their rule's text is lines of the function body (a value's is an expression)
    statements = frozenset({Ops.STORE, Ops.RANGE, Ops.END, Ops.DEFINE_LOCAL})
    # names fixed by the UOp (a loop by its axis id); other declared values are counted: val0, alu1, ...
    fixed_names: dict[Ops, Callable[[UOp], str]] = {
        Ops.PARAM: lambda u: f"data{u.arg}", Ops.DEFINE_VAR: lambda u: u.arg[0], Ops.RANGE: lambda u: f"r{u.arg[0]}",
        Ops.DEFINE_REG: lambda u: f"acc{u.arg}", Ops.DEFINE_LOCAL: lambda u: f"local{u.arg}"}

    def render_dtype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            return self.render_dtype(dt.base) + "*"
        if dt not in self.type_map:
            raise NotImplementedError(f"{type(self).__name__}: dtype {dt!r} is not supported by this renderer yet")
        return self.type_map[dt]

    def render_kernel(self, name: str, body: list[str], uops: tuple[UOp, ...], ctx: RenderContext) -> str:
        """The function: buffers in slot order (const where only read), then the int variables by name."""
        bufs = [f"{'' if u in ctx.written else 'const '}{self.render_dtype(u.dtype.base)}* restrict {ctx[u]}"
                for u in sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)]
        variables = [f"{self.render_dtype(dtypes.index)} {ctx[u]}"
                     for u in sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])]
        return f"void {name}({', '.join(bufs + variables)}) {{\n" + "\n".join(body) + "\n}\n"

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        body, ctx = self.render_body(uops)
        return self.render_kernel(name, body, uops, ctx)

    def render_body(self, uops: tuple[UOp, ...]) -> tuple[list[str], RenderContext]:
        """The lines of the function body, and the context that named the values."""
        ctx = RenderContext(self, uops)
        names, rewrite, fixed_names, statements = ctx.names, self.string_rewrite.rewrite, self.fixed_names, \
            self.statements
        body: list[str] = []
        indent = "  "
        for u in uops:
            op = u.op
            if op is Ops.SINK or op is Ops.NOOP:
                continue
            if op is Ops.END:
                indent = indent[:-2]
            declared = False
            if (fixed := fixed_names.get(op)) is not None:
                names[u] = fixed(u)
            elif declared := ctx.declared(u):
                names[u] = ctx.fresh("val" if op is Ops.LOAD else "alu")
            text = rewrite(u, ctx=ctx)
            if not isinstance(text, str):
                raise NotImplementedError(f"{type(self).__name__}: cannot render {op}")
            if op in statements or op is Ops.LOAD and declared:  # (a load declares its value itself)
                body.extend(indent + line for line in text.split("\n"))
            elif declared:
                body.append(f"{indent}{self.render_dtype(u.dtype)} {names[u]} = {text};")
            else:
                names[u] = text
            if op is Ops.RANGE:
                indent += "  "
        return body, ctx


# *** the CPU: GCC vector extensions, OpenMP, bfloat16 as bits, guarded helpers ***

# no <math.h> (parsing it cost every compiler run a few ms): the prelude declares the functions of _MATH itself, and
# INFINITY and NAN as glibc defines them (an identical redefinition is no error where a source includes it as well)
_PRELUDE = """#ifndef EMB_PRELUDE
#define EMB_PRELUDE
#ifndef INFINITY
#define INFINITY (__builtin_inff ())
#endif
#ifndef NAN
#define NAN (__builtin_nanf (""))
#endif
float exp2f(float); float log2f(float); float sinf(float); float sqrtf(float); float truncf(float);
float powf(float, float); float fmodf(float, float); float fmaxf(float, float);
double exp2(double); double log2(double); double sin(double); double sqrt(double); double trunc(double);
double pow(double, double); double fmod(double, double); double fmax(double, double);
static inline float emb_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
static inline double emb_max(double a, double b) { return (a != a || a > b) ? a : b; }
static inline float emb_bf16_to_f32(unsigned short x) { unsigned int u = (unsigned int)x << 16; float f;
  __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned short emb_f32_to_bf16(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  /* NaN stays NaN */
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }  /* round to nearest even */
#endif
"""


FUNCTION_DIGEST = 10  # hex digits of the source's sha256 in a CPU kernel's function name (CRenderer.render_program)


def guarded(key: str, text: str) -> str:
    """`text` defined once per translation unit (the sources of several kernels compile as one: see CPUCompiler)."""
    return f"#ifndef EMB_{key}\n#define EMB_{key}\n{text}#endif\n"


def bits_const(value: float, dt: DType) -> str:
    """A float16 or bfloat16 constant for a target that stores the type as its 16 bits (an unsigned short)."""
    bits = struct.unpack("<H", struct.pack("<e", float(value)))[0] if dt == dtypes.float16 else \
        struct.unpack("<I", struct.pack("<f", float(value)))[0] >> 16  # (bfloat16: the top half of the float32)
    return f"((unsigned short)0x{bits:04x})"


def lane_const(ctx: RenderContext, value: int | float | bool, dt: DType) -> str:
    return bits_const(value, dt) if dt == dtypes.bfloat16 else render_const(value, dt, ctx.ctype(dt))


def vector_const(ctx: RenderContext, x: UOp) -> str | None:
    if x.dtype.count == 1:
        return None
    lane = ("-1" if x.arg else "0") if x.dtype.scalar() == dtypes.bool else lane_const(ctx, x.arg, x.dtype.scalar())
    return f"{ctx.ctype(x.dtype)}_bcast({lane})"  # (a mask lane is -1 or 0)


def vectorize(ctx: RenderContext, x: UOp) -> str:
    # one value in every lane is a broadcast; mask lanes are -1 or 0
    lanes = [f"-(int)({ctx[s]})" if x.dtype.scalar() == dtypes.bool else ctx[s] for s in x.src]
    return f"{ctx.ctype(x.dtype)}_bcast({lanes[0]})" if all(s is x.src[0] for s in x.src) else \
        f"(({ctx.ctype(x.dtype)}){{{', '.join(lanes)}}})"


def vector_load(ctx: RenderContext, x: UOp, idx: UOp) -> str | None:
    # a vector of consecutive elements, unaligned: through the `_u` type of vector_helpers (one statement, where a
    # zeroed variable and a memcpy into it were three for the compiler to parse and fold)
    if x.dtype.count == 1:
        return None
    vt = ctx.ctype(x.dtype)
    read = f"*(const {vt}_u*)&{ctx[idx]}"
    if len(idx.src) == 2:
        return f"{vt} {ctx[x]} = {read};"
    return f"{vt} {ctx[x]} = {{{render_const(0, x.dtype.scalar(), '')}}};\n" + gated(ctx, idx, f"{ctx[x]} = {read};")


def vector_store(ctx: RenderContext, idx: UOp, v: UOp) -> str | None:
    if v.dtype.count == 1:
        return None
    return gated(ctx, idx, f"*({ctx.ctype(v.dtype)}_u*)&{ctx[idx]} = {ctx[v]};")


def vector_alu(ctx: RenderContext, x: UOp) -> str | None:
    # max, exp2 and select by the helpers of CRenderer.vector_helpers; 1/x divides a broadcast
    if x.dtype.count == 1:
        return None
    if x.op is Ops.RECIPROCAL:
        return f"({ctx.ctype(x.dtype)}_bcast(1.0{'f' if x.dtype.scalar() == dtypes.float32 else ''})/{ctx[x.src[0]]})"
    return call(ctx, f"{ctx.ctype(x.dtype)}_{ {Ops.MAX: 'max', Ops.EXP2: 'exp2', Ops.WHERE: 'sel'}[x.op]}", x)


def thread_or_unrolled_range(ctx: RenderContext, x: UOp) -> str | None:
    if x.arg[1] is AxisType.THREAD:
        n = ctx.renderer.max_threads
        return f"#pragma omp parallel for num_threads({n}) if({ctx[x.src[0]]} > 1)\n" + render_range(ctx, x)
    if x.arg[1] in (AxisType.UPCAST, AxisType.UNROLL) and x.src[0].op is Ops.CONST:
        return f"#pragma GCC unroll {x.src[0].arg}\n" + render_range(ctx, x)
    return None


c_rewrite = PatternMatcher([
    (UPat(Ops.CONST, dtype=dtypes.bfloat16, name="x"), lambda ctx, x: lane_const(ctx, x.arg, x.dtype)),
    (UPat(Ops.CONST, name="x"), vector_const),
    (UPat(Ops.CAST, src=(UPat(dtype=dtypes.bfloat16, name="y"),), name="x"),
     lambda ctx, x, y: f"(({ctx.ctype(x.dtype)})emb_bf16_to_f32({ctx[y]}))"),
    (UPat(Ops.CAST, dtype=dtypes.bfloat16, name="x"), lambda ctx, x: f"emb_f32_to_bf16((float){ctx[x.src[0]]})"),
    (UPat(Ops.CAST, name="x"), lambda ctx, x: f"__builtin_convertvector({ctx[x.src[0]]}, {ctx.ctype(x.dtype)})"
     if x.dtype.count > 1 else None),
    (UPat(Ops.BITCAST, name="x"),
     lambda ctx, x: f"({{ {ctx.ctype(x.dtype)} t_; __builtin_memcpy(&t_, &{ctx[x.src[0]]}, sizeof(t_)); t_; }})"),
    (UPat(Ops.VECTORIZE, name="x"), vectorize),
    (UPat(Ops.GEP, src=(UPat.var("a"), UPat.var("b")), name="x"),  # a shuffle of the lanes of a and b
     lambda ctx, x, a, b: f"__builtin_shufflevector({ctx[a]}, {ctx[b]}, {', '.join(map(str, x.arg))})"),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), allow_any_len=True, name="x"), vector_load),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("v")), allow_any_len=True), vector_store),
    (UPat((Ops.MAX, Ops.EXP2, Ops.WHERE, Ops.RECIPROCAL), name="x"), vector_alu),
    (UPat(Ops.MAX, dtype=dtypes.floats, name="x"),  # NaN-propagating, as numpy
     lambda ctx, x: call(ctx, "emb_max" if x.dtype == dtypes.float64 else "emb_maxf", x)),
    (UPat(Ops.RANGE, name="x"), thread_or_unrolled_range),
    # a panel (opt PACK) on the stack of the thread that fills it
    (UPat(Ops.DEFINE_LOCAL, name="x"),
     lambda ctx, x: f"{ctx.ctype(x.dtype.base)} {ctx[x]}[{x.dtype.size}] __attribute__((aligned(64)));"),
])


def _omp_threads() -> int:
    return settings.OMP_NUM_THREADS.value


_VECTOR_DTYPES = (dtypes.float32, dtypes.float64, dtypes.int32)


class CRenderer(CStyleLanguage):
    """C for the host: GCC vector types (`v16_float`) and their helpers, OpenMP for THREAD loops, float16 as
    `_Float16`, bfloat16 stored as its 16 bits and computed in float."""

    device = "CPU"
    has_threads = True
    max_threads = _omp_threads()
    max_vector = 16
    type_map = {**C_TYPES, dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short"}
    supports_dtypes = tuple(type_map)
    # GCC vector extensions: + * / negation and comparisons are lane-wise; max, select, reciprocal, exp2 of float32
    # and conversions by the helpers of vector_helpers or builtins; a comparison is a mask of -1 or 0 per int lane
    vector_dtypes = _VECTOR_DTYPES
    vector_alu = {**dict.fromkeys((Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.WHERE, Ops.CAST, Ops.CMPLT, Ops.CMPNE,
                                   Ops.CMPEQ), _VECTOR_DTYPES),
                  Ops.FDIV: (dtypes.float32, dtypes.float64), Ops.RECIPROCAL: (dtypes.float32, dtypes.float64),
                  Ops.EXP2: (dtypes.float32,)}
    mask_itemsize = 4
    mask_alu = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE, Ops.ADD, Ops.MUL})  # (bool + and * are or, and)
    # float16 math too, with a cast after each op: GCC evaluates _Float16 expressions in float (excess precision) and
    # rounds only where it must, so a*b*c overflowed nowhere (PyTorch rounds every op)
    compute_via_float32 = (dtypes.bfloat16, dtypes.float16)
    string_rewrite = c_rewrite + base_rewrite

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1 and dt.scalar() == dtypes.bool:  # a mask: -1 or 0 in ints as wide as the values compared
            return f"v{dt.count}_int"
        if dt.count > 1:  # a GCC vector type, declared by vector_helpers: `v16_float`
            return f"v{dt.count}_{self.render_dtype(dt.scalar()).replace(' ', '_')}"
        return super().render_dtype(dt)

    def vector_helpers(self, dt: DType, typedefs: set[str]) -> str:
        """The typedef of a vector type (and its `_u` twin, unaligned and may-alias, that loads and stores read and
        write memory through) and its helpers: broadcast, NaN-propagating max (as emb_maxf), and for float
        exp2 (2^round(x) from the exponent bits times a degree-7 Taylor polynomial of 2^f, |f| <= 1/2: relative
        error < 1e-7; 0 below 2^-125, inf from 2^128 on, NaN stays NaN). round(x) comes from adding 1.5 * 2^23 (its
        low bits are then the integer, no float-int conversion); out-of-range lanes compute garbage bits that the
        two selects at the end replace (x + inf is inf, or NaN for a NaN)."""
        vt, st, n = self.render_dtype(dt), self.render_dtype(dt.scalar()), dt.count
        it = f"v{n}_{'int' if dt.scalar().itemsize == 4 else 'long_long'}"
        ist = "int" if dt.scalar().itemsize == 4 else "long long"
        out = ""
        for t, v in ((st, vt), (ist, it)):  # (an int vector is its own mask type: declared once)
            if v not in typedefs:
                typedefs.add(v)
                size, al = dt.itemsize, dt.scalar().itemsize
                out += guarded(f"T_{v}", f"typedef {t} {v} __attribute__((vector_size({size})));\n"
                               f"typedef {t} {v}_u __attribute__((vector_size({size}), aligned({al}), may_alias));\n")
        helpers = (f"static inline {vt} {vt}_bcast({st} x) {{ return ({vt}){{{', '.join(['x'] * n)}}}; }}\n"
                   f"static inline {vt} {vt}_sel({it} m, {vt} a, {vt} b) {{ "
                   f"return ({vt})((m & ({it})a) | (~m & ({it})b)); }}\n"
                   f"static inline {vt} {vt}_max({vt} a, {vt} b) {{ return {vt}_sel((a != a) | (a > b), a, b); }}\n")
        if dt.scalar() == dtypes.float32:
            taylor = "".join(f"+f*({1 / math.factorial(k)!r}f" for k in range(1, 8)) + ")" * 7
            helpers += (f"static inline {vt} {vt}_exp2({vt} x) {{\n"
                        f"  {it} over = (x >= 128.0f) | (x != x), under = x < -125.0f;\n"
                        f"  {vt} c = x + 12582912.0f;  /* 1.5 * 2^23: the float's low bits are round(x) */\n"
                        f"  {it} n = ({it})c - 0x4B400000;\n"
                        f"  {vt} f = (x - (c - 12582912.0f)) * 0.6931471805599453f;\n"
                        f"  {vt} p = 1.0f{taylor};\n"
                        f"  {vt} r = ({vt})(~under & (({it})p + (n << 23)));\n"
                        f"  return {vt}_sel(over, x + INFINITY, r);\n"
                        f"}}\n")
        return out + guarded(f"H_{vt}", helpers)

    def render_kernel(self, name: str, body: list[str], uops: tuple[UOp, ...], ctx: RenderContext) -> str:
        # the vector types used (a mask is an int vector) each get their typedef and helpers once
        vectors = sorted({dtypes.int32.vec(u.dtype.count) if u.dtype.scalar() == dtypes.bool else u.dtype
                          for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)})
        declared: set[str] = set()
        typedefs = "".join(self.vector_helpers(dt, declared) for dt in vectors)
        return _PRELUDE + typedefs + super().render_kernel(name, body, uops, ctx)

    def render_program(self, name: str, uops: tuple[UOp, ...]) -> tuple[str, str]:
        """The function is `name` and a digest of the source: the CPU compiler builds a batch of kernels into one
        library, and kernels of one shape (one display name: the three E_327680_16 of an AdamW step) then share a
        batch instead of waiting for a batch each. Equal programs get equal names (and one compile); two of one name
        and digest in a batch fail it, which then compiles source by source."""
        body, ctx = self.render_body(uops)
        digest = hashlib.sha256(self.render_kernel(name, body, uops, ctx).encode()).hexdigest()[:FUNCTION_DIGEST]
        function = f"{name}_{digest}"
        return function, self.render_kernel(function, body, uops, ctx)
