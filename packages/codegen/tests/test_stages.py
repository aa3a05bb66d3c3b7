"""The stages as modules and tables: opt application apart from the heuristic, the reduce lowering rule, settings."""

import ast as pyast
import importlib.util

import numpy as np
import pytest

import ember.codegen
from ember.codegen import CRenderer, Opt, OptOps, apply_opts, linearize, lower, to_program
from ember.codegen.opt import APPLY_OPT
from ember.uops import AxisType, Ops, UOp, dtypes, settings


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def matmul_ast(n, k, m):
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    val = param(1, n * k).index(r0 * k + r2).load() * param(2, k * m).index(r2 * m + r1).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (val, r2), Ops.ADD)
    return UOp.sink(param(0, n * m).index(r0 * m + r1).store(red).end(r0, r1))


def softmax_denominator_ast(n, m):
    """out[i] = sum_j exp2(a[i, j] - max_k a[i, k]): a reduce inside another's value"""
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE), UOp.range(m, 2, AxisType.REDUCE)
    row_max = UOp(Ops.REDUCE, dtypes.float32, (param(1, n * m).index(r0 * m + r2).load(), r2), Ops.MAX)
    val = (param(1, n * m).index(r0 * m + r1).load() - row_max).exp2()
    return UOp.sink(param(0, n).index(r0).store(UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.ADD)).end(r0))


def imported_modules(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = pyast.parse(open(spec.origin).read())
    return {n.module for n in pyast.walk(tree) if isinstance(n, pyast.ImportFrom) and n.module} | \
        {a.name for n in pyast.walk(tree) if isinstance(n, pyast.Import) for a in n.names}


def test_opt_application_and_the_heuristic_are_separate_modules():
    import ember.codegen.heuristic as heuristic
    import ember.codegen.opt as opt

    # opt.py defines what an Opt does and knows nothing of who picks them; the heuristic builds on it
    assert not {"ember.codegen.heuristic", "ember.codegen.search", "ember.codegen.pipeline"} & \
        imported_modules("ember.codegen.opt")
    assert "ember.codegen.opt" in imported_modules("ember.codegen.heuristic")
    assert ember.codegen.hand_coded_opts is heuristic.hand_coded_opts and ember.codegen.apply_opts is opt.apply_opts
    assert not hasattr(opt, "hand_coded_opts")


def test_every_opt_has_an_entry_in_the_dispatch_table():
    assert set(APPLY_OPT) == set(OptOps)


def test_reduces_over_the_same_ranges_share_one_loop():
    # an 8 x 4 tile of a matmul: 32 reduces over the one k range, lowered into one loop with 32 accumulators
    uops = linearize(lower(apply_opts(matmul_ast(16, 8, 16), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 8)])))
    regs = [u for u in uops if u.op is Ops.DEFINE_REG]
    assert sum(u.op is Ops.RANGE for u in uops) == 3 and sorted(r.arg for r in regs) == list(range(32))
    assert not any(u.op is Ops.REDUCE for u in uops)


@pytest.mark.parametrize("opts", [[], None, [Opt(OptOps.UPCAST, 0, 4)], [Opt(OptOps.UNROLL, 2, 4)]])
def test_a_reduce_inside_a_reduce(run_c, rng, opts):
    n, m = 8, 24
    a = rng.standard_normal((n, m), dtype=np.float32)
    prg = to_program(softmax_denominator_ast(n, m), CRenderer(), opts)
    (out, *_) = run_c(prg, np.zeros(n, np.float32), a)
    np.testing.assert_allclose(out, np.exp2(a - a.max(1, keepdims=True)).sum(1), rtol=1e-5)
    # the inner max is computed once per row, before the sum's loop: two loops inside the rows' one
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 2


def test_settings_come_from_ember_uops_settings(monkeypatch):
    ast = matmul_ast(16, 16, 16)
    monkeypatch.setenv("DEBUG", "")  # empty: the default (it used to crash int())
    assert to_program(ast, CRenderer()).applied_opts != ()
    with settings.Context(NOOPT=True):
        assert to_program(ast, CRenderer()).applied_opts == ()
    monkeypatch.setenv("NOOPT", "0")  # off, not "set"
    assert to_program(ast, CRenderer()).applied_opts != ()
    monkeypatch.setenv("NOOPT", "maybe")
    with pytest.raises(ValueError, match="NOOPT='maybe'"):
        to_program(ast, CRenderer())


