"""The PYTHON device on hand-built linear programs (the ProgramSpec.uops format of ember.codegen.program)."""

import numpy as np
import pytest

from ember.runtime import Buffer, CompileError, Device
from ember.runtime.python import PythonProgram, deserialize
from ember.uops import AxisType, Ops, UOp, dtypes

f32, idx_t = dtypes.float32, dtypes.index


def param(slot, n, dt=f32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def const(v, dt=idx_t):
    return UOp.const(dt, v)


def rng_(end, axis):
    return UOp(Ops.RANGE, idx_t, (end,), (axis, AxisType.LOOP))


def end(r):
    return UOp(Ops.END, dtypes.void, (r,))


def run(uops, *bufs, vals=(), global_size=(1, 1, 1), local_size=None, name="kernel"):
    dev = Device["PYTHON"]
    prg = dev.runtime(name, dev.compiler.compile_cached(dev.renderer.render(name, tuple(uops))))
    return prg(*bufs, vals=vals, global_size=global_size, local_size=local_size, wait=True)


def buf(data, dt=None):
    data = np.asarray(data)
    return Buffer("PYTHON", data.size, dt or dtypes.from_name(data.dtype.name)).copyin(data)


def test_elementwise_add(rng):
    n = 10
    p0, p1, p2, cn = param(0, n), param(1, n), param(2, n), const(n)
    r = rng_(cn, 0)
    l1, l2 = p1.index(r).load(), p2.index(r).load()
    uops = (p0, p1, p2, cn, r, p1.index(r), l1, p2.index(r), l2, l1 + l2, p0.index(r), p0.index(r).store(l1 + l2),
            end(r))
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = Buffer("PYTHON", n, f32)
    assert run(uops, out, buf(a), buf(b)) > 0
    np.testing.assert_array_equal(out.numpy(), a + b)


def row_sum_program(n, m):
    """out[i] = sum_j a[i*m + j], with a DEFINE_REG accumulator as codegen's lowering makes it."""
    p0, p1, zero, cn, cm = param(0, n), param(1, n * m), const(0.0, f32), const(n), const(m)
    acc = UOp(Ops.DEFINE_REG, f32, (zero,), 0)
    ri = rng_(cn, 0)
    init = UOp(Ops.STORE, dtypes.void, (acc, zero, ri))
    rj = rng_(cm, 1)
    row = ri * cm
    pos = row + rj
    ld = p1.index(pos).load()
    cur = UOp(Ops.LOAD, f32, (acc, init, rj))
    upd = UOp(Ops.STORE, dtypes.void, (acc, cur + ld, rj))
    end_j = end(rj)
    res = UOp(Ops.LOAD, f32, (acc, end_j))
    return (p0, p1, zero, cn, cm, acc, ri, init, row, rj, pos, p1.index(pos), ld, cur, cur + ld, upd, end_j, res,
            p0.index(ri), p0.index(ri).store(res), end(ri))


@pytest.mark.parametrize("n, m", [(1, 1), (4, 7), (6, 3)])
def test_row_sum_with_define_reg(rng, n, m):
    a = rng.standard_normal((n, m), dtype=np.float32)
    out = Buffer("PYTHON", n, f32)
    run(row_sum_program(n, m), out, buf(a.reshape(-1)))
    # the interpreter adds in float32 left to right, as the C loop does
    expected = np.zeros(n, np.float32)
    for j in range(m):
        expected += a[:, j]
    np.testing.assert_array_equal(out.numpy(), expected)


def test_valid_gated_load_pads():
    n = 5
    p0, p1, c0, c1, cpad, cn1 = param(0, n + 2), param(1, n), const(0), const(-1), const(n + 2), const(n + 1)
    r = rng_(cpad, 0)
    lo, hi = c0.alu(Ops.CMPLT, r), r < cn1
    valid = lo & hi
    shifted = r + c1
    src_idx = p1.index(shifted, valid=valid)
    ld = src_idx.load()
    uops = (p0, p1, c0, c1, cpad, cn1, r, lo, hi, valid, shifted, src_idx, ld, p0.index(r), p0.index(r).store(ld),
            end(r))
    a = np.arange(1, n + 1, dtype=np.float32)
    out = Buffer("PYTHON", n + 2, f32)
    # r - 1 is -1 and n at the edges: the gate keeps those addresses from being touched
    run(uops, out, buf(a))
    np.testing.assert_array_equal(out.numpy(), np.pad(a, 1))


def test_valid_gated_store_skips():
    n = 6
    p0, cn, c2, c0, seven = param(0, n, dtypes.int32), const(n), const(2), const(0), const(7, dtypes.int32)
    r = rng_(cn, 0)
    even = (r % c2).eq(c0)
    target = p0.index(r, valid=even)
    uops = (p0, cn, c2, c0, seven, r, r % c2, even, target, target.store(seven), end(r))
    out = buf(np.full(n, -1, np.int32))
    run(uops, out)
    assert out.numpy().tolist() == [7, -1, 7, -1, 7, -1]


def test_define_var_bounds_a_loop_and_vals_come_in_name_order():
    p0 = param(0, 16, dtypes.int32)
    b, a = UOp.variable("b", 0, 9), UOp.variable("a", 1, 16)  # b appears first in the program
    ten, one = const(10), const(1, dtypes.int32)
    r = rng_(a, 0)
    val = (b * ten + r).cast(dtypes.int32)
    uops = (p0, b, a, ten, one, r, b * ten, b * ten + r, val, p0.index(r), p0.index(r).store(val), end(r))
    out = buf(np.zeros(16, np.int32))
    run(uops, out, vals=(3, 2))  # a=3, b=2
    assert out.numpy()[:4].tolist() == [20, 21, 22, 0]
    with pytest.raises(ValueError, match=r"variable a = 17 is outside \[1, 16\]"):
        run(uops, out, vals=(17, 2))
    with pytest.raises(ValueError, match=r"takes 2 vals \(\['a', 'b'\]\), got 1"):
        run(uops, out, vals=(3,))


def test_int_division_by_zero_is_zero_and_rounds_toward_zero():
    n = 5
    p0, p1, p2, cn = param(0, n, dtypes.int32), param(1, n, dtypes.int32), param(2, n, dtypes.int32), const(n)
    r = rng_(cn, 0)
    x, y = p1.index(r).load(), p2.index(r).load()
    uops = (p0, p1, p2, cn, r, p1.index(r), x, p2.index(r), y, x // y, p0.index(r), p0.index(r).store(x // y), end(r))
    out = Buffer("PYTHON", n, dtypes.int32)
    run(uops, out, buf(np.array([7, -7, 7, 5, -2**31], np.int32)), buf(np.array([2, 2, 0, -1, -1], np.int32)))
    assert out.numpy().tolist() == [3, -3, 0, -5, -2**31]  # C semantics, int32 wraps


def test_out_of_bounds_is_an_index_error():
    n = 4
    p0, p1, cn, c1 = param(0, n), param(1, n), const(n), const(1)
    r = rng_(cn, 0)
    nxt = r + c1
    ld = p1.index(nxt).load()
    uops = (p0, p1, cn, c1, r, nxt, p1.index(nxt), ld, p0.index(r), p0.index(r).store(ld), end(r))
    with pytest.raises(IndexError, match=r"LOAD of data1\[4\] is out of bounds \(size 4\)"):
        run(uops, Buffer("PYTHON", n, f32), buf(np.zeros(n, np.float32)))


def test_vectorize_gep_and_vector_load_store():
    p0, p1, c0, c1, c2 = param(0, 6), param(1, 2), const(0), const(1), const(2)
    l0, l1 = p1.index(c0).load(), p1.index(c1).load()
    v = UOp(Ops.VECTORIZE, f32.vec(2), (l0, l1))
    w = v + v
    g0, g1 = UOp(Ops.GEP, f32, (w,), (0,)), UOp(Ops.GEP, f32, (w,), (1,))
    vl = UOp(Ops.LOAD, f32.vec(2), (p1.index(c0),))
    c4 = const(4)
    uops = (p0, p1, c0, c1, c2, c4, p1.index(c0), l0, p1.index(c1), l1, v, w, g0, g1, vl,
            p0.index(c0), p0.index(c0).store(g1), p0.index(c1), p0.index(c1).store(g0),
            p0.index(c2), p0.index(c2).store(w), p0.index(c4), p0.index(c4).store(vl))
    out = Buffer("PYTHON", 6, f32)
    run(uops, out, buf(np.array([1.5, -2.0], np.float32)))
    assert out.numpy().tolist() == [-4.0, 3.0, 3.0, -4.0, 1.5, -2.0]


def test_float16_and_bitcast(rng):
    n = 8
    p0, p1, p2, p3, cn = param(0, n, dtypes.half), param(1, n, dtypes.half), param(2, n, dtypes.int32), param(3, n), \
        const(n)
    r = rng_(cn, 0)
    h = p1.index(r).load()
    hh = h * h + h
    x = p3.index(r).load()
    bits = x.bitcast(dtypes.int32)
    uops = (p0, p1, p2, p3, cn, r, p1.index(r), h, h * h, hh, p0.index(r), p0.index(r).store(hh), p3.index(r), x,
            bits, p2.index(r), p2.index(r).store(bits), end(r))
    a, f = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n, dtype=np.float32)
    out, out_bits = Buffer("PYTHON", n, dtypes.half), Buffer("PYTHON", n, dtypes.int32)
    run(uops, out, buf(a), out_bits, buf(f))
    np.testing.assert_allclose(out.numpy(), a * a + a, rtol=1e-3)
    np.testing.assert_array_equal(out_bits.numpy(), f.view(np.int32))


def test_bfloat16_loads_and_stores():
    n = 3
    p0, p1, p2, cn, two = param(0, n, dtypes.bfloat16), param(1, n, dtypes.bfloat16), param(2, n), const(n), \
        const(2.0, f32)
    r = rng_(cn, 0)
    x = p1.index(r).load().cast(f32) * two
    uops = (p0, p1, p2, cn, two, r, p1.index(r), p1.index(r).load(), p1.index(r).load().cast(f32), x,
            p2.index(r), p2.index(r).store(x), x.cast(dtypes.bfloat16), p0.index(r),
            p0.index(r).store(x.cast(dtypes.bfloat16)), end(r))
    vals = np.array([1.5, -3.0, 0.15625], np.float32)
    raw = (vals.view(np.uint32) >> 16).astype(np.uint16)
    out = Buffer("PYTHON", n, dtypes.bfloat16)
    out_f32 = Buffer("PYTHON", n, f32)
    run(uops, out, Buffer("PYTHON", n, dtypes.bfloat16).copyin(raw), out_f32)
    np.testing.assert_array_equal(out_f32.numpy(), vals * 2)
    got = np.empty(n, np.uint16)
    out.copyout(memoryview(got))
    np.testing.assert_array_equal(got, ((vals * 2).view(np.uint32) >> 16).astype(np.uint16))


def test_special_thread_ids():
    p0, c3, c4, c10 = param(0, 12, dtypes.int32), const(3), const(4), const(10)
    g, lid = UOp(Ops.SPECIAL, idx_t, (c3,), "gidx0"), UOp(Ops.SPECIAL, idx_t, (c4,), "lidx0")
    pos, val = g * c4 + lid, (g * c10 + lid).cast(dtypes.int32)
    uops = (p0, c3, c4, c10, g, lid, g * c4, pos, g * c10, g * c10 + lid, val, p0.index(pos), p0.index(pos).store(val))
    out = Buffer("PYTHON", 12, dtypes.int32)
    run(uops, out, global_size=(3, 1, 1), local_size=(4, 1, 1))
    assert out.numpy().tolist() == [g_ * 10 + l_ for g_ in range(3) for l_ in range(4)]


def test_deep_expression_serializes_without_recursion():
    p0, one = param(0, 1), const(1.0, f32)
    chain, x = [], one
    for _ in range(3000):
        x = x + one
        chain.append(x)
    uops = (p0, one, *chain, p0.index(const(0)), p0.index(const(0)).store(x))
    uops = (const(0), *uops)
    out = Buffer("PYTHON", 1, f32)
    run(uops, out)
    assert out.numpy()[0] == 3001.0


def test_render_compile_roundtrip_reinterns_the_uops():
    dev = Device["PYTHON"]
    uops = row_sum_program(2, 3)
    src = dev.renderer.render("row_sum", uops)
    assert isinstance(src, str)
    name, back = deserialize(dev.compiler.compile(src))
    assert name == "row_sum" and all(a is b for a, b in zip(back, uops)) and len(back) == len(uops)
    with pytest.raises(CompileError, match="not a rendered PYTHON program"):
        dev.compiler.compile("not base64!")
    with pytest.raises(RuntimeError, match="holds the program 'row_sum', not 'other'"):
        dev.runtime("other", dev.compiler.compile(src))
    with pytest.raises(RuntimeError, match="is not a PYTHON program"):
        dev.runtime("x", b"garbage")


def test_unsupported_ops_are_named():
    copy = UOp(Ops.COPY, f32, (), None)  # a tensor-level op: no kernel holds one
    with pytest.raises(NotImplementedError, match="Ops.COPY is not supported"):
        PythonProgram(Device["PYTHON"], "k", Device["PYTHON"].compiler.compile(
            Device["PYTHON"].renderer.render("k", (copy,))))


def test_malformed_programs():
    dev = Device["PYTHON"]
    p0, cn = param(0, 4), const(4)
    r = rng_(cn, 0)
    load = (lambda uops: dev.runtime("k", dev.compiler.compile(dev.renderer.render("k", uops))))
    with pytest.raises(ValueError, match="never closed"):
        load((p0, cn, r))
    with pytest.raises(ValueError, match=r"uop 2 \(Ops.INDEX\) uses a RANGE that is not computed before it"):
        load((p0, cn, p0.index(r), r, end(r)))
    r1 = rng_(cn, 1)
    with pytest.raises(ValueError, match="END at 4 does not close the innermost open RANGE"):
        load((p0, cn, r, r1, end(r), end(r1)))
    with pytest.raises(ValueError, match=r"PARAM slots \[1, 1\] are not distinct slots >= 0"):
        load((param(1, 4), param(1, 4)))
    # a slot the program does not read (a reduce over an empty range reads none of its inputs): its buffer is passed
    # and ignored; too few buffers are still refused
    prg = load((param(1, 4),))
    prg(Buffer("PYTHON", 1, f32), Buffer("PYTHON", 4, f32))
    with pytest.raises(ValueError, match="takes 2 buffers, got 1"):
        prg(Buffer("PYTHON", 4, f32))


def test_argument_checks():
    uops = row_sum_program(2, 3)
    with pytest.raises(ValueError, match="takes 2 buffers, got 1"):
        run(uops, Buffer("PYTHON", 2, f32))
    with pytest.raises(TypeError, match="data1 is dtypes.float32, the buffer is dtypes.int32"):
        run(uops, Buffer("PYTHON", 2, f32), Buffer("PYTHON", 6, dtypes.int32))
    with pytest.raises(ValueError, match="data1 needs 6 elements, the buffer holds 5"):
        run(uops, Buffer("PYTHON", 2, f32), Buffer("PYTHON", 5, f32).copyin(bytes(20)))
