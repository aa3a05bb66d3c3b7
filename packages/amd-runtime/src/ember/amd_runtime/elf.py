"""AMDGPU code objects: an ELF64 reader, the 64-byte kernel descriptor, and the loadable image.

`load_code_object(blob, arch)` checks that `blob` is an AMDHSA code object (ELF64 little endian, e_machine
EM_AMDGPU 0xE0, OSABI 64, ABI version 2/3/4 = code object v4/v5/v6) for `arch` (the mach in e_flags & 0xFF: 0x4C
gfx942, 0x4F gfx950), lays its allocated contents out at their virtual addresses (an executable, ET_DYN, by its
PT_LOAD segments; a relocatable, ET_REL, section after section at each one's alignment), applies the relocations
that do not depend on where the image is loaded (PC-relative: REL32*, REL64) and keeps the others (ABS*, RELATIVE64)
for `CodeObject.relocated(base)`. Each kernel is found by its `<name>.kd` symbol; its descriptor is decoded into a
`KernelDescriptor` and its first instruction is at `descriptor offset + kernel_code_entry_byte_offset` in the image.
The NT_AMDGPU_METADATA note (msgpack), when there is one, gives each kernel's `KernelMetadata` (register counts,
the argument list with the hidden arguments).

    co = load_code_object(Path("k.hsaco").read_bytes(), arch="gfx942")
    k = co.kernels["add"]            # Kernel(name, descriptor, descriptor_offset, entry_offset)
    k.descriptor.kernarg_size, k.descriptor.user_sgpr_count, co.image[k.entry_offset:]

Field layouts follow LLVM's `llvm/Support/AMDHSAKernelDescriptor.h` and `llvm/BinaryFormat/ELF.h`.
`write_code_object` builds a minimal code object from instruction bytes and descriptors (tests, the interpreter's
hand-written kernels).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

# ELF constants (the generic ABI plus the AMDGPU additions)
ELF_MAGIC = b"\x7fELF"
ELFCLASS64, ELFDATA2LSB = 2, 1
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
EM_AMDGPU = 0xE0
ELFOSABI_AMDGPU_HSA = 64
# EI_ABIVERSION -> code object version (ELFABIVERSION_AMDGPU_HSA_V4/V5/V6)
ABI_VERSIONS: MappingProxyType[int, int] = MappingProxyType({2: 4, 3: 5, 4: 6})
PT_LOAD = 1
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 1, 2, 3, 4, 8, 9, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
SHN_UNDEF, SHN_ABS = 0, 0xFFF1

EF_AMDGPU_MACH = 0xFF
EF_AMDGPU_FEATURE_XNACK_V4, EF_AMDGPU_FEATURE_SRAMECC_V4 = 0x300, 0xC00
_FEATURE_SETTING = ("unsupported", "any", "off", "on")  # the V4 two-bit encoding of xnack and sramecc

# e_flags & EF_AMDGPU_MACH -> the processor (EF_AMDGPU_MACH_AMDGCN_*; 0x4F is gfx950 from LLVM 20 on)
MACHS: MappingProxyType[int, str] = MappingProxyType({
    0x2C: "gfx900", 0x2F: "gfx906", 0x30: "gfx908", 0x3F: "gfx90a", 0x40: "gfx940", 0x4B: "gfx941", 0x4C: "gfx942",
    0x4F: "gfx950", 0x51: "gfx9-generic", 0x36: "gfx1030", 0x41: "gfx1100", 0x46: "gfx1101", 0x47: "gfx1102",
    0x48: "gfx1200", 0x4E: "gfx1201",
})
ARCH_MACH: MappingProxyType[str, int] = MappingProxyType({arch: mach for mach, arch in MACHS.items()})

# relocation types (llvm/BinaryFormat/ELFRelocs/AMDGPU.def)
R_AMDGPU_NONE, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64 = 0, 1, 2, 3
R_AMDGPU_REL32, R_AMDGPU_REL64, R_AMDGPU_ABS32 = 4, 5, 6
R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI, R_AMDGPU_RELATIVE64 = 10, 11, 13
_PC_RELATIVE = (R_AMDGPU_REL32, R_AMDGPU_REL64, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI)
_BASE_DEPENDENT = (R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_ABS32, R_AMDGPU_RELATIVE64)

KERNEL_DESCRIPTOR_SIZE = 64
CODE_ALIGN = 256  # COMPUTE_PGM_LO/HI hold the entry address >> 8
DESCRIPTOR_ALIGN = 64  # the AQL packet's kernel_object must be 64-byte aligned
MAX_IMAGE_SIZE = 1 << 30

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
_REL = struct.Struct("<QQ")
_KD = struct.Struct("<III4sq20sIIIHH4s")
assert _KD.size == KERNEL_DESCRIPTOR_SIZE


def _bits(value: int, shift: int, width: int) -> int:
    return (value >> shift) & ((1 << width) - 1)


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte `kernel_descriptor_t` that the AQL packet's kernel_object (and the PM4 path) points at.

    The raw fields are stored; the properties decode the bit fields of compute_pgm_rsrc1/2/3 and
    kernel_code_properties (names as in AMDHSAKernelDescriptor.h, without the prefixes)."""

    group_segment_fixed_size: int = 0
    private_segment_fixed_size: int = 0
    kernarg_size: int = 0
    kernel_code_entry_byte_offset: int = 0
    compute_pgm_rsrc3: int = 0
    compute_pgm_rsrc1: int = 0
    compute_pgm_rsrc2: int = 0
    kernel_code_properties: int = 0
    kernarg_preload: int = 0

    SIZE: ClassVar[int] = KERNEL_DESCRIPTOR_SIZE

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> KernelDescriptor:
        """Decode the first 64 bytes of `data`; reserved bytes must be zero (they are in every valid descriptor)."""
        if len(data) < KERNEL_DESCRIPTOR_SIZE:
            raise ValueError(f"kernel descriptor: need {KERNEL_DESCRIPTOR_SIZE} bytes, got {len(data)}")
        (group, private, kernarg, res0, entry, res1, rsrc3, rsrc1, rsrc2, kcp, preload,
         res3) = _KD.unpack_from(bytes(data[:KERNEL_DESCRIPTOR_SIZE]))
        if any(res0 + res1 + res3):
            raise ValueError("kernel descriptor: reserved bytes are not zero (not a kernel descriptor?)")
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, kcp, preload)

    def to_bytes(self) -> bytes:
        """The 64-byte encoding (inverse of `from_bytes`)."""
        return _KD.pack(self.group_segment_fixed_size, self.private_segment_fixed_size, self.kernarg_size,
                        bytes(4), self.kernel_code_entry_byte_offset, bytes(20), self.compute_pgm_rsrc3,
                        self.compute_pgm_rsrc1, self.compute_pgm_rsrc2, self.kernel_code_properties,
                        self.kernarg_preload, bytes(4))

    # compute_pgm_rsrc1
    @property
    def granulated_workitem_vgpr_count(self) -> int:
        """rsrc1[5:0]: VGPR blocks - 1 (see `vgpr_count`)."""
        return _bits(self.compute_pgm_rsrc1, 0, 6)

    @property
    def granulated_wavefront_sgpr_count(self) -> int:
        """rsrc1[9:6]: SGPR blocks of 8 - 1 on gfx9 (reserved, 0, on gfx10+)."""
        return _bits(self.compute_pgm_rsrc1, 6, 4)

    @property
    def priority(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 10, 2)

    @property
    def float_round_mode_32(self) -> int:
        """rsrc1[13:12]: 0 nearest even, 1 +inf, 2 -inf, 3 toward zero."""
        return _bits(self.compute_pgm_rsrc1, 12, 2)

    @property
    def float_round_mode_16_64(self) -> int:
        """rsrc1[15:14], the same encoding as `float_round_mode_32`."""
        return _bits(self.compute_pgm_rsrc1, 14, 2)

    @property
    def float_denorm_mode_32(self) -> int:
        """rsrc1[17:16]: 0 flush source and destination, 1 flush destination, 2 flush source, 3 flush none."""
        return _bits(self.compute_pgm_rsrc1, 16, 2)

    @property
    def float_denorm_mode_16_64(self) -> int:
        """rsrc1[19:18], the same encoding as `float_denorm_mode_32`."""
        return _bits(self.compute_pgm_rsrc1, 18, 2)

    @property
    def priv(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 20, 1))

    @property
    def enable_dx10_clamp(self) -> bool:
        """rsrc1 b21 (gfx6-gfx11): clamp NaN to 0 in clamped results."""
        return bool(_bits(self.compute_pgm_rsrc1, 21, 1))

    @property
    def debug_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 22, 1))

    @property
    def enable_ieee_mode(self) -> bool:
        """rsrc1 b23 (gfx6-gfx11): IEEE NaN handling in min/max (quiet signaling NaNs)."""
        return bool(_bits(self.compute_pgm_rsrc1, 23, 1))

    @property
    def fp16_ovfl(self) -> bool:
        """rsrc1 b26 (gfx9+): f16 overflow clamps to max finite instead of inf."""
        return bool(_bits(self.compute_pgm_rsrc1, 26, 1))

    # compute_pgm_rsrc2
    @property
    def enable_private_segment(self) -> bool:
        """rsrc2 b0 (SCRATCH_EN): the kernel uses scratch memory."""
        return bool(_bits(self.compute_pgm_rsrc2, 0, 1))

    @property
    def user_sgpr_count(self) -> int:
        """rsrc2[5:1]: the SGPRs s[0:n) that the dispatch preloads (kernarg pointer etc., see `user_sgprs`)."""
        return _bits(self.compute_pgm_rsrc2, 1, 5)

    @property
    def enable_trap_handler(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 6, 1))

    @property
    def enable_sgpr_workgroup_id_x(self) -> bool:
        """rsrc2 b7 (TGID_X_EN): the workgroup id x is placed in the SGPR after the user SGPRs."""
        return bool(_bits(self.compute_pgm_rsrc2, 7, 1))

    @property
    def enable_sgpr_workgroup_id_y(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 8, 1))

    @property
    def enable_sgpr_workgroup_id_z(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 9, 1))

    @property
    def enable_sgpr_workgroup_info(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 10, 1))

    @property
    def enable_vgpr_workitem_id(self) -> int:
        """rsrc2[12:11] (TIDIG_COMP_CNT): 0 = v0 holds x, 1 = x and y, 2 = x, y and z (on gfx90a+ packed in v0 as
        z<<20 | y<<10 | x; earlier in v0, v1, v2)."""
        return _bits(self.compute_pgm_rsrc2, 11, 2)

    @property
    def enable_exception_address_watch(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 13, 1))

    @property
    def enable_exception_memory(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 14, 1))

    @property
    def granulated_lds_size(self) -> int:
        """rsrc2[23:15]: LDS blocks; the compiler leaves it 0 (the dispatch sets it from group_segment_size)."""
        return _bits(self.compute_pgm_rsrc2, 15, 9)

    @property
    def lds_size(self) -> int:
        """Bytes of LDS in rsrc2 (gfx9 granule: 128 dwords = 512 bytes)."""
        return self.granulated_lds_size * 512

    @property
    def enable_exceptions(self) -> int:
        """rsrc2[30:24]: IEEE invalid, denormal source, divide by zero, overflow, underflow, inexact, int div 0."""
        return _bits(self.compute_pgm_rsrc2, 24, 7)

    # compute_pgm_rsrc3 (gfx90a, gfx942, gfx950)
    @property
    def accum_offset(self) -> int:
        """The first AccVGPR's index in the unified VGPR file (rsrc3[5:0] = accum_offset/4 - 1), gfx90a+."""
        return (_bits(self.compute_pgm_rsrc3, 0, 6) + 1) * 4

    @property
    def tg_split(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc3, 16, 1))

    # kernel_code_properties
    @property
    def enable_sgpr_private_segment_buffer(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 0, 1))

    @property
    def enable_sgpr_dispatch_ptr(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 1, 1))

    @property
    def enable_sgpr_queue_ptr(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 2, 1))

    @property
    def enable_sgpr_kernarg_segment_ptr(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 3, 1))

    @property
    def enable_sgpr_dispatch_id(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 4, 1))

    @property
    def enable_sgpr_flat_scratch_init(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 5, 1))

    @property
    def enable_sgpr_private_segment_size(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 6, 1))

    @property
    def enable_wavefront_size32(self) -> bool:
        """kernel_code_properties b10 (gfx10+); gfx9 is always wave64."""
        return bool(_bits(self.kernel_code_properties, 10, 1))

    @property
    def uses_dynamic_stack(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 11, 1))

    @property
    def kernarg_preload_length(self) -> int:
        """kernarg_preload[6:0]: dwords of kernargs preloaded into SGPRs after the user SGPRs (gfx940+)."""
        return _bits(self.kernarg_preload, 0, 7)

    @property
    def kernarg_preload_offset(self) -> int:
        """kernarg_preload[15:7]: the dword offset in the kernarg segment where the preload starts."""
        return _bits(self.kernarg_preload, 7, 9)

    # derived
    @property
    def wavefront_size(self) -> int:
        return 32 if self.enable_wavefront_size32 else 64

    def vgpr_count(self, arch: str = "gfx942") -> int:
        """VGPRs allocated per work-item (including AccVGPRs on gfx90a/gfx94x/gfx950, whose unified file has an
        encoding granule of 8; other gfx9 wave64 targets use 4)."""
        granule = 8 if arch in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950") else 4
        return (self.granulated_workitem_vgpr_count + 1) * granule

    @property
    def sgpr_count(self) -> int:
        """SGPRs allocated per wave on gfx9 (blocks of 8, VCC/FLAT_SCRATCH/XNACK included)."""
        return (self.granulated_wavefront_sgpr_count + 1) * 8

    @property
    def workgroup_id_sgprs(self) -> tuple[int, ...]:
        """The SGPR indices that receive the workgroup ids x, y, z (those enabled), right after the user SGPRs."""
        enabled = (self.enable_sgpr_workgroup_id_x, self.enable_sgpr_workgroup_id_y, self.enable_sgpr_workgroup_id_z)
        return tuple(range(self.user_sgpr_count, self.user_sgpr_count + sum(enabled)))

    def user_sgprs(self) -> list[tuple[str, int]]:
        """The user SGPRs in AMDHSA order as (name, dword count): private_segment_buffer (4), dispatch_ptr (2),
        queue_ptr (2), kernarg_segment_ptr (2), dispatch_id (2), flat_scratch_init (2), private_segment_size (1),
        then the preloaded kernarg dwords. Their total is checked against `user_sgpr_count` by `validate`."""
        order = (("private_segment_buffer", 4, self.enable_sgpr_private_segment_buffer),
                 ("dispatch_ptr", 2, self.enable_sgpr_dispatch_ptr), ("queue_ptr", 2, self.enable_sgpr_queue_ptr),
                 ("kernarg_segment_ptr", 2, self.enable_sgpr_kernarg_segment_ptr),
                 ("dispatch_id", 2, self.enable_sgpr_dispatch_id),
                 ("flat_scratch_init", 2, self.enable_sgpr_flat_scratch_init),
                 ("private_segment_size", 1, self.enable_sgpr_private_segment_size))
        sgprs = [(name, n) for name, n, on in order if on]
        if self.kernarg_preload_length:
            sgprs.append(("kernarg_preload", self.kernarg_preload_length))
        return sgprs

    def validate(self, name: str = "kernel") -> None:
        """Raise ValueError when the descriptor cannot be dispatched as is: wave32 on gfx9, or a user SGPR count
        that does not match the enabled user SGPRs (the hardware loads rsrc2's count, the kernel expects the list)."""
        if self.enable_wavefront_size32:
            raise ValueError(f"{name}: the kernel descriptor asks for wave32, but gfx9 (gfx942/gfx950) runs wave64")
        needed = sum(n for _, n in self.user_sgprs())
        if needed != self.user_sgpr_count:
            raise ValueError(f"{name}: compute_pgm_rsrc2 loads {self.user_sgpr_count} user SGPRs but "
                             f"kernel_code_properties enables {needed} ({self.user_sgprs()})")


