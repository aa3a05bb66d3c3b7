"""The kernarg segment of a launch: where each argument goes, and the bytes.

Our kernels are `name(T* data0, ..., const int var0, ...)`: buffer pointers first, each a u64 at an 8-byte
offset, then the scalars each at its natural alignment (the C ABI that clang uses for the kernel's explicit
arguments). The kernel descriptor's `kernarg_size` says what else the kernel reads:

* `kernarg_size` == the explicit size: nothing else (our renderer's kernels: workgroup and work-item ids come from
  `__builtin_amdgcn_*`, which read SGPRs/VGPRs, not kernargs).
* more: the code object v5/v6 *hidden* (implicit) arguments, a 256-byte block at the explicit size rounded up to 8
  (LLVM emits it when a kernel asks for `__builtin_amdgcn_implicitarg_ptr`, e.g. through ockl's
  `__ockl_get_local_size` or printf). This module fills what a dispatch defines: hidden_block_count_xyz (u32 @0,
  4, 8), hidden_group_size_xyz (u16 @12, 14, 16), hidden_remainder_xyz (u16 @18, 20, 22: 0, our grids are whole
  workgroups), hidden_global_offset_xyz (u64 @40, 48, 56: 0) and hidden_grid_dims (u16 @64). The pointers (hostcall
  @80, multigrid sync @88, heap @96, default queue @104, completion action @112, queue @200) are left 0: a kernel
  that uses printf, device malloc or device enqueue cannot run here (given the code object's metadata, a kernel
  that lists them raises NotImplementedError at layout time, and a signature that does not match the metadata's
  argument list raises ValueError). Code object v4's different hidden block is not supported
  (NotImplementedError).
* `enable_sgpr_dispatch_ptr`: a 64-byte AQL dispatch packet is placed after the kernargs (at a 64-byte boundary)
  and its address goes into the user SGPRs; `pack` fills it (workgroup and grid sizes, segment sizes, kernarg
  address).

The block is allocated at KERNARG_ALIGN (16) bytes, the alignment the HSA ABI gives the kernarg segment (or the
metadata's kernarg_segment_align when larger).

    k = co.kernel("add")
    layout = kernarg_layout(n_buffers=2, scalars="i", descriptor=k.descriptor, metadata=k.metadata)
    blob = layout.pack([out_va, in_va], [n], global_size=(4, 1, 1), local_size=(64, 1, 1))
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ember.amd_runtime import aql
from ember.amd_runtime.elf import KernelDescriptor, KernelMetadata

KERNARG_ALIGN = 16
POINTER_SIZE = 8
HIDDEN_ARGS_ALIGN = 8
HIDDEN_ARGS_SIZE_V5 = 256
DISPATCH_PACKET_ALIGN = 64
# code object v5 hidden argument offsets, relative to the hidden block (LLVM AMDGPU ImplicitArg / AMDGPUUsage)
HIDDEN_BLOCK_COUNT, HIDDEN_GROUP_SIZE, HIDDEN_REMAINDER = 0, 12, 18
HIDDEN_GLOBAL_OFFSET, HIDDEN_GRID_DIMS = 40, 64
HIDDEN_HOSTCALL_PTR, HIDDEN_MULTIGRID_SYNC, HIDDEN_HEAP_PTR, HIDDEN_DEFAULT_QUEUE = 80, 88, 96, 104
HIDDEN_COMPLETION_ACTION, HIDDEN_PRIVATE_BASE, HIDDEN_SHARED_BASE, HIDDEN_QUEUE_PTR = 112, 192, 196, 200

# the hidden arguments `pack` fills (their code object v5 offsets: `_HIDDEN_V5`), and those it may leave 0
_HIDDEN_V5 = {f"hidden_{kind}_{axis}": base + i * step
              for kind, base, step in (("block_count", HIDDEN_BLOCK_COUNT, 4), ("group_size", HIDDEN_GROUP_SIZE, 2),
                                       ("remainder", HIDDEN_REMAINDER, 2), ("global_offset", HIDDEN_GLOBAL_OFFSET, 8))
              for i, axis in enumerate("xyz")} | {"hidden_grid_dims": HIDDEN_GRID_DIMS}
_HIDDEN_ZERO_OK = frozenset({"hidden_none", "hidden_dynamic_lds_size"})

# struct format codes of the scalars a kernel may take (int vars are "i", int32)
SCALAR_FORMATS = "bBhHiIqQefd"


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class KernargLayout:
    """Offsets in a launch's kernarg block. `scalars` are struct format codes; `size` is the bytes the kernel reads
    (its descriptor's kernarg_size, or the explicit size), `alloc_size` what to allocate (dispatch packet included,
    rounded to `align`: KERNARG_ALIGN, or the metadata's larger kernarg_segment_align, which the block's address
    needs too)."""

    buffer_offsets: tuple[int, ...]
    scalar_offsets: tuple[int, ...]
    scalars: str
    explicit_size: int
    size: int
    hidden_offset: int | None
    dispatch_packet_offset: int | None
    alloc_size: int
    align: int = KERNARG_ALIGN

    def pack(self, buffers: Sequence[int], values: Sequence[int | float] = (),
             global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
             kernarg_address: int = 0, kernel_object: int = 0, group_segment_size: int = 0,
             private_segment_size: int = 0) -> bytes:
        """The `alloc_size` bytes of the block: buffer addresses, scalar values, and (when the layout has them)
        the hidden arguments and the dispatch packet. `global_size` counts workgroups; `kernarg_address` (where the
        block will live) is needed only for the dispatch packet."""
        if kernarg_address % self.align:
            raise ValueError(f"kernargs: kernarg_address {kernarg_address:#x} must be {self.align}-byte aligned")
        if len(buffers) != len(self.buffer_offsets):
            raise ValueError(f"kernargs: {len(buffers)} buffer addresses given, the kernel takes "
                             f"{len(self.buffer_offsets)}")
        if len(values) != len(self.scalar_offsets):
            raise ValueError(f"kernargs: {len(values)} scalar values given, the kernel takes "
                             f"{len(self.scalar_offsets)} ({self.scalars!r})")
        out = bytearray(self.alloc_size)
        for off, addr in zip(self.buffer_offsets, buffers):
            if not 0 <= addr < 1 << 64:
                raise ValueError(f"kernargs: buffer address {addr:#x} does not fit in 64 bits")
            struct.pack_into("<Q", out, off, addr)
        for off, fmt, v in zip(self.scalar_offsets, self.scalars, values):
            try:
                struct.pack_into("<" + fmt, out, off, v)
            except struct.error as e:
                raise ValueError(f"kernargs: value {v!r} does not fit the scalar type {fmt!r}: {e}") from None
        groups, local = _dims("global_size", global_size), _dims("local_size", local_size)
        if self.hidden_offset is not None:
            h = self.hidden_offset
            dims = max((i + 1 for i in range(3) if groups[i] * local[i] > 1), default=1)
            struct.pack_into("<3I", out, h + HIDDEN_BLOCK_COUNT, *groups)
            struct.pack_into("<3H", out, h + HIDDEN_GROUP_SIZE, *local)
            struct.pack_into("<3H", out, h + HIDDEN_REMAINDER, 0, 0, 0)
            struct.pack_into("<3Q", out, h + HIDDEN_GLOBAL_OFFSET, 0, 0, 0)
            struct.pack_into("<H", out, h + HIDDEN_GRID_DIMS, dims)
        if self.dispatch_packet_offset is not None:
            pkt = aql.kernel_dispatch(kernel_object, kernarg_address, groups, local, group_segment_size,
                                      private_segment_size)
            out[self.dispatch_packet_offset:self.dispatch_packet_offset + aql.PACKET_SIZE] = pkt
        return bytes(out)

    def dispatch_packet_address(self, kernarg_address: int) -> int | None:
        """The dispatch packet's GPU address for a block at `kernarg_address` (what the dispatch_ptr SGPRs get)."""
        return None if self.dispatch_packet_offset is None else kernarg_address + self.dispatch_packet_offset


