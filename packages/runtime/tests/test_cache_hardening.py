"""The compile cache is not a way in: entries are data verified against their key, a library must be what the
compiler makes, planted or edited entries are rebuilt (never executed), unsafe folders are not used."""

import os
import pickle

import pytest

from ember.runtime import compiler as compiler_module
from ember.runtime.cpu import CPUCompiler
from ember.uops import files

C_SRC = "int answer(void) { return 42; }\n"


class EchoCompiler(compiler_module.Compiler):
    def __init__(self):
        super().__init__("echo")
        self.runs = 0

    def compile(self, src):
        self.runs += 1
        return src.encode()[::-1]


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_never_runs(cache_dir, tmp_path):
    comp = EchoCompiler()
    marker = tmp_path / "pwned"
    path = comp.cache_path("src")
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached("src") == b"crs"
    assert not marker.exists() and comp.runs == 1


def test_an_entry_for_another_key_is_rebuilt(cache_dir):
    comp = EchoCompiler()
    comp.compile_cached("abc")
    comp.compile_cached("xyz")
    # a whole, valid entry copied over another key's: verified against the key stored in it
    comp.cache_path("abc").write_bytes(comp.cache_path("xyz").read_bytes())
    with pytest.warns(UserWarning, match="written for the key"):
        assert comp.compile_cached("abc") == b"cba"
    assert comp.runs == 3


def test_an_edited_payload_with_its_header_kept_is_rebuilt(cache_dir):
    comp = CPUCompiler()
    lib = comp.compile_cached(C_SRC)
    path = comp.cache_path(C_SRC)
    data = path.read_bytes()
    path.write_bytes(data.replace(b"answer", b"ANSWER"))  # an edited symbol: the sha256 in the header catches it
    before = CPUCompiler.invocations
    with pytest.warns(UserWarning, match="sha256"):
        assert comp.compile_cached(C_SRC) == lib
    assert CPUCompiler.invocations == before + 1


@pytest.mark.parametrize("payload", [b"#!/bin/sh\necho hi\n", b"\x7fELF" + b"\0" * 100, b""])
def test_a_well_formed_entry_that_is_no_shared_object_is_rebuilt(cache_dir, payload):
    comp = CPUCompiler()
    lib = comp.compile_cached(C_SRC)
    key = comp.cache_key(C_SRC)
    files.write_entry(comp.cache_path(C_SRC), key, payload, {"kind": "library"})  # checksum and key are right
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached(C_SRC) == lib
    assert files.read_entry(comp.cache_path(C_SRC), key).payload == lib


def test_a_reference_that_escapes_the_folder_is_rebuilt(cache_dir):
    comp = EchoCompiler()
    comp.compile_cached("abc")
    key = comp.cache_key("abc")
    files.write_entry(comp.cache_path("abc"), key, b"", {"kind": "reference", "library": "lib-../../etc/passwd"})
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 2


def test_a_cache_others_can_write_is_not_used(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    comp = EchoCompiler()
    with pytest.warns(UserWarning, match="writable by group or others"):
        assert comp.compile_cached("abc") == b"cba"
    assert comp.compile_cached("abc") == b"cba" and comp.runs == 2  # no cache: compiled each time
    assert list(cache_dir.iterdir()) == []


def test_compile_cache_folders_are_private_under_umask_0(cache_dir):
    old = os.umask(0)
    try:
        EchoCompiler().compile_cached("abc")
    finally:
        os.umask(old)
    assert os.stat(cache_dir).st_mode & 0o777 == 0o700
    assert os.stat(cache_dir / "compile").st_mode & 0o777 == 0o700
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in (cache_dir / "compile").iterdir())


def test_the_compile_cache_is_bounded(cache_dir, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_MAX_SIZE", "2K")
    comp = EchoCompiler()
    for i in range(40):
        comp.compile_cached(f"source number {i} " * 5)
    assert files.folder_size(cache_dir / "compile") <= 2048
    assert len(list((cache_dir / "compile").iterdir())) < 40