@dataclass(frozen=True)
class Section:
    """One ELF section header (name resolved)."""

    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


@dataclass(frozen=True)
class Symbol:
    """One symbol table entry; `value` is an address in the laid-out image (for a relocatable object, the section's
    place is added), `section` its section index (0 undefined, 0xFFF1 absolute)."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    section: int


@dataclass(frozen=True)
class Relocation:
    """A relocation the loader applies at `offset` in the image: its `type` (R_AMDGPU_*), the symbol's address in
    the image (`symbol_value`, 0 for RELATIVE64), the `addend` and the symbol's name (for messages)."""

    offset: int
    type: int
    symbol_value: int
    addend: int
    symbol: str = ""

    def value(self, base: int) -> int:
        """The value written when the image is loaded at `base` (S, P and B all shifted by it)."""
        s, p = base + self.symbol_value, base + self.offset
        if self.type == R_AMDGPU_RELATIVE64:
            return base + self.addend
        if self.type in _PC_RELATIVE:
            return s + self.addend - p
        return s + self.addend


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument of the code object metadata (`.args`): its byte offset and size in the kernarg segment,
    its `value_kind` (global_buffer, by_value, hidden_block_count_x, ...) and, for pointers, the address space."""

    offset: int
    size: int
    value_kind: str
    address_space: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class KernelMetadata:
    """A kernel's entry of the NT_AMDGPU_METADATA note (code object v3+ msgpack `amdhsa.kernels`): what the compiler
    says about the kernel besides its descriptor (register counts, the argument list with the hidden arguments)."""

    name: str
    symbol: str
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int
    agpr_count: int
    max_flat_workgroup_size: int
    args: tuple[KernelArg, ...]

    @property
    def hidden_args(self) -> tuple[KernelArg, ...]:
        """The implicit arguments (value kinds hidden_*) the compiler placed after the explicit ones."""
        return tuple(a for a in self.args if a.value_kind.startswith("hidden_"))


@dataclass(frozen=True)
class Kernel:
    """A kernel of a code object: its descriptor, where the descriptor lies in the image (the AQL kernel_object is
    image base + descriptor_offset), where its first instruction is (COMPUTE_PGM_LO/HI from image base +
    entry_offset), and its metadata when the code object has the note (None otherwise)."""

    name: str
    descriptor: KernelDescriptor
    descriptor_offset: int
    entry_offset: int
    metadata: KernelMetadata | None = None


@dataclass(frozen=True)
class CodeObject:
    """A loaded AMDGPU code object. `image` is the memory image from virtual address 0 (copy it to a 256-byte
    aligned GPU buffer); `text_offset`/`text` are the `.text` section's place and bytes in it; `relocations` are the
    ones that depend on the load address (`relocated(base)` applies them)."""

    arch: str
    code_object_version: int
    e_flags: int
    image: bytes
    text_offset: int
    text_size: int
    kernels: MappingProxyType[str, Kernel]
    sections: tuple[Section, ...]
    symbols: tuple[Symbol, ...]
    relocations: tuple[Relocation, ...] = field(default=())

    @property
    def text(self) -> bytes:
        """The instructions (the `.text` section as laid out in the image)."""
        return self.image[self.text_offset:self.text_offset + self.text_size]

    @property
    def xnack(self) -> str:
        """The XNACK setting the code was built for: 'unsupported', 'any', 'off' or 'on'."""
        return _FEATURE_SETTING[(self.e_flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8]

    @property
    def sramecc(self) -> str:
        """The SRAMECC setting the code was built for: 'unsupported', 'any', 'off' or 'on'."""
        return _FEATURE_SETTING[(self.e_flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10]

    def kernel(self, name: str) -> Kernel:
        """The kernel called `name` (KeyError naming the kernels there are)."""
        try:
            return self.kernels[name]
        except KeyError:
            raise KeyError(f"code object has no kernel {name!r}; it has {sorted(self.kernels)}") from None

    def relocated(self, base: int) -> bytes:
        """The image with the address-dependent relocations applied for a load at GPU address `base`."""
        if base % CODE_ALIGN:
            raise ValueError(f"code object base {base:#x} must be {CODE_ALIGN}-byte aligned (COMPUTE_PGM_LO >> 8)")
        image = bytearray(self.image)
        for rel in self.relocations:
            _write_reloc(image, rel, rel.value(base))
        return bytes(image)


def _write_reloc(image: bytearray, rel: Relocation, value: int) -> None:
    if rel.type in (R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_RELATIVE64):
        struct.pack_into("<Q", image, rel.offset, value & (2**64 - 1))
    elif rel.type in (R_AMDGPU_ABS32_LO, R_AMDGPU_REL32_LO, R_AMDGPU_ABS32, R_AMDGPU_REL32):
        struct.pack_into("<I", image, rel.offset, value & 0xFFFFFFFF)
    elif rel.type in (R_AMDGPU_ABS32_HI, R_AMDGPU_REL32_HI):
        struct.pack_into("<I", image, rel.offset, (value >> 32) & 0xFFFFFFFF)
    else:
        raise AssertionError(f"relocation type {rel.type} reached _write_reloc")


class _Reader:
    """The parsed headers of an ELF64 file (no AMDGPU meaning yet)."""

    def __init__(self, blob: bytes):
        self.blob = blob
        if len(blob) < _EHDR.size or blob[:4] != ELF_MAGIC:
            raise ValueError(f"code object: not an ELF file (starts with {blob[:4]!r}, {len(blob)} bytes)")
        ident = blob[:16]
        if ident[4] != ELFCLASS64 or ident[5] != ELFDATA2LSB:
            raise ValueError(f"code object: not a little-endian ELF64 file (class {ident[4]}, data {ident[5]})")
        (_, self.e_type, self.e_machine, _, _, self.e_phoff, self.e_shoff, self.e_flags, _, phentsize, phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack_from(blob)
        self.osabi, self.abiversion = ident[7], ident[8]
        if shnum and shentsize != _SHDR.size or phnum and phentsize != _PHDR.size:
            raise ValueError(f"code object: bad header entry sizes (section {shentsize}, program {phentsize})")
        raw = [_SHDR.unpack_from(self._slice(self.e_shoff + i * _SHDR.size, _SHDR.size, "section header"))
               for i in range(shnum)]
        self.phdrs = [_PHDR.unpack_from(self._slice(self.e_phoff + i * _PHDR.size, _PHDR.size, "program header"))
                      for i in range(phnum)]
        names = self._data_of(raw[shstrndx]) if 0 < shstrndx < len(raw) else b""
        self.sections = tuple(Section(i, _cstr(names, h[0]) if names else "", *h[1:]) for i, h in enumerate(raw))

    def _slice(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or offset + size > len(self.blob):
            raise ValueError(f"code object: {what} at {offset:#x}+{size:#x} is past the end of the file "
                             f"({len(self.blob):#x} bytes); truncated?")
        return self.blob[offset:offset + size]

    def _data_of(self, hdr: tuple[int, ...]) -> bytes:
        sh_type, sh_offset, sh_size = hdr[1], hdr[4], hdr[5]
        return b"" if sh_type == SHT_NOBITS else self._slice(sh_offset, sh_size, "section")

    def data(self, sec: Section) -> bytes:
        return b"" if sec.type == SHT_NOBITS else self._slice(sec.offset, sec.size, f"section {sec.name}")


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode(errors="replace")


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a if a > 1 else x


def _check_header(elf: _Reader, arch: str | None) -> tuple[str, int]:
    if elf.e_machine != EM_AMDGPU:
        raise ValueError(f"code object: e_machine is {elf.e_machine:#x}, not EM_AMDGPU ({EM_AMDGPU:#x}); "
                         "not an AMDGPU code object")
    if elf.osabi != ELFOSABI_AMDGPU_HSA:
        raise ValueError(f"code object: OS ABI is {elf.osabi}, not AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})")
    if elf.abiversion not in ABI_VERSIONS:
        raise ValueError(f"code object: ABI version {elf.abiversion} is not supported; accepted: "
                         f"{', '.join(f'{a} (code object v{v})' for a, v in ABI_VERSIONS.items())}")
    if elf.e_type not in (ET_DYN, ET_REL):
        raise ValueError(f"code object: ELF type {elf.e_type} is neither a shared object (3) nor relocatable (1)")
    mach = elf.e_flags & EF_AMDGPU_MACH
    if mach not in MACHS:
        raise ValueError(f"code object: unknown AMDGPU mach {mach:#x} in e_flags {elf.e_flags:#x}; known: "
                         f"{', '.join(f'{m:#x} {a}' for m, a in sorted(MACHS.items()))}")
    co_arch = MACHS[mach]
    if arch is not None and co_arch != arch:
        raise ValueError(f"code object: built for {co_arch} (mach {mach:#x}), but the device is {arch}; "
                         f"recompile for {arch}")
    return co_arch, ABI_VERSIONS[elf.abiversion]


def _layout(elf: _Reader) -> tuple[bytearray, dict[int, int]]:
    """The memory image and each section's address in it. An executable is laid out by its PT_LOAD segments (the
    sections keep their sh_addr); a relocatable object's allocated sections are placed one after another."""
    if elf.e_type == ET_DYN:
        loads = [p for p in elf.phdrs if p[0] == PT_LOAD]
        if not loads:
            raise ValueError("code object: a shared object without PT_LOAD segments")
        image = bytearray(_image_size(max(p[3] + p[6] for p in loads)))  # p_vaddr + p_memsz
        for _, _, p_offset, p_vaddr, _, p_filesz, p_memsz, _ in loads:
            if p_filesz > p_memsz:
                raise ValueError(f"code object: segment at {p_vaddr:#x} has filesz {p_filesz:#x} > memsz {p_memsz:#x}")
            image[p_vaddr:p_vaddr + p_filesz] = elf._slice(p_offset, p_filesz, "segment")
        return image, {s.index: s.addr for s in elf.sections}
    addrs: dict[int, int] = {}
    end = 0
    for sec in elf.sections:
        if sec.flags & SHF_ALLOC and sec.size:
            # code at the 256-byte alignment COMPUTE_PGM_LO needs, whatever the section asked for
            addrs[sec.index] = end = _align(end, max(sec.addralign, CODE_ALIGN if sec.flags & SHF_EXECINSTR else 1))
            end += sec.size
    image = bytearray(_image_size(end))
    for index, addr in addrs.items():
        sec = elf.sections[index]
        image[addr:addr + sec.size] = elf.data(sec) if sec.type != SHT_NOBITS else bytes(sec.size)
    return image, addrs