def _dims(name: str, size: Sequence[int]) -> tuple[int, int, int]:
    if not 1 <= len(size) <= 3 or any(s < 1 for s in size):
        raise ValueError(f"kernargs: {name} {tuple(size)} must be 1 to 3 sizes >= 1")
    return (*size, *([1] * (3 - len(size))))  # type: ignore[return-value]


def kernarg_layout(n_buffers: int, scalars: str = "", descriptor: KernelDescriptor | None = None,
                   code_object_version: int = 5, metadata: KernelMetadata | None = None) -> KernargLayout:
    """The layout for a kernel taking `n_buffers` pointers then one scalar per format code in `scalars` ("i" an
    int32 var, "q" int64, "f" float, ...), checked against `descriptor.kernarg_size` when a descriptor is given
    and against the argument list of the code object's `metadata` when given (a signature that does not match the
    kernel raises ValueError; hidden arguments this runtime cannot provide, e.g. printf's hostcall buffer, raise
    NotImplementedError)."""
    if n_buffers < 0:
        raise ValueError(f"kernargs: n_buffers {n_buffers} < 0")
    if bad := [c for c in scalars if c not in SCALAR_FORMATS]:
        raise ValueError(f"kernargs: scalar format codes {bad} not in {SCALAR_FORMATS!r}")
    buffer_offsets = tuple(i * POINTER_SIZE for i in range(n_buffers))
    offset, scalar_offsets = n_buffers * POINTER_SIZE, []
    for fmt in scalars:
        item = struct.calcsize(fmt)
        offset = _round_up(offset, item)
        scalar_offsets.append(offset)
        offset += item
    explicit, size, hidden, packet = offset, offset, None, None
    if descriptor is not None:
        size = descriptor.kernarg_size
        hidden_start = _round_up(explicit, HIDDEN_ARGS_ALIGN)
        if size < explicit:
            raise ValueError(f"kernargs: the signature ({n_buffers} buffers, scalars {scalars!r}) needs {explicit} "
                             f"bytes but the kernel's kernarg_size is {size}: the kernel takes fewer arguments")
        if size > explicit:
            if code_object_version < 5:
                raise NotImplementedError(f"kernargs: hidden arguments of code object v{code_object_version} "
                                          "(only the v5/v6 layout is implemented)")
            if size < hidden_start + HIDDEN_ARGS_SIZE_V5:
                raise ValueError(f"kernargs: the kernel's kernarg_size {size} is more than the signature's {explicit} "
                                 f"bytes but less than explicit + the {HIDDEN_ARGS_SIZE_V5}-byte hidden block "
                                 f"({hidden_start + HIDDEN_ARGS_SIZE_V5}): the kernel takes other arguments")
            hidden = hidden_start
        if descriptor.enable_sgpr_dispatch_ptr:
            packet = _round_up(size, DISPATCH_PACKET_ALIGN)
    if metadata is not None:
        _check_metadata(metadata, buffer_offsets, scalar_offsets, scalars, hidden)
    end = packet + aql.PACKET_SIZE if packet is not None else size
    align = max(KERNARG_ALIGN, metadata.kernarg_segment_align if metadata is not None else 0)
    return KernargLayout(buffer_offsets, tuple(scalar_offsets), scalars, explicit, size, hidden, packet,
                         _round_up(max(end, 1), align), align)


