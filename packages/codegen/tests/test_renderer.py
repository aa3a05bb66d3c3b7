"""Renderers as rule tables: a subclass that overrides one rule changes only that op's text; the generic C base renders
scalar C alone; the vector capabilities on the renderer decide what the lowering vectorizes."""

import ctypes
import dataclasses
import math
import subprocess

import numpy as np
import pytest

from ember.codegen import CRenderer, CStyleLanguage, to_program
from ember.uops import AxisType, Ops, PatternMatcher, UOp, UPat, dtypes, files


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def exp2_mul_ast(n):
    """out[i] = exp2(a[i]) * b[i] + a[i]"""
    r0 = UOp.range(n, 0, AxisType.GLOBAL)
    a, b = param(1, n).index(r0).load(), param(2, n).index(r0).load()
    return UOp.sink(param(0, n).index(r0).store(a.exp2() * b + a).end(r0))


def matvec_ast(n, m):
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load() * param(2, m).index(r1).load()
    return UOp.sink(param(0, n).index(r0).store(UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.ADD)).end(r0))


def row_max_ast(n, m):
    """out[i] = max_j a[i, j]"""
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load()
    return UOp.sink(param(0, n).index(r0).store(UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.MAX)).end(r0))


class MyExp2Renderer(CRenderer):
    string_rewrite = PatternMatcher([
        (UPat(Ops.EXP2, dtype=dtypes.float32, name="x"), lambda ctx, x: f"my_exp2({ctx[x.src[0]]})"),
    ]) + CRenderer.string_rewrite


def test_a_subclass_overriding_one_rule_changes_only_that_op(run_c, rng):
    ast = exp2_mul_ast(100)
    base, mine = to_program(ast, CRenderer(), []), to_program(ast, MyExp2Renderer(), [])
    (head, fn), (my_head, my_fn) = (p.src.split("\nvoid ") for p in (base, mine))  # the prelude, the function
    assert "exp2f(" in fn and my_head == head  # (each function is named by its own source: mine.function differs)
    assert my_fn == fn.replace("exp2f(", "my_exp2(").replace(base.function, mine.function)
    a, b = rng.standard_normal(100, dtype=np.float32), rng.standard_normal(100, dtype=np.float32)
    helper = "#include <math.h>\nstatic float my_exp2(float x) { return exp2f(x); }\n"
    (out, *_) = run_c(dataclasses.replace(mine, src=helper + mine.src), np.zeros(100, np.float32), a, b)
    np.testing.assert_allclose(out, np.exp2(a) * b + a, rtol=1e-5, atol=1e-6)


