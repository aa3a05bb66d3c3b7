"""Kernarg layouts: explicit arguments at natural alignment, code object v5 hidden arguments (checked against the
offsets clang's metadata gives), the dispatch packet tail."""

import re
import shutil
import struct
import subprocess

import pytest

from ember.amd_runtime import aql
from ember.amd_runtime.elf import KernelArg, KernelDescriptor, KernelMetadata, load_code_object
from ember.amd_runtime.kernargs import HIDDEN_ARGS_SIZE_V5, kernarg_layout

CLANG, READELF = shutil.which("clang-19"), shutil.which("llvm-readelf-19")


def test_explicit_layout():
    layout = kernarg_layout(2, "i")  # (float* a, const float* b, const int n)
    assert (layout.buffer_offsets, layout.scalar_offsets, layout.explicit_size, layout.size) == ((0, 8), (16,), 20, 20)
    assert layout.hidden_offset is None and layout.dispatch_packet_offset is None
    assert (layout.alloc_size, layout.align) == (32, 16)
    blob = layout.pack([0x7F00_0000_1000, 0x7F00_0000_2000], [-3])
    assert blob == struct.pack("<QQi", 0x7F00_0000_1000, 0x7F00_0000_2000, -3) + bytes(12)


def test_natural_alignment():
    layout = kernarg_layout(1, "bqhdif")
    # ptr@0, char@8, i64@16, i16@24, f64@32, i32@40, f32@44
    assert layout.scalar_offsets == (8, 16, 24, 32, 40, 44) and layout.explicit_size == 48
    blob = layout.pack([0x10], [-1, 2**40, 7, 2.5, 9, 0.5])
    assert struct.unpack_from("<Qb7xqh6xdif", blob) == (0x10, -1, 2**40, 7, 2.5, 9, 0.5)


def test_descriptor_without_hidden_args():
    layout = kernarg_layout(2, "i", KernelDescriptor(kernarg_size=20))
    assert layout.size == 20 and layout.hidden_offset is None
    with pytest.raises(ValueError, match="needs 20 bytes but the kernel's kernarg_size is 16"):
        kernarg_layout(2, "i", KernelDescriptor(kernarg_size=16))
    with pytest.raises(ValueError, match="the kernel takes other arguments"):
        kernarg_layout(2, "i", KernelDescriptor(kernarg_size=64))
    with pytest.raises(NotImplementedError, match="code object v4"):
        kernarg_layout(2, "i", KernelDescriptor(kernarg_size=20 + 4 + 256), code_object_version=4)


def test_hidden_args_v5():
    # (float* a, char c, double d): explicit 24 bytes, hidden block at 24, kernarg_size 280
    layout = kernarg_layout(1, "bd", KernelDescriptor(kernarg_size=24 + HIDDEN_ARGS_SIZE_V5))
    assert (layout.hidden_offset, layout.size, layout.alloc_size) == (24, 280, 288)
    blob = layout.pack([0x1000], [3, 2.5], global_size=(4, 2), local_size=(64, 2))
    h = 24
    assert struct.unpack_from("<3I", blob, h) == (4, 2, 1)  # hidden_block_count_xyz (workgroups)
    assert struct.unpack_from("<3H", blob, h + 12) == (64, 2, 1)  # hidden_group_size_xyz
    assert struct.unpack_from("<3H", blob, h + 18) == (0, 0, 0)  # hidden_remainder_xyz
    assert struct.unpack_from("<3Q", blob, h + 40) == (0, 0, 0)  # hidden_global_offset_xyz
    assert struct.unpack_from("<H", blob, h + 64) == (2,)  # hidden_grid_dims
    assert blob[h + 66:] == bytes(len(blob) - h - 66)  # hostcall, heap, queue pointers: none


