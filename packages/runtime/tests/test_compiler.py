import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from ember.runtime import Compiler
from ember.runtime import compiler as compiler_module
from ember.runtime.cpu import CPUCompiler
from ember.uops import files, settings

C_SRC = "int answer(void) { return 42; }\n"


class EchoCompiler(Compiler):
    """A stand-in compiler that counts its runs: the "binary" is the reversed source."""

    def __init__(self, cachekey="echo"):
        super().__init__(cachekey)
        self.runs = 0

    def compile(self, src):
        self.runs += 1
        return src.encode()[::-1]


def test_cache_dir_follows_the_env(cache_dir, monkeypatch):
    assert compiler_module.cache_dir() == cache_dir / "compile"
    monkeypatch.delenv("EMBER_CACHE_DIR")
    assert compiler_module.cache_dir() == Path.home() / ".cache" / "ember" / "compile"


def test_second_compile_comes_from_the_cache(cache_dir):
    comp = EchoCompiler()
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 1
    assert comp.cache_path("abc").parent == cache_dir / "compile" and comp.cache_path("abc").is_file()
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 1
    assert EchoCompiler().compile_cached("abc") == b"cba"  # a new compiler object, same key: still cached
    assert comp.compile_cached("abd") == b"dba" and comp.runs == 2


def test_the_key_covers_cachekey_flags_and_source():
    a, b = EchoCompiler("one"), EchoCompiler("two")
    assert a.cache_path("x") != b.cache_path("x") != b.cache_path("y")
    flagged = EchoCompiler("one")
    flagged.flags = ("-O3",)
    assert flagged.cache_path("x") != a.cache_path("x")
    assert len(a.cache_path("x").name) == 64  # sha256 hex


def test_cache_0_skips_reading(monkeypatch):
    comp = EchoCompiler()
    comp.compile_cached("abc")
    monkeypatch.setenv("CACHE", "0")
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 2
    monkeypatch.setenv("CACHE", "")  # empty: the default (read)
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 2
    with settings.Context(CACHE=False):  # the settings' Context overrides the environment
        assert comp.compile_cached("abc") == b"cba" and comp.runs == 3
    monkeypatch.setenv("CACHE", "maybe")
    with pytest.raises(ValueError, match="CACHE='maybe': expected 1/0"):
        comp.compile_cached("abc")


def test_cache_dir_from_a_context(tmp_path):
    with settings.Context(EMBER_CACHE_DIR=str(tmp_path / "elsewhere")):
        assert EchoCompiler().cache_path("x").parent == tmp_path / "elsewhere" / "compile"


def test_no_cachekey_means_no_cache(cache_dir):
    comp = EchoCompiler(cachekey=None)
    comp.compile_cached("abc")
    comp.compile_cached("abc")
    assert comp.runs == 2 and not cache_dir.exists()


@pytest.mark.parametrize("corrupt", [
    lambda data: data[:len(data) // 2],  # truncated
    lambda data: data[:-1] + bytes([data[-1] ^ 0x01]),  # a flipped bit in the payload
    lambda data: bytes([data[0] ^ 0xFF]) + data[1:],  # a bad header
    lambda data: b"",  # empty
])
def test_a_corrupt_entry_is_deleted_and_rebuilt(corrupt):
    comp = EchoCompiler()
    src = "some kernel source " * 10
    comp.compile_cached(src)
    path = comp.cache_path(src)
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached(src) == src.encode()[::-1]
    assert comp.runs == 2
    assert comp.compile_cached(src) == src.encode()[::-1] and comp.runs == 2  # the rebuilt entry is good


def test_entries_are_written_atomically_with_no_temp_files_left(cache_dir):
    comp = EchoCompiler()
    for i in range(5):
        comp.compile_cached(f"src {i}")
    names = sorted(p.name for p in files.entries(cache_dir / "compile"))
    assert len(names) == 5 and not any(n.startswith(".tmp-") for n in names)


def test_an_unwritable_cache_is_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker))
    comp = EchoCompiler()
    with pytest.warns(UserWarning, match="cannot write"):
        assert comp.compile_cached("abc") == b"cba"


def test_cpu_compiler_runs_cc_once_then_hits_the_cache():
    comp = CPUCompiler()
    before = CPUCompiler.invocations
    lib = comp.compile_cached(C_SRC)
    assert lib[:4] == b"\x7fELF" and CPUCompiler.invocations == before + 1
    assert comp.compile_cached(C_SRC) == lib and CPUCompiler.invocations == before + 1


