import itertools
import math

import numpy as np
import pytest

from ember.codegen import (
    CRenderer,
    KernelOptError,
    Opt,
    OptOps,
    apply_opts,
    hand_coded_opts,
    kernel_ranges,
    linearize,
    lower,
    to_program,
)
from ember.uops import AxisType, Ops, UOp, dtypes


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def matvec_ast(n, m):
    """out[i] = sum_j a[i, j] * b[j]"""
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load() * param(2, m).index(r1).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.ADD)
    return UOp.sink(param(0, n).index(r0).store(red).end(r0))


def matmul_ast(n, k, m):
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    val = param(1, n * k).index(r0 * k + r2).load() * param(2, k * m).index(r2 * m + r1).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (val, r2), Ops.ADD)
    return UOp.sink(param(0, n * m).index(r0 * m + r1).store(red).end(r0, r1))


def elementwise_ast(n, dt=dtypes.float32):
    r0 = UOp.range(n, 0, AxisType.GLOBAL)
    a, b = param(1, n, dt).index(r0).load(), param(2, n, dt).index(r0).load()
    return UOp.sink(param(0, n, dt).index(r0).store(a * b + a).end(r0))


@pytest.mark.parametrize("n, m", [(1, 1), (7, 33), (33, 7), (64, 128), (1000, 3)])
def test_matvec_default_opts(run_c, rng, n, m):
    prg = to_program(matvec_ast(n, m), CRenderer())
    a, b = rng.standard_normal((n, m), dtype=np.float32), rng.standard_normal(m, dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros(n, np.float32), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # a multiply and an add per element (the first add into the identity disappears when the reduce is unrolled),
    # plus the sum of 16 partial sums per row where the heuristic splits the reduce into a vector of them
    assert 2 * n * m - n <= prg.estimates.flops <= 2 * n * m + 16 * n
    # every a once; b once per row, or once in all when its loads are hoisted out of the unrolled reduce
    assert prg.estimates.bytes_written == 4 * n and 4 * n * m + 4 * m <= prg.estimates.bytes_read <= 8 * n * m


def _legal_opt_lists(ast):
    rngs = kernel_ranges(ast)
    cands = []
    for i, r in enumerate(rngs):
        size = r.src[0].arg
        for amt in (2, 3, 4, 8):
            op = OptOps.UPCAST if r.arg[1] is AxisType.GLOBAL else OptOps.UNROLL
            if size % amt == 0:
                cands.append(Opt(op, i, amt))
    cands.append(Opt(OptOps.THREAD, 0, 2))
    return [[]] + [[c] for c in cands] + [list(p) for p in itertools.combinations(cands, 2)]


@pytest.mark.parametrize("n, k, m", [(6, 12, 8), (9, 8, 4), (2, 3, 1)])
def test_matmul_every_opt_combination(run_c, rng, n, k, m):
    ast = matmul_ast(n, k, m)
    a, b = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((k, m), dtype=np.float32)
    tried = 0
    for opts in _legal_opt_lists(ast):
        try:
            prg = to_program(ast, CRenderer(), opts)
        except KernelOptError:
            continue  # e.g. the second opt's axis index points at a range the first opt changed
        (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5, err_msg=str(opts))
        tried += 1
    assert tried >= 5


@pytest.mark.parametrize("dt, npdt", [(dtypes.float32, np.float32), (dtypes.int32, np.int32),
                                      (dtypes.float64, np.float64),
                                      (dtypes.int8, np.int8), (dtypes.float16, np.float16)])
def test_elementwise_dtypes(run_c, rng, dt, npdt):
    n = 1001
    a = (rng.standard_normal(n) * 10).astype(npdt)
    b = (rng.standard_normal(n) * 10).astype(npdt)
    (out, *_) = run_c(to_program(elementwise_ast(n, dt), CRenderer()), np.zeros(n, npdt), a, b)
    with np.errstate(all="ignore"):
        # float16 rounds after every op, as numpy and PyTorch (the C computes each in float and casts back)
        want = a * b + a
    # the C compiler contracts a*b+a into one FMA (a single rounding): equal to numpy within an ulp or two
    rtol = {dtypes.float16: 1e-3, dtypes.float32: 1e-5, dtypes.float64: 1e-12}.get(dt, 0)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol)


def test_gated_load_and_max_reduce(run_c, rng):
    # out[i] = max_j (j < 3 ? a[i*5+j] : 0) over j < 5 : a padded read
    n, m = 6, 5
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    valid = r1 < 3
    val = param(1, n * m).index(r0 * m + r1, valid=valid).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.MAX)
    prg = to_program(UOp.sink(param(0, n).index(r0).store(red).end(r0)), CRenderer())
    a = rng.standard_normal((n, m), dtype=np.float32) - 5
    (out, *_) = run_c(prg, np.zeros(n, np.float32), a)
    np.testing.assert_allclose(out, np.maximum(a[:, :3].max(1), 0))
    assert "?" in prg.src  # the gate guards the load


