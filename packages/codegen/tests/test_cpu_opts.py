"""The CPU opts (register tiles, vectors, partial sums, threads) against numpy, every combination on odd sizes."""

import itertools
import re

import numpy as np
import pytest

from ember.codegen import CRenderer, KernelOptError, Opt, OptOps, apply_opts, hand_coded_opts, kernel_ranges, to_program
from ember.codegen.opt import apply_opt
from ember.uops import AxisType, Ops, UOp, dtypes


def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def matmul_ast(n, k, m, b_transposed=False, dt=dtypes.float32):
    """out[i, j] = sum_k a[i, k] * b[k, j]  (b stored (m, k) when b_transposed: x @ W.T)"""
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    b_idx = r1 * k + r2 if b_transposed else r2 * m + r1
    val = param(1, n * k, dt).index(r0 * k + r2).load() * param(2, k * m, dt).index(b_idx).load()
    red = UOp(Ops.REDUCE, dt, (val, r2), Ops.ADD)
    return UOp.sink(param(0, n * m, dt).index(r0 * m + r1).store(red).end(r0, r1))


def row_reduce_ast(n, m, op=Ops.ADD):
    """out[i] = reduce_j (a[i, j] * 0.5 + 1)"""
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load()
    red = UOp(Ops.REDUCE, dtypes.float32, (val * 0.5 + 1.0, r1), op)
    return UOp.sink(param(0, n).index(r0).store(red).end(r0))


def reference(n, k, m, b_transposed, rng, npdt=np.float32):
    a = rng.standard_normal((n, k)).astype(npdt)
    b = rng.standard_normal((m, k) if b_transposed else (k, m)).astype(npdt)
    return a, b, a @ (b.T if b_transposed else b)


def candidate_opts(ast):
    """Single opts of every kind and amount the heuristic uses, on every axis they apply to."""
    cands = []
    for i, r in enumerate(kernel_ranges(ast)):
        size = r.src[0].arg
        for amt in (2, 4, 8, 16, 32):
            if size % amt == 0 and size >= amt:
                if r.arg[1] is AxisType.GLOBAL:
                    cands.append(Opt(OptOps.UPCAST, i, amt))
                elif r.arg[1] is AxisType.REDUCE:
                    cands += [Opt(OptOps.UNROLL, i, amt), Opt(OptOps.PARTIAL, i, amt)]
        if r.arg[1] is AxisType.GLOBAL and size >= 2:
            cands.append(Opt(OptOps.THREAD, i, 2))
    return cands


