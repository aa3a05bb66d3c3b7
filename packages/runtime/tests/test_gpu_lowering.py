"""The GPU half of codegen (ember.codegen.gpudims: LOCAL, GROUP, GROUPTOP, thread ids, shared memory, barriers), run
on the PYTHON device, whose workgroups' threads share memory and wait for each other at barriers as a GPU's do."""

import numpy as np
import pytest

from ember.codegen import KernelOptError, Opt, OptOps, hand_coded_opts, to_program
from ember.runtime import Buffer, Device
from ember.uops import AxisType, Ops, UOp, dtypes

f32 = dtypes.float32


def param(slot, n, dt=f32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def reduce_ast(shape, axes, op=Ops.ADD):
    """out = x.<op>(axes) over a contiguous x of `shape`, kept dims of size 1 dropped."""
    rngs = [UOp.range(n, i, AxisType.REDUCE if i in axes else AxisType.GLOBAL) for i, n in enumerate(shape)]
    at = UOp.const(dtypes.index, 0)
    for r, n in zip(rngs, shape):
        at = at * n + r
    red = UOp(Ops.REDUCE, f32, (param(1, int(np.prod(shape))).index(at).load(), *(rngs[i] for i in axes)), op)
    outs = [r for i, r in enumerate(rngs) if i not in axes]
    out_at = UOp.const(dtypes.index, 0)
    for r in outs:
        out_at = out_at * r.src[0].arg + r
    n_out = int(np.prod([shape[i] for i in range(len(shape)) if i not in axes]))
    st = param(0, n_out).index(out_at).store(red)
    return UOp.sink(st.end(*outs) if outs else st)


def matmul_ast(n, k, m):
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    val = param(1, n * k).index(r0 * k + r2).load() * param(2, k * m).index(r2 * m + r1).load()
    red = UOp(Ops.REDUCE, f32, (val, r2), Ops.ADD)
    return UOp.sink(param(0, n * m).index(r0 * m + r1).store(red).end(r0, r1))


def run(spec, *arrays):
    dev = Device["PYTHON"]
    bufs = [Buffer("PYTHON", a.size, dtypes.float32).copyin(a) for a in arrays]
    dev.runtime(spec.name, dev.compiler.compile(spec.src))(*bufs, global_size=spec.global_size,
                                                           local_size=spec.local_size)
    return [b.numpy() for b in bufs]


RENDERER = Device["PYTHON"].renderer


@pytest.mark.parametrize("shape, axes, opts", [
    ((256,), (0,), [Opt(OptOps.GROUP, 0, 16)]),
    ((256,), (0,), [Opt(OptOps.GROUPTOP, 0, 16)]),
    ((64,), (0,), [Opt(OptOps.GROUP, 0, 64)]),  # the whole axis on threads: no loop left
    ((6, 40), (1,), [Opt(OptOps.GROUP, 1, 8), Opt(OptOps.LOCAL, 0, 2)]),  # threads of 3 outputs x 8 lanes
    ((6, 40), (0,), [Opt(OptOps.GROUPTOP, 1, 2), Opt(OptOps.LOCAL, 0, 4)]),  # the reduce axis is the outer one
    ((4, 6, 10), (0, 2), [Opt(OptOps.GROUP, 2, 5), Opt(OptOps.GROUP, 2, 2)]),  # two group axes
])
def test_group_reduce_matches_numpy(shape, axes, opts):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    spec = to_program(reduce_ast(shape, axes), RENDERER, opts)
    assert any(u.op is Ops.BARRIER for u in spec.uops) and any(u.op is Ops.DEFINE_LOCAL for u in spec.uops)
    want = x.sum(axis=axes).reshape(-1)
    out, _ = run(spec, np.zeros(want.size, np.float32), x)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_group_max_and_lane_zero_stores_alone():
    x = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    spec = to_program(reduce_ast((128,), (0,), Ops.MAX), RENDERER, [Opt(OptOps.GROUP, 0, 32)])
    # the one output is written by lane 0 alone: its store is gated
    stores = [u for u in spec.uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and
              u.src[0].src[0].op is Ops.PARAM]
    assert len(stores) == 1 and len(stores[0].src[0].src) == 3
    assert spec.local_size == (32, 1, 1) and spec.global_size == (1, 1, 1)
    out, _ = run(spec, np.zeros(1, np.float32), x)
    assert out[0] == x.max()


@pytest.mark.parametrize("opts", [[], [Opt(OptOps.LOCAL, 0, 4)], [Opt(OptOps.LOCAL, 1, 6), Opt(OptOps.LOCAL, 0, 2)],
                                  [Opt(OptOps.LOCAL, 1, 3), Opt(OptOps.GROUP, 3, 4)],
                                  [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.LOCAL, 0, 2)]])
