"""The CPU path end to end: vector FMAs in the assembly, BEAM's cache across processes, 1 vs 2 threads, and the
compiles of a schedule (parallel, each source once)."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from ember.codegen import CRenderer, to_program
from ember.runtime import Device
from ember.schedule import schedule
from ember.tensor import Tensor, engine
from ember.uops import UOp, dtypes, files


def kernel_ast(t: Tensor) -> UOp:
    (item,) = schedule(UOp.sink(t.uop)).items
    return item.ast


def test_matmul_assembly_has_vector_fmas(tmp_path):
    a, b = Tensor(np.ones((64, 96), np.float32)), Tensor(np.ones((96, 128), np.float32))
    for bt in (False, True):  # b row-major, and x @ W.T (both contiguous along the reduce)
        prg = to_program(kernel_ast(a @ (b if not bt else Tensor(np.ones((128, 96), np.float32)).T)), CRenderer())
        (tmp_path / "k.c").write_text(prg.src)
        flags = [f for f in Device["CPU"].compiler.flags if f != "-shared"]
        subprocess.run(["cc", *flags, "-S", "k.c", "-o", "k.s"], cwd=tmp_path, check=True, capture_output=True)
        asm = (tmp_path / "k.s").read_text()
        assert "vfmadd" in asm and ("zmm" in asm or "ymm" in asm), prg.src


SCRIPT = r"""
import sys, numpy as np
from ember.tensor import Tensor
import ember.codegen.search as search
rng = np.random.default_rng(0)
x = Tensor(rng.standard_normal((48, 64), dtype=np.float32))
w = Tensor(rng.standard_normal((64, 32), dtype=np.float32))
out = ((x @ w).softmax(-1).sum(0) + x.sum()).numpy()
sys.stdout.write(f"{search.timed} {out.tobytes().hex()}")
"""


def run_script(**env: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    timed, out = proc.stdout.split()
    return int(timed), out


def test_beam_cache_hit_in_a_second_process(tmp_path):
    env = {"BEAM": "1", "EMBER_CACHE_DIR": str(tmp_path)}
    timed, first = run_script(**env)
    assert timed > 0 and list((tmp_path / "beam").iterdir())
    timed_again, second = run_script(**env)
    assert timed_again == 0 and second == first  # the cache answers every search, the kernels are the same
    _, heuristic = run_script(EMBER_CACHE_DIR=str(tmp_path))
    np.testing.assert_allclose(np.frombuffer(bytes.fromhex(first), np.float32),
                               np.frombuffer(bytes.fromhex(heuristic), np.float32), rtol=1e-4)


def test_one_and_two_threads_give_identical_bytes(tmp_path):
    outs = {run_script(OMP_NUM_THREADS=n, EMBER_CACHE_DIR=str(tmp_path))[1] for n in ("1", "2")}
    assert len(outs) == 1


def test_schedule_compiles_each_source_once(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    from ember.runtime.cpu import CPUCompiler

    x = Tensor(np.arange(3 * 517, dtype=np.float32).reshape(3, 517) / 1000)
    y = Tensor(np.ones((3, 517), np.float32))
    # constants no other test uses: kernels new to this process; the last two are the first two's programs on other
    # buffers (one source each, compiled once). (Kernels of different shapes: two that differ only in a constant
    # would run one program of their family, see Engine._shared.)
    outs = [(x * 1.0625).exp().sum(1), (x * 1.1875).exp().max(1), (x * 1.3125).exp().sum(0),
            (y * 1.0625).exp().sum(1), x.max(0) * 3.40625, y.max(0) * 3.40625]
    items = schedule(UOp.sink(*(o.uop for o in outs))).items
    specs = {(spec := engine.codegen(it.ast, "CPU")).src: spec for it in items}
    srcs = set(specs)
    assert len(items) > len(srcs) >= 4
    before = CPUCompiler.invocations
    Tensor.realize(*outs)
    # the sources compile in batches (one run of the C compiler for several): never more runs than sources
    assert 1 <= CPUCompiler.invocations - before <= len(srcs)
    compiler = Device["CPU"].compiler
    # each source's entry: by its hash, or by the src_key of the cached program it was rendered from (see compiler.py)
    assert all(compiler.cache_path(src).is_file() or (spec.src_key is not None and
               (tmp_path / "compile" / compiler.src_key_entry(spec.src_key)).is_file()) for src, spec in specs.items())
    entries = [p.name for p in files.entries(tmp_path / "compile")]
    libraries = [e for e in entries if e.startswith("lib-")]  # a batch's library, which its sources' entries name
    assert len(entries) - len(libraries) == len(srcs) and len(libraries) <= CPUCompiler.invocations - before
    np.testing.assert_allclose(outs[4].numpy(), x.numpy().max(0) * 3.40625)
    np.testing.assert_allclose(outs[0].numpy(), np.exp(x.numpy() * 1.0625).sum(1), rtol=1e-5)


def test_vector_exp2_and_max_match_numpy():
    # the vector exp2 helper (range reduction + polynomial) over the whole float32 range, specials included
    x = np.linspace(-130, 130, 4096 * 4, dtype=np.float32)
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 127.9, 128.0, -125.0, -124.9, 1e-30] * 16,
                                    np.float32)])[: 4096 * 4 + 160]
    got = Tensor(x).exp2().numpy()
    want = np.exp2(x.astype(np.float64))
    normal = (want < 3.4e38) & (want > 2.0**-125)
    np.testing.assert_allclose(got[normal], want[normal], rtol=2e-7)
    assert (got[want >= 3.5e38] == np.inf).all() and (got[want < 2.0**-126] == 0).all()
    assert np.isnan(got[np.isnan(x)]).all()
    prg = to_program(kernel_ast(Tensor(x).exp2()), CRenderer())
    assert "v16_float_exp2(" in prg.src
    # a NaN anywhere in a row makes its max NaN, as numpy
    rows = x.reshape(-1, 32)
    np.testing.assert_array_equal(Tensor(rows).max(1).numpy(), rows.max(1))


def test_vector_masks_selects_reciprocals_and_casts_match_numpy():
    # comparisons become masks, WHERE a select, 1/x and int32 -> float32 whole vectors (a causal mask from aranges,
    # a sigmoid), against numpy
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256), dtype=np.float32)
    i = rng.integers(-50, 50, (64, 256)).astype(np.int32)
    rows, cols = Tensor.arange(64).reshape(64, 1), Tensor.arange(256).reshape(1, 256)
    tx, ti = Tensor(x), Tensor(i)
    t = (cols <= rows).where(tx, ti.cast(dtypes.float32)) + (1 + (-tx).exp()).reciprocal()
    want = np.where(np.arange(256)[None] <= np.arange(64)[:, None], x, i.astype(np.float32)) + 1 / (1 + np.exp(-x))
    src = to_program(kernel_ast(t), CRenderer()).src
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-6)
    assert "v16_float_sel(" in src and "__builtin_convertvector(" in src and "(v16_float_bcast(1.0f)/" in src, src
    assert "exp2f(" not in src.split("\nvoid ")[1]  # no lane left scalar (the prelude declares exp2f)
    # the aranges are now computed from the kernel's index (IOTA): an upcast column as an int32 vector is a broadcast
    # plus the constant ramp (0, 1, ..., 15), not 16 scalar casts put together lane by lane
    assert "{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}" in src and "(v16_int){((int)" not in src, src


def test_expansion_folds_copies_as_well_as_full_symbolic(monkeypatch):
    """The expansion's copies are simplified by constant folding and the divmod rules only (the term rules over
    every copy cost twice the expansion): the C of a permuted-view x @ W.T, a padded matmul and a causal softmax row
    has no more divisions and modulos than with the whole symbolic pass; the values match numpy."""
    from ember.uops import symbolic

    lower_mod = sys.modules["ember.codegen.lower"]  # (the package's `lower` attribute is the function)
    rng = np.random.default_rng(0)
    x4, w = rng.standard_normal((4, 8, 256, 32), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    p, q = rng.standard_normal((100, 70), dtype=np.float32), rng.standard_normal((70, 136), dtype=np.float32)
    s = rng.standard_normal((64, 64), dtype=np.float32)
    x = x4.transpose(0, 2, 1, 3).reshape(4, 256, 256)  # (attention's output, heads merged back: the wo projection)
    causal = np.arange(64)[:, None] >= np.arange(64)[None]
    cases = [(Tensor(x4).permute(0, 2, 1, 3).reshape(4, 256, 256) @ Tensor(w).T, x @ w.T),
             (Tensor(p) @ Tensor(q), p @ q),
             ((Tensor.arange(64).reshape(64, 1) >= Tensor.arange(64).reshape(1, 64)).where(Tensor(s), -np.inf)
              .exp().sum(-1), np.where(causal, np.exp(s), 0).sum(-1))]

    def divmods(ast):
        body = to_program(ast, CRenderer()).src.split("void ", 1)[1]
        return sum(line.count("/") + line.count("%") for line in body.splitlines() if "/*" not in line)

    asts = [kernel_ast(t) for t, _ in cases]
    ours = [divmods(ast) for ast in asts]
    with monkeypatch.context() as m:
        m.setattr(lower_mod, "pm_lower_expand", lower_mod.pm_sort_ends + lower_mod.pm_expand + symbolic)
        full = [divmods(ast) for ast in asts]
    assert all(o <= f for o, f in zip(ours, full)), (ours, full)
    for t, want in cases:
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)


def test_kernel_sources_concatenate_into_one_batch(tmp_path, monkeypatch):
    # vector floats with exp2 and max, int vectors, bfloat16 and scalar helpers: each kernel's definitions outside its
    # function are guarded, so several sources compile as one translation unit
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    import ctypes
    import tempfile

    x = [Tensor(np.linspace(-3, 3, 64 * n, dtype=np.float32).reshape(64, n)) for n in (48, 80, 96, 112, 144)]
    outs = [x[0].softmax(-1), x[1].exp().max(0), (x[2].cast(dtypes.int32) * 3).cast(dtypes.float32),
            x[3].cast(dtypes.bfloat16).relu(), x[4].sum(1).sqrt()]
    specs = {}
    for it in schedule(UOp.sink(*(o.uop for o in outs))).items:
        spec = engine.codegen(it.ast, "CPU")
        specs.setdefault(spec.name, spec)
    srcs = "".join(s.src for s in specs.values())
    assert len(specs) >= 5 and all(h in srcs for h in ("v16_float_exp2(", "v16_float_max(", "v16_int", "bf16"))
    lib = Device["CPU"].compiler.compile_batch([s.src for s in specs.values()])
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(lib)
        f.flush()
        library = ctypes.CDLL(f.name)
        assert all(hasattr(library, spec.function) for spec in specs.values())


def test_kernels_of_one_shape_share_a_batch(tmp_path, monkeypatch):
    # an optimizer's updates: kernels of one shape (one display name), other math. Each function has a name of its own
    # (CRenderer.render_program), so they compile together (one batch per compile worker), not one batch each.
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CODEGEN_WORKERS", "0")
    from ember.runtime.cpu import CPUCompiler

    v = np.linspace(-2, 2, 29 * 43, dtype=np.float32).reshape(29, 43)
    x = Tensor(v)
    outs = [(x * 1.0390625).exp(), (x + 2.5).sqrt(), x * x - 1.5, x.relu() * 3.75, x.neg().exp2() + x]
    eng = engine.Engine()
    specs = [engine.codegen(it.ast, "CPU") for it in schedule(UOp.sink(*(o.uop for o in outs))).items]
    assert len(specs) == 5 and len({s.name for s in specs}) == 1 and len({s.function for s in specs}) == 5
    before = CPUCompiler.invocations
    try:
        becomes = eng.realize_uops([o.uop for o in outs], frozenset())
    finally:
        eng.close()
    assert CPUCompiler.invocations - before < 5  # (before: 5, a batch may not hold one name twice)
    want = [np.exp(v * 1.0390625), np.sqrt(v + 2.5), v * v - 1.5, np.maximum(v, 0) * 3.75, np.exp2(-v) + v]
    for o, w in zip(outs, want):
        np.testing.assert_allclose(engine.copyout(becomes[o.uop]), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_realize_of_many_kernels_compiles_in_batches(tmp_path, monkeypatch, workers):
    # with CODEGEN_WORKERS=1 a helper process renders some of the kernels
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CODEGEN_WORKERS", workers)
    from ember.runtime.cpu import CPUCompiler

    rng = np.random.default_rng(int(workers))
    xs = [rng.standard_normal((5 + i, 33 + int(workers)), dtype=np.float32) for i in range(10)]
    outs = [(Tensor(v) * 1.015625).exp().sum(1) for v in xs]  # ten shapes: ten kernels, new to this process
    eng = engine.Engine()  # its own kernels and helper pools
    before = CPUCompiler.invocations
    try:
        becomes = eng.realize_uops([o.uop for o in outs], frozenset())
        assert CPUCompiler.invocations - before < 10  # at least one batch of several kernels
        assert len(eng.kernels) == 10 and list(eng.pools) == ([1] if workers == "1" else [])
        for o, v in zip(outs, xs):
            np.testing.assert_allclose(engine.copyout(becomes[o.uop]), np.exp(v * 1.015625).sum(1), rtol=1e-5)
    finally:
        eng.close()
    assert eng.pools == {}


def test_helpers_build_kernels_while_the_schedule_is_still_made(tmp_path, monkeypatch):
    # the schedule hands the engine each kernel as it makes it: from the POOL_MIN_KERNELS-th on a helper builds them
    # while the rest is scheduled (the one core scheduling leaves the others idle), before the engine's own codegen
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CODEGEN_WORKERS", "1")
    real, seen = engine.schedule, {}

    def spy(sink, hold, on_item):
        sched = real(sink, hold=hold, on_item=on_item)
        build = on_item.__self__
        seen["helpers"] = build.helpers is not None
        deadline = time.monotonic() + 60
        while not build.todo and time.monotonic() < deadline:  # (the helper's first program; none is built here yet)
            time.sleep(0.01)
        seen["built"] = len(build.todo)
        return sched

    monkeypatch.setattr(engine, "schedule", spy)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((3 + i, 41), dtype=np.float32) for i in range(engine.POOL_MIN_KERNELS + 4)]
    outs = [(Tensor(v) * 1.0078125).exp().sum(1) for v in xs]
    eng = engine.Engine()
    try:
        becomes = eng.realize_uops([o.uop for o in outs], frozenset())
        assert seen["helpers"] and seen["built"] >= 1
        assert len(eng.kernels) == len(xs)
        for o, v in zip(outs, xs):
            np.testing.assert_allclose(engine.copyout(becomes[o.uop]), np.exp(v * 1.0078125).sum(1), rtol=1e-5)
    finally:
        eng.close()


@pytest.mark.parametrize("value", ["two", "-1"])
def test_codegen_workers_is_checked(tmp_path, monkeypatch, value):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CODEGEN_WORKERS", value)
    # enough kernels new to the engine for helpers to be worth it: the engine reads their number
    outs = [(Tensor(np.ones((3 + i, 7), np.float32)) * 1.03125).sum(1) for i in range(engine.POOL_MIN_KERNELS)]
    with pytest.raises(ValueError, match=rf"CODEGEN_WORKERS='{value}': expected an integer >= 0"):
        engine.Engine().realize_uops([o.uop for o in outs], frozenset())