def _image_size(size: int) -> int:
    if size > MAX_IMAGE_SIZE:
        raise ValueError(f"code object: the loaded image would be {size:#x} bytes, more than {MAX_IMAGE_SIZE:#x} "
                         "(corrupt segment addresses?)")
    return size


def _symbols(elf: _Reader, addrs: dict[int, int]) -> tuple[Symbol, ...]:
    """The symbols of .symtab (or .dynsym when stripped), with values as image addresses."""
    table = next((s for s in elf.sections if s.type == SHT_SYMTAB), None) or \
        next((s for s in elf.sections if s.type == SHT_DYNSYM), None)
    if table is None:
        return ()
    return _read_symtab(elf, table, addrs)


def _read_symtab(elf: _Reader, table: Section, addrs: dict[int, int]) -> tuple[Symbol, ...]:
    if not 0 < table.link < len(elf.sections):
        raise ValueError(f"code object: symbol table {table.name} links to missing string table {table.link}")
    strings, data = elf.data(elf.sections[table.link]), elf.data(table)
    out = []
    for off in range(0, len(data) - _SYM.size + 1, _SYM.size):
        st_name, st_info, _, st_shndx, st_value, st_size = _SYM.unpack_from(data, off)
        if elf.e_type == ET_REL and st_shndx not in (SHN_UNDEF, SHN_ABS) and st_shndx < 0xFF00:
            st_value += addrs.get(st_shndx, 0)
        out.append(Symbol(_cstr(strings, st_name), st_value, st_size, st_info & 0xF, st_info >> 4, st_shndx))
    return tuple(out)