def test_matmul_local_opts(opts):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 6)).astype(np.float32)
    spec = to_program(matmul_ast(8, 12, 6), RENDERER, opts)
    threads = int(np.prod(spec.local_size))
    assert threads == int(np.prod([o.amount for o in opts if o.op in (OptOps.LOCAL, OptOps.GROUP)] or [1]))
    out, *_ = run(spec, np.zeros(48, np.float32), a, b)
    np.testing.assert_allclose(out.reshape(8, 6), a @ b, rtol=1e-5, atol=1e-5)


def test_thread_ids_and_launch_dims():
    spec = to_program(matmul_ast(8, 4, 6), RENDERER, [Opt(OptOps.LOCAL, 1, 3)])
    specials = {u.arg: u.src[0].arg for u in spec.uops if u.op is Ops.SPECIAL}
    # the innermost output axis on x: 6 columns = 2 workgroups x 3 threads; the rows on y
    assert specials == {"gidx0": 2, "gidx1": 8, "lidx0": 3}
    assert spec.global_size == (2, 8, 1) and spec.local_size == (3, 1, 1)
    assert not any(u.op is Ops.RANGE and u.arg[1] is AxisType.GLOBAL for u in spec.uops)


def test_more_axes_than_dimensions_share_one():
    shape = (2, 3, 4, 5)
    x = np.arange(120, dtype=np.float32)
    rngs = [UOp.range(n, i, AxisType.GLOBAL) for i, n in enumerate(shape)]
    at = ((rngs[0] * 3 + rngs[1]) * 4 + rngs[2]) * 5 + rngs[3]
    ast = UOp.sink(param(0, 120).index(at).store(param(1, 120).index(at).load() * 2.0).end(*rngs))
    spec = to_program(ast, RENDERER, [])
    assert spec.global_size == (5, 4, 6)  # the two outermost axes share z
    out, _ = run(spec, np.zeros(120, np.float32), x)
    np.testing.assert_array_equal(out, x * 2)


def test_a_dimension_over_its_limit_moves_all_to_x():
    class Small(type(RENDERER)):
        global_max = (1000, 4, 4)

    rngs = [UOp.range(10, 0, AxisType.GLOBAL), UOp.range(30, 1, AxisType.GLOBAL)]
    at = rngs[0] * 30 + rngs[1]
    ast = UOp.sink(param(0, 300).index(at).store(param(1, 300).index(at).load() + 1.0).end(*rngs))
    spec = to_program(ast, Small(), [])
    assert spec.global_size == (300, 1, 1)
    x = np.arange(300, dtype=np.float32)
    out, _ = run(spec, np.zeros(300, np.float32), x)
    np.testing.assert_array_equal(out, x + 1)


def test_gpu_opt_errors():
    with pytest.raises(KernelOptError, match="LOCAL needs a GLOBAL axis whose size 6 the amount"):
        to_program(matmul_ast(8, 4, 6), RENDERER, [Opt(OptOps.LOCAL, 1, 4)])
    with pytest.raises(KernelOptError, match="GROUP needs a REDUCE axis"):
        to_program(matmul_ast(8, 4, 6), RENDERER, [Opt(OptOps.GROUP, 0, 2)])
    class Tiny(type(RENDERER)):
        shared_max = 64

    with pytest.raises(ValueError, match="shared buffers take 128 bytes, the target has 64"):
        to_program(reduce_ast((256,), (0,)), Tiny(), [Opt(OptOps.GROUP, 0, 32)])
    with pytest.raises(ValueError, match="threads in a workgroup"):
        to_program(matmul_ast(64, 4, 64), RENDERER, [Opt(OptOps.LOCAL, 0, 64), Opt(OptOps.LOCAL, 0, 64)])


