"""Programs read back from codegen's disk cache: their linear program is decoded and their source rendered on first use
only, and their `src_key` names that source (the same program, the same key, in any process; another program or
renderer, another key)."""

import dataclasses
import pickle
import threading

import pytest

from ember.codegen import CRenderer, CUDARenderer, ProgramSpec, cached_program, load_program, to_program
from ember.codegen import cache as cache_mod
from ember.uops import AxisType, Ops, UOp, dtypes, files


def elementwise_ast(n, scale):
    out, inp = (UOp(Ops.PARAM, dtypes.float32.ptr(n), (), i) for i in range(2))
    r = UOp.range(n, 0, AxisType.GLOBAL)
    return UOp.sink(out.index(r).store(inp.index(r).load() * UOp.const(dtypes.float32, scale)).end(r))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CACHE", raising=False)
    return tmp_path / "program"


@pytest.fixture
def renders(monkeypatch):
    """The programs CRenderer renders (the length of each)."""
    renders: list[int] = []
    render_body = CRenderer.render_body
    monkeypatch.setattr(CRenderer, "render_body",
                        lambda self, uops: renders.append(len(uops)) or render_body(self, uops))
    return renders


def test_a_program_read_back_renders_only_when_its_source_is_read(renders, monkeypatch):
    built = cached_program(elementwise_ast(64, 0.5), CRenderer())
    assert len(renders) == 1 and built.src_key is not None
    decodes = []
    decode = cache_mod.from_table
    monkeypatch.setattr(cache_mod, "from_table", lambda rows, *a: decodes.append(len(rows)) or decode(rows, *a))
    loaded = [load_program(elementwise_ast(64, 0.5), CRenderer()) for _ in range(3)]
    assert len(renders) == 1 and all(p.src_key == built.src_key for p in loaded)
    assert loaded[0].global_size == built.global_size and loaded[0].bufs == built.bufs
    assert loaded[0].vars == built.vars and loaded[0].name == built.name
    assert all(n == 0 for n in decodes)  # (only the variables' rows: none here)
    assert loaded[0].uops == built.uops and len(decodes) == 4 and decodes[-1] == len(built.uops)
    assert loaded[0].src == built.src and loaded[0].src == built.src and len(renders) == 2  # once, then kept
    assert loaded[1] == built and len(renders) == 3  # (equality compares sources: it renders)


def test_src_keys_tell_programs_and_renderers_apart():
    a = cached_program(elementwise_ast(64, 0.5), CRenderer())
    b = cached_program(elementwise_ast(64, 0.25), CRenderer())
    assert a.src_key != b.src_key and a.src_key is not None and b.src_key is not None
    sm80 = cached_program(elementwise_ast(64, 0.5), CUDARenderer("sm_80"))
    sm90 = cached_program(elementwise_ast(64, 0.5), CUDARenderer("sm_90"))
    assert len({a.src_key, sm80.src_key, sm90.src_key}) == 3  # (a renderer's settings are in the program's key)


def test_a_rebuilt_entry_with_other_contents_names_another_source(cache):
    ast = elementwise_ast(32, 2.0)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache)
    payload = files.read_entry(entry, entry.name).payload
    files.write_entry(entry, entry.name, payload.replace(b'"name":"', b'"name":"x'))  # (verified, decodes)
    other = load_program(ast, CRenderer())
    assert other.name == "x" + built.name and other.src_key != built.src_key


def test_kernels_of_one_name_have_functions_of_their_own():
    # the CPU compiles a batch of kernels into one library: two kernels of one shape (one display name) must not
    # define one function twice there. The function is named by the source, so it is the same in every process.
    a, b = (cached_program(elementwise_ast(64, c), CRenderer()) for c in (0.5, 0.25))
    assert a.name == b.name and a.function != b.function
    assert all(p.function.startswith(p.name + "_") and p.src.count(f"void {p.function}(") == 1 for p in (a, b))
    assert to_program(elementwise_ast(64, 0.5), CRenderer()).function == a.function
    loaded = load_program(elementwise_ast(64, 0.5), CRenderer())  # (its source rendered from the stored program)
    assert loaded.function == a.function and loaded.src == a.src
    cuda = to_program(elementwise_ast(64, 0.5), CUDARenderer("sm_80"))
    assert cuda.function == cuda.name  # (a target that names no function apart)


def test_an_entry_whose_function_is_no_identifier_is_rebuilt(cache):
    # the function is rendered into the source: an entry's must be an identifier, nothing the C compiler would read
    # as more code
    ast = elementwise_ast(32, 6.0)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache)
    payload = files.read_entry(entry, entry.name).payload
    files.write_entry(entry, entry.name, payload.replace(f'"function":"{built.function}"'.encode(),
                                                         b'"function":"f(void){} void g"'))
    with pytest.warns(UserWarning, match="is not an identifier"):
        assert load_program(ast, CRenderer()) is None
    assert cached_program(ast, CRenderer()).src == built.src


def test_no_src_key_without_the_cache(monkeypatch):
    monkeypatch.setenv("NOOPT", "1")
    assert cached_program(elementwise_ast(16, 3.0), CRenderer()).src_key is None