@pytest.mark.skipif(CLANG is None or READELF is None, reason="clang-19/llvm-readelf-19 not installed")
def test_hidden_args_match_clang_metadata(tmp_path):
    src = r"""
extern "C" __attribute__((global)) void hid(float* a, char c, double d) {
  const unsigned short* ia = (const unsigned short*)__builtin_amdgcn_implicitarg_ptr();
  a[__builtin_amdgcn_workitem_id_x()] = ia[6] + c + d;
}
"""
    (tmp_path / "h.hip").write_text(src)
    subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-nogpulib", "-nogpuinc", "-O3", "-c", "h.hip", "-o", "h.hsaco"], cwd=tmp_path, check=True)
    co = load_code_object((tmp_path / "h.hsaco").read_bytes(), "gfx942")
    k = co.kernel("hid")
    layout = kernarg_layout(1, "bd", k.descriptor, metadata=k.metadata)
    with pytest.raises(ValueError, match=r"places its arguments at \(offset, size\) \[\(0, 8\), \(8, 4\)"):
        kernarg_layout(1, "id", k.descriptor, metadata=k.metadata)
    notes = subprocess.run([READELF, "--notes", "h.hsaco"], cwd=tmp_path, capture_output=True, text=True).stdout
    offsets = {kind: int(off) for off, kind in re.findall(r"\.offset:\s+(\d+)\n\s+\.size:\s+\d+\n\s+"
                                                            r"\.value_kind:\s+(\w+)", notes)}
    blob = layout.pack([0xABC], [1, 1.0], global_size=(5, 3, 2), local_size=(32, 4, 2))
    assert offsets["hidden_block_count_x"] == layout.hidden_offset
    want = {"hidden_block_count_x": ("I", 5), "hidden_block_count_z": ("I", 2), "hidden_group_size_x": ("H", 32),
            "hidden_group_size_y": ("H", 4), "hidden_remainder_x": ("H", 0), "hidden_global_offset_x": ("Q", 0),
            "hidden_grid_dims": ("H", 3)}
    for kind, (fmt, value) in want.items():
        assert struct.unpack_from("<" + fmt, blob, offsets[kind]) == (value,), kind


def test_metadata_hidden_args_we_cannot_provide():
    hostcall = KernelMetadata("k", "k.kd", 24 + 256, 8, 0, 0, 64, 8, 4, 0, 1024,
                              (KernelArg(0, 8, "global_buffer", "global"), KernelArg(8, 4, "by_value"),
                               KernelArg(16, 4, "hidden_block_count_x"), KernelArg(96, 8, "hidden_hostcall_buffer")))
    with pytest.raises(NotImplementedError, match=r"needs the hidden arguments \['hidden_hostcall_buffer'\]"):
        kernarg_layout(1, "i", KernelDescriptor(kernarg_size=16 + 256), metadata=hostcall)
    misplaced = KernelMetadata("k", "k.kd", 16 + 256, 8, 0, 0, 64, 8, 4, 0, 1024,
                               (KernelArg(0, 8, "global_buffer", "global"), KernelArg(8, 4, "by_value"),
                                KernelArg(24, 4, "hidden_block_count_x")))
    with pytest.raises(ValueError, match="hidden_block_count_x is at offset 24 in the metadata, not at the code "
                                         "object v5 place 16"):
        kernarg_layout(1, "i", KernelDescriptor(kernarg_size=16 + 256), metadata=misplaced)


def test_dispatch_packet_tail():
    desc = KernelDescriptor(kernarg_size=20, kernel_code_properties=0b1010)  # dispatch_ptr | kernarg_segment_ptr
    layout = kernarg_layout(2, "i", desc)
    assert (layout.dispatch_packet_offset, layout.alloc_size) == (64, 128)
    blob = layout.pack([1, 2], [3], global_size=(8,), local_size=(32,), kernarg_address=0x7F00_0000_0000,
                       kernel_object=0x7F00_0010_0000, group_segment_size=512)
    pkt = aql.decode(blob[64:128])
    assert isinstance(pkt, aql.KernelDispatch)
    assert (pkt.workgroup_size, pkt.grid_size, pkt.group_segment_size) == ((32, 1, 1), (256, 1, 1), 512)
    assert (pkt.kernarg_address, pkt.kernel_object) == (0x7F00_0000_0000, 0x7F00_0010_0000)
    assert layout.dispatch_packet_address(0x7F00_0000_0000) == 0x7F00_0000_0040


def test_pack_errors():
    layout = kernarg_layout(2, "i")
    with pytest.raises(ValueError, match="1 buffer addresses given, the kernel takes 2"):
        layout.pack([1], [2])
    with pytest.raises(ValueError, match="0 scalar values given, the kernel takes 1"):
        layout.pack([1, 2])
    with pytest.raises(ValueError, match="does not fit the scalar type 'i'"):
        layout.pack([1, 2], [2**31])
    with pytest.raises(ValueError, match="format codes"):
        kernarg_layout(1, "x")
    with pytest.raises(ValueError, match="kernarg_address 0x1008 must be 16-byte aligned"):
        layout.pack([1, 2], [3], kernarg_address=0x1008)