def _relocate(elf: _Reader, image: bytearray, addrs: dict[int, int]) -> tuple[Relocation, ...]:
    """Apply the PC-relative relocations to `image`; return the ones that depend on the load address."""
    pending: list[Relocation] = []
    for sec in elf.sections:
        if sec.type not in (SHT_RELA, SHT_REL):
            continue
        if elf.e_type == ET_REL and not (elf.sections[sec.info].flags & SHF_ALLOC if sec.info < len(elf.sections)
                                         else False):
            continue  # relocations of debug info and other non-loaded sections
        symbols = _read_symtab(elf, elf.sections[sec.link], addrs) if sec.link else ()
        target = addrs.get(sec.info, 0) if elf.e_type == ET_REL else 0
        data, entry = elf.data(sec), _RELA if sec.type == SHT_RELA else _REL
        for off in range(0, len(data) - entry.size + 1, entry.size):
            r_offset, r_info, *addend = entry.unpack_from(data, off)
            rtype, rsym = r_info & 0xFFFFFFFF, r_info >> 32
            offset = target + r_offset
            if rtype == R_AMDGPU_NONE:
                continue
            if rsym >= len(symbols) and rtype != R_AMDGPU_RELATIVE64:
                raise ValueError(f"code object: relocation at {offset:#x} names symbol {rsym} of {len(symbols)}")
            sym = symbols[rsym] if rsym < len(symbols) else Symbol("", 0, 0, 0, 0, SHN_ABS)
            if rsym and sym.section == SHN_UNDEF:
                raise ValueError(f"code object: relocation at {offset:#x} refers to the undefined symbol "
                                 f"{sym.name!r}; link the code object (ld.lld -shared) with everything it uses")
            width = 8 if rtype in (R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_RELATIVE64) else 4
            if offset + width > len(image):
                raise ValueError(f"code object: relocation at {offset:#x} is outside the image ({len(image):#x})")
            a = addend[0] if addend else int.from_bytes(image[offset:offset + width], "little", signed=True)
            rel = Relocation(offset, rtype, sym.value, a, sym.name)
            if rtype in _PC_RELATIVE:
                _write_reloc(image, rel, rel.value(0))
            elif rtype in _BASE_DEPENDENT:
                pending.append(rel)
            else:
                raise NotImplementedError(f"code object: relocation type {rtype} at {offset:#x} (symbol "
                                          f"{sym.name!r}) is not supported (GOT relocations need a GOT)")
    return tuple(pending)


