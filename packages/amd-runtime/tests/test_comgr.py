"""The comgr binding against a fake libamd_comgr built here with gcc (once as comgr 2.x, once as 3.x: each knows
only its own enum values), the clang/ld.lld fallback, and HIPCompiler's choice and disk cache."""

import shutil
import subprocess
from pathlib import Path

import pytest

from ember.amd_runtime import comgr as comgr_mod
from ember.amd_runtime.clang_compiler import ClangCompiler, find_toolchain
from ember.amd_runtime.comgr import ENUMS_V2, ENUMS_V3, Comgr, ComgrCompiler, ComgrError, HIPCompiler
from ember.amd_runtime.elf import KernelDescriptor, load_code_object, write_code_object
from ember.runtime import CompileError

CC = shutil.which("gcc") or shutil.which("cc")
CLANG, LLD = shutil.which("clang-19"), shutil.which("ld.lld-19")

# The fake implements the entry points the binding calls, appends one line per call to $FAKE_COMGR_TRACE, checks
# the language and action enums against its own version's table (a wrong table gets status 2, invalid argument),
# and returns the bytes of $FAKE_COMGR_OUTPUT as the executable. "#error" in a source fails with a log.
FAKE_COMGR_C = r"""
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { uint64_t handle; } h_t;
#if MAJOR == 2
enum { LANG_HIP = 4, ACT_DEVLIBS_TO_BC = 15, ACT_CODEGEN_TO_RELOC = 6, ACT_LINK_TO_EXEC = 9, ACT_ASSEMBLE = 10 };
#else
enum { LANG_HIP = 3, ACT_DEVLIBS_TO_BC = 12, ACT_CODEGEN_TO_RELOC = 4, ACT_LINK_TO_EXEC = 7, ACT_ASSEMBLE = 8 };
#endif
enum { K_SOURCE = 1, K_LOG = 5, K_BC = 6, K_RELOC = 7, K_EXEC = 8 };
typedef struct { int kind; size_t size; char* bytes; } data_t;
typedef struct { int n; uint64_t items[16]; } set_t;
static data_t datas[256]; static int ndatas = 1;
static set_t sets[64]; static int nsets = 1;
static struct { int lang; char isa[128]; int logging; char options[2048]; } infos[16]; static int ninfos = 1;

static void rec(const char* fmt, ...) {
  const char* path = getenv("FAKE_COMGR_TRACE");
  if (!path) return;
  FILE* f = fopen(path, "a"); va_list ap; va_start(ap, fmt); vfprintf(f, fmt, ap); va_end(ap);
  fputc('\n', f); fclose(f);
}
static uint64_t new_data(int kind, const char* bytes, size_t size) {
  datas[ndatas].kind = kind; datas[ndatas].size = size; datas[ndatas].bytes = malloc(size + 1);
  memcpy(datas[ndatas].bytes, bytes, size); return ndatas++;
}
static void add(uint64_t set, uint64_t data) { sets[set].items[sets[set].n++] = data; }
static data_t* find(uint64_t set, int kind) {
  for (int i = 0; i < sets[set].n; i++) if (datas[sets[set].items[i]].kind == kind) return &datas[sets[set].items[i]];
  return NULL;
}

void amd_comgr_get_version(size_t* major, size_t* minor) { *major = MAJOR; *minor = 7; rec("get_version"); }
int amd_comgr_status_string(int status, const char** s) {
  static const char* names[] = {"AMD_COMGR_STATUS_SUCCESS", "AMD_COMGR_STATUS_ERROR",
                                "AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT", "AMD_COMGR_STATUS_ERROR_OUT_OF_RESOURCES"};
  if (status < 0 || status > 3) return 2;
  *s = names[status]; return 0;
}
int amd_comgr_create_action_info(h_t* ai) { ai->handle = ninfos++; rec("create_action_info"); return 0; }
int amd_comgr_destroy_action_info(h_t ai) { rec("destroy_action_info"); return 0; }
int amd_comgr_action_info_set_language(h_t ai, int lang) { infos[ai.handle].lang = lang; rec("set_language %d", lang);
  return 0; }
int amd_comgr_action_info_set_isa_name(h_t ai, const char* isa) { strncpy(infos[ai.handle].isa, isa, 127);
  rec("set_isa_name %s", isa); return 0; }
int amd_comgr_action_info_set_logging(h_t ai, bool on) { infos[ai.handle].logging = on; return 0; }
int amd_comgr_action_info_set_option_list(h_t ai, const char** opts, size_t n) {
  char* o = infos[ai.handle].options; o[0] = 0;
  for (size_t i = 0; i < n; i++) { if (i) strcat(o, " "); strcat(o, opts[i]); }
  return 0;
}
int amd_comgr_create_data_set(h_t* s) { s->handle = nsets++; sets[s->handle].n = 0; return 0; }
int amd_comgr_destroy_data_set(h_t s) { rec("destroy_data_set"); return 0; }
int amd_comgr_create_data(int kind, h_t* d) { d->handle = new_data(kind, "", 0); return 0; }
int amd_comgr_release_data(h_t d) { return 0; }
int amd_comgr_set_data(h_t d, size_t size, const char* bytes) {
  free(datas[d.handle].bytes); datas[d.handle].bytes = malloc(size + 1); memcpy(datas[d.handle].bytes, bytes, size);
  datas[d.handle].bytes[size] = 0; datas[d.handle].size = size; return 0;
}
int amd_comgr_set_data_name(h_t d, const char* name) { rec("set_data_name %s", name); return 0; }
int amd_comgr_data_set_add(h_t s, h_t d) { add(s.handle, d.handle); return 0; }
int amd_comgr_get_data(h_t d, size_t* size, char* bytes) {
  if (bytes) memcpy(bytes, datas[d.handle].bytes, *size < datas[d.handle].size ? *size : datas[d.handle].size);
  else *size = datas[d.handle].size;
  return 0;
}
int amd_comgr_action_data_count(h_t s, int kind, size_t* n) {
  *n = 0; for (int i = 0; i < sets[s.handle].n; i++) *n += datas[sets[s.handle].items[i]].kind == kind; return 0;
}
int amd_comgr_action_data_get_data(h_t s, int kind, size_t index, h_t* d) {
  for (int i = 0; i < sets[s.handle].n; i++)
    if (datas[sets[s.handle].items[i]].kind == kind && index-- == 0) { d->handle = sets[s.handle].items[i]; return 0; }
  return 2;
}
int amd_comgr_do_action(int kind, h_t ai, h_t in, h_t out) {
  rec("do_action %d lang=%d isa=%s options=[%s]", kind, infos[ai.handle].lang, infos[ai.handle].isa,
      infos[ai.handle].options);
  if (kind == ACT_DEVLIBS_TO_BC || kind == ACT_ASSEMBLE) {
    data_t* src = find(in.handle, K_SOURCE);
    if (!src || infos[ai.handle].lang != LANG_HIP) return 2;
    if (strstr(src->bytes, "#error")) {
      const char* log = "k.hip:1:2: error: fake comgr rejects this source";
      add(out.handle, new_data(K_LOG, log, strlen(log))); return 1;
    }
    add(out.handle, new_data(kind == ACT_ASSEMBLE ? K_RELOC : K_BC, src->bytes, src->size)); return 0;
  }
  if (kind == ACT_CODEGEN_TO_RELOC) {
    data_t* bc = find(in.handle, K_BC); if (!bc) return 2;
    add(out.handle, new_data(K_RELOC, bc->bytes, bc->size)); return 0;
  }
  if (kind == ACT_LINK_TO_EXEC) {
    if (!find(in.handle, K_RELOC)) return 2;
    FILE* f = fopen(getenv("FAKE_COMGR_OUTPUT"), "rb"); static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f); fclose(f);
    add(out.handle, new_data(K_EXEC, buf, n)); return 0;
  }
  return 2;
}
int amd_comgr_get_isa_count(size_t* n) { *n = 2; return 0; }
int amd_comgr_get_isa_name(size_t i, const char** name) {
  static const char* names[] = {"amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "amdgcn-amd-amdhsa--gfx950"};
  if (i > 1) return 2;
  *name = names[i]; return 0;
}
"""
KERNEL_SRC = 'extern "C" __attribute__((global)) void k0(int* a) { a[0] = 1; }\n'


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """{major: path} of the fake library built as comgr 2.7 and 3.7, and the canned code object it returns."""
    if CC is None:
        pytest.skip("no C compiler (gcc/cc) to build the fake libamd_comgr")
    d = tmp_path_factory.mktemp("comgr")
    (d / "fake_comgr.c").write_text(FAKE_COMGR_C)
    libs = {}
    for major in (2, 3):
        (d / str(major)).mkdir()
        libs[major] = d / str(major) / f"libamd_comgr.so.{major}"
        subprocess.run([CC, "-shared", "-fPIC", "-O1", f"-DMAJOR={major}", "fake_comgr.c", "-o", str(libs[major])],
                       cwd=d, check=True)
    desc = KernelDescriptor(kernarg_size=8, compute_pgm_rsrc1=0xAF0040, compute_pgm_rsrc2=0x84,
                            kernel_code_properties=0x8)
    canned = d / "canned.hsaco"
    canned.write_bytes(write_code_object(bytes.fromhex("000081bf"), {"k0": (desc, 0)}, "gfx942"))
    return libs, canned