def test_heuristic_groups_a_full_reduce_and_puts_outputs_on_threads():
    opts = hand_coded_opts(reduce_ast((4096,), (0,)), RENDERER)
    assert [o.op for o in opts] == [OptOps.GROUP] and opts[0].amount == 256
    # the store's contiguous axis first (coalesced), 256 threads in all
    assert hand_coded_opts(matmul_ast(64, 16, 64), RENDERER) == [Opt(OptOps.LOCAL, 1, 32), Opt(OptOps.LOCAL, 0, 8)]


def test_barrier_reached_by_some_threads_is_an_error():
    c4, c2, one = UOp.const(dtypes.index, 4), UOp.const(dtypes.index, 2), UOp.const(f32, 1.0)
    lid = UOp(Ops.SPECIAL, dtypes.index, (c4,), "lidx0")
    local = UOp(Ops.DEFINE_LOCAL, f32.ptr(4), (), 0)
    idx = UOp(Ops.INDEX, local.dtype, (local, lid))
    st = UOp(Ops.STORE, dtypes.void, (idx, one))
    cond = UOp(Ops.CMPLT, dtypes.bool, (lid, c2))
    iff = UOp(Ops.IF, dtypes.void, (cond,))
    bar = UOp(Ops.BARRIER, dtypes.void, (st,))
    endif = UOp(Ops.ENDIF, dtypes.void, (iff,))
    uops = (c4, c2, one, lid, local, idx, st, cond, iff, bar, endif)
    dev = Device["PYTHON"]
    prg = dev.runtime("k", dev.compiler.compile(dev.renderer.render("k", uops)))
    with pytest.raises(RuntimeError, match="2 of 4 threads wait at a barrier the others never reach"):
        prg(global_size=(1, 1, 1), local_size=(4, 1, 1))


def test_every_lane_of_a_group_sees_the_whole_sum():
    # softmax-like: the grouped sum is used by every thread's own element afterwards (x / sum(x))
    n = 64
    r_out, r_red = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(n, 1, AxisType.REDUCE)
    total = UOp(Ops.REDUCE, f32, (param(1, n).index(r_red).load(), r_red), Ops.ADD)
    ast = UOp.sink(param(0, n).index(r_out).store(param(1, n).index(r_out).load() / total).end(r_out))
    x = np.random.default_rng(3).random(n).astype(np.float32) + 0.5
    for opts in ([Opt(OptOps.GROUP, 1, 16)], [Opt(OptOps.GROUP, 1, 16), Opt(OptOps.LOCAL, 0, 4)]):
        out, _ = run(to_program(ast, RENDERER, opts), np.zeros(n, np.float32), x)
        np.testing.assert_allclose(out, x / x.sum(), rtol=1e-5)


def test_products_of_local_axes_index_shared_memory_apart():
    # two local output axes and a group: each (i, j) thread pair has its own slots
    shape = (4, 3, 16)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    for opts in ([Opt(OptOps.LOCAL, 1, 3), Opt(OptOps.LOCAL, 0, 4)],
                 [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 0, 3)]):
        spec = to_program(reduce_ast(shape, (2,)), RENDERER, [Opt(OptOps.GROUP, 2, 8), *opts])
        out, _ = run(spec, np.zeros(12, np.float32), x)
        np.testing.assert_allclose(out, x.sum(2).reshape(-1), rtol=1e-5, atol=1e-5)


# *** tensor cores (Opt TC): fragments by each vendor's lane layout, run by the PYTHON device's warp emulation ***
def tc_matmul_ast(n, k, m, dt, batch=1, out_dt=f32):
    """out[b, i, j] = sum_k dt(a[b, i, k]) * dt(b[b, k, j]), float32 inputs cast to the core's dtype in the kernel.
    Its axes: i, j, b (by id), then the reduce k: axis 3."""
    rb, r0 = UOp.range(batch, 3, AxisType.GLOBAL), UOp.range(n, 0, AxisType.GLOBAL)
    r1, r2 = UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    x = param(1, batch * n * k).index(rb * (n * k) + r0 * k + r2).load().cast(dt).cast(f32)
    y = param(2, batch * k * m).index(rb * (k * m) + r2 * m + r1).load().cast(dt).cast(f32)
    red = UOp(Ops.REDUCE, f32, (x * y, r2), Ops.ADD)
    out = param(0, batch * n * m, out_dt).index(rb * (n * m) + r0 * m + r1).store(red.cast(out_dt))
    return UOp.sink(out.end(rb, r0, r1))


