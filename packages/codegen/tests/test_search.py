"""BEAM search with a model of the device's time: it finds the fastest list, caches it, and reads the cache back."""

import json

import pytest

from ember.codegen import CRenderer, Opt, OptOps, beam_search
from ember.codegen import search as search_mod
from ember.uops import AxisType, Ops, UOp, dtypes, files


def matmul_ast(n, k, m):
    p = [UOp(Ops.PARAM, dtypes.float32.ptr(s), (), i) for i, s in enumerate((n * m, n * k, k * m))]
    r0, r1, r2 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.GLOBAL), UOp.range(k, 2, AxisType.REDUCE)
    red = UOp(Ops.REDUCE, dtypes.float32, (p[1].index(r0 * k + r2).load() * p[2].index(r2 * m + r1).load(), r2),
              Ops.ADD)
    return UOp.sink(p[0].index(r0 * m + r1).store(red).end(r0, r1))


def model_time(spec):
    # a made-up device: upcasts of the contiguous axis by 4 pay, everything else costs
    opts = spec.applied_opts
    return 1.0 - 0.5 * (Opt(OptOps.UPCAST, 1, 4) in opts) + 0.01 * len(opts)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    return tmp_path / "beam"


def test_beam_finds_the_fastest_and_caches_it(cache):
    ast = matmul_ast(8, 16, 8)
    before = search_mod.timed
    best = beam_search(ast, CRenderer(), model_time, width=3, device_key="model")
    assert best == [Opt(OptOps.UPCAST, 1, 4)]
    assert search_mod.timed > before + 10
    (entry,) = files.entries(cache)
    assert json.loads(files.read_entry(entry, entry.name).payload)["opts"] == [["UPCAST", 1, 4]]
    # the second search reads the cache: nothing is timed, the answer is the same
    before = search_mod.timed
    assert beam_search(ast, CRenderer(), lambda spec: pytest.fail("timed a cached kernel"), 3, "model") == best
    assert search_mod.timed == before
    # another device key or width searches again
    assert search_mod.cache_path(ast, "other", 3) != entry and search_mod.cache_path(ast, "model", 2) != entry


def test_beam_corrupt_cache_and_bad_width(cache):
    ast = matmul_ast(4, 4, 4)
    path = search_mod.cache_path(ast, "model", 1)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert Opt(OptOps.UPCAST, 1, 4) in beam_search(ast, CRenderer(), model_time, 1, "model")
    assert search_mod._read(path, ast, CRenderer()) is not None  # rewritten whole
    with pytest.raises(ValueError, match="width must be >= 1"):
        beam_search(ast, CRenderer(), model_time, 0)


def test_beam_actions_stay_within_the_expansion_limit():
    ast = matmul_ast(64, 64, 64)
    acts = search_mod.actions(ast, CRenderer())
    assert Opt(OptOps.UPCAST, 1, 32) in acts and Opt(OptOps.PARTIAL, 2, 16) in acts
    assert sum(a.op is OptOps.THREAD for a in acts) == 2
    from ember.codegen import apply_opts
    big = apply_opts(ast, [Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8)])
    # 32 x 8 copies already: no more expansion, only THREAD, the loop order and the panel are left to try
    assert {a.op for a in search_mod.actions(big, CRenderer())} == {OptOps.THREAD, OptOps.SWAP, OptOps.PACK}


def test_program_cache_across_calls(cache, monkeypatch):
    from ember.codegen import cache as cache_mod
    from ember.codegen import cached_program, to_program

    ast = matmul_ast(8, 16, 32)
    first = cached_program(ast, CRenderer())
    assert first.src == to_program(ast, CRenderer()).src
    (entry,) = files.entries(cache.parent / "program")
    monkeypatch.setattr(cache_mod, "to_program", lambda *a: pytest.fail("rebuilt a cached program"))
    again = cached_program(ast, CRenderer())
    assert again.src == first.src and again.uops == first.uops and again.applied_opts == first.applied_opts
    # other opts are another entry; a corrupt entry is rebuilt with a warning
    monkeypatch.undo()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache.parent))
    assert cached_program(ast, CRenderer(), []).applied_opts == ()
    entry.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unreadable"):
        assert cached_program(ast, CRenderer()).src == first.src


def test_load_program_reads_only(cache, monkeypatch):
    from ember.codegen import cached_program, load_program

    ast = matmul_ast(8, 16, 24)
    assert load_program(ast, CRenderer()) is None and not list(cache.parent.glob("program/*"))
    built = cached_program(ast, CRenderer())
    assert load_program(ast, CRenderer()).src == built.src
    assert load_program(ast, CRenderer(), []) is None  # other opts: another entry
    monkeypatch.setenv("CACHE", "0")
    assert load_program(ast, CRenderer()) is None
    monkeypatch.delenv("CACHE")
    monkeypatch.setenv("NOOPT", "1")
    assert load_program(ast, CRenderer()) is None


def test_a_built_program_is_stored_without_rendering_it_again(cache, monkeypatch):
    # the stored program is checked to read back as the same nodes (hash-consed UOps), not by a second render
    from ember.codegen import cached_program, load_program

    renders = []
    render_body = CRenderer.render_body
    monkeypatch.setattr(CRenderer, "render_body",
                        lambda self, uops: renders.append(len(uops)) or render_body(self, uops))
    ast = matmul_ast(8, 16, 40)
    built = cached_program(ast, CRenderer())
    assert len(renders) == 1 and list(cache.parent.glob("program/*"))
    again = load_program(ast, CRenderer())  # a hit renders the source from the stored program, on first use
    assert len(renders) == 1 and again.uops == built.uops and again.src_key == built.src_key is not None
    assert again.src == built.src and len(renders) == 2
    assert again.src == built.src and len(renders) == 2  # (once)