def test_symbolic_size_variable(run_c, rng):
    n = UOp.variable("n", 1, 100)
    r0 = UOp.range(n, 0, AxisType.GLOBAL)
    ast = UOp.sink(param(0, 100).index(r0).store(param(1, 100).index(r0).load() * 2.0).end(r0))
    prg = to_program(ast, CRenderer(), [])
    assert prg.vars == (n,)
    a = rng.standard_normal(100, dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros(100, np.float32), a, vals=(37,))
    np.testing.assert_allclose(out[:37], a[:37] * 2)
    assert (out[37:] == 0).all()


def test_hoisting_loop_invariant_loads():
    uops = linearize(lower(matvec_ast(8, 16)))
    depth, depth_of = 0, {}
    for u in uops:
        depth_of[u] = depth
        depth += u.op is Ops.RANGE
        depth -= u.op is Ops.END
    b_load = next(u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 2)
    acc_init = next(u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_REG)
    assert depth_of[acc_init] == 1 and depth_of[b_load] == 2
    assert sum(u.op is Ops.RANGE for u in uops) == sum(u.op is Ops.END for u in uops) == 2


def test_hand_coded_opts_and_errors(run_c, rng):
    ast = matmul_ast(64, 64, 64)
    opts = hand_coded_opts(ast, CRenderer())
    # properties, not the heuristic's exact choice: an output axis is upcast, and the opts give the right product
    rngs = kernel_ranges(ast)
    assert any(o.op is OptOps.UPCAST and rngs[o.axis].arg[1] is AxisType.GLOBAL for o in opts if o.axis < len(rngs))
    a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    (out, *_) = run_c(to_program(ast, CRenderer(), opts), np.zeros((64, 64), np.float32), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(KernelOptError, match="must be >= 2 and divide"):
        apply_opts(ast, [Opt(OptOps.UPCAST, 1, 5)])
    with pytest.raises(KernelOptError, match="needs an axis of kind"):
        apply_opts(ast, [Opt(OptOps.UNROLL, 0, 2)])
    with pytest.raises(KernelOptError, match="out of range"):
        apply_opts(ast, [Opt(OptOps.UPCAST, 9, 2)])
    with pytest.raises(KernelOptError, match="CRenderer has no workgroups"):
        to_program(ast, CRenderer(), [Opt(OptOps.LOCAL, 0, 2)])
    with pytest.raises(ValueError, match="must be a SINK"):
        to_program(param(0, 4), CRenderer())


def check_c_layout(src):
    """The function body is one statement per line, indented two spaces per open loop, braces balanced."""
    body = src[src.index("void "):].splitlines()[1:-1]
    depth = 1
    for line in body:
        depth -= line.strip() == "}"
        assert line == "  " * depth + line.strip() and line.strip(), f"badly indented: {line!r}"
        depth += line.endswith("{")
    assert depth == 1, "unbalanced braces"


def test_renderer_output_is_readable(run_c, rng):
    prg = to_program(matmul_ast(64, 64, 64), CRenderer())
    sizes = [int(x) for x in prg.name.split("_")[1:]]
    assert prg.name.startswith("r_") and math.prod(sizes) == 64 ** 3  # the name lists the axes' sizes
    assert "float* restrict data0" in prg.src and "const float* restrict data1" in prg.src
    assert [b.written for b in prg.bufs] == [True, False, False]
    # one for loop per RANGE of the program, each statement on its own line, indented by loop depth
    assert prg.src.count("for (") == sum(u.op is Ops.RANGE for u in prg.uops)
    check_c_layout(prg.src)
    a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros((64, 64), np.float32), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_bfloat16_math_in_float(run_c, rng):
    n = 257
    ast = elementwise_ast(n, dtypes.bfloat16)
    prg = to_program(ast, CRenderer())
    assert "emb_bf16_to_f32" in prg.src and "emb_f32_to_bf16" in prg.src
    a32 = (rng.standard_normal(n) * 10).astype(np.float32)
    b32 = (rng.standard_normal(n) * 10).astype(np.float32)

    def to_bf16(x):  # round to nearest even, as bits
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    def from_bf16(b):
        return (b.astype(np.uint32) << 16).view(np.float32)

    a, b = to_bf16(a32), to_bf16(b32)
    (out, *_) = run_c(prg, np.zeros(n, np.uint16), a, b)
    # each op rounds to bfloat16 (a*b first, then + a), computed in float32
    want = to_bf16(from_bf16(to_bf16(from_bf16(a) * from_bf16(b))) + from_bf16(a))
    np.testing.assert_array_equal(out, want)