def opt_lists(ast, depth=3, limit=12):
    """[], each candidate, and chains: each opt applied to the kernel the previous ones made (so axis indices are
    valid), up to `depth` long; a deterministic sample of at most `limit`."""
    out, frontier = [[]], [[]]
    for _ in range(depth):
        nxt = []
        for opts in frontier:
            ast_now = apply_opts(ast, opts)
            nxt += [opts + [c] for c in candidate_opts(ast_now) if c.op is not OptOps.THREAD or not opts or
                    all(o.op is not OptOps.THREAD for o in opts)]
        frontier = nxt[::max(1, len(nxt) // limit)]
        out += frontier
    return out


@pytest.mark.parametrize("n, k, m, bt", [(8, 32, 64, False), (24, 48, 32, True), (6, 16, 96, False)])
def test_matmul_opt_chains(run_c, rng, n, k, m, bt):
    assert len(check_chains(run_c, rng, (n, k, m, bt), opt_lists(matmul_ast(n, k, m, bt)))) >= 25


def check_chains(run_c, rng, shape, chains):
    """Each opt list that applies to the matmul of `shape` against numpy; the lists that applied."""
    n, k, m, bt = shape
    ast = matmul_ast(n, k, m, bt)
    a, b, want = reference(n, k, m, bt, rng)
    applied = []
    for opts in chains:
        try:
            prg = to_program(ast, CRenderer(), opts)
        except KernelOptError:
            continue
        (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, err_msg=str(opts))
        applied.append(opts)
    return applied


@pytest.mark.parametrize("n, k, m, bt", [(7, 33, 5, False), (1, 1, 1, False), (100, 37, 129, True), (64, 96, 48, False),
                                         (64, 96, 48, True), (33, 256, 17, True), (3, 1024, 96, False)])
def test_heuristic_on_odd_sizes(run_c, rng, n, k, m, bt):
    ast = matmul_ast(n, k, m, bt)
    a, b, want = reference(n, k, m, bt, rng)
    prg = to_program(ast, CRenderer())
    (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(prg.applied_opts))


def upcasts(ast, opts):
    """{axis id of the kernel as given: the product of the UPCAST / PARTIAL amounts it got} (an opt's axis indexes the
    ranges of the kernel the opts before it made: a split keeps the outer part's id)."""
    out = {}
    for o in opts:
        rid = kernel_ranges(ast)[o.axis].arg[0]
        if o.op in (OptOps.UPCAST, OptOps.PARTIAL):
            out[rid] = out.get(rid, 1) * o.amount
        ast = apply_opt(ast, o)
    return out


def test_heuristic_register_tile_and_partial_sums():
    # b contiguous along the output's last axis: a register tile of rows x vectors, one vector FMA per pair
    ast = matmul_ast(64, 64, 64)
    tile = upcasts(ast, hand_coded_opts(ast, CRenderer()))
    assert set(tile) == {0, 1} and tile[1] % 16 == 0 and tile[0] >= 4, tile
    src = to_program(ast, CRenderer()).src
    assert "typedef float v16_float __attribute__((vector_size(64)));" in src
    assert src.count("v16_float acc") == tile[0] * tile[1] // 16 and "*(v16_float_u*)&data0[" in src
    # both operands contiguous along the reduce (x @ W.T): vector partial sums, several sharing their loads
    ast = matmul_ast(64, 64, 64, b_transposed=True)
    tile = upcasts(ast, hand_coded_opts(ast, CRenderer()))
    assert tile.get(2, 1) % 16 == 0 and tile.get(0, 1) * tile.get(1, 1) > 1, tile
    src = to_program(ast, CRenderer()).src
    assert src.count("v16_float acc") > 1  # their lanes summed after the loop by a tree of shuffles, not one by one
    assert "__builtin_shufflevector(acc0, acc1, " in src and "acc0[" not in src


@pytest.mark.parametrize("n, k, m, bt", [(256, 64, 256, False), (256, 64, 256, True), (64, 48, 512, True),
                                         (96, 40, 128, False)])
def test_heuristic_packs_the_b_panel(run_c, rng, n, k, m, bt):
    # big enough to reuse B across row tiles: its columns' loop goes outside the rows, B packed into a panel
    ast = matmul_ast(n, k, m, bt)
    opts = hand_coded_opts(ast, CRenderer())
    assert OptOps.PACK in [o.op for o in opts], opts
    prg = to_program(ast, CRenderer())
    panel = re.search(r"float local0\[(\d+)\] __attribute__\(\(aligned\(64\)\)\);", prg.src)
    assert panel and int(panel[1]) % (k * 16) == 0  # the whole reduce, by a tile of vectors
    # the panel is read with vector loads (x @ W.T too: its transpose is done once, by the copy)
    assert re.search(r"v16_float val\d+ = \*\(const v16_float_u\*\)&local0\[", prg.src)
    a, b, want = reference(n, k, m, bt, rng)
    (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(opts))


def test_heuristic_tiles_a_weight_gradient_along_its_wide_operand(run_c, rng):
    """dW[v, k] = sum_t g[t, v] * h[t, k] with g (1024 x 512, 2 MiB) much wider than h (256 KiB): tiled along the
    store's contiguous k, g would be re-read from memory for every 32-column panel; the tile runs along v instead (g
    streamed once into panels, h re-read from cache), its stores lane by lane. A narrow g keeps the store's axis."""
    def wgrad(nv, nk, nt):
        v, k, t = (UOp.range(nv, 0, AxisType.GLOBAL), UOp.range(nk, 1, AxisType.GLOBAL),
                   UOp.range(nt, 2, AxisType.REDUCE))
        val = param(1, nt * nv).index(t * nv + v).load() * param(2, nt * nk).index(t * nk + k).load()
        return UOp.sink(param(0, nv * nk).index(v * nk + k).store(UOp(Ops.REDUCE, dtypes.float32, (val, t),
                                                                          Ops.ADD)).end(v, k))

    def vector_axis(ast):  # the output axis the register tile runs along: the widest, by whole vectors
        tile = upcasts(ast, hand_coded_opts(ast, CRenderer()))
        axis = max(tile, key=lambda a: tile[a])
        assert tile[axis] % 16 == 0, tile
        return axis

    ast = wgrad(512, 64, 1024)
    opts = hand_coded_opts(ast, CRenderer())
    assert vector_axis(ast) == 0, opts
    g, h = rng.standard_normal((1024, 512), dtype=np.float32), rng.standard_normal((1024, 64), dtype=np.float32)
    (out, *_) = run_c(to_program(ast, CRenderer()), np.zeros((512, 64), np.float32), g, h)
    np.testing.assert_allclose(out, g.T @ h, rtol=1e-4, atol=1e-3, err_msg=str(opts))
    assert vector_axis(wgrad(64, 512, 1024)) == 1
    # GQA's dV = p^T dO (p: 512 x 256, 512 KB; dO: 512 x 32): p streamed into panels along its contiguous rows
    assert vector_axis(wgrad(256, 32, 512)) == 0


def test_heuristic_traded_tile_axis_vectorizes_whole_rows(run_c, rng):
    """A tile axis traded away from the store's (GQA's dV = p^T dO over head_dim 32: p streamed into panels) leaves
    the store's contiguous axis as the tile's rows, and those are the vector lanes: a whole vector of them (16
    floats), not 8 (half-vector FMAs, 32 accumulators of 8 lanes: 1.25x slower on an AVX-512 CPU), p still packed."""
    nv, nk, nt = 256, 32, 512
    v, k, t = UOp.range(nv, 0, AxisType.GLOBAL), UOp.range(nk, 1, AxisType.GLOBAL), UOp.range(nt, 2, AxisType.REDUCE)
    val = param(1, nt * nv).index(t * nv + v).load() * param(2, nt * nk).index(t * nk + k).load()
    ast = UOp.sink(param(0, nv * nk).index(v * nk + k).store(UOp(Ops.REDUCE, dtypes.float32, (val, t),
                                                                      Ops.ADD)).end(v, k))
    opts = hand_coded_opts(ast, CRenderer())
    tile = upcasts(ast, opts)
    assert tile[0] > tile[1] == 16, opts  # (the traded tile axis, then the rows: one whole vector)
    assert OptOps.PACK in [o.op for o in opts], opts  # (two row tiles read p's panel: packed once, not read twice)
    prg = to_program(ast, CRenderer())
    assert "v16_float acc" in prg.src and "v8_float acc" not in prg.src
    p, d = rng.standard_normal((nt, nv), dtype=np.float32), rng.standard_normal((nt, nk), dtype=np.float32)
    (out, *_) = run_c(prg, np.zeros((nv, nk), np.float32), p, d)
    np.testing.assert_allclose(out, p.T @ d, rtol=1e-4, atol=1e-3, err_msg=str(opts))

def rope_transposed_ast(nh, nd, nt):
    """out[h, d, t] from x[t, h, d] rotated by pairs, as RoPE's backward writes it (the output a transpose of its
    inputs): even d: x[d] * c - x[d + 1] * s, odd d: x[d - 1] * s + x[d] * c, with c, s = cos, sin[t, d // 2]; each
    branch's loads gated by d's parity, their indexes through d % 2 and d // 2 (affine in no range)."""
    h, d, t = (UOp.range(nh, 0, AxisType.GLOBAL), UOp.range(nd, 1, AxisType.GLOBAL), UOp.range(nt, 2, AxisType.GLOBAL))
    even = (d % 2) < 1
    odd = even.logical_not()
    x, cos, sin = param(1, nt * nh * nd), param(2, nt * nd // 2), param(3, nt * nd // 2)
    row, half = (t * nh + h) * nd + d // 2 * 2, t * (nd // 2) + d // 2
    first = x.index(row, valid=even).load() * cos.index(half, valid=even).load() - \
        x.index(row + 1, valid=even).load() * sin.index(half, valid=even).load()
    second = x.index(row, valid=odd).load() * sin.index(half, valid=odd).load() + \
        x.index(row + 1, valid=odd).load() * cos.index(half, valid=odd).load()
    val = even.where(first, 0.0) + odd.where(second, 0.0)
    return UOp.sink(param(0, nh * nd * nt).index((h * nd + d) * nt + t).store(val).end(h, d, t))


def test_heuristic_vectorizes_an_elementwise_transpose_along_its_loads(run_c, rng):
    """An elementwise kernel whose store is contiguous along an axis that its loads gather along (the output a
    transpose of its inputs) is vectorized along the axis its loads are contiguous in, the store then writing lanes
    one by one; a transpose of a single load keeps the store's axis (one gather for one scatter)."""
    nh, nd, nt = 2, 32, 64
    ast = rope_transposed_ast(nh, nd, nt)
    opts = hand_coded_opts(ast, CRenderer())
    assert upcasts(ast, opts) == {1: 16}, opts
    x = rng.standard_normal((nt, nh, nd), dtype=np.float32)
    angle = rng.standard_normal((nt, nd // 2), dtype=np.float32)
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    want = np.empty_like(x)
    want[..., 0::2] = even * cos[:, None] - odd * sin[:, None]
    want[..., 1::2] = even * sin[:, None] + odd * cos[:, None]
    (out, *_) = run_c(to_program(ast, CRenderer()), np.zeros(nh * nd * nt, np.float32), x, cos, sin)
    np.testing.assert_allclose(out.reshape(nh, nd, nt), want.transpose(1, 2, 0), rtol=1e-5, atol=1e-6,
                               err_msg=str(opts))

    def transpose_ast(n, m, loads):  # out[j, i] = a[i, j] (+ b[i, j])
        i, j = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL)
        val = param(1, n * m).index(j * n + i).load()
        for slot in range(2, loads + 1):
            val = val + param(slot, n * m).index(j * n + i).load()
        return UOp.sink(param(0, n * m).index(i * m + j).store(val).end(i, j))

    for loads, axis in ((1, 1), (2, 0)):
        tr = transpose_ast(64, 48, loads)
        tr_opts = hand_coded_opts(tr, CRenderer())
        assert upcasts(tr, tr_opts) == {axis: 16}, (loads, tr_opts)
    a, b = rng.standard_normal((48, 64), dtype=np.float32), rng.standard_normal((48, 64), dtype=np.float32)
    (out, *_) = run_c(to_program(tr, CRenderer()), np.zeros((64, 48), np.float32), a, b)
    np.testing.assert_allclose(out, (a + b).T, rtol=1e-6, err_msg=str(tr_opts))


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_padto_on_every_axis_kind(run_c, rng, op):
    """PADTO runs an axis to a multiple of the amount with the padded iterations gated off: on the rows, the
    columns and the reduce axis of a 37 x 45 x 70 matmul, then tiles, partial sums and threads on the padded sizes,
    against numpy; a MAX reduce padded on its axis adds -inf (its identity), not the 0 a gated load reads."""
    ast = matmul_ast(37, 45, 70)
    a, b, want = reference(37, 45, 70, False, rng)
    chains = [[Opt(OptOps.PADTO, 0, 8)], [Opt(OptOps.PADTO, 1, 32)], [Opt(OptOps.PADTO, 2, 8)],
              [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.PADTO, 1, 32), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8),
               Opt(OptOps.THREAD, 0, 2)],
              [Opt(OptOps.PADTO, 2, 16), Opt(OptOps.PARTIAL, 2, 16), Opt(OptOps.PADTO, 1, 8),
               Opt(OptOps.UPCAST, 1, 8)],
              [Opt(OptOps.PADTO, 1, 32), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8),
               Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 0)]]
    for opts in chains:
        (out, *_) = run_c(to_program(ast, CRenderer(), opts), np.zeros((37, 70), np.float32), a, b)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, err_msg=str(opts))
    x = -np.abs(rng.standard_normal((9, 45), dtype=np.float32)) - 1  # all below the 0 a padded load reads
    red = row_reduce_ast(9, 45, op)
    ref = (x * 0.5 + 1).max(1) if op is Ops.MAX else (x * 0.5 + 1).sum(1)
    for opts in ([Opt(OptOps.PADTO, 1, 16)], [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.PARTIAL, 1, 16)]):
        (out, *_) = run_c(to_program(red, CRenderer(), opts), np.zeros(9, np.float32), x)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=str(opts))
    with pytest.raises(KernelOptError):
        apply_opt(ast, Opt(OptOps.PADTO, 0, 37))  # nothing to pad


