"""The code object reader on gfx942 objects built by clang-19 here, checked against llvm-readelf/llvm-objdump, and on
hand-built objects (gfx950's mach 0x4F, bad files)."""

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from ember.amd_runtime import elf
from ember.amd_runtime.elf import KernelDescriptor, load_code_object, write_code_object

CLANG, LLD = shutil.which("clang-19"), shutil.which("ld.lld-19")
READELF, OBJDUMP = shutil.which("llvm-readelf-19"), shutil.which("llvm-objdump-19")
needs_clang = pytest.mark.skipif(CLANG is None or LLD is None, reason="clang-19/ld.lld-19 not installed (apt: clang-19 "
                                 "lld-19); the gfx942 code objects are compiled in the test")
needs_llvm_tools = pytest.mark.skipif(READELF is None or OBJDUMP is None,
                                      reason="llvm-readelf-19/llvm-objdump-19 not installed (apt: llvm-19)")

KERNELS_HIP = r"""
extern "C" __attribute__((global)) void add(float* a, const float* b, const int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) a[i] += b[i];
}
extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 256)))
void fancy(float* out, const float* in, int n, long long m) {
  __attribute__((shared)) float tile[256];
  unsigned x = __builtin_amdgcn_workitem_id_x(), y = __builtin_amdgcn_workitem_id_y();
  unsigned gy = __builtin_amdgcn_workgroup_id_y(), gz = __builtin_amdgcn_workgroup_id_z();
  tile[x] = in[x + y * 16];
  __builtin_amdgcn_s_barrier();
  const unsigned short* dp = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
  volatile float priv[64];
  for (int i = 0; i < 64; i++) priv[i] = in[i];
  out[gy * n + gz + m] = tile[(x + 1) % 256] + dp[2] + priv[n & 63];
}
"""
# a global table of pointers: the linker leaves R_AMDGPU_RELATIVE64 relocations for the loader
RELOC_HIP = r"""
__attribute__((device)) int vals[4] = {1, 2, 3, 4};
__attribute__((device)) int* table[2] = {&vals[0], &vals[2]};
extern "C" __attribute__((global)) void pick(int* out, int i) { out[0] = *table[i & 1]; }
"""
# a relocatable object (ET_REL): the descriptors' entry offsets are R_AMDGPU_REL64 relocations
RELOCATABLE_C = r"""
__attribute__((amdgpu_kernel)) void f2(int* out) { out[0] = 1; }
__attribute__((amdgpu_kernel)) void add(float* a, const float* b, const int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) a[i] += b[i];
}
"""


def _run(*cmd: str, cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The three code objects, compiled once for the module."""
    if CLANG is None or LLD is None:
        pytest.skip("clang-19/ld.lld-19 not installed")
    d = tmp_path_factory.mktemp("gfx942")
    (d / "k.hip").write_text(KERNELS_HIP)
    (d / "rel.hip").write_text(RELOC_HIP)
    (d / "kc.c").write_text(RELOCATABLE_C)
    hip = ("-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-O3")
    # without -fgpu-rdc clang compiles and links (lld) in one go: k.hsaco is the loadable shared object
    _run(CLANG, *hip, "--no-gpu-bundle-output", "-c", "k.hip", "-o", "k.hsaco", cwd=d)
    _run(CLANG, *hip, "-fgpu-rdc", "-c", "rel.hip", "-o", "rel.bc", cwd=d)
    _run(LLD, "-shared", "-plugin-opt=mcpu=gfx942", "rel.bc", "-o", "rel.hsaco", cwd=d)
    _run(CLANG, "--target=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-O3", "-nogpulib", "-c", "kc.c", "-o", "kc.o", cwd=d)
    return d


def _directives(objdump_out: str) -> dict[str, dict[str, int]]:
    """`.amdhsa_kernel NAME` blocks of llvm-objdump's descriptor disassembly -> {name: {directive: value}}."""
    out: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"\.amdhsa_kernel (\w+)\n(.*?)\.end_amdhsa_kernel", objdump_out, re.S):
        out[name] = {k: int(v) for k, v in re.findall(r"\.amdhsa_(\w+) (\d+)", body)}
    return out