def _msgpack(data: bytes, pos: int = 0) -> tuple[object, int]:
    """One msgpack value at `data[pos]` and the position after it (the subset the AMDGPU metadata uses: maps,
    arrays, strings, binary, ints, bools, nil, floats)."""
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
        n, pos = (b & 0x0F, pos) if b <= 0x8F else _msgpack_len(data, pos, 2 if b == 0xDE else 4)
        out: dict[object, object] = {}
        for _ in range(n):
            key, pos = _msgpack(data, pos)
            out[key], pos = _msgpack(data, pos)
        return out, pos
    if 0x90 <= b <= 0x9F or b in (0xDC, 0xDD):
        n, pos = (b & 0x0F, pos) if b <= 0x9F else _msgpack_len(data, pos, 2 if b == 0xDC else 4)
        items = []
        for _ in range(n):
            item, pos = _msgpack(data, pos)
            items.append(item)
        return items, pos
    if 0xA0 <= b <= 0xBF or b in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}.get(b, 0)
        n, pos = (b & 0x1F, pos) if not width else _msgpack_len(data, pos, width)
        raw = data[pos:pos + n]
        return (raw if b in (0xC4, 0xC5, 0xC6) else raw.decode(errors="replace")), pos + n
    fixed = {0xC0: (0, None), 0xC2: (0, False), 0xC3: (0, True), 0xCC: (1, "<B"), 0xCD: (2, ">H"), 0xCE: (4, ">I"),
             0xCF: (8, ">Q"), 0xD0: (1, ">b"), 0xD1: (2, ">h"), 0xD2: (4, ">i"), 0xD3: (8, ">q"), 0xCA: (4, ">f"),
             0xCB: (8, ">d")}
    if b not in fixed:
        raise ValueError(f"code object metadata: msgpack type {b:#04x} at byte {pos - 1} is not supported")
    width, fmt = fixed[b]
    if not isinstance(fmt, str):
        return fmt, pos
    return struct.unpack_from(fmt, data, pos)[0], pos + width