@pytest.mark.parametrize("n, k, m", [(100, 70, 136), (257, 129, 300)])
def test_heuristic_pads_remainders_into_the_microkernel(run_c, rng, n, k, m):
    """Sizes the 8 x 32 tile does not divide are padded (PADTO) and get the packed microkernel: the edge tiles'
    loads and stores are gated, their accumulators still vectors (stored lane by lane where gated apart)."""
    ast = matmul_ast(n, k, m)
    opts = hand_coded_opts(ast, CRenderer())
    assert opts[0].op is OptOps.PADTO and OptOps.PACK in [o.op for o in opts], opts
    prg = to_program(ast, CRenderer())
    assert "v16_float acc0" in prg.src and not re.search(r"\bfloat acc\d+ =", prg.src)  # no scalar accumulator
    a, b, want = reference(n, k, m, False, rng)
    (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(opts))


def test_pack_and_swap_opts(run_c, rng):
    # PACK at each output axis of a batched matmul (the panel of what that axis does not move), with and without
    # SWAP and tiles, against numpy; PACK refuses axes nothing inside is independent of
    bs, n, k, m = 3, 16, 24, 32
    r = [UOp.range(bs, 0, AxisType.GLOBAL), UOp.range(n, 1, AxisType.GLOBAL), UOp.range(m, 2, AxisType.GLOBAL),
         UOp.range(k, 3, AxisType.REDUCE)]
    val = param(1, bs * n * k).index(r[0] * n * k + r[1] * k + r[3]).load() * \
        param(2, bs * k * m).index(r[0] * k * m + r[3] * m + r[2]).load()
    ast = UOp.sink(param(0, bs * n * m).index(r[0] * n * m + r[1] * m + r[2]).store(
        UOp(Ops.REDUCE, dtypes.float32, (val, r[3]), Ops.ADD)).end(*r[:3]))
    a, b = rng.standard_normal((bs, n, k), dtype=np.float32), rng.standard_normal((bs, k, m), dtype=np.float32)
    want = a @ b
    plans = [[Opt(OptOps.PACK, 1, 0)], [Opt(OptOps.PACK, 2, 0)], [Opt(OptOps.SWAP, 1, 2), Opt(OptOps.PACK, 2, 0)],
             [Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 1, 2), Opt(OptOps.PACK, 2, 0),
              Opt(OptOps.THREAD, 0, 2)],
             [Opt(OptOps.UPCAST, 2, 32), Opt(OptOps.UNROLL, 3, 4), Opt(OptOps.PACK, 1, 0), Opt(OptOps.THREAD, 0, 2)]]
    for opts in plans:
        prg = to_program(ast, CRenderer(), opts)
        assert "local0[" in prg.src
        (out, *_) = run_c(prg, np.zeros((bs, n, m), np.float32), a, b)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=str(opts))
    with pytest.raises(KernelOptError, match="PACK"):  # both loads move with the batch axis
        apply_opt(ast, Opt(OptOps.PACK, 0, 0))
    with pytest.raises(KernelOptError, match="SWAP"):
        apply_opt(ast, Opt(OptOps.SWAP, 1, 3))