@pytest.fixture
def trace(fakes, tmp_path, monkeypatch):
    path = tmp_path / "trace.txt"
    monkeypatch.setenv("FAKE_COMGR_TRACE", str(path))
    monkeypatch.setenv("FAKE_COMGR_OUTPUT", str(fakes[1]))
    return path


def _actions(trace_path: Path) -> list[str]:
    return [ln for ln in trace_path.read_text().splitlines() if ln.startswith(("do_action", "set_language"))]


@pytest.mark.parametrize("major, enums", [(2, ENUMS_V2), (3, ENUMS_V3)])
def test_compile_hip(fakes, trace, major, enums):
    lib = Comgr(str(fakes[0][major]))
    assert lib.version == (major, 7) and lib.enums is enums
    blob = lib.compile_hip(KERNEL_SRC, "gfx942")
    assert blob == fakes[1].read_bytes()
    assert "k0" in load_code_object(blob, "gfx942").kernels
    calls = _actions(trace)
    hip = 4 if major == 2 else 3
    steps = (15, 6, 9) if major == 2 else (12, 4, 7)  # devlibs->bc, codegen->reloc, link->exec
    assert calls[0] == f"set_language {hip}"
    assert [int(c.split()[1]) for c in calls[1:]] == list(steps)
    assert all(f"lang={hip} isa=amdgcn-amd-amdhsa--gfx942 " in c for c in calls[1:])
    assert "--offload-arch=gfx942" in calls[1] and "-Xclang -disable-llvm-passes" in calls[1]
    assert "options=[-O3 -mllvm -amdgpu-internalize-symbols]" in calls[2] and "options=[]" in calls[3]
    text = trace.read_text()
    assert "set_data_name <null>" in text and text.count("destroy_data_set") == 4
    assert text.count("destroy_action_info") == 1


