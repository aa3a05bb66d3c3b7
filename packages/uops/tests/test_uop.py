import gc
import math
import pickle
import sys

import pytest

from ember.uops import GroupOp, Ops, UOp, dtypes, render, verify
from ember.uops.ops import UOpMetaClass


def buf(size, dtype=dtypes.float32, n=0):
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=n), UOp(Ops.DEVICE, arg="CPU")), size)


def test_hash_consing_identity():
    a = UOp(Ops.CONST, dtypes.int32, (), 3)
    b = UOp(Ops.CONST, dtypes.int32, (), 3)
    assert a is b
    x = UOp.variable("x", 0, 10)
    assert (x + 1) * 2 is (x + 1) * 2
    assert (x + 1) is not (x + 2)
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.float32, 1) is UOp.const(dtypes.float32, 1.0)  # value converted with the dtype
    assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)
    assert {a: 1}[UOp.const(dtypes.int32, 3)] == 1


def test_cache_entries_die_with_their_uops():
    x = UOp.variable("gc_probe", 0, 5)
    key = (Ops.ADD, dtypes.index, (x, UOp.const(dtypes.index, 77)), None, None)
    y = x + 77
    assert key in UOpMetaClass.ucache
    del y
    gc.collect()
    assert key not in UOpMetaClass.ucache


def test_replace_and_pickle():
    x = UOp.variable("x", 0, 10)
    e = x + 1
    assert e.replace() is e and e.replace(src=e.src) is e
    assert e.replace(op=Ops.MUL) is x * 1
    with pytest.raises(TypeError, match="unknown fields"):
        e.replace(bogus=1)
    assert pickle.loads(pickle.dumps(e * 3)) is e * 3


def test_toposort_order_and_sharing():
    x = UOp.variable("x", 0, 10)
    s = x + 1
    e = s * s + s
    order = e.toposort()
    assert len(order) == len(set(order)) == 5  # x, 1, s, s*s, e
    pos = {u: i for i, u in enumerate(order)}
    assert all(pos[src] < pos[u] for u in order for src in u.src)
    assert order[-1] is e
    assert x not in e.toposort(gate=lambda u: u is not s)


def test_toposort_deep_chain_no_recursion():
    x = UOp.variable("x", 0, 10)
    e = x
    for i in range(sys.getrecursionlimit() * 3):
        e = (e + x) % 97 if i % 2 else e * 2
    assert len(e.toposort()) > sys.getrecursionlimit() * 3
    assert (e.vmin, e.vmax) == (0, 96)  # range analysis is iterative too
    assert e.shape is None


def test_substitute():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    e = (x + 1) * x
    assert e.substitute({x: y}) is (y + 1) * y
    assert e.substitute({x + 1: y}) is y * x
    assert e.substitute({}) is e
    # the walk stops at a key: x under x+1 is not replaced there, but x outside it is
    assert e.substitute({x + 1: y, x: y + 2}) is y * (y + 2)


def test_alu_builders_and_dtypes():
    x = UOp.variable("x", 0, 10, dtypes.int32)
    assert (x < 3).dtype == dtypes.bool and x.eq(3).op is Ops.CMPEQ and x.ne(3).op is Ops.CMPNE
    assert (x - 2).src[1].op is Ops.MUL  # a - b is a + b*-1: one canonical form for the simplifier
    f = UOp.const(dtypes.float32, 2.0)
    assert (f / 3).op is Ops.FDIV and (f / 3).dtype == dtypes.float32
    with pytest.raises(TypeError, match="same dtype"):
        x + f
    with pytest.raises(TypeError, match="condition must be bool"):
        x.where(x, x)
    w = (x < 3).where(x, 0)
    assert w.op is Ops.WHERE and w.dtype == dtypes.int32
    assert x.cast(dtypes.int32) is x and x.cast(dtypes.float32).op is Ops.CAST
    v = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (f,) * 4)
    assert (v < v).dtype == dtypes.bool.vec(4)
    assert GroupOp.Commutative <= GroupOp.Binary and Ops.WHERE in GroupOp.Ternary