@pytest.mark.parametrize("m, copy_loop", [(32, True), (16, True), (8, False), (12, False)])
def test_pack_of_a_transposed_panel(run_c, rng, m, copy_loop):
    # x @ W.T: the panel's upcast axis walks W's rows (stride k), so its lanes are scalar loads: the copy assembles
    # them PACK_GATHER_LANES at a time in a loop (a transposed copy of 32 whole lanes cost ~15 ms of gcc per kernel),
    # where they divide the axis and are fewer; numerics against numpy either way
    n, k = 8, 40
    ast = matmul_ast(n, k, m, b_transposed=True)
    opts = [Opt(OptOps.UPCAST, 1, m), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.PACK, 0, 0)]
    prg = to_program(ast, CRenderer(), opts)
    copy = prg.src[prg.src.index("local0["):prg.src.index("acc0")]
    assert len(re.findall(r"float val\d+ = data2\[", copy)) == (8 if copy_loop else m), copy
    assert copy.count("for (long long") == (3 if copy_loop else 2), copy  # (k, the lanes' loop if any, then n)
    if copy_loop:
        assert f"< {m // 8}ll;" in copy, copy
    a, b, want = reference(n, k, m, True, rng)
    (out, *_) = run_c(prg, np.zeros((n, m), np.float32), a, b)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # a contiguous panel (x @ W) keeps its vector copy: whole vectors, no loop of lanes
    prg = to_program(matmul_ast(n, k, 32), CRenderer(), [Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 4),
                                                       Opt(OptOps.PACK, 0, 0)])
    copy = prg.src[prg.src.index("local0["):prg.src.index("acc0")]
    assert not re.findall(r"float val\d+ = data2\[", copy), copy


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
@pytest.mark.parametrize("n, m", [(5, 48), (64, 1024), (3, 17)])
def test_row_reduce(run_c, rng, op, n, m):
    ast = row_reduce_ast(n, m, op)
    a = rng.standard_normal((n, m), dtype=np.float32)
    want = (a * 0.5 + 1.0).sum(1) if op is Ops.ADD else (a * 0.5 + 1.0).max(1)
    for opts in (None, [], *([Opt(OptOps.PARTIAL, 1, p)] for p in (16, 32) if m % p == 0)):
        prg = to_program(ast, CRenderer(), opts)
        (out, *_) = run_c(prg, np.zeros(n, np.float32), a)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4, err_msg=str(prg.applied_opts))