def rounded(a, dt):
    if dt == dtypes.float16:
        return a.astype(np.float16).astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("tc_index", range(4))
@pytest.mark.parametrize("shape, more", [((16, 16, 16), []), ((32, 48, 32), [Opt(OptOps.LOCAL, 0, 2)]),
                                         ((32, 32, 16), [Opt(OptOps.UPCAST, 0, 2)])])
def test_tensor_core_matmul(tc_index, shape, more):
    from ember.codegen import TENSOR_CORES

    tc = TENSOR_CORES[tc_index]
    n, k, m = shape
    if m % tc.dims[1]:
        m *= 2
    rng = np.random.default_rng(tc_index)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    spec = to_program(tc_matmul_ast(n, k, m, tc.dtype_in), RENDERER, [Opt(OptOps.TC, 3, tc_index), *more])
    wmmas = [u for u in spec.uops if u.op is Ops.WMMA]
    assert wmmas and {u.arg for u in wmmas} == {tc.name} and spec.local_size[0] == tc.threads
    out, *_ = run(spec, np.zeros(n * m, np.float32), a, b)
    want = rounded(a, tc.dtype_in).astype(np.float64) @ rounded(b, tc.dtype_in).astype(np.float64)
    np.testing.assert_allclose(out.reshape(n, m), want, rtol=1e-5, atol=1e-5)


def test_tensor_core_batched_with_a_bfloat16_result():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((2, 16, 32)).astype(np.float32), rng.standard_normal((2, 32, 16)).astype(np.float32)
    ast = tc_matmul_ast(16, 32, 16, dtypes.bfloat16, batch=2, out_dt=dtypes.bfloat16)
    spec = to_program(ast, RENDERER, [Opt(OptOps.TC, 3, 2)])
    dev = Device["PYTHON"]
    bufs = [Buffer("PYTHON", 512, dtypes.bfloat16), Buffer("PYTHON", a.size, f32).copyin(a.reshape(-1)),
            Buffer("PYTHON", b.size, f32).copyin(b.reshape(-1))]
    dev.runtime(spec.name, dev.compiler.compile(spec.src))(*bufs, global_size=spec.global_size,
                                                           local_size=spec.local_size)
    raw = np.empty(512, np.uint16)
    bufs[0].copyout(memoryview(raw).cast("B"))
    got = (raw.astype(np.uint32) << 16).view(np.float32).reshape(2, 16, 16)
    want = rounded(rounded(a, dtypes.bfloat16) @ rounded(b, dtypes.bfloat16), dtypes.bfloat16)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_tensor_core_errors_and_heuristic():
    from ember.codegen import CRenderer, CUDARenderer

    ast = tc_matmul_ast(16, 16, 16, dtypes.bfloat16)
    with pytest.raises(KernelOptError, match="TC mma_m16n8k16_f16 multiplies float16 values"):
        to_program(ast, RENDERER, [Opt(OptOps.TC, 3, 1)])
    with pytest.raises(KernelOptError, match="divisible by 16 and 8 and a reduce axis divisible by 16"):
        to_program(tc_matmul_ast(16, 24, 16, dtypes.bfloat16), RENDERER, [Opt(OptOps.TC, 3, 0)])
    with pytest.raises(KernelOptError, match="CUDARenderer has the tensor cores"):
        to_program(ast, CUDARenderer(), [Opt(OptOps.TC, 3, 2)])  # an AMD core on NVIDIA
    with pytest.raises(KernelOptError, match="CRenderer has no workgroups"):
        to_program(ast, CRenderer(), [Opt(OptOps.TC, 3, 0)])
    assert hand_coded_opts(ast, CUDARenderer())[0] == Opt(OptOps.TC, 3, 0)
    assert all(o.op is not OptOps.TC for o in hand_coded_opts(tc_matmul_ast(16, 16, 16, f32), CUDARenderer()))