def _check_metadata(meta: KernelMetadata, buffer_offsets: tuple[int, ...], scalar_offsets: Sequence[int],
                    scalars: str, hidden: int | None) -> None:
    ours = [(off, POINTER_SIZE) for off in buffer_offsets] + \
        [(off, struct.calcsize(fmt)) for off, fmt in zip(scalar_offsets, scalars)]
    theirs = [(a.offset, a.size) for a in meta.args if not a.value_kind.startswith("hidden_")]
    if ours != theirs:
        raise ValueError(f"kernargs: {meta.name}: the signature places its arguments at (offset, size) {ours}, the "
                         f"code object's metadata at {theirs}")
    if unknown := sorted({a.value_kind for a in meta.hidden_args} - set(_HIDDEN_V5) - _HIDDEN_ZERO_OK):
        raise NotImplementedError(f"kernargs: {meta.name} needs the hidden arguments {unknown} (printf/hostcall, "
                                  "device heap, device enqueue or queue pointer), which this runtime does not provide")
    for a in meta.hidden_args:
        place = None if hidden is None else hidden + _HIDDEN_V5.get(a.value_kind, 0)
        if a.value_kind in _HIDDEN_V5 and a.offset != place:
            raise ValueError(f"kernargs: {meta.name}: {a.value_kind} is at offset {a.offset} in the metadata, not at "
                             f"the code object v5 place {place}")
