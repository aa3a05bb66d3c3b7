"""The online softmax (ember.codegen.lower.lower_online): sums over a range whose values read the max over that same
range are lowered as one loop, the running max rescaling the sums. Against numpy, and against the same kernel with
the max over a range of its own (the unfused lowering: the whole max first, then the sums), -inf and NaN included."""

import math

import numpy as np
import pytest

from ember.codegen import CRenderer, CUDARenderer, KernelOptError, Opt, OptOps, apply_opts, to_program
from ember.uops import AxisType, Ops, UOp, dtypes

LOG2E = 1 / math.log(2)


def param(slot, n):
    return UOp(Ops.PARAM, dtypes.float32.ptr(n), (), slot)


def softmax_ast(rows, keys, cols, fused=True, row_sum=False):
    """out[i, c] = sum_j exp2((s[i, j] - M_i) log2e) v[j, c] / sum_j exp2((s[i, j] - M_i) log2e), M_i the max of
    s[i, :] over the sums' own range j (fused) or over a range of its own; row_sum: out[i] = the denominator."""
    i, c = UOp.range(rows, 0, AxisType.GLOBAL), UOp.range(cols, 1, AxisType.GLOBAL)
    j = UOp.range(keys, 2, AxisType.REDUCE)
    jm = j if fused else UOp.range(keys, 3, AxisType.REDUCE)
    s = param(1, rows * keys)
    mx = UOp(Ops.REDUCE, dtypes.float32, (s.index(i * keys + jm).load(), jm), Ops.MAX)
    e = ((s.index(i * keys + j).load() + mx * -1.0) * LOG2E).exp2()
    den = UOp(Ops.REDUCE, dtypes.float32, (e, j), Ops.ADD)
    if row_sum:
        return UOp.sink(param(0, rows).index(i).store(den).end(i))
    num = UOp(Ops.REDUCE, dtypes.float32, (e * param(2, keys * cols).index(j * cols + c).load(), j), Ops.ADD)
    return UOp.sink(param(0, rows * cols).index(i * cols + c).store(num * den.reciprocal()).end(i, c))


def run(run_c, ast, s, v, opts=None):
    rows, keys = s.shape
    prg = to_program(ast, CRenderer(), opts)
    out = np.zeros((rows, v.shape[1]) if ast.src[0].src[0].src[0].dtype.size == rows * v.shape[1] else rows,
                   np.float32)
    return prg, run_c(prg, out, np.ascontiguousarray(s), np.ascontiguousarray(v))[0]


def softmax_v(s, v):
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UPCAST, 1, 4)], [Opt(OptOps.UPCAST, 0, 4)],
                                  [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.THREAD, 0, 2)]])
def test_one_loop_equals_numpy(run_c, rng, opts):
    """Scores spread wide (the running max changes often, by a lot): one loop over the keys, the values of numpy's
    softmax(s) @ v."""
    s = (rng.standard_normal((12, 37)) * 8).astype(np.float32)
    s[3] = np.arange(37, dtype=np.float32) * 3  # (a new max at every key)
    v = rng.standard_normal((37, 8)).astype(np.float32)
    prg, out = run(run_c, softmax_ast(12, 37, 8), s, v, opts)
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 1
    np.testing.assert_allclose(out, softmax_v(s, v), rtol=2e-5, atol=1e-6)


def special_rows(rng):
    s = rng.standard_normal((8, 19)).astype(np.float32)
    s[0] = -np.inf  # fully masked
    s[1, :10] = -np.inf  # masked prefix: the first finite max drops the terms before it
    s[2, 10:] = -np.inf  # masked suffix
    s[3, 5] = np.nan
    s[4, 7] = np.inf
    s[5, 0] = np.nan  # (NaN first: the max is NaN from the start)
    s[6, ::2] = -np.inf
    return s