def _symbols(readelf_out: str) -> dict[str, int]:
    return {m.group(2): int(m.group(1), 16)
            for m in re.finditer(r"^\s*\d+: ([0-9a-f]{16})\s+\d+\s+\w+\s+\w+\s+\w+\s+\S+\s+(\S+)$", readelf_out, re.M)}


@needs_clang
def test_header_and_kernels(built):
    co = load_code_object((built / "k.hsaco").read_bytes(), arch="gfx942")
    assert (co.arch, co.code_object_version, co.e_flags & 0xFF) == ("gfx942", 5, 0x4C)
    assert (co.xnack, co.sramecc) == ("any", "any")  # e_flags 0x54C
    assert sorted(co.kernels) == ["add", "fancy"]
    for k in co.kernels.values():
        assert k.descriptor_offset % 64 == 0 and k.entry_offset % 256 == 0
        assert k.entry_offset == k.descriptor_offset + k.descriptor.kernel_code_entry_byte_offset
        assert co.text_offset <= k.entry_offset < co.text_offset + co.text_size
        assert KernelDescriptor.from_bytes(co.image[k.descriptor_offset:k.descriptor_offset + 64]).to_bytes() == \
            co.image[k.descriptor_offset:k.descriptor_offset + 64]
    with pytest.raises(KeyError, match=r"no kernel 'mul'; it has \['add', 'fancy'\]"):
        co.kernel("mul")


@needs_clang
@needs_llvm_tools
def test_layout_matches_readelf_and_objdump(built):
    path = built / "k.hsaco"
    co = load_code_object(path.read_bytes(), arch="gfx942")
    syms = _symbols(_run(READELF, "-s", str(path), cwd=built))
    sections = _run(READELF, "-S", str(path), cwd=built)
    text_addr = int(re.search(r"\.text\s+PROGBITS\s+([0-9a-f]+)", sections).group(1), 16)
    assert co.text_offset == text_addr
    for name in ("add", "fancy"):
        assert co.kernels[name].descriptor_offset == syms[f"{name}.kd"]
        assert co.kernels[name].entry_offset == syms[name]
    # the first instruction, as llvm-objdump encodes it, sits at the entry offset of the image
    dis = _run(OBJDUMP, "-d", "--triple=amdgcn-amd-amdhsa", "--mcpu=gfx942", str(path), cwd=built)
    first = re.search(r"<add>:\n\s*\S.*?// ([0-9A-F]{12}): ([0-9A-F]{8})", dis)
    assert int(first.group(1), 16) == co.kernels["add"].entry_offset
    assert struct.unpack_from("<I", co.image, co.kernels["add"].entry_offset)[0] == int(first.group(2), 16)
    notes = _run(READELF, "--notes", str(path), cwd=built)
    meta = dict(re.findall(r"\.kernarg_segment_size:\s+(\d+)\n(?:.*\n)*?\s+\.name:\s+(\w+)", notes))
    assert {name: int(size) for size, name in meta.items()} == \
        {name: k.descriptor.kernarg_size for name, k in co.kernels.items()} == {"add": 20, "fancy": 32}