@pytest.mark.parametrize("major", [2, 3])
def test_compile_error_carries_log(fakes, trace, major):
    lib = Comgr(str(fakes[0][major]))
    with pytest.raises(ComgrError, match="fake comgr rejects this source") as e:
        lib.compile_hip("#error nope\n" + KERNEL_SRC, "gfx942")
    assert e.value.status == 1 and "COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC" in str(e.value)
    assert "AMD_COMGR_STATUS_ERROR (1)" in str(e.value) and isinstance(e.value, CompileError)
    assert "destroy_action_info" in trace.read_text()  # cleaned up on failure too


def test_wrong_enum_table_is_rejected(fakes, trace):
    """The fake 3.x refuses comgr 2's numbers: what happens when a binding ignores the version."""
    lib = Comgr(str(fakes[0][3]))
    lib.enums = ENUMS_V2
    with pytest.raises(ComgrError, match=r"INVALID_ARGUMENT \(2\)"):
        lib.compile_hip(KERNEL_SRC, "gfx942")


@pytest.mark.parametrize("major", [2, 3])
def test_assemble_and_list_isas(fakes, trace, major):
    lib = Comgr(str(fakes[0][major]))
    assert lib.assemble(".text\ns_endpgm\n", "gfx950") == fakes[1].read_bytes()
    assert "set_data_name <null>.s" in trace.read_text()
    assert lib.compile_bitcode(b"BC\xc0\xde", "gfx942") == fakes[1].read_bytes()
    codegen = 6 if major == 2 else 4
    assert [c.split()[1] for c in _actions(trace) if c.startswith("do_action")][-2:] == \
        [str(codegen), str(9 if major == 2 else 7)]
    assert lib.list_isas() == ["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "amdgcn-amd-amdhsa--gfx950"]
    assert lib.supports("gfx942") and lib.supports("gfx950:sramecc+") and not lib.supports("gfx90a")


def test_unsupported_major():
    with pytest.raises(RuntimeError, match="comgr 4.x is not supported"):
        comgr_mod.enums_for(4)


def test_library_search(fakes, monkeypatch, tmp_path):
    for var in ("COMGR_PATH", "COMGR_3_PATH", "ROCM_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COMGR_PATH", str(fakes[0][2]))
    assert comgr_mod.comgr_candidates() == [str(fakes[0][2])]
    assert comgr_mod.load_comgr().version == (2, 7)
    monkeypatch.setenv("COMGR_3_PATH", str(fakes[0][3]))
    assert comgr_mod.comgr_candidates() == [str(fakes[0][3]), str(fakes[0][2])]
    assert comgr_mod.load_comgr().version == (3, 7)
    monkeypatch.delenv("COMGR_PATH")
    monkeypatch.delenv("COMGR_3_PATH")
    rocm = tmp_path / "rocm"
    (rocm / "lib").mkdir(parents=True)
    shutil.copy(fakes[0][3], rocm / "lib" / "libamd_comgr.so")
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    assert comgr_mod.comgr_candidates()[0] == str(rocm / "lib" / "libamd_comgr.so")
    assert comgr_mod.comgr_candidates()[-3:] == ["libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2"]
    monkeypatch.setenv("COMGR_PATH", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="set COMGR_PATH"):
        comgr_mod.load_comgr()
    assert not comgr_mod.comgr_available() and not comgr_mod.comgr_available("gfx942")


def test_hip_compiler_prefers_comgr_and_caches(fakes, trace, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMGR_3_PATH", raising=False)
    monkeypatch.setenv("COMGR_PATH", str(fakes[0][3]))
    compiler = HIPCompiler("gfx942")
    assert isinstance(compiler.backend, ComgrCompiler)
    assert compiler.cachekey == "hip comgr 3.7 libamd_comgr.so.3 gfx942"
    assert compiler.compile_cached(KERNEL_SRC) == fakes[1].read_bytes()
    assert compiler.compile_cached(KERNEL_SRC) == fakes[1].read_bytes()
    assert sum(c.startswith("do_action 12") for c in _actions(trace)) == 1  # the second came from the disk cache
    assert any((tmp_path / "cache" / "compile").iterdir())


def test_comgr_output_checked(fakes, trace, monkeypatch, tmp_path):
    (tmp_path / "junk").write_bytes(b"not an elf")
    monkeypatch.setenv("FAKE_COMGR_OUTPUT", str(tmp_path / "junk"))
    with pytest.raises(CompileError, match="not a usable code object: code object: not an ELF file"):
        ComgrCompiler("gfx942", Comgr(str(fakes[0][3]))).compile(KERNEL_SRC)
    monkeypatch.setenv("FAKE_COMGR_OUTPUT", str(fakes[1]))  # a gfx942 object
    with pytest.raises(CompileError, match="built for gfx942"):
        ComgrCompiler("gfx950", Comgr(str(fakes[0][3]))).compile(KERNEL_SRC)


@pytest.mark.skipif(CLANG is None or LLD is None, reason="clang-19/ld.lld-19 not installed (apt: clang-19 lld-19)")
def test_clang_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    compiler = ClangCompiler("gfx942")
    assert compiler.cachekey.startswith("hip clang ") and compiler.cachekey.endswith(" gfx942")
    src = 'extern "C" __attribute__((global)) void add(float* a, const float* b, const int n) {\n' \
          '  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();\n' \
          '  if (i < n) a[i] += b[i];\n}\n'
    lib = compiler.compile_cached(src)
    co = load_code_object(lib, "gfx942")
    assert co.kernel("add").descriptor.kernarg_size == 20 and co.e_flags == 0x54C
    assert compiler.compile_cached(src) == lib  # from the disk cache
    with pytest.raises(CompileError, match="undeclared identifier 'nope'"):
        compiler.compile('extern "C" __attribute__((global)) void bad(int* a) { a[0] = nope; }\n')


def test_clang_gfx950_needs_llvm20(monkeypatch):
    if CLANG is None:
        pytest.skip("clang-19 not installed")
    if any(shutil.which(f"clang-{m}") for m in range(20, 31)):
        pytest.skip("an LLVM >= 20 clang is installed: gfx950 compiles")
    with pytest.raises(FileNotFoundError, match="gfx950 needs clang and ld.lld of LLVM >= 20"):
        find_toolchain("gfx950")
    with pytest.raises(FileNotFoundError, match="gfx950 needs LLVM >= 20, but clang-19 is LLVM 19"):
        ClangCompiler("gfx950", clang="clang-19", lld="ld.lld-19")
    with pytest.raises(ValueError, match="arch 'gfx1100' is not supported"):
        find_toolchain("gfx1100")


def test_clang_compiles_gfx950():
    try:
        clang, lld = find_toolchain("gfx950")
    except FileNotFoundError as e:
        pytest.skip(f"gfx950 needs LLVM >= 20 (clang-19 rejects the target): {e}")
    lib = ClangCompiler("gfx950", clang, lld).compile(KERNEL_SRC)
    assert load_code_object(lib, "gfx950").e_flags & 0xFF == 0x4F


def test_hip_compiler_falls_back_to_clang(monkeypatch, tmp_path):
    if CLANG is None or LLD is None:
        pytest.skip("clang-19/ld.lld-19 not installed")
    monkeypatch.setenv("COMGR_PATH", str(tmp_path / "no_comgr.so"))
    compiler = HIPCompiler("gfx942")
    assert isinstance(compiler.backend, ClangCompiler) and compiler.cachekey == compiler.backend.cachekey