def test_nested_reduce_found_in_one_walk():
    from ember.codegen.vectorize import _has_nested_reduce

    assert not _has_nested_reduce(matmul_ast(8, 16, 8))
    assert _has_nested_reduce(softmax_denominator_ast(8, 16))
    # two reduces side by side (an upcast's partial sums) are not nested
    r0, r1 = UOp.range(8, 0, AxisType.GLOBAL), UOp.range(16, 1, AxisType.REDUCE)
    parts = [UOp(Ops.REDUCE, dtypes.float32, (param(1, 8 * 32).index(r0 * 32 + r1 * 2 + i).load(), r1), Ops.ADD)
             for i in range(2)]
    assert not _has_nested_reduce(UOp.sink(param(0, 8).index(r0).store(parts[0] + parts[1]).end(r0)))


def test_the_copies_of_an_upcast_address_share_one_base(run_c, rng):
    # out[i, j] = a[j, i], j split 4 x 8 and upcast by 8: the copies read a[(jo*8 + u)*64 + i] for u = 0..7, which
    # lowering writes as one base (jo*512 + i) plus u*64, not a product per copy
    r0, r1 = UOp.range(64, 0, AxisType.GLOBAL), UOp.range(32, 1, AxisType.GLOBAL)
    val = param(1, 32 * 64).index(r1 * 64 + r0).load()
    ast = UOp.sink(param(0, 64 * 32).index(r0 * 32 + r1).store(val).end(r0, r1))
    prg = to_program(ast, CRenderer(), [Opt(OptOps.UPCAST, 1, 8)])
    idxs = [u.src[1] for u in prg.uops if u.op is Ops.INDEX and u.src[0].arg == 1]
    bases = {i.src[0] if i.op is Ops.ADD and i.src[1].op is Ops.CONST else i for i in idxs}
    assert len(idxs) == 8 and len(bases) == 1
    offsets = sorted(i.src[1].arg for i in idxs if i.op is Ops.ADD and i.src[1].op is Ops.CONST)
    assert offsets == [64 * u for u in range(1, 8)]
    a = rng.standard_normal((32, 64), dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros((64, 32), np.float32), a)
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("opts", [[], None, [Opt(OptOps.UPCAST, 1, 16)]])
def test_a_kernel_with_two_outputs(run_c, rng, opts):
    # a multi-output kernel (ember.schedule's dK with dV): out0 = a @ b and out1 = a @ c over the same ranges, one
    # END of a NOOP of their stores; the two reduces share one loop over k, and an upcast copies (and vectorizes)
    # both stores
    n, k, m = 8, 12, 32
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    a = param(2, n * k).index(r0 * k + r2).load()
    sums = [UOp(Ops.REDUCE, dtypes.float32, (a * param(slot, k * m).index(r2 * m + r1).load(), r2), Ops.ADD)
            for slot in (3, 4)]
    stores = [param(slot, n * m).index(r0 * m + r1).store(s) for slot, s in zip((0, 1), sums)]
    ast = UOp.sink(UOp(Ops.NOOP, dtypes.void, tuple(stores)).end(r0, r1))
    prg = to_program(ast, CRenderer(), opts)
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in prg.uops) == 1
    if opts:
        assert {u.src[0].src[0].arg for u in prg.uops if u.op is Ops.STORE and u.src[1].dtype.count == 16} == {0, 1}
    x, y, z = (rng.standard_normal(s, dtype=np.float32) for s in ((n, k), (k, m), (k, m)))
    out0, out1, *_ = run_c(prg, np.zeros((n, m), np.float32), np.zeros((n, m), np.float32), x, y, z)
    np.testing.assert_allclose(out0, x @ y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out1, x @ z, rtol=1e-5, atol=1e-5)


def test_a_row_statistic_stored_beside_its_rows_is_accumulated_once(run_c, rng):
    # a multi-output kernel of two shapes (ember.schedule: o with the softmax row sum it reads): out1[i] = sum_k a[i, k]
    # and out0[i, j] = b[i, j] * out1[i]. Upcast by 16 along i and by 16 along j, out1's store is one vector of 16 rows
    # (its copies along j are one store), and out0 reads those rows' sums from that vector's lanes: one vector
    # accumulator in all, not a vector for the store and 16 scalars for out0
    n, m, k = 32, 16, 8
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    red = UOp(Ops.REDUCE, dtypes.float32, (param(2, n * k).index(r0 * k + r2).load(), r2), Ops.ADD)
    stores = (param(0, n * m).index(r0 * m + r1).store(param(3, n * m).index(r0 * m + r1).load() * red),
              param(1, n).index(r0).store(red))
    ast = UOp.sink(UOp(Ops.NOOP, dtypes.void, stores).end(r0, r1))
    prg = to_program(ast, CRenderer(), [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16)])
    regs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    assert len(regs) == 1 and regs[0].dtype.count == 16
    a, b = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((n, m), dtype=np.float32)
    out0, out1, *_ = run_c(prg, np.zeros((n, m), np.float32), np.zeros(n, np.float32), a, b)
    np.testing.assert_allclose(out1, a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out0, b * a.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