def _msgpack_len(data: bytes, pos: int, width: int) -> tuple[int, int]:
    return int.from_bytes(data[pos:pos + width], "big"), pos + width


NT_AMDGPU_METADATA = 32
SHT_NOTE = 7


def _metadata(elf: _Reader) -> dict[str, KernelMetadata]:
    """The kernels' metadata from the AMDGPU NT_AMDGPU_METADATA note, by kernel name ({} without the note)."""
    out: dict[str, KernelMetadata] = {}
    for sec in elf.sections:
        if sec.type != SHT_NOTE:
            continue
        data, pos = elf.data(sec), 0
        while pos + 12 <= len(data):
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            desc_at = pos + 12 + _align(namesz, 4)
            desc = data[desc_at:desc_at + descsz]
            pos = desc_at + _align(descsz, 4)
            if name != b"AMDGPU" or ntype != NT_AMDGPU_METADATA:
                continue
            try:
                root, _ = _msgpack(desc)
            except (IndexError, struct.error) as e:
                raise ValueError(f"code object: the AMDGPU metadata note is truncated ({e})") from None
            kernels = root.get("amdhsa.kernels", []) if isinstance(root, dict) else []
            for k in kernels if isinstance(kernels, list) else []:
                if isinstance(k, dict) and isinstance(k.get(".name"), str):
                    out[k[".name"]] = _kernel_metadata(k)
    return out