def test_variables_and_bind():
    n = UOp.variable("n", 1, 128)
    assert (n.vmin, n.vmax) == (1, 128)
    b = n.bind(16)
    assert b.op is Ops.BIND and b.unbind() == (n, 16) and (b.vmin, b.vmax) == (1, 128)
    with pytest.raises(ValueError, match="outside \\[1, 128\\]"):
        n.bind(0)
    with pytest.raises(ValueError, match="min <= max"):
        UOp.variable("bad", 3, 2)
    with pytest.raises(ValueError, match="only a DEFINE_VAR"):
        UOp.const(dtypes.index, 3).bind(3)


def test_vmin_vmax():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", -3, 4)
    assert ((x * y).vmin, (x * y).vmax) == (-30, 40)
    assert ((x + y).vmin, (x + y).vmax) == (-3, 14)
    assert ((x // 3).vmin, (x // 3).vmax) == (0, 3)
    assert ((y // 2).vmin, (y // 2).vmax) == (-1, 2)  # C division truncates toward zero
    assert ((x % 4).vmin, (x % 4).vmax) == (0, 3)
    assert ((y % 3).vmin, (y % 3).vmax) == (-2, 2)
    assert ((x % 20).vmin, (x % 20).vmax) == (0, 10)
    assert ((x < 11).vmin, (x < 11).vmax) == (True, True)
    r = UOp.range(16, 0)
    assert (r.vmin, r.vmax) == (0, 15)
    assert (x.maximum(y).vmin, x.maximum(y).vmax) == (0, 10)
    i8 = UOp.variable("i8", 100, 120, dtypes.int8)
    assert ((i8 + i8).vmin, (i8 + i8).vmax) == (-128, 127)  # may wrap: nothing known
    f = UOp.const(dtypes.float32, 1.5)
    assert (f.vmin, f.vmax) == (1.5, 1.5)



def test_vmin_vmax_of_a_node_over_analyzed_and_new_sources():
    # the bounds of a node whose sources are analyzed come without a walk, of one over new nodes with one: the same
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", -3, 4)
    s = x + y
    assert (s.vmin, s.vmax) == (-3, 14)
    assert ((s * s).vmin, (s * s).vmax) == (-42, 196)  # over analyzed sources only
    deep = ((s * 7 + 5) // 4) % 3  # new nodes over s and constants never analyzed
    assert (deep.vmin, deep.vmax) == (-2, 2)
    assert (deep.src[0].vmin, deep.src[0].vmax) == (-4, 25)
    i8 = UOp.variable("i8v", 100, 120, dtypes.int8)
    assert (i8.vmin, i8.vmax) == (100, 120)
    assert ((i8 + i8).vmin, (i8 + i8).vmax) == (-128, 127)  # over an analyzed source: still may wrap
    b = (x < 5) & (y < 5)
    assert ((x < 5).vmin, (x < 5).vmax) == (False, True) and (b.vmin, b.vmax) == (False, True)
    f = UOp.variable("x", 0, 10).cast(dtypes.float32) * 2.0
    assert (f.vmin, f.vmax) == (-math.inf, math.inf)  # floats are not analyzed

def test_evaluate():
    x, y = UOp.variable("x", -10, 10), UOp.variable("y", 1, 5)
    assert ((x // y) + x % y).evaluate({x: -7, y: 2}) == -3 + -1
    with pytest.raises(ValueError, match="no value for DEFINE_VAR"):
        (x + 1).evaluate({})


def test_tensor_shapes():
    b = buf(24)
    assert b.shape == (24,)
    t = b.reshape((4, 6))
    assert t.shape == (4, 6)
    assert t.permute((1, 0)).shape == (6, 4)
    assert t.reshape((4, 1, 6)).expand((4, 5, 6)).shape == (4, 5, 6)
    assert t.pad(((1, 2), (0, 3))).shape == (7, 9)
    assert t.shrink(((1, 3), (0, 6))).shape == (2, 6)
    assert t.flip((True, False)).shape == (4, 6)
    assert t.reduce_axis(Ops.ADD, (1,)).shape == (4, 1)
    assert (t + t).shape == (4, 6) and t.cast(dtypes.int32).shape == (4, 6)
    assert t.bitcast(dtypes.float16).shape == (4, 12)
    assert UOp.const(dtypes.float32, 1.0, device="CPU").shape == ()
    assert UOp.const(dtypes.float32, 1.0).shape is None
    assert t.reshape((4, 6)) is t and t.permute((0, 1)) is t  # no-op movements are not built


def test_symbolic_shapes():
    n = UOp.variable("n", 1, 64)
    b = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=1), UOp(Ops.DEVICE, arg="CPU")), 4096)
    t = b.shrink(((0, n * 4),)).reshape((n, 4))
    assert t.shape == (n, 4)
    assert t.permute((1, 0)).shape == (4, n)
    with pytest.raises(ValueError, match="sizes"):
        t.reshape((n, 5))


@pytest.mark.parametrize("build, err, msg", [
    (lambda t: t.reshape((5, 5)), ValueError, "reshape: cannot view shape (4, 6) as (5, 5): sizes 24 and 25 differ"),
    (lambda t: t.reshape((-1, 24)), ValueError, "sizes must be >= 0"),
    (lambda t: t.permute((0, 0)), ValueError, "permute: order (0, 0) is not a permutation"),
    (lambda t: t.permute((0,)), ValueError, "not a permutation of the 2 axes"),
    (lambda t: t.expand((8, 6)), ValueError, "only size-1 dims expand"),
    (lambda t: t.expand((4, 6, 1)), ValueError, "different numbers of dims"),
    (lambda t: t.pad(((1, 1),)), ValueError, "one (before, after) pair per dim"),
    (lambda t: t.pad(((-1, 0), (0, 0))), ValueError, "must be >= 0"),
    (lambda t: t.shrink(((0, 5), (0, 6))), ValueError, "out of range for shape (4, 6)"),
    (lambda t: t.shrink(((3, 2), (0, 6))), ValueError, "begin <= end"),
    (lambda t: t.flip((True,)), ValueError, "one bool per dim"),
    (lambda t: t.reduce_axis(Ops.ADD, (2,)), ValueError, "not distinct axes of shape (4, 6)"),
    (lambda t: t.reduce_axis(Ops.IDIV, (0,)), ValueError, "op must be one of"),
    (lambda t: t + t.reshape((6, 4)), ValueError, "ADD: source shapes (4, 6) and (6, 4) differ"),
    (lambda t: t.bitcast(dtypes.float16).shrink(((0, 4), (0, 3))).bitcast(dtypes.float32), ValueError,
     "BITCAST: cannot bitcast shape (4, 3) of dtypes.float16 to dtypes.float32"),
])
def test_shape_errors(build, err, msg):
    with pytest.raises(err) as e:
        build(buf(24).reshape((4, 6)))
    assert msg in str(e.value)


def test_render_prints_shared_once():
    x = UOp.variable("x", 0, 10)
    s = x + 1
    text = render(s * s)
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0] == "%0 = DEFINE_VAR dtypes.index arg=('x', 0, 10)"
    assert lines[-1] == "%3 = MUL dtypes.index (%2, %2)"
    assert repr(s * s) == text


def test_unique_is_fresh_each_call():
    # one allocator for every package's buffers: same-looking buffers from two callers stay two nodes
    ids = [UOp.unique() for _ in range(100)]
    assert all(u.op is Ops.UNIQUE and u.src == () and type(u.arg) is int for u in ids)
    assert len({u.arg for u in ids}) == 100
    dev = UOp(Ops.DEVICE, arg="CPU")
    a, b = (UOp(Ops.BUFFER, dtypes.float32, (UOp.unique(), dev), 16) for _ in range(2))
    assert a is not b and a.src[1] is b.src[1]
    verify(UOp.sink(a.reshape((4, 4)), b.reshape((4, 4))), "tensor")
