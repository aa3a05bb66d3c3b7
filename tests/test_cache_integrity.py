"""The codegen caches (programs, BEAM winners) end to end: entries are JSON data verified against their key, a
planted pickle never runs, an edited entry never changes a result, opts that do not fit their kernel are searched
again."""

import json
import os
import pickle

import numpy as np
import pytest

import ember.tensor.engine as engine
from ember.codegen import CRenderer, Opt, OptOps, beam_search, cached_program, load_program, to_program
from ember.codegen import cache as cache_mod
from ember.codegen import search as search_mod
from ember.schedule import schedule
from ember.tensor import Tensor
from ember.uops import UOp, files


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "ember-cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    monkeypatch.delenv("CACHE", raising=False)
    return path


def kernel_ast(t: Tensor) -> UOp:
    return schedule(UOp.sink(t.uop)).items[-1].ast


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_program_entry_is_json_lines_that_render_the_same_source(cache_dir):
    ast = kernel_ast(Tensor(np.ones((8, 8), np.float32)).sum(1) * 0.5)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache_dir / "program")
    payload = files.read_entry(entry, entry.name).payload
    head, body = (json.loads(line) for line in payload.split(b"\n"))  # plain data: launch facts, linear program
    assert head["name"] == built.name and "src" not in head and "src" not in body
    again = load_program(ast, CRenderer())
    assert again.src == built.src and again.uops == built.uops and again.bufs == built.bufs
    assert again.global_size == built.global_size and again.estimates == built.estimates


def test_a_planted_pickle_in_the_program_cache_never_runs(cache_dir, tmp_path):
    ast = kernel_ast(Tensor(np.ones(16, np.float32)) * 0.37)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache_dir / "program")
    marker = tmp_path / "pwned"
    entry.write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.warns(UserWarning, match="unreadable"):
        assert cached_program(ast, CRenderer()).src == built.src
    # a pickle behind a valid header (checksum and key right) is not JSON: rejected, not loaded
    files.write_entry(entry, entry.name, pickle.dumps(_Planted(marker)))
    with pytest.warns(UserWarning, match="unreadable"):
        assert cached_program(ast, CRenderer()).src == built.src
    assert not marker.exists()


def test_an_edited_constant_in_a_program_entry_is_rejected(cache_dir):
    ast = kernel_ast(Tensor(np.ones(16, np.float32)) * 0.375)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache_dir / "program")
    data = entry.read_bytes()
    hexed = (0.375).hex().encode()
    assert hexed in data
    entry.write_bytes(data.replace(hexed, (0.5).hex().encode()))  # the header's sha256 no longer matches
    with pytest.warns(UserWarning, match="sha256"):
        assert cached_program(ast, CRenderer()).src == built.src


def test_a_program_entry_that_is_not_a_program_is_rebuilt(cache_dir):
    ast = kernel_ast(Tensor(np.ones(16, np.float32)) + 2.5)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache_dir / "program")
    for payload in (b'{"format": 1}', b"[]", b'{"format": 1, "name": "x", "table": [["NOPE", ["float32", 1], [], '
                                               b'null, null]], "program": [0]}'):
        files.write_entry(entry, entry.name, payload)  # checksum and key right, contents wrong
        with pytest.warns(UserWarning, match="unreadable"):
            assert cached_program(ast, CRenderer()).src == built.src


def test_results_stay_right_when_every_cache_entry_is_edited(cache_dir):
    engine.ENGINE.kernels.clear()  # (built in this test's cache)
    want = (Tensor(np.arange(6, dtype=np.float32)) * 3 + 1).numpy()
    assert files.entries(cache_dir / "program") and files.entries(cache_dir / "compile")
    for entry in files.entries(cache_dir / "compile"):
        data = bytearray(entry.read_bytes())
        data[-10] ^= 0xFF
        entry.write_bytes(bytes(data))
    for entry in files.entries(cache_dir / "program"):
        entry.write_bytes(entry.read_bytes().replace(b"3", b"4"))
    engine.ENGINE.kernels.clear()
    with pytest.warns(UserWarning):
        np.testing.assert_array_equal((Tensor(np.arange(6, dtype=np.float32)) * 3 + 1).numpy(), want)


def model_time(spec):
    return 1.0 - 0.5 * (Opt(OptOps.UPCAST, 0, 4) in spec.applied_opts) + 0.01 * len(spec.applied_opts)


@pytest.mark.parametrize("opts", [
    [["UPCAST", 7, 4]],  # no axis 7
    [["UPCAST", 0, 5]],  # 5 does not divide 16
    [["LOCAL", 0, 4]],  # a GPU opt on the CPU
    [["NOT_AN_OPT", 0, 4]],
    "not a list",
])
def test_a_beam_entry_whose_opts_do_not_fit_is_searched_again(cache_dir, opts):
    ast = kernel_ast(Tensor(np.ones(16, np.float32)) * 2.0)
    best = beam_search(ast, CRenderer(), model_time, 1, "model")
    path = search_mod.cache_path(ast, "model", 1)
    files.write_entry(path, path.name, json.dumps({"opts": opts, "seconds": 0.1}).encode())
    with pytest.warns(UserWarning, match="does not fit its kernel"):
        assert beam_search(ast, CRenderer(), model_time, 1, "model") == best
    to_program(ast, CRenderer(), best)


def test_an_unsafe_cache_folder_builds_without_the_cache(cache_dir):
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "program").mkdir(mode=0o700)
    os.chmod(cache_dir / "program", 0o757)
    ast = kernel_ast(Tensor(np.ones(16, np.float32)) * 1.25)
    with pytest.warns(UserWarning, match="writable by group or others"):
        cached_program(ast, CRenderer())
    assert list((cache_dir / "program").iterdir()) == []
    assert cache_mod.load_program(ast, CRenderer()) is None


def test_a_warm_engine_renders_no_source_and_compiles_nothing(cache_dir, monkeypatch):
    from ember.runtime.cpu import CPUCompiler

    renders: list[int] = []
    render_body = CRenderer.render_body
    monkeypatch.setattr(CRenderer, "render_body",
                        lambda self, uops: renders.append(len(uops)) or render_body(self, uops))
    x = np.arange(48, dtype=np.float32).reshape(6, 8) / 7

    def step() -> np.ndarray:
        t = Tensor(x)
        return ((t - t.mean(1, keepdim=True)).softmax(1) * 3.5 + t.sum(0)).numpy()

    monkeypatch.setattr(engine, "ENGINE", engine.Engine())  # (a fresh process's engine: no kernels compiled)
    want = step()
    assert len(renders) >= 3  # (several kernels: the engine's batched path)
    for entries_left in ("all", "no key entries", "all"):
        if entries_left == "no key entries":  # lost (or never written): rendered and compiled again, filed again
            for entry in (cache_dir / "compile").glob("key-*"):
                entry.unlink()
        monkeypatch.setattr(engine, "ENGINE", engine.Engine())
        renders.clear()
        runs = CPUCompiler.invocations
        np.testing.assert_array_equal(step(), want)
        if entries_left == "all":
            assert renders == [] and CPUCompiler.invocations == runs
        else:
            assert renders and CPUCompiler.invocations > runs