def _kernel_metadata(k: dict[object, object]) -> KernelMetadata:
    def num(key: str) -> int:
        v = k.get(key, 0)
        return v if isinstance(v, int) else 0

    args = []
    for a in k.get(".args", []) or []:  # type: ignore[union-attr]
        if isinstance(a, dict):
            args.append(KernelArg(int(a.get(".offset", 0)), int(a.get(".size", 0)), str(a.get(".value_kind", "")),
                                  a.get(".address_space"), a.get(".name")))
    return KernelMetadata(str(k[".name"]), str(k.get(".symbol", "")), num(".kernarg_segment_size"),
                          num(".kernarg_segment_align"), num(".group_segment_fixed_size"),
                          num(".private_segment_fixed_size"), num(".wavefront_size"), num(".sgpr_count"),
                          num(".vgpr_count"), num(".agpr_count"), num(".max_flat_workgroup_size"), tuple(args))


def load_code_object(blob: bytes, arch: str | None = None) -> CodeObject:
    """Parse and lay out an AMDGPU code object (see the module docstring). `arch` ("gfx942", "gfx950"), when given,
    must match the code object's mach. A bad file, machine, ABI, arch or descriptor raises ValueError."""
    blob = bytes(blob)
    elf = _Reader(blob)
    co_arch, version = _check_header(elf, arch)
    image, addrs = _layout(elf)
    symbols = _symbols(elf, addrs)
    relocations = _relocate(elf, image, addrs)
    metadata = _metadata(elf)
    kernels: dict[str, Kernel] = {}
    for sym in symbols:
        if not sym.name.endswith(".kd") or sym.section == SHN_UNDEF:
            continue
        name = sym.name[:-3]
        if sym.value % DESCRIPTOR_ALIGN or sym.value + KERNEL_DESCRIPTOR_SIZE > len(image):
            raise ValueError(f"code object: descriptor {sym.name} at {sym.value:#x} is not 64-byte aligned inside "
                             f"the image ({len(image):#x} bytes)")
        desc = KernelDescriptor.from_bytes(image[sym.value:sym.value + KERNEL_DESCRIPTOR_SIZE])
        entry = sym.value + desc.kernel_code_entry_byte_offset
        if entry % CODE_ALIGN or not 0 <= entry < len(image):
            raise ValueError(f"code object: kernel {name} starts at {entry:#x}, which is not a {CODE_ALIGN}-byte "
                             f"aligned address inside the image ({len(image):#x} bytes)")
        kernels[name] = Kernel(name, desc, sym.value, entry, metadata.get(name))
    text = next((s for s in elf.sections if s.name == ".text"), None)
    text_offset = (addrs.get(text.index, text.addr) if text is not None else 0)
    return CodeObject(co_arch, version, elf.e_flags, bytes(image), text_offset, text.size if text else 0,
                      MappingProxyType(kernels), elf.sections, symbols, relocations)