def test_an_axis_of_a_size_known_at_run_time_stays_a_loop_next_to_thread_ids():
    n = UOp.variable("n", 1, 64)
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(8, 1, AxisType.GLOBAL)
    at = r0 * 8 + r1
    ast = UOp.sink(param(0, 512).index(at).store(param(1, 512).index(at).load() * 2.0).end(r0, r1))
    spec = to_program(ast, RENDERER, None)
    assert spec.vars == (n,) and spec.local_size[0] == 8
    assert [u.arg[1] for u in spec.uops if u.op is Ops.RANGE] == [AxisType.GLOBAL]  # n's loop, in each thread
    x = np.arange(512, dtype=np.float32)
    dev = Device["PYTHON"]
    bufs = [Buffer("PYTHON", 512, f32).copyin(np.zeros(512, np.float32)), Buffer("PYTHON", 512, f32).copyin(x)]
    dev.runtime(spec.name, dev.compiler.compile(spec.src))(*bufs, global_size=spec.global_size,
                                                           local_size=spec.local_size, vals=(37,))
    out = bufs[0].numpy()
    np.testing.assert_array_equal(out[:296], x[:296] * 2)
    assert (out[296:] == 0).all()


def test_a_scatter_kernel_runs_on_one_thread():
    # an embedding gradient: the scheduler's scatter (fill, then out[y(t)] += g(t) in sequential LOOP ranges); on a
    # GPU the fill and every update must be in order: one thread, no opts
    from ember.tensor import Tensor

    rng = np.random.default_rng(5)
    idx, g = rng.integers(0, 16, (2, 5)), rng.standard_normal((2, 5, 8)).astype(np.float32)
    w = Tensor(rng.standard_normal((16, 8)).astype(np.float32), device="PYTHON", requires_grad=True)
    (w[Tensor(idx, device="PYTHON")] * Tensor(g, device="PYTHON")).sum().backward()
    want = np.zeros((16, 8), np.float32)
    np.add.at(want, idx, g)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6, atol=1e-6)
    r0, r1 = UOp.range(4, 0, AxisType.GLOBAL), UOp.range(3, 1, AxisType.LOOP)
    ast = UOp.sink(param(0, 4).index(r0).store(param(1, 4).index(r0).load()).end(r0, r1))
    assert hand_coded_opts(ast, RENDERER) == [] and to_program(ast, RENDERER, None).local_size == (1, 1, 1)
    with pytest.raises(KernelOptError, match="sequential LOOP ranges"):
        to_program(ast, RENDERER, [Opt(OptOps.LOCAL, 0, 2)])


def test_pack_is_refused_on_a_target_with_workgroups():
    # a PACK panel is private to a CPU thread; a GPU's local memory is shared by the workgroup
    with pytest.raises(KernelOptError, match="PACK stages a panel private to a CPU thread"):
        to_program(matmul_ast(8, 12, 6), RENDERER, [Opt(OptOps.PACK, 0, 0)])


def run_gpu_program(spec, *arrays):
    """A GPU renderer's linear program (vectors and all) run on the PYTHON device: the numbers the GPU must give."""
    dev = Device["PYTHON"]
    bufs = [Buffer("PYTHON", a.size, dtypes.float32).copyin(a) for a in arrays]
    dev.runtime(spec.name, dev.compiler.compile(RENDERER.render(spec.name, spec.uops)))(
        *bufs, global_size=spec.global_size, local_size=spec.local_size)
    return [b.numpy() for b in bufs]


