import pytest

from ember.uops import Ops, UOp, dtypes, gradient

_ids = iter(range(10**6))


def buf(*shape):
    size = 1
    for s in shape:
        size *= s
    src = (UOp(Ops.UNIQUE, arg=next(_ids)), UOp(Ops.DEVICE, arg="CPU"))
    return UOp(Ops.BUFFER, dtypes.float32, src, size).reshape(shape)


def ones(shape):
    return UOp.const(dtypes.float32, 1.0, "CPU").reshape((1,) * len(shape)).expand(shape)


def test_product_rule_structure():
    x, y = buf(3), buf(3)
    g = gradient(x * y, [x, y], ones((3,)))
    assert g[x] is ones((3,)) * y and g[y] is ones((3,)) * x


def test_sum_of_paths_and_unreached_targets():
    x, y, z = buf(4), buf(4), buf(4)
    g = gradient(x * x + y, [x, y, z], ones((4,)))
    assert set(g) == {x, y}
    assert g[x].op is Ops.ADD  # two paths through x*x add up
    assert g[y] is ones((4,))


def test_shapes_follow_movement_and_reduce():
    x = buf(2, 3)
    out = x.permute((1, 0)).reshape((6,)).reshape((6, 1)).expand((6, 4)).reduce_axis(Ops.ADD, (1,))
    g = gradient(out, [x], ones((6, 1)))
    assert g[x].shape == (2, 3)
    p = x.pad(((1, 0), (0, 2))).shrink(((0, 2), (1, 4))).flip((True, False))
    assert gradient(p, [x], ones((2, 3)))[x].shape == (2, 3)


def test_detach_and_comparisons_block():
    x = buf(3)
    assert gradient(x.detach() * ones((3,)), [x], ones((3,))) == {}
    # used only through a comparison: zeros, as in PyTorch (not left out: the target is in the graph)
    g = gradient((x < ones((3,))).cast(dtypes.float32), [x], ones((3,)))
    zero = g[x].src[0].src[0]
    assert g[x].shape == (3,) and g[x].op is Ops.EXPAND and zero.op is Ops.CONST and zero.arg == 0


def test_missing_rule_is_clear():
    x = buf(3)
    with pytest.raises(NotImplementedError, match="no rule for"):
        gradient(UOp(Ops.MULACC, dtypes.float32, (x, x, x)), [x], ones((3,)))