def test_float64_vectors(run_c, rng):
    ast = matmul_ast(16, 24, 32, dt=dtypes.float64)
    a, b, want = reference(16, 24, 32, False, rng, np.float64)
    prg = to_program(ast, CRenderer())
    assert "v8_double" in prg.src
    (out, *_) = run_c(prg, np.zeros((16, 32)), a, b)
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_partial_errors():
    ast = matmul_ast(8, 24, 8)
    with pytest.raises(KernelOptError, match="PARTIAL needs a REDUCE axis"):
        apply_opts(ast, [Opt(OptOps.PARTIAL, 2, 16)])
    with pytest.raises(KernelOptError, match="PARTIAL needs a REDUCE axis"):
        apply_opts(ast, [Opt(OptOps.PARTIAL, 0, 2)])


def test_threads_give_identical_results(run_c, rng):
    ast = matmul_ast(64, 96, 48, True)
    a, b, _ = reference(64, 96, 48, True, rng)
    outs = []
    for threads in (1, 2):
        r = CRenderer()
        r.max_threads = threads
        prg = to_program(ast, r)
        assert any(o.op is OptOps.THREAD for o in prg.applied_opts) == (threads > 1)
        (out, *_) = run_c(prg, np.zeros((64, 48), np.float32), a, b)
        outs.append(out)
    assert outs[0].tobytes() == outs[1].tobytes()


