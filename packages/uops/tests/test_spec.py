import pytest

from ember.uops import Ops, SpecError, UOp, dtypes, verify


def buf(size, dtype=dtypes.float32):
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="CPU")), size)


def test_valid_tensor_graph_passes():
    a = buf(12).reshape((3, 4))
    b = buf(4).reshape((1, 4)).expand((3, 4))
    out = (a * b + UOp.const(dtypes.float32, 1.0, "CPU").reshape((1, 1)).expand((3, 4))).reduce_axis(Ops.ADD, (1,))
    n = UOp.variable("n", 1, 3)
    verify(UOp.sink(out.contiguous(), out.detach(), a.copy_to_device("CPU:1"), a.assign(a * a),
                    a.pad(((0, 1), (2, 0))).flip((True, False)),
                    a.shrink(((0, 2), (1, 3))).permute((1, 0)), a.cast(dtypes.int32), n.bind(2),
                    UOp.iota(5, dtypes.int32, "CPU")), "tensor")
    assert UOp.iota(5, dtypes.int64, "CPU").shape == (5,) and UOp.iota(5, dtypes.int64, "CPU").device == "CPU"


@pytest.mark.parametrize("bad, msg", [
    (UOp(Ops.ADD, dtypes.float32, (buf(4), buf(4, dtypes.int32))), "spec(tensor): invalid ADD node"),
    (UOp(Ops.CMPLT, dtypes.float32, (buf(4), buf(4))), "spec(tensor): invalid CMPLT node"),
    (UOp(Ops.ADD, dtypes.float32, (buf(4),)), "spec(tensor): invalid ADD node"),
    (UOp(Ops.RESHAPE, dtypes.float32, (buf(4),), (3,)), "spec(tensor): invalid RESHAPE node: reshape: cannot view"),
    (UOp(Ops.PERMUTE, dtypes.float32, (buf(4),), (0.5,)), "spec(tensor): invalid PERMUTE node"),
    (UOp(Ops.CONST, dtypes.int32, (), 1.5), "spec(tensor): invalid CONST node"),
    (UOp(Ops.BUFFER, dtypes.float32, (), 4), "spec(tensor): invalid BUFFER node"),
    (UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0), "spec(tensor): invalid RANGE node"),
    (UOp(Ops.REDUCE_AXIS, dtypes.float32, (buf(4),), (Ops.IDIV, (0,))), "spec(tensor): invalid REDUCE_AXIS node"),
    (UOp(Ops.ADD, dtypes.float32, (buf(4), buf(5))), "ADD: source shapes (4,) and (5,) differ"),
    (UOp(Ops.AND, dtypes.float32, (buf(4), buf(4))), "spec(tensor): invalid AND node"),
    (UOp(Ops.IOTA, dtypes.float32, (UOp(Ops.DEVICE, arg="CPU"),), 4), "spec(tensor): invalid IOTA node"),
    (UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, arg="CPU"),), -1), "spec(tensor): invalid IOTA node"),
])
def test_invalid_nodes_named(bad, msg):
    with pytest.raises(SpecError) as e:
        verify(UOp.sink(bad), "tensor")
    assert msg in str(e.value)


def test_kernel_stage_rejects_tensor_ops():
    r = UOp.range(4, 0)
    p = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0)
    verify(UOp.sink(p.index(r).store(p.index(r).load() + 1.0).end(r)), "kernel")
    with pytest.raises(SpecError, match="spec\\(kernel\\): invalid UNIQUE"):
        verify(UOp.sink(buf(4).reshape((2, 2))), "kernel")
    with pytest.raises(ValueError, match="unknown stage 'program'; stages: \\['kernel', 'tensor'\\]"):
        verify(UOp.sink(), "program")