def write_code_object(text: bytes, kernels: dict[str, tuple[KernelDescriptor, int]], arch: str = "gfx942",
                      code_object_version: int = 5, e_flags_features: int = 0x500) -> bytes:
    """A minimal AMDGPU code object (ET_DYN, one read-only PT_LOAD with .rodata then .text, and .symtab) that
    `load_code_object` and the loaders of the HSA runtime read.

    `text` is the instruction bytes; `kernels` maps each kernel name to (descriptor, offset of its first instruction
    in `text`, a multiple of 256). Each descriptor's kernel_code_entry_byte_offset is filled in. The default features
    are xnack any, sramecc any (0x500), what clang writes for gfx942."""
    if arch not in ARCH_MACH:
        raise ValueError(f"write_code_object: unknown arch {arch!r}; known: {sorted(ARCH_MACH)}")
    abiversion = {v: a for a, v in ABI_VERSIONS.items()}.get(code_object_version)
    if abiversion is None:
        raise ValueError(f"write_code_object: code object version {code_object_version} not in 4, 5, 6")
    names = list(kernels)
    rodata_off = 0x100  # after the ELF header and the program header
    text_off = _align(rodata_off + KERNEL_DESCRIPTOR_SIZE * len(names), CODE_ALIGN)
    rodata = bytearray()
    for i, name in enumerate(names):
        desc, entry = kernels[name]
        if entry % CODE_ALIGN or not 0 <= entry < max(len(text), 1):
            raise ValueError(f"write_code_object: kernel {name} entry {entry:#x} must be a multiple of {CODE_ALIGN} "
                             f"inside the text ({len(text)} bytes)")
        kd_addr = rodata_off + i * KERNEL_DESCRIPTOR_SIZE
        fields = {**desc.__dict__, "kernel_code_entry_byte_offset": text_off + entry - kd_addr}
        rodata += KernelDescriptor(**fields).to_bytes()
    shstrtab = b"\0.rodata\0.text\0.symtab\0.strtab\0.shstrtab\0"
    strtab = bytearray(b"\0")
    symtab = bytearray(_SYM.size)  # the null symbol
    for i, name in enumerate(names):
        desc, entry = kernels[name]
        for sym_name, info, shndx, value, size in ((name + ".kd", STT_OBJECT, 1, rodata_off + i * 64, 64),
                                                  (name, STT_FUNC, 2, text_off + entry, 0)):
            symtab += _SYM.pack(len(strtab), (1 << 4) | info, 0, shndx, value, size)  # STB_GLOBAL
            strtab += sym_name.encode() + b"\0"
    body = bytearray(text_off + len(text))
    body[rodata_off:rodata_off + len(rodata)] = rodata
    body[text_off:] = text
    symtab_off = _align(len(body), 8)
    strtab_off = symtab_off + len(symtab)
    shstrtab_off = strtab_off + len(strtab)
    shoff = _align(shstrtab_off + len(shstrtab), 8)
    sections = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                (1, SHT_PROGBITS, SHF_ALLOC, rodata_off, rodata_off, len(rodata), 0, 0, 64, 0),
                (9, SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text_off, text_off, len(text), 0, 0, CODE_ALIGN, 0),
                (15, SHT_SYMTAB, 0, 0, symtab_off, len(symtab), 4, 1, 8, _SYM.size),
                (23, SHT_STRTAB, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0),
                (31, SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab), 0, 0, 1, 0)]
    ident = ELF_MAGIC + bytes([ELFCLASS64, ELFDATA2LSB, 1, ELFOSABI_AMDGPU_HSA, abiversion]) + bytes(7)
    ehdr = _EHDR.pack(ident, ET_DYN, EM_AMDGPU, 1, 0, _EHDR.size, shoff, ARCH_MACH[arch] | e_flags_features,
                      _EHDR.size, _PHDR.size, 1, _SHDR.size, len(sections), 5)
    phdr = _PHDR.pack(PT_LOAD, 0x5, 0, 0, 0, len(body), len(body), 0x1000)  # R+X, the whole body from address 0
    body[:_EHDR.size + _PHDR.size] = ehdr + phdr
    out = body + bytes(symtab_off - len(body)) + symtab + strtab + shstrtab
    out += bytes(shoff - len(out))
    for s in sections:
        out += _SHDR.pack(*s)
    return bytes(out)
