"""C renderer: a linear program becomes one C function; OpenMP shares THREAD loops across cores."""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable

from ember.codegen.renderer import Renderer
from ember.uops import AxisType, DType, Ops, PtrDType, UOp, dtypes

C_TYPES = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
           dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
           dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.index: "long long",
           dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short", dtypes.float32: "float",
           dtypes.float64: "double"}

_PRELUDE = """#include <math.h>
#ifndef EMB_PRELUDE
#define EMB_PRELUDE
static inline float emb_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
static inline double emb_max(double a, double b) { return (a != a || a > b) ? a : b; }
static inline float emb_bf16_to_f32(unsigned short x) { unsigned int u = (unsigned int)x << 16; float f;
  __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned short emb_f32_to_bf16(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  /* NaN stays NaN */
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }  /* round to nearest even */
#endif
"""


def guarded(key: str, text: str) -> str:
    """`text` defined once per translation unit (the sources of several kernels compile as one: see CPUCompiler)."""
    return f"#ifndef EMB_{key}\n#define EMB_{key}\n{text}#endif\n"


# float math of each width; float16 computes in float
_MATH = {"float": ("exp2f", "log2f", "sinf", "sqrtf", "truncf", "powf", "fmodf", "emb_maxf"),
         "double": ("exp2", "log2", "sin", "sqrt", "trunc", "pow", "fmod", "emb_max")}


def render_const(value: int | float | bool, dtype: DType) -> str:
    if dtype == dtypes.bool:
        return "1" if value else "0"
    if dtype == dtypes.bfloat16:  # stored as its bits: the top half of the float32
        return f"((unsigned short)0x{struct.unpack('I', struct.pack('f', float(value)))[0] >> 16:04x})"
    if dtypes.is_float(dtype):
        v = float(value)
        if math.isnan(v):
            txt = "NAN"
        elif math.isinf(v):
            txt = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            txt = repr(v) + ("f" if dtype != dtypes.float64 else "")
        return txt if dtype in (dtypes.float32, dtypes.float64) else f"(({C_TYPES[dtype]}){txt})"
    v = int(value)
    if dtype in (dtypes.int64, dtypes.index) and v == dtypes.min(dtypes.int64):
        return "(-9223372036854775807ll-1)"
    if dtype == dtypes.int32 and v == dtypes.min(dtypes.int32):
        return "(-2147483647-1)"
    suffix = {dtypes.int64: "ll", dtypes.index: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dtype, "")
    return f"{v}{suffix}" if dtype in (dtypes.int32, dtypes.int64, dtypes.index, dtypes.uint32, dtypes.uint64) \
        else f"(({C_TYPES[dtype]}){v})"


_VECTOR_DTYPES = (dtypes.float32, dtypes.float64, dtypes.int32)


