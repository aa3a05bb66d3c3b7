"""UOp tables: graphs as JSON data and back to the same hash-consed UOps; what cannot be stored or read is refused."""

import json
import math

import pytest

from ember.uops import AxisType, Ops, UOp, dtypes
from ember.uops.table import from_table, to_table


def roundtrip(*roots):
    rows, idx = to_table(list(roots))
    nodes = from_table(json.loads(json.dumps(rows, allow_nan=False)))
    return [nodes[i] for i in idx]


def test_kernel_graph_reads_back_as_the_same_uops():
    buf = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=-1), UOp(Ops.DEVICE, arg="CPU")), 64)
    r = UOp.range(64, 0, AxisType.GLOBAL)
    red = UOp(Ops.REDUCE, dtypes.float32, (buf.index(r).load() * 0.5, UOp.range(8, 1, AxisType.REDUCE)), Ops.ADD)
    ptr = UOp(Ops.PARAM, dtypes.half.ptr(64), (), 0)
    vec = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (UOp.const(dtypes.float32, 1.0),) * 4)
    sink = UOp.sink(buf.index(r).store(red), ptr, vec)
    assert roundtrip(sink) == [sink]  # (hash-consed: equal graphs are the same objects)
    got = roundtrip(red)[0]
    assert got is red and type(got.arg) is Ops  # an IntEnum arg stays an enum, not its int


@pytest.mark.parametrize("v", [-0.0, 0.0, math.inf, -math.inf, 0.1, 1e-300])
def test_floats_keep_every_bit(v):
    c = UOp.const(dtypes.float32, v)
    got = roundtrip(c)[0]
    assert got is c and math.copysign(1, got.arg) == math.copysign(1, v)


def test_nan_and_nested_args():
    c = UOp.const(dtypes.float32, math.nan)
    assert math.isnan(roundtrip(c)[0].arg)
    u = UOp(Ops.REDUCE_AXIS, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (Ops.MAX, (0, 2)), tag=("t", 1))
    got = roundtrip(u)[0]
    assert got is u and got.arg == (Ops.MAX, (0, 2)) and got.tag == ("t", 1)


def test_shared_nodes_are_one_row():
    x = UOp.range(16, 0, AxisType.GLOBAL)
    y = x * 2 + x
    rows, idx = to_table([y, x])
    assert len(rows) == len(y.toposort()) and idx[1] < idx[0]


@pytest.mark.parametrize("arg", [frozenset({1}), UOp.const(dtypes.index, 3), object()])
def test_unstorable_arg_is_a_type_error(arg):
    with pytest.raises(TypeError, match="cannot store"):
        to_table([UOp(Ops.DEFINE_VAR, dtypes.index, (), arg)])


@pytest.mark.parametrize("rows,fragment", [
    ([["CONST", ["int", 1], [1], 1, None]], "not a UOp table.*out of order"),
    ([["NOT_AN_OP", ["int", 1], [], 1, None]], "not a UOp table"),
    ([["CONST", ["no_such_dtype", 1], [], 1, None]], "not a UOp table.*unknown name"),
    ([["CONST", ["float", 1], [], 1.5, None]], "not a UOp table.*not a stored value"),
    ([["CONST", ["float", 1], [], {"e": "os", "n": "system"}, None]], "not a UOp table.*not a stored value"),
    ([["CONST", ["int", 1], []]], "not a UOp table"),
    ("not a list of rows", "not a UOp table"),
])
def test_malformed_table_is_a_value_error(rows, fragment):
    with pytest.raises(ValueError, match=fragment):
        from_table(rows)


def test_tables_over_a_shared_dtype_list():
    x = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("i", 0, 9))
    a = UOp(Ops.REDUCE, dtypes.float32, (UOp.const(dtypes.float32, -0.0) + x.cast(dtypes.float32),), Ops.MAX)
    index: dict = {}
    rows_a, (ra,) = to_table([a], dtype_index=index)
    rows_x, (rx,) = to_table([x], dtype_index=index)
    assert all(type(r[1]) is int for r in rows_a + rows_x) and len(index) == 2  # (index, float32: each once)
    dts = list(index)
    assert from_table(rows_a, dtypes=dts)[ra] is a and from_table(rows_x, dtypes=dts)[rx] is x
    assert type(json.loads(json.dumps(rows_a))[-1][3]) is dict  # (the Ops arg by name, not its number)
    for bad in ([["CONST", -1, [], 1, None]], [["CONST", 5, [], 1, None]], [["CONST", 0, [0], 1, None]],
                [["CONST", 0, [-1], 1, None]], [["CONST", [0], [], 1, None]]):
        with pytest.raises(ValueError, match="not a UOp table"):
            from_table(bad, dtypes=dts)