def test_cpu_compiler_cache_is_shared_across_processes(cache_dir):
    lib = CPUCompiler().compile_cached(C_SRC)
    script = textwrap.dedent(f"""
        import ctypes, tempfile
        from ember.runtime.cpu import CPUCompiler
        lib = CPUCompiler().compile_cached({C_SRC!r})
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(lib); f.flush()
            print(ctypes.CDLL(f.name).answer(), CPUCompiler.invocations, len(lib))
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache_dir), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["42", "0", str(len(lib))], out.stderr
    # and without the cache, the other process does compile
    env["EMBER_CACHE_DIR"] = str(cache_dir.parent / "other-cache")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[:2] == ["42", "1"], out.stderr


def test_cpu_corrupt_entry_is_rebuilt_with_one_cc_run():
    comp = CPUCompiler()
    lib = comp.compile_cached(C_SRC)
    path = comp.cache_path(C_SRC)
    path.write_bytes(path.read_bytes()[:100])
    before = CPUCompiler.invocations
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached(C_SRC) == lib  # cc output does not depend on the temp folder
    assert CPUCompiler.invocations == before + 1


class BatchingEcho(EchoCompiler):
    """EchoCompiler that batches: a batch's "library" is its sources joined, reversed."""

    batches = True

    def __init__(self, cachekey="echo-batch"):
        super().__init__(cachekey)
        self.batch_runs: list[list[str]] = []

    def compile_batch(self, srcs):
        self.batch_runs.append(list(srcs))
        if any("bad" in s for s in srcs):
            raise compiler_module.CompileError("a bad source in the batch")
        return "|".join(srcs).encode()[::-1]


def test_compile_many_batches_the_misses_in_distinct_names(cache_dir):
    comp = BatchingEcho()
    comp.compile_cached("s0")  # already cached: not compiled again
    libs = comp.compile_cached_many([("f", "s0"), ("f", "s1"), ("g", "s2"), ("f", "s3"), ("g", "s2")])
    # s1 and s3 define the same function f: two batches, [s1, s2] and the lone s3 (compiled alone)
    assert comp.batch_runs == [["s1", "s2"]] and comp.runs == 2
    assert libs == [b"0s", b"2s|1s", b"2s|1s", b"3s", b"2s|1s"]
    # each source's entry names the batch's library entry, read back by a new compiler in one step
    lib_entries = [p.name for p in (cache_dir / "compile").iterdir() if p.name.startswith("lib-")]
    assert len(lib_entries) == 1
    fresh = BatchingEcho()
    assert fresh.compile_cached("s2") == b"2s|1s" and fresh.compile_cached_many([("f", "s1")]) == [b"2s|1s"]
    assert fresh.runs == 0 and fresh.batch_runs == []


def test_a_reference_to_a_missing_or_corrupt_library_is_rebuilt(cache_dir):
    comp = BatchingEcho()
    comp.compile_cached_many([("f", "s1"), ("g", "s2")])
    (lib,) = (p for p in (cache_dir / "compile").iterdir() if p.name.startswith("lib-"))
    lib.write_bytes(lib.read_bytes()[:-3])
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached("s1") == b"1s"  # compiled alone now
    assert not lib.exists() and comp.runs == 1
    assert comp.compile_cached("s2") == b"2s" and comp.runs == 2  # its reference went with the library


def test_a_rejected_batch_compiles_source_by_source(cache_dir):
    comp = BatchingEcho()
    assert comp.compile_cached_many([("f", "s1"), ("g", "s2")]) == [b"2s|1s"] * 2
    with pytest.raises(compiler_module.CompileError):
        comp.compile_batch(["bad"])
    comp.batch_runs.clear()
    assert comp.compile_cached_many([("f", "t1"), ("g", "bad t2")]) == [b"1t", b"2t dab"]
    assert comp.batch_runs == [["t1", "bad t2"]] and comp.runs == 2  # then each alone


def test_cpu_batch_is_one_cc_run_and_each_function_loads(cache_dir):
    from ember.runtime import Device

    srcs = [f"int k{i}(void) {{ return {i * 7}; }}\n" for i in range(3)] + ["int k0(void) { return -1; }\n"]
    comp = CPUCompiler()
    before = CPUCompiler.invocations
    libs = comp.compile_cached_many([(f"k{i}", s) for i, s in enumerate(srcs[:3])] + [("k0", srcs[3])])
    assert CPUCompiler.invocations == before + 2  # k0, k1, k2 together; the other k0 alone
    assert libs[0] == libs[1] == libs[2] != libs[3]
    dev = Device["CPU"]
    programs = [dev.runtime(f"k{i}", lib) for i, lib in enumerate(libs[:3])] + [dev.runtime("k0", libs[3])]
    assert [p.library[p.name]() for p in programs] == [0, 7, 14, -1]  # (getitem: a fresh int-returning handle)
    assert programs[0].library is programs[1].library is programs[2].library  # one library, loaded once
    assert CPUCompiler().compile_cached(srcs[1]) == libs[1] and CPUCompiler.invocations == before + 2


# *** sources named by a src_key: found without the source ***
class Renders:
    """A source rendered on demand, counting its renders."""

    def __init__(self, src):
        self.src, self.calls = src, 0

    def __call__(self):
        self.calls += 1
        return self.src


def test_a_keyed_source_is_found_by_its_key_without_rendering(cache_dir):
    comp, render = EchoCompiler(), Renders("abc")
    assert comp.compile_cached(render, "prog-1") == b"cba" and comp.runs == 1 and render.calls == 1
    fresh, again = EchoCompiler(), Renders("abc")
    assert fresh.cached_library("prog-1") == b"cba"
    assert fresh.compile_cached(again, "prog-1") == b"cba" and fresh.runs == 0 and again.calls == 0
    assert fresh.cached_library("prog-2") is None  # another key: nothing filed
    names = sorted(p.name for p in files.entries(cache_dir / "compile"))
    assert names == [comp.src_key_entry("prog-1")] and names[0].startswith("key-")  # filed under the key alone


def test_a_key_filed_by_another_compiler_or_flags_is_not_used(cache_dir):
    EchoCompiler("one").compile_cached("abc", "prog")
    other = EchoCompiler("two")
    assert other.cached_library("prog") is None
    render = Renders("abd")
    assert other.compile_cached(render, "prog") == b"dba" and other.runs == 1 and render.calls == 1
    flagged = EchoCompiler("one")
    flagged.flags = ("-O3",)
    assert flagged.cached_library("prog") is None and flagged.src_key_entry("prog") != \
        EchoCompiler("one").src_key_entry("prog")
    assert flagged.compile_cached(Renders("abe"), "prog") == b"eba" and flagged.runs == 1
    assert EchoCompiler("one").cached_library("prog") == b"cba"  # each keeps its own


@pytest.mark.parametrize("corrupt", [lambda data: data[:len(data) // 2], lambda data: b"", None])
def test_a_corrupt_or_missing_key_entry_falls_back_to_rendering_and_compiling(cache_dir, corrupt):
    comp = EchoCompiler()
    comp.compile_cached("abc", "prog")
    path = cache_dir / "compile" / comp.src_key_entry("prog")
    if corrupt is None:
        path.unlink()
    else:
        path.write_bytes(corrupt(path.read_bytes()))
    render = Renders("abc")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert comp.compile_cached(render, "prog") == b"cba"
    assert render.calls == 1 and comp.runs == 2
    assert (corrupt is None) != any("is corrupt" in str(w.message) for w in caught)
    assert EchoCompiler().compile_cached(Renders("x"), "prog") == b"cba"  # filed again


def test_a_source_compiled_without_its_key_files_the_key_on_its_next_use(cache_dir):
    comp = EchoCompiler()
    comp.compile_cached("abc")  # (a cache an older Ember filled, or a compile of the source alone)
    render = Renders("abc")
    assert comp.compile_cached(render, "prog") == b"cba" and comp.runs == 1 and render.calls == 1
    entry = files.read_entry(cache_dir / "compile" / comp.src_key_entry("prog"), comp.src_key_entry("prog"))
    assert entry.meta == {"kind": "reference", "library": comp.cache_key("abc")}
    assert comp.cached_library("prog") == b"cba"


def test_compile_many_files_each_key_to_its_batch_library(cache_dir):
    comp = BatchingEcho()
    libs = comp.compile_cached_many([("f", "s1"), ("g", "s2"), ("h", "s3"), ("g", "s2")],
                                    src_keys=["k1", "k2", None, "k2b"])
    assert comp.batch_runs == [["s1", "s2", "s3"]] and libs == [b"3s|2s|1s"] * 4
    fresh = BatchingEcho()
    assert [fresh.cached_library(k) for k in ("k1", "k2", "k2b")] == [b"3s|2s|1s"] * 3
    assert fresh.compile_cached("s3") == b"3s|2s|1s" and fresh.runs == 0  # the keyless source by its hash
    # a reference whose batch library is gone: the key misses, the source compiles again
    (lib,) = (p for p in (cache_dir / "compile").iterdir() if p.name.startswith("lib-"))
    lib.unlink()
    assert fresh.cached_library("k1") is None
    assert fresh.compile_cached_many([("f", "s1")], src_keys=["k1"]) == [b"1s"] and fresh.runs == 1
    assert BatchingEcho().cached_library("k1") == b"1s"
    with pytest.raises(ValueError, match="2 src_keys for 1 programs"):
        fresh.compile_cached_many([("f", "s1")], src_keys=["k1", "k2"])


def test_cache_0_reads_no_key(monkeypatch):
    comp = EchoCompiler()
    comp.compile_cached("abc", "prog")
    monkeypatch.setenv("CACHE", "0")
    assert comp.cached_library("prog") is None
    assert comp.compile_cached(Renders("abc"), "prog") == b"cba" and comp.runs == 2


def test_entries_are_not_fsynced(monkeypatch):
    # a cache entry is verified when read: one a crash tore is rebuilt, so no write waits for the disk (~7 ms each)
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    comp = BatchingEcho()
    comp.compile_cached("abc")
    comp.compile_cached("abd", "prog")
    comp.compile_cached_many([("f", "s1"), ("g", "s2")], src_keys=["k1", None])
    assert synced == [] and comp.cached_library("k1") == b"2s|1s"