class CRenderer(Renderer):
    """C for the host: one function per kernel, `restrict` buffer pointers, OpenMP for THREAD loops."""

    device = "CPU"
    has_threads = True
    max_threads = int(os.environ.get("OMP_NUM_THREADS", 0)) or (os.cpu_count() or 1)
    max_vector = 16
    supports_dtypes = tuple(C_TYPES)
    # GCC vector extensions: + * / negation and comparisons are lane-wise; max, select, reciprocal, exp2 of float32
    # and conversions by the helpers of _vector_helpers or builtins; a comparison is a mask of -1 or 0 per int lane
    vector_dtypes = _VECTOR_DTYPES
    vector_alu = {**dict.fromkeys((Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.WHERE, Ops.CAST, Ops.CMPLT, Ops.CMPNE,
                                   Ops.CMPEQ), _VECTOR_DTYPES),
                  Ops.FDIV: (dtypes.float32, dtypes.float64), Ops.RECIPROCAL: (dtypes.float32, dtypes.float64),
                  Ops.EXP2: (dtypes.float32,)}
    mask_itemsize = 4
    mask_alu = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE, Ops.ADD, Ops.MUL})  # (bool + and * are or, and)

    def ctype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            return self.ctype(dt.base) + "*"
        if dt.count > 1 and dt.scalar() == dtypes.bool:  # a mask: -1 or 0 in ints as wide as the values compared
            return f"v{dt.count}_int"
        if dt.count > 1:  # a GCC vector type, declared by render: `v16_float`
            return f"v{dt.count}_{self.ctype(dt.scalar()).replace(' ', '_')}"
        if dt not in C_TYPES:
            raise NotImplementedError(f"CRenderer: dtype {dt!r} is not supported by the C renderer yet")
        return C_TYPES[dt]

    def _vector_helpers(self, dt: DType, typedefs: set[str]) -> str:
        """The typedef of a vector type and its helpers: broadcast, NaN-propagating max (as emb_maxf), and for float
        exp2 (2^round(x) from the exponent bits times a degree-7 Taylor polynomial of 2^f, |f| <= 1/2: relative
        error < 1e-7; 0 below 2^-125, inf from 2^128 on, NaN stays NaN). round(x) comes from adding 1.5 * 2^23 (its
        low bits are then the integer, no float-int conversion); out-of-range lanes compute garbage bits that the
        two selects at the end replace (x + inf is inf, or NaN for a NaN)."""
        vt, st, n = self.ctype(dt), self.ctype(dt.scalar()), dt.count
        it = f"v{n}_{'int' if dt.scalar().itemsize == 4 else 'long_long'}"
        ist = "int" if dt.scalar().itemsize == 4 else "long long"
        out = ""
        for t, v in ((st, vt), (ist, it)):  # (an int vector is its own mask type: declared once)
            if v not in typedefs:
                typedefs.add(v)
                out += guarded(f"T_{v}", f"typedef {t} {v} __attribute__((vector_size({dt.itemsize})));\n")
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

    def _alu(self, u: UOp, a: list[str]) -> str:
        if u.dtype.count > 1 and u.op in (Ops.MAX, Ops.EXP2):  # vectors: the helpers of _vector_helpers
            return f"{self.ctype(u.dtype)}_{'max' if u.op is Ops.MAX else 'exp2'}({', '.join(a)})"
        if u.dtype.count > 1 and u.op is Ops.WHERE:
            return f"{self.ctype(u.dtype)}_sel({', '.join(a)})"
        if u.dtype.count > 1 and u.op is Ops.RECIPROCAL:
            return f"({self.ctype(u.dtype)}_bcast(1.0{'f' if u.dtype.scalar() == dtypes.float32 else ''})/{a[0]})"
        op, dt = u.op, u.src[0].dtype if u.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else u.dtype
        is_float = dtypes.is_float(dt)
        fns = _MATH["double" if dt == dtypes.float64 else "float"]
        binary: dict[Ops, Callable[[str, str], str]] = {
            Ops.ADD: lambda x, y: f"({x}+{y})", Ops.MUL: lambda x, y: f"({x}*{y})",
            Ops.IDIV: lambda x, y: f"({x}/{y})", Ops.FDIV: lambda x, y: f"({x}/{y})",
            Ops.MOD: (lambda x, y: f"{fns[6]}({x}, {y})") if is_float else (lambda x, y: f"({x}%{y})"),
            Ops.MAX: (lambda x, y: f"{fns[7]}({x}, {y})") if is_float else (lambda x, y: f"(({x}>{y})?{x}:{y})"),
            Ops.CMPLT: lambda x, y: f"({x}<{y})", Ops.CMPNE: lambda x, y: f"({x}!={y})",
            Ops.CMPEQ: lambda x, y: f"({x}=={y})", Ops.AND: lambda x, y: f"({x}&{y})",
            Ops.OR: lambda x, y: f"({x}|{y})", Ops.XOR: lambda x, y: f"({x}^{y})",
            Ops.SHL: lambda x, y: f"({x}<<{y})", Ops.SHR: lambda x, y: f"({x}>>{y})",
            Ops.POW: lambda x, y: f"{fns[5]}({x}, {y})"}
        unary = {Ops.EXP2: fns[0], Ops.LOG2: fns[1], Ops.SIN: fns[2], Ops.SQRT: fns[3], Ops.TRUNC: fns[4]}
        if dt.scalar() == dtypes.bool and op in (Ops.ADD, Ops.MUL):  # bool arithmetic stays bool: or / and
            op = Ops.OR if op is Ops.ADD else Ops.AND
        if op in binary:
            ret = binary[op](a[0], a[1])
        elif op in unary:
            ret = f"{unary[op]}({a[0]})"
        elif op is Ops.NEG:
            ret = f"(-{a[0]})"
        elif op is Ops.RECIPROCAL:
            ret = f"(1.0f/{a[0]})" if dt != dtypes.float64 else f"(1.0/{a[0]})"
        elif op is Ops.WHERE:
            ret = f"({a[0]}?{a[1]}:{a[2]})"
        elif op is Ops.MULACC:
            ret = f"(({a[0]}*{a[1]})+{a[2]})"
        else:
            raise NotImplementedError(f"CRenderer: {op} is not supported")
        # float16 math runs in float; the result is converted back where it is stored
        return f"(({self.ctype(u.dtype)}){ret})" if dt == dtypes.float16 and op in unary else ret

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        uses: dict[UOp, int] = {}
        loop_of: dict[UOp, UOp | None] = {}
        stack: list[UOp] = []
        for u in uops:
            for s in u.src:
                uses[s] = uses.get(s, 0) + 1
            loop_of[u] = stack[-1] if stack else None
            if u.op is Ops.RANGE:
                stack.append(u)
            elif u.op is Ops.END:
                stack.pop()
        users_loop: dict[UOp, UOp | None] = {}
        for u in uops:
            for s in u.src:
                users_loop[s] = loop_of[u]

        bitcast_srcs = {u.src[0] for u in uops if u.op is Ops.BITCAST}

        def inlinable(u: UOp) -> bool:
            # one use in the same loop: the expression moves into its user (no work moves into an inner loop)
            return u.op in (Ops.CONST, Ops.INDEX) or (u not in bitcast_srcs and u.op in (*_ALU_OPS, Ops.CAST) and
                                                      uses.get(u, 0) == 1 and users_loop.get(u) is loop_of[u])

        names: dict[UOp, str] = {}
        params: list[tuple[tuple[int, int | str], str]] = []
        written = {u.src[0].src[0] for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
        lines: list[str] = []
        counter = 0
        depth = 1

        def emit(line: str) -> None:
            lines.append("  " * depth + line)

        for u in uops:
            a = [names.get(s, "") for s in u.src]
            if u.op is Ops.PARAM:
                names[u] = f"data{u.arg}"
                const = "" if u in written else "const "
                params.append(((0, u.arg), f"{const}{self.ctype(u.dtype.base)}* restrict {names[u]}"))
            elif u.op is Ops.DEFINE_VAR:
                names[u] = u.arg[0]
                params.append(((1, u.arg[0]), f"long long {u.arg[0]}"))  # after the buffers, by name (vars order)
            elif u.op is Ops.CONST:
                c = render_const(u.arg, u.dtype.scalar())
                if u.dtype.count > 1 and u.dtype.scalar() == dtypes.bool:
                    c = "-1" if u.arg else "0"  # a mask lane
                names[u] = c if u.dtype.count == 1 else f"{self.ctype(u.dtype)}_bcast({c})"
            elif u.op is Ops.VECTORIZE:  # one value in every lane is a broadcast
                if u.dtype.scalar() == dtypes.bool:  # mask lanes: -1 or 0
                    a = [f"-(int)({x})" for x in a]
                names[u] = f"{self.ctype(u.dtype)}_bcast({a[0]})" if all(s is u.src[0] for s in u.src) else \
                    f"(({self.ctype(u.dtype)}){{{', '.join(a)}}})"
            elif u.op is Ops.GEP and isinstance(u.arg, tuple):  # a shuffle of the lanes of its sources
                names[u] = f"__builtin_shufflevector({a[0]}, {a[-1]}, {', '.join(map(str, u.arg))})"
            elif u.op is Ops.GEP:
                names[u] = f"{a[0]}[{u.arg}]"
            elif u.op is Ops.RANGE:
                r = names[u] = f"r{u.arg[0]}"
                kind = u.arg[1]
                if kind is AxisType.THREAD:
                    emit(f"#pragma omp parallel for num_threads({self.max_threads}) if({a[0]} > 1)")
                elif kind in (AxisType.UPCAST, AxisType.UNROLL) and u.src[0].op is Ops.CONST:
                    emit(f"#pragma GCC unroll {u.src[0].arg}")
                emit(f"for (long long {r} = 0; {r} < {a[0]}; {r}++) {{")
                depth += 1
            elif u.op is Ops.END:
                depth -= 1
                emit("}")
            elif u.op is Ops.DEFINE_REG:
                names[u] = f"acc{u.arg}"
            elif u.op is Ops.DEFINE_LOCAL:  # a panel (opt PACK) on the stack of the thread that fills it
                names[u] = f"local{u.arg}"
                emit(f"{self.ctype(u.dtype.base)} {names[u]}[{u.dtype.size}] __attribute__((aligned(64)));")
            elif u.op is Ops.INDEX:
                names[u] = f"{a[0]}[{a[1]}]"
            elif u.op is Ops.LOAD:
                if u.src[0].op is Ops.DEFINE_REG:
                    names[u] = a[0]
                    continue
                idx = u.src[0]
                names[u] = f"val{counter}"
                counter += 1
                if u.dtype.count > 1:  # a vector of consecutive elements, unaligned
                    load = f"__builtin_memcpy(&{names[u]}, &{names[idx]}, sizeof({names[u]}));"
                    zero = render_const(0, u.dtype.scalar())
                    emit(f"{self.ctype(u.dtype)} {names[u]} = {{{zero}}};")
                    emit(load if len(idx.src) == 2 else f"if ({names[idx.src[2]]}) {load}")
                    continue
                val = f"{names[idx]}" if len(idx.src) == 2 else f"({names[idx.src[2]]}?{names[idx]}:0)"
                emit(f"{self.ctype(u.dtype)} {names[u]} = {val};")
            elif u.op is Ops.STORE:
                if u.src[0].op is Ops.DEFINE_REG:
                    acc = u.src[0]
                    init = u.src[1] is acc.src[0]  # the identity: the STORE that starts a reduce declares it
                    emit(f"{self.ctype(acc.dtype)} {a[0]} = {a[1]};" if init else f"{a[0]} = {a[1]};")
                    continue
                idx = u.src[0]
                store = f"{names[idx]} = {a[1]};" if u.src[1].dtype.count == 1 else \
                    f"{{ {self.ctype(u.src[1].dtype)} v_ = {a[1]}; __builtin_memcpy(&{names[idx]}, &v_, sizeof(v_)); }}"
                emit(store if len(idx.src) == 2 else f"if ({names[idx.src[2]]}) {store}")
            elif u.op in _ALU_OPS or u.op in (Ops.CAST, Ops.BITCAST):
                if u.op is Ops.CAST and u.src[0].dtype == dtypes.bfloat16:
                    expr = f"(({self.ctype(u.dtype)})emb_bf16_to_f32({a[0]}))"
                elif u.op is Ops.CAST and u.dtype == dtypes.bfloat16:
                    expr = f"emb_f32_to_bf16((float){a[0]})"
                elif u.op is Ops.CAST and u.dtype.count > 1:
                    expr = f"__builtin_convertvector({a[0]}, {self.ctype(u.dtype)})"
                elif u.op is Ops.CAST:
                    expr = f"(({self.ctype(u.dtype)}){a[0]})"
                elif u.op is Ops.BITCAST:
                    expr = f"({{ {self.ctype(u.dtype)} t_; __builtin_memcpy(&t_, &{a[0]}, sizeof(t_)); t_; }})"
                else:
                    expr = self._alu(u, a)
                if inlinable(u):
                    names[u] = expr
                else:
                    names[u] = f"alu{counter}"
                    counter += 1
                    emit(f"{self.ctype(u.dtype)} {names[u]} = {expr};")
            elif u.op in (Ops.SINK, Ops.NOOP):
                continue
            else:
                raise NotImplementedError(f"CRenderer: cannot render {u.op}")
        signature = ", ".join(p for _, p in sorted(params))
        # the vector types used (a mask is an int vector) each get their typedef and helpers once
        vectors = sorted({dtypes.int32.vec(u.dtype.count) if u.dtype.scalar() == dtypes.bool else u.dtype
                          for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)})
        declared: set[str] = set()
        typedefs = "".join(self._vector_helpers(dt, declared) for dt in vectors)
        return _PRELUDE + typedefs + f"void {name}({signature}) {{\n" + "\n".join(lines) + "\n}\n"


_ALU_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.MUL,
                      Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
                      Ops.SHL, Ops.SHR, Ops.FDIV, Ops.POW, Ops.WHERE, Ops.MULACC})