def test_a_lazy_program_pickles_with_its_source_and_replace_drops_its_key(renders):
    cached_program(elementwise_ast(64, 1.5), CRenderer())
    loaded = load_program(elementwise_ast(64, 1.5), CRenderer())
    again = pickle.loads(pickle.dumps(loaded))  # (a codegen helper's answer)
    assert len(renders) == 2 and again.src == loaded.src and again.src_key == loaded.src_key and len(renders) == 2
    edited = dataclasses.replace(loaded, src=loaded.src + "\n/* edited */\n")
    assert edited.src_key is None  # another source: never found by the old one's key
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaded.nope  # noqa: B018


def test_threads_reading_a_lazy_source_all_get_it():
    calls = []
    spec = ProgramSpec.read_later(lambda: (), lambda name, uops: calls.append(1) or f"int {name}(void) {{ return 1; }}",
                                  "key", "k", ())
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(spec.src)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ["int k(void) { return 1; }"] * 8 and 1 <= len(calls) <= 8 and spec.src_key == "key"
    assert vars(spec)["_later"] == {}  # (the functions are dropped once used)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        spec.nope  # noqa: B018


def test_a_malformed_linear_program_is_an_error_on_first_use(cache):
    ast = elementwise_ast(32, 5.0)
    built = cached_program(ast, CRenderer())
    (entry,) = files.entries(cache)
    head, body = files.read_entry(entry, entry.name).payload.split(b"\n")
    for bad in (body.replace(b'"PARAM"', b'"NOPE"'), body.replace(b'[]', b'[99]', 1), b"[1, 2"):
        files.write_entry(entry, entry.name, head + b"\n" + bad)  # (verified: as if Ember wrote it)
        loaded = load_program(ast, CRenderer())
        assert loaded.name == built.name
        with pytest.raises(ValueError, match="not a program"):
            loaded.uops  # noqa: B018
        with pytest.raises(ValueError, match="not a program"):
            loaded.src  # noqa: B018


def test_program_entries_are_not_fsynced(monkeypatch, cache):
    import os

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    cached_program(elementwise_ast(8, 7.0), CRenderer())
    assert synced == [] and len(files.entries(cache)) == 1  # (verified when read: a torn entry is rebuilt)


FILL = r"""
import dataclasses, sys
from pathlib import Path
from ember.codegen import CRenderer, to_program
from ember.codegen.cache import _program_path, program_to_json
from ember.uops import AxisType, Ops, UOp, dtypes, files
out, inp = UOp(Ops.PARAM, dtypes.float32.ptr(1), (), 0), UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 1)
r = UOp.range(64, 0, AxisType.REDUCE)
ast = UOp.sink(out.index(UOp.const(dtypes.int32, 0)).store(
    UOp(Ops.REDUCE, dtypes.float32, (inp.index(r).load(), r), Ops.MAX)))
spec = to_program(ast, CRenderer())
# args that are enums, as a renderer may meet (no lowering leaves an Ops arg in today's C programs): a reduce's op, an
# ALU's op in a tuple, a range's AxisType; stored where cached_program stores this kernel's program
x = next(u for u in spec.uops if u.op is Ops.LOAD)
extra = (UOp(Ops.REDUCE, x.dtype, (x,), Ops.ADD), UOp(Ops.NOOP, x.dtype, (x,), (Ops.MAX, AxisType.LOOP, 1)))
path, key = _program_path(ast, CRenderer(), None)
files.write_entry(path, key, program_to_json(dataclasses.replace(spec, uops=spec.uops + extra)))
Path(sys.argv[1]).write_text(spec.src)
"""

READ = r"""
import sys
from pathlib import Path
from ember.codegen import CRenderer, load_program
from ember.uops import AxisType, Ops, UOp, dtypes
out, inp = UOp(Ops.PARAM, dtypes.float32.ptr(1), (), 0), UOp(Ops.PARAM, dtypes.float32.ptr(64), (), 1)
r = UOp.range(64, 0, AxisType.REDUCE)
ast = UOp.sink(out.index(UOp.const(dtypes.int32, 0)).store(
    UOp(Ops.REDUCE, dtypes.float32, (inp.index(r).load(), r), Ops.MAX)))
spec = load_program(ast, CRenderer())  # (building the AST made its REDUCE(MAX); the linear program has no such node)
red, noop = spec.uops[-2:]
assert type(red.arg) is Ops and red.arg is Ops.ADD, repr(red.arg)
assert type(noop.arg[0]) is Ops and noop.arg == (Ops.MAX, AxisType.LOOP, 1), repr(noop.arg)
assert any(type(u.arg) is tuple and AxisType.REDUCE in u.arg for u in spec.uops)
assert CRenderer().render(spec.function, spec.uops[:-2]) == Path(sys.argv[1]).read_text()  # (renders as built)
print("ok")
"""


def test_enum_args_read_back_as_enums_in_a_fresh_process(tmp_path, cache):
    # (in the writing process an Ops stored as its number would come back as the enum: hash-consing returns the node
    # still in memory, so the reader is another interpreter, on the cache folder the writer filled)
    import subprocess
    import sys
    src = tmp_path / "src.c"
    subprocess.run([sys.executable, "-c", FILL, str(src)], check=True)
    assert len(files.entries(cache)) == 1
    out = subprocess.run([sys.executable, "-c", READ, str(src)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