def test_gpu_register_tile_and_vector_accesses():
    """The GPU heuristic gives a big float32 matmul a 4 x 4 register tile per thread (UPCAST of both output axes) on
    16 x 16 threads, the column axis innermost (a warp's lanes along a row: coalesced); the CUDA and HIP programs
    load B and store C as 4-float vectors, and compute the product exactly as numpy does."""
    from ember.codegen import CUDARenderer, HIPRenderer

    big = hand_coded_opts(matmul_ast(256, 64, 256), CUDARenderer())
    assert big == [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 16),
                   Opt(OptOps.LOCAL, 1, 16)]
    assert hand_coded_opts(matmul_ast(256, 64, 256), HIPRenderer("gfx942")) == big
    assert all(o.op is not OptOps.UPCAST for o in hand_coded_opts(matmul_ast(64, 64, 64), CUDARenderer()))  # small
    n, k, m = 128, 4, 128  # (the same opts on a matmul small enough for the interpreter: 2 x 2 workgroups)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    for renderer in (CUDARenderer(), HIPRenderer("gfx942")):
        spec = to_program(matmul_ast(n, k, m), renderer, big)
        assert spec.local_size == (16, 16, 1) and spec.global_size == (2, 2, 1)
        assert "emb_load4(&data2[" in spec.src and spec.src.count("emb_store4(&data0[") == 4
        vectors = [u for u in spec.uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and
                   (u.dtype if u.op is Ops.LOAD else u.src[1].dtype) == f32.vec(4)]
        assert len(vectors) == 5  # one B load, four C rows
        out, _, _ = run_gpu_program(spec, np.zeros(n * m, np.float32), a.ravel(), b.ravel())
        np.testing.assert_allclose(out.reshape(n, m), a @ b, rtol=1e-5, atol=1e-5)


def test_gpu_elementwise_vectors():
    """A big elementwise kernel moves 4 floats per thread and buffer; the math between the loads and the store is
    rendered lane by lane (a GPU thread has no vector ALU); an offset view (unaligned) takes emb_load4's slow path."""
    from ember.codegen import CUDARenderer

    def fma_ast(n, offset=0):
        r = UOp.range(n, 0, AxisType.GLOBAL)
        x = param(1, n + offset).index(r + offset).load()
        return UOp.sink(param(0, n).index(r).store(x * param(2, n).index(r).load() + 1.0).end(r))

    assert hand_coded_opts(fma_ast(1 << 20), CUDARenderer())[0] == Opt(OptOps.UPCAST, 0, 4)
    assert all(o.op is not OptOps.UPCAST for o in hand_coded_opts(fma_ast(4096), CUDARenderer()))
    rng = np.random.default_rng(4)
    for offset in (0, 1):
        spec = to_program(fma_ast(256, offset), CUDARenderer(), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 32)])
        body = spec.src.split("#endif")[-1]
        assert body.count("emb_load4(") == 2 and body.count("emb_store4(") == 1 and "emb_vec<float, 4>{{(" in body
        x, y = rng.standard_normal(256 + offset).astype(np.float32), rng.standard_normal(256).astype(np.float32)
        out, _, _ = run_gpu_program(spec, np.zeros(256, np.float32), x, y)
        np.testing.assert_allclose(out, x[offset:] * y + 1.0, rtol=1e-6)


def scatter_ast(vocab, dim, tokens):
    """The scheduler's embedding-gradient scatter: out = 0 over (vocab, dim), then out[y[t], j] += x[t, j] in LOOP
    ranges (the update reads out after the fill's END), out-of-range ids dropped."""
    rv, rj = UOp.range(vocab, 0, AxisType.GLOBAL), UOp.range(dim, 1, AxisType.GLOBAL)
    fill = param(0, vocab * dim).index(rv * dim + rj).store(UOp.const(f32, 0.0)).end(rv, rj)
    rt, rk = UOp.range(tokens, 2, AxisType.LOOP), UOp.range(dim, 3, AxisType.LOOP)
    y = param(1, tokens, dtypes.int32).index(rt).load().cast(dtypes.index)
    at = param(0, vocab * dim).index(y * dim + rk, valid=y < vocab)
    x = param(2, tokens * dim).index(rt * dim + rk).load()
    return UOp.sink(at.store(at.load(fill) + x).end(rt, rk))