@pytest.mark.parametrize("row_sum", [False, True])
def test_inf_and_nan_as_the_unfused_lowering(run_c, rng, row_sum):
    """-inf prefixes and suffixes, NaN and +inf scores: the one loop gives what the max first, then the sums give, NaN
    for NaN; the finite rows as numpy. A row of -inf: its softmax NaN (0 / 0) as unfused; its row sum 0 where the
    unfused reduces make exp2(-inf - -inf) = NaN (the running max stands at 0 while it is -inf)."""
    s, v = special_rows(rng), rng.standard_normal((19, 4)).astype(np.float32)
    _, fused = run(run_c, softmax_ast(8, 19, 4, row_sum=row_sum), s, v)
    prg, unfused = run(run_c, softmax_ast(8, 19, 4, fused=False, row_sum=row_sum), s, v)
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 2
    np.testing.assert_allclose(fused[1:], unfused[1:], rtol=2e-5, atol=1e-6)  # (NaN where NaN: equal_nan)
    assert np.isnan(fused[[3, 4, 5]]).all() and np.isfinite(fused[[1, 2, 6, 7]]).all()
    assert (fused[0] == 0).all() if row_sum else np.isnan(fused[0]).all()
    finite = [1, 2, 6, 7]
    with np.errstate(invalid="ignore"):
        ref = np.exp(s - s.max(-1, keepdims=True)).sum(-1) if row_sum else softmax_v(s, v)
    np.testing.assert_allclose(fused[finite], ref[finite], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("op", [OptOps.GROUP, OptOps.GROUPTOP, OptOps.PARTIAL])
def test_the_online_loop_is_not_split(op):
    """Opts that would make several partial maxes of the loop (a group's threads, partial sums' lanes) are refused."""
    with pytest.raises(KernelOptError, match="loop of an online softmax"):
        apply_opts(softmax_ast(12, 32, 8), [Opt(op, 2, 4)])


@pytest.mark.parametrize("opts", [[Opt(OptOps.UNROLL, 2, 4)], [Opt(OptOps.UNROLL, 2, 2), Opt(OptOps.UPCAST, 1, 4)],
                                  [Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 0, 4)],
                                  [Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8)]])
def test_unrolled_one_loop(run_c, rng, opts):
    """The loop unrolled (each iteration folds several keys into the running max, then rescales the sums once and adds
    the keys' terms), alone and with the rows or columns as vector lanes: the values of numpy's softmax(s) @ v, and
    with -inf prefixes and suffixes, NaN and +inf among the keys of one iteration, those of the unfused lowering."""
    s = (rng.standard_normal((12, 36)) * 8).astype(np.float32)
    s[3] = np.arange(36, dtype=np.float32) * 3  # (a new max at every key)
    v = rng.standard_normal((36, 8)).astype(np.float32)
    prg, out = run(run_c, softmax_ast(12, 36, 8), s, v, opts)
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 1
    assert any(o.op is OptOps.UNROLL for o in prg.applied_opts)
    np.testing.assert_allclose(out, softmax_v(s, v), rtol=2e-5, atol=1e-6)
    special = np.concatenate([special_rows(rng), rng.standard_normal((8, 1)).astype(np.float32)], axis=1)
    special = np.concatenate([special, special[1:5]])  # (12 rows: the row vectors of 4 divide them)
    v = rng.standard_normal((20, 8)).astype(np.float32)
    _, fused = run(run_c, softmax_ast(12, 20, 8), special, v, opts)
    _, unfused = run(run_c, softmax_ast(12, 20, 8, fused=False), special, v)
    np.testing.assert_allclose(fused, unfused, rtol=2e-5, atol=1e-6)  # (NaN where NaN)


def test_gpu_renderer_builds_one_loop():
    """The GPU lowering (CUDA source, not run): the heuristic's opts apply, one loop over the keys."""
    prg = to_program(softmax_ast(64, 100, 16), CUDARenderer(), None)
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 1
    assert prg.src.count("exp2") >= 2
