"""Loops whose size depends on another range (a causal reduce over keys j < i + 1, ember.schedule.attention): their
opts, the widening of the bound over an upcast's lanes, and the programs they make, against numpy."""

import math

import numpy as np
import pytest

from ember.codegen import CRenderer, KernelOptError, Opt, OptOps, apply_opts, kernel_ranges, to_program
from ember.uops import AxisType, Ops, UOp, dtypes


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def causal_row_max_ast(n):
    """out[i] = max over j < i + 1 of where(j <= i, a[i, j] * b[j], -inf): the mask stays under the bounded loop."""
    i = UOp.range(n, 0, AxisType.GLOBAL)
    j = UOp.range(i + 1, 1, AxisType.REDUCE)
    val = param(1, n * n).index(i * n + j).load() * param(2, n).index(j).load()
    masked = (i < j).where(UOp.const(dtypes.float32, -math.inf), val)
    red = UOp(Ops.REDUCE, dtypes.float32, (masked, j), Ops.MAX)
    return UOp.sink(param(0, n).index(i).store(red).end(i))


def expected(a, b):
    n = len(b)
    prod = a * b[None, :]
    return np.array([prod[i, :i + 1].max() for i in range(n)], np.float32)


@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UPCAST, 0, 4)], [Opt(OptOps.UPCAST, 0, 4),
                                                                         Opt(OptOps.THREAD, 0, 2)]])
def test_causal_row_max(run_c, rng, opts):
    n = 36
    prg = to_program(causal_row_max_ast(n), CRenderer(), opts)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros(n, np.float32), a, b)
    np.testing.assert_allclose(out, expected(a, b), rtol=1e-6)


def test_upcast_widens_the_bound_to_the_last_lane():
    """i = 4 i0 + u: the loop over j runs to 4 i0 + 4 for all four lanes (their masks keep each to its own part)."""
    ast = apply_opts(causal_row_max_ast(36), [Opt(OptOps.UPCAST, 0, 4)])
    j = next(r for r in kernel_ranges(ast) if r.arg[1] is AxisType.REDUCE)
    i0 = next(r for r in kernel_ranges(ast) if r.arg[1] is AxisType.GLOBAL)
    assert all(r.op is not Ops.RANGE or r.arg[1] is not AxisType.UPCAST for r in j.src[0].toposort())
    assert j.src[0].evaluate({i0: 3}) == 16


def test_unroll_of_a_loop_whose_bound_it_divides(run_c, rng):
    """After an UPCAST by 4 the loop over j runs to 4 i0 + 4: an UNROLL by 4 (or 2) divides it at every i0 (the loop
    runs i0 + 1 times, 4 keys each, the mask keeping each lane to its part), one by 8 does not and is refused."""
    from ember.codegen.opt import divided_size

    n = 36
    ast = apply_opts(causal_row_max_ast(n), [Opt(OptOps.UPCAST, 0, 4)])
    j_axis = next(k for k, r in enumerate(kernel_ranges(ast)) if r.arg[1] is AxisType.REDUCE)
    j, i0 = kernel_ranges(ast)[j_axis], kernel_ranges(ast)[0]
    assert divided_size(j, 4).evaluate({i0: 3}) == 4 and divided_size(j, 8) is None
    for amount in (8, 1, 0):  # (0: a clear error, not a division by zero)
        with pytest.raises(KernelOptError, match="divide the axis size"):
            apply_opts(ast, [Opt(OptOps.UNROLL, j_axis, amount)])
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    for amount in (2, 4):
        prg = to_program(causal_row_max_ast(n), CRenderer(), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, j_axis,
                                                                                               amount)])
        (out, *_) = run_c(prg, np.zeros(n, np.float32), a, b)
        np.testing.assert_allclose(out, expected(a, b), rtol=1e-6)


@pytest.mark.parametrize("op", [OptOps.PADTO, OptOps.LOCAL])
def test_no_padding_or_workgroup_split_of_a_bounding_axis(op):
    with pytest.raises(KernelOptError, match="size of another loop depends on axis 0"):
        apply_opts(causal_row_max_ast(36), [Opt(op, 0, 8 if op is OptOps.PADTO else 4)])


@pytest.mark.parametrize("renderer", ["CUDARenderer", "HIPRenderer"])
def test_gpu_heuristic_leaves_a_bounding_axis_whole(renderer):
    """The GPU heuristic puts no workgroup split on the axis a loop's bound depends on (a cumsum, a causal row max):
    the program builds, its loop bounded by the output index."""
    import ember.codegen as codegen

    prg = to_program(causal_row_max_ast(256), getattr(codegen, renderer)(), None)
    assert all(o.op is not OptOps.LOCAL for o in prg.applied_opts)
    assert any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in prg.uops)


def score_row_sum_ast(n, d):
    """out[i] = sum over j < i + 1 of q[i, :] . k[j, :] (a score's dot product over d recomputed in the loop over keys,
    as attention's kernels do), against numpy."""
    i = UOp.range(n, 0, AxisType.GLOBAL)
    j = UOp.range(i + 1, 1, AxisType.REDUCE)
    c = UOp.range(d, 2, AxisType.REDUCE)
    dot = UOp(Ops.REDUCE, dtypes.float32, (param(1, n * d).index(i * d + c).load() *
                                           param(2, n * d).index(j * d + c).load(), c), Ops.ADD)
    red = UOp(Ops.REDUCE, dtypes.float32, ((i < j).where(UOp.const(dtypes.float32, 0.0), dot), j), Ops.ADD)
    return UOp.sink(param(0, n).index(i).store(red).end(i))