@pytest.mark.parametrize("vocab, dim, tokens", [(16, 8, 10), (40, 48, 50)])  # (threads dividing the points or not)
def test_a_scatter_runs_on_a_workgroup_with_atomic_adds(vocab, dim, tokens):
    """On a target with atomic adds (CUDA) the scatter's fill is spread over 1024 threads, then a barrier, then its
    updates spread over them too, each an atomicAdd; the PYTHON device runs the CUDA program (its read-modify-write is
    atomic: threads take turns only at barriers) and matches numpy's np.add.at, repeated ids included. HIP (no
    atomics on the mock GPU yet) keeps one thread."""
    from ember.codegen import ATOMIC_ADD, CUDARenderer, HIPRenderer

    spec = to_program(scatter_ast(vocab, dim, tokens), CUDARenderer())
    assert spec.local_size == (1024, 1, 1) and spec.global_size == (1, 1, 1)
    body = spec.src.split("#endif")[-1]
    assert body.count("__syncthreads();") == 1 and body.count("atomicAdd(&data0[") == 1
    assert body.index("= 0.0f;") < body.index("__syncthreads();") < body.index("atomicAdd(")
    assert sum(u.op is Ops.STORE and u.arg == ATOMIC_ADD for u in spec.uops) == 1
    assert to_program(scatter_ast(vocab, dim, tokens), HIPRenderer("gfx942")).local_size == (1, 1, 1)
    rng = np.random.default_rng(6)
    ids = rng.integers(0, vocab + 2, tokens).astype(np.int32)  # repeats, and ids past the vocabulary (dropped)
    x = rng.standard_normal((tokens, dim)).astype(np.float32)
    dev = Device["PYTHON"]
    bufs = [Buffer("PYTHON", vocab * dim, f32).copyin(np.full(vocab * dim, 7.0, np.float32)),
            Buffer("PYTHON", tokens, dtypes.int32).copyin(ids), Buffer("PYTHON", tokens * dim, f32).copyin(x)]
    dev.runtime(spec.name, dev.compiler.compile(RENDERER.render(spec.name, spec.uops)))(
        *bufs, global_size=spec.global_size, local_size=spec.local_size)
    want = np.zeros((vocab, dim), np.float32)
    keep = ids < vocab
    np.add.at(want, ids[keep], x[keep])
    np.testing.assert_allclose(bufs[0].numpy().reshape(vocab, dim), want, rtol=1e-5, atol=1e-6)


def test_a_scatter_that_is_not_an_add_stays_on_one_thread():
    from ember.codegen import CUDARenderer

    rv = UOp.range(8, 0, AxisType.GLOBAL)
    fill = param(0, 8).index(rv).store(UOp.const(f32, 0.0)).end(rv)
    rt = UOp.range(5, 1, AxisType.LOOP)
    at = param(0, 8).index(param(1, 5, dtypes.int32).index(rt).load().cast(dtypes.index) % 8)
    ast = UOp.sink(at.store(at.load(fill).maximum(param(2, 5).index(rt).load())).end(rt))  # a max: no atomic
    spec = to_program(ast, CUDARenderer())
    assert spec.local_size == (1, 1, 1) and "atomicAdd" not in spec.src


def test_tensor_core_register_tiles_of_a_big_matmul():
    """For a big matmul the heuristic has each warp compute 2 x 2 tensor-core tiles (UPCAST by 2 of the axis only A
    moves and of the one only B moves, after TC): 4 instructions per k step sharing 2 A and 2 B fragments. The
    PYTHON device runs the CUDA opts' program (mma.sync lanes emulated) and matches the rounded-input product."""
    from ember.codegen import CUDARenderer

    n, k, m = 256, 16, 256
    ast = tc_matmul_ast(n, k, m, dtypes.bfloat16)
    opts = hand_coded_opts(ast, CUDARenderer())
    assert opts[:3] == [Opt(OptOps.TC, 3, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2)]
    assert hand_coded_opts(tc_matmul_ast(32, 16, 32, dtypes.bfloat16), CUDARenderer())[1].op is OptOps.LOCAL  # small
    spec = to_program(ast, RENDERER, opts)
    assert sum(u.op is Ops.WMMA for u in spec.uops) == 4
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    out, *_ = run(spec, np.zeros(n * m, np.float32), a, b)
    want = rounded(a, dtypes.bfloat16).astype(np.float64) @ rounded(b, dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(out.reshape(n, m), want, rtol=1e-5, atol=1e-5)