def test_the_generic_c_base_renders_scalar_c(run_c, rng):
    # no vectors, threads, pragmas or helpers: plain C99 that any C compiler takes
    prg = to_program(matvec_ast(7, 33), CStyleLanguage())
    assert "v16" not in prg.src and "#pragma" not in prg.src and "emb_" not in prg.src
    a, b = rng.standard_normal((7, 33), dtype=np.float32), rng.standard_normal(33, dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros(7, np.float32), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_the_cpu_prelude_declares_the_math_functions_without_math_h(tmp_path):
    # the prelude replaces <math.h>: each function of the rules' table is declared (as the compiler's builtin: a
    # wrong prototype warns), INFINITY and NAN defined; a source that includes <math.h> as well still compiles (the
    # same definitions), and the values are the library's
    from ember.codegen.cstyle import _MATH, _PRELUDE
    two = (Ops.POW, Ops.MOD, Ops.MAX)
    calls = [f"{fn}({'x, y' if op in two else 'x'})" for op, fns in _MATH.items() for fn in fns]
    body = "".join(f"  out[{i}] = {c};\n" for i, c in enumerate(calls))
    src = (f"void f(double* restrict out, double x, double y) {{\n{body}  out[{len(calls)}] = INFINITY;\n"
           f"  out[{len(calls) + 1}] = NAN;\n}}\n")
    for head in ("", "#include <math.h>\n"):
        (tmp_path / "m.c").write_text(head + _PRELUDE + src)
        subprocess.run(["cc", "-std=c11", "-O1", "-Werror", "-Werror=implicit-function-declaration", "-fPIC",
                        "-shared", "m.c", "-o", "m.so", "-lm"], cwd=tmp_path, check=True, capture_output=True)
        out = np.zeros(len(calls) + 2)
        ctypes.CDLL(str(tmp_path / "m.so")).f(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_double(0.7),
                                              ctypes.c_double(0.3))
        x, y = 0.7, 0.3
        ref = {Ops.EXP2: 2 ** x, Ops.LOG2: math.log2(x), Ops.SIN: math.sin(x), Ops.SQRT: math.sqrt(x), Ops.TRUNC: 0.0,
               Ops.POW: x ** y, Ops.MOD: math.fmod(x, y), Ops.MAX: max(x, y)}
        want = [ref[op] for op, fns in _MATH.items() for _ in fns] + [math.inf]
        np.testing.assert_allclose(out[:-1], want, rtol=1e-6)
        assert np.isnan(out[-1])


def test_an_op_it_has_no_rule_for_is_an_error():
    r0 = UOp.range(4, 0, AxisType.GLOBAL)
    ast = UOp.sink(param(0, 4).index(r0).store(param(1, 4).index(r0).load().cast(dtypes.bfloat16)
                                               .cast(dtypes.float32)).end(r0))
    to_program(ast, CRenderer(), [])  # (the CPU stores bfloat16 as bits)
    with pytest.raises(NotImplementedError, match="CStyleLanguage: dtype dtypes.bfloat16 is not supported"):
        to_program(ast, CStyleLanguage(), [])


class ScalarCRenderer(CRenderer):
    max_vector = 1


class NoVectorALURenderer(CRenderer):
    vector_alu = {}
    mask_alu = frozenset()


class NoVectorExp2Renderer(CRenderer):
    vector_alu = {op: dts for op, dts in CRenderer.vector_alu.items() if op is not Ops.EXP2}


@pytest.mark.parametrize("ast_fn, shape, ref", [
    (exp2_mul_ast, (256,), lambda a, b: np.exp2(a) * b + a),
    (matvec_ast, (32, 64), lambda a, b: a @ b),
    (row_max_ast, (32, 64), lambda a: a.max(1)),
])
def test_the_vector_capabilities_drive_vectorization(run_c, rng, ast_fn, shape, ref):
    ast = ast_fn(*shape)
    ins = [rng.standard_normal(shape, dtype=np.float32)] + \
        ([rng.standard_normal(shape[-1:], dtype=np.float32)] if ast_fn is not row_max_ast else [])
    want = ref(*ins)
    srcs = {}
    for renderer in (CRenderer(), ScalarCRenderer(), NoVectorALURenderer(), NoVectorExp2Renderer()):
        prg = to_program(ast, renderer)
        (out, *_) = run_c(prg, np.zeros(want.shape, np.float32), *ins)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=type(renderer).__name__)
        srcs[type(renderer).__name__] = prg.src
    assert "v16_float" in srcs["CRenderer"]  # the heuristic's upcasts become vectors on the CPU
    assert "vector_size" not in srcs["ScalarCRenderer"]  # max_vector 1: no vector type at all
    # no vector ALU: whatever vectors remain (loads, stores) are computed on lane by lane
    assert not any(f"v16_float_{h}(" in srcs["NoVectorALURenderer"] for h in ("exp2", "max", "sel"))
    if ast_fn is exp2_mul_ast:
        fns = {name: src.split("\nvoid ")[1] for name, src in srcs.items()}  # (the prelude declares exp2f)
        assert "v16_float_exp2(" in fns["CRenderer"] and "exp2f(" not in fns["CRenderer"]
        # exp2 alone lane by lane, the rest still on vectors
        assert "exp2f(" in fns["NoVectorExp2Renderer"] and "v16_float" in fns["NoVectorExp2Renderer"]


def test_the_program_cache_tells_renderers_apart_by_capability(tmp_path, monkeypatch):
    from ember.codegen import cached_program

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    ast = exp2_mul_ast(256)
    vector, no_alu = CRenderer(), CRenderer()
    no_alu.vector_alu, no_alu.mask_alu = {}, frozenset()  # one class, other capabilities: other programs
    assert "v16_float_exp2(" in cached_program(ast, vector).src
    assert "v16_float_exp2(" not in cached_program(ast, no_alu).src
    assert len(files.entries(tmp_path / "program")) == 2