def test_a_recomputed_dot_product_folds_as_chains_of_multiply_adds(run_c, rng):
    """The dot product unrolled inside the loop over keys folds as FOLD_CHAINS interleaved chains: every add but the
    FOLD_CHAINS - 1 that join the chains has a product operand (a multiply-add). A tree of pairs, ((t0 + t1) + (t2 +
    t3)) ..., has n/2 - 1 adds of two sums, ~1.5x the operations."""
    from ember.codegen.lower import FOLD_CHAINS

    n, d = 40, 32
    prg = to_program(score_row_sum_ast(n, d), CRenderer())
    unrolls = [o.amount for o in prg.applied_opts if o.op is OptOps.UNROLL]
    assert unrolls[0] == d
    keys = math.prod(unrolls[1:])  # (the loop over keys unrolled too: a dot product per key of an iteration)
    adds = [u for u in prg.uops if u.op is Ops.ADD and dtypes.is_float(u.dtype)]
    joins = [u for u in adds if not any(s.op is Ops.MUL for s in u.src)]
    assert 0 < len(joins) <= FOLD_CHAINS * keys  # (the chains' trees, and the accumulator's adds of the products)
    q, k = rng.standard_normal((n, d), dtype=np.float32), rng.standard_normal((n, d), dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros(n, np.float32), q, k)
    np.testing.assert_allclose(out, np.tril(q @ k.T).sum(1), rtol=1e-4, atol=1e-4)


def scores_times_ast(n, d, outputs):
    """out_o[j, c] = sum over i >= j of (q[i, :] . k[j, :]) a_o[i, c], for `outputs` operands a_o (dk with dv: two
    outputs summing over the same recomputed scores in one loop)."""
    j, c = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(d, 1, AxisType.GLOBAL)
    i = UOp.range(n - j, 2, AxisType.REDUCE)  # (i counted back from the end: a causal start bound)
    e = UOp.range(d, 3, AxisType.REDUCE)
    row = n - 1 - i
    dot = UOp(Ops.REDUCE, dtypes.float32, (param(outputs, n * d).index(row * d + e).load() *
                                           param(outputs + 1, n * d).index(j * d + e).load(), e), Ops.ADD)
    masked = (row < j).where(UOp.const(dtypes.float32, 0.0), dot)  # (the bound widens over a block: the mask stays)
    sums = [UOp(Ops.REDUCE, dtypes.float32, (masked * param(outputs + 2 + o, n * d).index(row * d + c).load(), i),
                Ops.ADD) for o in range(outputs)]
    stores = [param(o, n * d).index(j * d + c).store(s) for o, s in enumerate(sums)]
    return UOp.sink((stores[0] if outputs == 1 else UOp(Ops.NOOP, dtypes.void, tuple(stores))).end(j, c))


@pytest.mark.parametrize("n", [48, 4096])
@pytest.mark.parametrize("outputs", [1, 2])
def test_the_block_is_a_vector_and_its_loop_unrolled(run_c, rng, outputs, n):
    """Head_dim 32 upcast whole, the block of keys a vector (16) for one output and for two (dk with dv: 1024
    accumulator lanes, more than AVX-512's 32 registers), and the loop over queries unrolled by NESTED_UNROLL_SCORES /
    16 = 4: each accumulator is loaded once per 4 queries (the block of 8 that kept them in registers was 21% slower at
    T = 1024, once unrolled; at T = 4096 too); the values against numpy."""
    from ember.codegen.heuristic import NESTED_UNROLL_SCORES, hand_coded_opts

    d = 32
    ast = scores_times_ast(n, d, outputs)
    opts = hand_coded_opts(ast, CRenderer())
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == [d, 16]
    assert [o.amount for o in opts if o.op is OptOps.UNROLL] == [d, NESTED_UNROLL_SCORES // 16]
    if n > 64:
        return  # (the long loop's opts only)
    prg = to_program(ast, CRenderer(), opts)
    q, k, *ops = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(2 + outputs))
    outs = run_c(prg, *(np.zeros((n, d), np.float32) for _ in range(outputs)), q, k, *ops)[:outputs]
    s = np.triu(k @ q.T)  # s[j, i] for i >= j
    for out, a in zip(outs, ops):
        np.testing.assert_allclose(out, s @ a, rtol=1e-4, atol=1e-4)


def test_the_copies_of_one_key_share_vectors():
    """In an unrolled loop each copy of a score belongs to one point of the unroll (a key): `_term_points` finds it,
    -1 for what several points read (a block's operand), so `_scalar_lanes` makes vectors of one key's scores (over the
    block's queries), not of (query, key) pairs whose broadcasts then need shuffles."""
    from ember.codegen.vectorize import _term_points

    j = UOp.range(8, 0, AxisType.REDUCE)
    x = param(1, 4).index(UOp.const(dtypes.index, 0)).load()
    terms = [(x * param(2, 4).index(UOp.const(dtypes.index, u)).load()).exp2() for u in range(2)]
    red = UOp(Ops.REDUCE, dtypes.float32, (UOp(Ops.NOOP, dtypes.float32, tuple(terms)), j), Ops.ADD)
    point = _term_points(UOp.sink(param(0, 1).index(UOp.const(dtypes.index, 0)).store(red)).toposort())
    assert [point[t] for t in terms] == [0, 1] and [point[t.src[0]] for t in terms] == [0, 1]
    assert point[x] == -1