@needs_clang
@needs_llvm_tools
def test_descriptor_fields_match_objdump(built):
    path = built / "k.hsaco"
    co = load_code_object(path.read_bytes(), arch="gfx942")
    dis = _run(OBJDUMP, "-D", "--triple=amdgcn-amd-amdhsa", "--mcpu=gfx942", "-j", ".rodata", str(path), cwd=built)
    directives = _directives(dis)
    assert sorted(directives) == ["add", "fancy"]
    for name, want in directives.items():
        d = co.kernels[name].descriptor
        got = {
            "group_segment_fixed_size": d.group_segment_fixed_size,
            "private_segment_fixed_size": d.private_segment_fixed_size, "kernarg_size": d.kernarg_size,
            "accum_offset": d.accum_offset, "tg_split": d.tg_split, "next_free_vgpr": d.vgpr_count("gfx942"),
            "next_free_sgpr": d.sgpr_count, "float_round_mode_32": d.float_round_mode_32,
            "float_round_mode_16_64": d.float_round_mode_16_64, "float_denorm_mode_32": d.float_denorm_mode_32,
            "float_denorm_mode_16_64": d.float_denorm_mode_16_64, "dx10_clamp": d.enable_dx10_clamp,
            "ieee_mode": d.enable_ieee_mode, "fp16_overflow": d.fp16_ovfl,
            "enable_private_segment": d.enable_private_segment,
            "system_sgpr_workgroup_id_x": d.enable_sgpr_workgroup_id_x,
            "system_sgpr_workgroup_id_y": d.enable_sgpr_workgroup_id_y,
            "system_sgpr_workgroup_id_z": d.enable_sgpr_workgroup_id_z,
            "system_sgpr_workgroup_info": d.enable_sgpr_workgroup_info,
            "system_vgpr_workitem_id": d.enable_vgpr_workitem_id,
            "user_sgpr_dispatch_ptr": d.enable_sgpr_dispatch_ptr, "user_sgpr_queue_ptr": d.enable_sgpr_queue_ptr,
            "user_sgpr_kernarg_segment_ptr": d.enable_sgpr_kernarg_segment_ptr,
            "user_sgpr_dispatch_id": d.enable_sgpr_dispatch_id,
            "user_sgpr_private_segment_size": d.enable_sgpr_private_segment_size,
            "uses_dynamic_stack": d.uses_dynamic_stack,
        }
        exceptions = ("fp_ieee_invalid_op", "fp_denorm_src", "fp_ieee_div_zero", "fp_ieee_overflow",
                      "fp_ieee_underflow", "fp_ieee_inexact", "int_div_zero")
        got.update({f"exception_{e}": d.enable_exceptions >> i & 1 for i, e in enumerate(exceptions)})
        checked = {k: int(v) for k, v in got.items() if k in want}
        assert checked == {k: want[k] for k in checked}, name
        assert len(checked) >= 30  # every directive objdump printed that we decode
        d.validate(name)


@needs_clang
def test_descriptor_values(built):
    """The facts the dispatch path uses, for the two kernels (cf. spec 4 'Local facts')."""
    co = load_code_object((built / "k.hsaco").read_bytes(), arch="gfx942")
    add, fancy = co.kernels["add"].descriptor, co.kernels["fancy"].descriptor
    assert (add.compute_pgm_rsrc1, add.compute_pgm_rsrc2, add.kernel_code_properties) == (0xAF0040, 0x84, 0x8)
    assert add.user_sgprs() == [("kernarg_segment_ptr", 2)] and add.workgroup_id_sgprs == (2,)
    assert (add.wavefront_size, add.enable_vgpr_workitem_id, add.lds_size) == (64, 0, 0)
    assert fancy.user_sgprs() == [("dispatch_ptr", 2), ("kernarg_segment_ptr", 2)]
    assert (fancy.user_sgpr_count, fancy.workgroup_id_sgprs, fancy.enable_vgpr_workitem_id) == (4, (4, 5, 6), 1)
    assert (fancy.group_segment_fixed_size, fancy.private_segment_fixed_size) == (1024, 272)
    assert fancy.enable_private_segment and fancy.enable_sgpr_dispatch_ptr


@needs_clang
def test_metadata_note(built):
    co = load_code_object((built / "k.hsaco").read_bytes(), arch="gfx942")
    for k in co.kernels.values():
        m, d = k.metadata, k.descriptor
        assert m is not None and (m.name, m.symbol, m.wavefront_size) == (k.name, f"{k.name}.kd", 64)
        assert (m.kernarg_segment_size, m.group_segment_fixed_size, m.private_segment_fixed_size) == \
            (d.kernarg_size, d.group_segment_fixed_size, d.private_segment_fixed_size)
        assert m.vgpr_count <= d.vgpr_count("gfx942") and m.sgpr_count <= d.sgpr_count and m.hidden_args == ()
    fancy = co.kernels["fancy"].metadata
    assert [(a.offset, a.size, a.value_kind, a.address_space) for a in fancy.args] == \
        [(0, 8, "global_buffer", "global"), (8, 8, "global_buffer", "global"), (16, 4, "by_value", None),
         (24, 8, "by_value", None)]
    assert fancy.max_flat_workgroup_size == 256 and fancy.kernarg_segment_align == 8
    assert load_code_object(_tiny()[0]).kernels["k0"].metadata is None  # no note