def test_every_combination_small(run_c, rng):
    # all pairs of candidate opts on a kernel whose sizes leave no remainder
    ast = matmul_ast(8, 32, 32)
    a, b, want = reference(8, 32, 32, False, rng)
    cands = candidate_opts(ast)
    tried = 0
    for pair in itertools.combinations(cands, 2):
        try:
            prg = to_program(ast, CRenderer(), list(pair))
        except KernelOptError:
            continue
        (out, *_) = run_c(prg, np.zeros((8, 32), np.float32), a, b)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, err_msg=str(pair))
        tried += 1
    assert tried >= 20


@pytest.mark.parametrize("n, k, m, bt", [(16, 32, 64, False), (32, 16, 48, True), (37, 45, 70, False)])
def test_beam_action_chains(run_c, rng, n, k, m, bt):
    # chains of what BEAM may pick (search.actions: SWAP and PACK included), each against numpy
    from ember.codegen.search import actions

    ast = matmul_ast(n, k, m, bt)
    chains, frontier = [], [[]]
    for _ in range(3):
        nxt = [opts + [c] for opts in frontier for c in actions(apply_opts(ast, opts), CRenderer())]
        frontier = nxt[::max(1, len(nxt) // 16)]
        chains += frontier
    chains += [[c] for c in actions(ast, CRenderer()) if c.op in (OptOps.SWAP, OptOps.PACK, OptOps.PADTO)]
    used = {o.op for opts in check_chains(run_c, rng, (n, k, m, bt), chains) for o in opts}
    assert {OptOps.SWAP, OptOps.PACK, OptOps.UPCAST} <= used, used
    assert (OptOps.PADTO in used) == (n % 8 > 0), used  # (sizes no tile divides: 37 rows, 45, 70)