@needs_clang
def test_relative_relocations(built):
    co = load_code_object((built / "rel.hsaco").read_bytes(), arch="gfx942")
    assert list(co.kernels) == ["pick"]
    vals = next(s.value for s in co.symbols if s.name == "vals")
    table = next(s.value for s in co.symbols if s.name == "table")
    assert [(r.type, r.offset, r.addend) for r in co.relocations] == \
        [(elf.R_AMDGPU_RELATIVE64, table, vals), (elf.R_AMDGPU_RELATIVE64, table + 8, vals + 8)]
    base = 0x7F12_3400_0000
    image = co.relocated(base)
    assert struct.unpack_from("<QQ", image, table) == (base + vals, base + vals + 8)
    assert image[:table] == co.image[:table]
    with pytest.raises(ValueError, match="256-byte aligned"):
        co.relocated(base + 4)


@needs_clang
def test_relocatable_object(built):
    """ET_REL: sections laid out by us, the descriptors' REL64 entry offsets applied."""
    co = load_code_object((built / "kc.o").read_bytes(), arch="gfx942")
    assert sorted(co.kernels) == ["add", "f2"] and co.relocations == ()
    funcs = {s.name: s.value for s in co.symbols if s.type == elf.STT_FUNC}
    for name, k in co.kernels.items():
        assert k.entry_offset == funcs[name] and k.entry_offset % 256 == 0
        assert k.descriptor.kernarg_size in (8, 20)
    assert co.text == co.image[co.text_offset:co.text_offset + co.text_size] and co.text_offset % 256 == 0


def _tiny(arch="gfx942", **kw):
    desc = KernelDescriptor(kernarg_size=16, compute_pgm_rsrc1=0xAF0040, compute_pgm_rsrc2=0x84,
                            kernel_code_properties=0x8)
    text = struct.pack("<2I", 0xBF810000, 0xBF800000) + bytes(248) + struct.pack("<I", 0xBF810000)  # s_endpgm
    return write_code_object(text, {"k0": (desc, 0), "k1": (desc, 256)}, arch=arch, **kw), desc, text


def test_written_code_object_round_trip():
    blob, desc, text = _tiny()
    co = load_code_object(blob, "gfx942")
    assert (co.arch, co.code_object_version, co.e_flags) == ("gfx942", 5, 0x54C)
    assert co.text == text and sorted(co.kernels) == ["k0", "k1"]
    assert co.kernels["k1"].entry_offset == co.text_offset + 256
    d = co.kernels["k0"].descriptor
    assert (d.kernarg_size, d.compute_pgm_rsrc1, d.compute_pgm_rsrc2, d.kernel_code_properties) == \
        (desc.kernarg_size, desc.compute_pgm_rsrc1, desc.compute_pgm_rsrc2, desc.kernel_code_properties)
    assert load_code_object(_tiny(code_object_version=6)[0]).code_object_version == 6


@pytest.mark.skipif(READELF is None, reason="llvm-readelf-19 not installed (apt: llvm-19)")
def test_written_code_object_reads_in_llvm(tmp_path):
    (tmp_path / "t.hsaco").write_bytes(_tiny()[0])
    out = _run(READELF, "-hs", "t.hsaco", cwd=tmp_path)
    assert "gfx942" in out and "AMDGPU - HSA" in out and "k1.kd" in out


def test_gfx950_mach_and_arch_check():
    blob = _tiny("gfx950")[0]
    assert blob[48:52] == struct.pack("<I", 0x54F)  # e_flags: mach 0x4F, xnack any, sramecc any
    assert load_code_object(blob, "gfx950").arch == "gfx950"
    assert load_code_object(blob).arch == "gfx950"
    with pytest.raises(ValueError, match=r"built for gfx950 \(mach 0x4f\), but the device is gfx942"):
        load_code_object(blob, "gfx942")
    with pytest.raises(ValueError, match=r"built for gfx942 \(mach 0x4c\), but the device is gfx950"):
        load_code_object(_tiny()[0], "gfx950")


@needs_clang
def test_clang_object_patched_to_gfx950(built):
    blob = bytearray((built / "k.hsaco").read_bytes())
    struct.pack_into("<I", blob, 48, 0x54F)
    assert load_code_object(bytes(blob)).arch == "gfx950"
    with pytest.raises(ValueError, match="built for gfx950"):
        load_code_object(bytes(blob), "gfx942")


def _patched(offset: int, fmt: str, value: int) -> bytes:
    blob = bytearray(_tiny()[0])
    struct.pack_into(fmt, blob, offset, value)
    return bytes(blob)


@pytest.mark.parametrize("blob, message", [
    (b"MZ\x90\x00" + bytes(100), "not an ELF file"),
    (_patched(4, "<B", 1), "not a little-endian ELF64"),
    (_patched(18, "<H", 0x3E), r"e_machine is 0x3e, not EM_AMDGPU \(0xe0\)"),
    (_patched(7, "<B", 0), r"OS ABI is 0, not AMDGPU HSA \(64\)"),
    (_patched(8, "<B", 1), r"ABI version 1 is not supported; accepted: 2 \(code object v4\)"),
    (_patched(48, "<I", 0x599), "unknown AMDGPU mach 0x99"),
    (_patched(16, "<H", 2), "neither a shared object"),
    (_tiny()[0][:600], "past the end of the file"),
    (_patched(64 + 16, "<Q", 1 << 40), "more than 0x40000000"),  # the PT_LOAD's p_vaddr
])
def test_bad_files(blob, message):
    with pytest.raises(ValueError, match=message):
        load_code_object(blob)


def test_bad_descriptors():
    co = load_code_object(_tiny()[0])
    kd = co.kernels["k0"].descriptor_offset
    blob = bytearray(_tiny()[0])
    blob[kd + 12] = 1  # reserved0
    with pytest.raises(ValueError, match="reserved bytes are not zero"):
        load_code_object(bytes(blob))
    blob = bytearray(_tiny()[0])
    struct.pack_into("<q", blob, kd + 16, co.kernels["k0"].descriptor.kernel_code_entry_byte_offset + 4)
    with pytest.raises(ValueError, match="not a 256-byte aligned address"):
        load_code_object(bytes(blob))
    with pytest.raises(ValueError, match="wave32"):
        KernelDescriptor(kernel_code_properties=1 << 10).validate()
    with pytest.raises(ValueError, match="loads 2 user SGPRs but kernel_code_properties enables 4"):
        KernelDescriptor(compute_pgm_rsrc2=0x4, kernel_code_properties=0xA).validate()
    with pytest.raises(ValueError, match="need 64 bytes"):
        KernelDescriptor.from_bytes(bytes(10))


# *** the compile cache holds only AMDGPU code objects ***
@pytest.mark.parametrize("payload", ["cpu-elf", "cubin-machine", "other-arch", "junk"])
def test_a_cached_entry_that_is_no_amdgpu_code_object_is_rebuilt(tmp_path, monkeypatch, payload):
    # a well-formed cache entry (right key and checksum) holding a CPU shared object, an ELF whose e_machine is not
    # EM_AMDGPU (224), a code object of another arch, or junk: refused before it is loaded, built again, replaced
    from ember.amd_runtime.comgr import HIPCompiler
    from ember.runtime import Compiler
    from ember.runtime.cpu import CPUCompiler
    from ember.uops import files

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CACHE", raising=False)
    good = _tiny("gfx942")[0]

    class Backend(Compiler):  # stands in for comgr/clang: the code object they would make
        runs = 0

        def compile(self, src):
            Backend.runs += 1
            return good

    comp = HIPCompiler.__new__(HIPCompiler)
    comp.arch, comp.backend, comp.flags = "gfx942", Backend("test backend"), ()
    Compiler.__init__(comp, "hip test gfx942")
    assert comp.compile_cached("k") == good and Backend.runs == 1
    planted = {"cpu-elf": CPUCompiler().compile("int f(void) { return 1; }\n"),
               "cubin-machine": good[:18] + (190).to_bytes(2, "little") + good[20:],  # e_machine EM_CUDA
               "other-arch": _tiny("gfx950")[0],
               "junk": b"\x7fELF" + bytes(60)}[payload]
    key = comp.cache_key("k")
    files.write_entry(comp.cache_path("k"), key, planted, {"kind": "library"})
    with pytest.warns(UserWarning, match="is corrupt"):
        assert comp.compile_cached("k") == good
    assert Backend.runs == 2 and files.read_entry(comp.cache_path("k"), key).payload == good
