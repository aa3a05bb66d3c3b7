"""Running a kernel dispatch: the initial wave state from the kernel descriptor (gfx942_isa.md §3.2), workgroups
one after another, and the waves of a workgroup interleaved at s_barrier."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ember.amd_runtime.mock.isa.memory import GlobalMemory
from ember.amd_runtime.mock.isa.program import Program, Tracer
from ember.amd_runtime.mock.isa.state import M32, WAVE_SIZE, Wave

MAX_LDS = 64 * 1024


@dataclass(frozen=True)
class KernelCode:
    """The fields of a kernel descriptor (`llvm_amdhsa_kernel_descriptor_t`) a dispatch needs, with the entry
    point as an absolute address."""

    entry: int
    rsrc1: int
    rsrc2: int
    rsrc3: int = 0
    code_properties: int = 0x8  # kernarg segment pointer only
    group_segment_size: int = 0
    private_segment_size: int = 0
    kernarg_size: int = 0
    kernarg_preload: int = 0

    @classmethod
    def from_descriptor(cls, data: bytes | bytearray | memoryview, descriptor_addr: int) -> KernelCode:
        """Parse the 64-byte descriptor found at device address `descriptor_addr`."""
        if len(data) < 64:
            raise ValueError(f"KernelCode.from_descriptor: a kernel descriptor is 64 bytes, got {len(data)}")
        group, private, kernarg = struct.unpack_from("<III", data, 0)
        (entry_off,) = struct.unpack_from("<q", data, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", data, 44)
        props, preload = struct.unpack_from("<HH", data, 56)
        return cls(descriptor_addr + entry_off, rsrc1, rsrc2, rsrc3, props, group, private, kernarg, preload)

    @classmethod
    def from_kernel_descriptor(cls, kd: Any, descriptor_addr: int) -> KernelCode:
        """Adapt any object with the descriptor's field names (e.g. ember.amd_runtime.elf's KernelDescriptor)."""
        return cls(descriptor_addr + int(kd.kernel_code_entry_byte_offset), int(kd.compute_pgm_rsrc1),
                   int(kd.compute_pgm_rsrc2), int(getattr(kd, "compute_pgm_rsrc3", 0)),
                   int(kd.kernel_code_properties), int(kd.group_segment_fixed_size),
                   int(kd.private_segment_fixed_size), int(getattr(kd, "kernarg_size", 0)),
                   int(getattr(kd, "kernarg_preload", 0)))

    @classmethod
    def from_code_object(cls, code_object: Any, name: str, base: int) -> KernelCode:
        """The kernel `name` of an `ember.amd_runtime.elf.CodeObject` whose image is loaded at `base`."""
        k = code_object.kernel(name)
        return cls.from_kernel_descriptor(k.descriptor, base + k.descriptor_offset)

    @property
    def user_sgpr_count(self) -> int:
        return (self.rsrc2 >> 1) & 0x1F

    @property
    def float_mode(self) -> int:
        """The initial MODE register: round 3:0, denorm 7:4, DX10 clamp 8, IEEE 9 (from rsrc1)."""
        r = self.rsrc1
        return ((r >> 12) & 0xF) | (((r >> 16) & 0xF) << 4) | (((r >> 21) & 1) << 8) | (((r >> 23) & 1) << 9)


@dataclass(frozen=True)
class DispatchStats:
    """What a dispatch ran."""

    workgroups: int
    waves: int
    instructions: int


AQL_PACKET_SIZE = 64


def run_aql_dispatch(memory: GlobalMemory, packet_addr: int, program: Program | None = None,
                     max_instructions_per_wave: int = 1_000_000) -> DispatchStats:
    """Execute the HSA kernel dispatch packet at `packet_addr` (amd_hcq.md §2.7): the kernel descriptor is read at
    its kernel_object, the code from memory (through `program`, a `MemoryProgram(memory)` by default; pass one kept
    per code object to reuse decoded instructions), and the packet's address is the dispatch pointer."""
    from ember.amd_runtime.mock.isa.program import MemoryProgram

    raw = memory.read(packet_addr, AQL_PACKET_SIZE)
    pkt = raw.tobytes() if hasattr(raw, "tobytes") else bytes(raw)
    header, setup = struct.unpack_from("<HH", pkt, 0)
    if header & 0xFF != 2:
        raise ValueError(f"run_aql_dispatch: packet at {packet_addr:#x} has type {header & 0xFF}, not "
                         "KERNEL_DISPATCH (2)")
    wg = struct.unpack_from("<HHH", pkt, 4)
    grid = struct.unpack_from("<III", pkt, 12)
    private, group = struct.unpack_from("<II", pkt, 24)
    kernel_object, kernarg = struct.unpack_from("<QQ", pkt, 32)
    dims = setup & 3
    if not 1 <= dims <= 3:
        raise ValueError(f"run_aql_dispatch: packet setup dimensions {dims} must be 1, 2 or 3")
    kd = memory.read(kernel_object, 64)
    kernel = KernelCode.from_descriptor(kd.tobytes() if hasattr(kd, "tobytes") else bytes(kd), kernel_object)
    if private > kernel.private_segment_size:
        kernel = KernelCode(**{**kernel.__dict__, "private_segment_size": private})
    return run_dispatch(program if program is not None else MemoryProgram(memory), kernel, memory=memory,
                        kernarg_addr=kernarg, grid=grid[:dims], workgroup_size=wg[:dims],
                        lds_size=max(group, kernel.group_segment_size), dispatch_ptr=packet_addr,
                        max_instructions_per_wave=max_instructions_per_wave)


def _dims(value: Any, name: str, least: int = 1) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (value if isinstance(value, (tuple, list)) else (value,)))
    if not 1 <= len(t) <= 3 or any(x < least for x in t):
        raise ValueError(f"run_dispatch: {name} must be 1 to 3 sizes of at least {least}, got {value!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


def run_dispatch(program: Program, kernel: KernelCode, *, memory: GlobalMemory, kernarg_addr: int,
                 grid: tuple[int, ...], workgroup_size: tuple[int, ...],
                 grid_in: Literal["workitems", "workgroups"] = "workitems", lds_size: int | None = None,
                 dispatch_ptr: int | None = None, queue_ptr: int | None = None, dispatch_id: int = 0,
                 user_sgprs: list[int] | None = None, max_instructions_per_wave: int = 1_000_000,
                 trace: Tracer | None = None) -> DispatchStats:
    """Execute one kernel dispatch on the interpreter.

    `grid` counts work-items (AQL `grid_size`; edge workgroups may be partial) or, with `grid_in="workgroups"`,
    workgroups. `lds_size` is the dispatch's total group segment size (default: the descriptor's fixed size).
    `dispatch_ptr`/`queue_ptr` are required when the descriptor enables those user SGPRs. `user_sgprs` (the PM4
    path's COMPUTE_USER_DATA registers) replaces the user SGPRs built from the descriptor's enable bits.
    `trace(wave, instruction)` sees every instruction before it executes (wave.workgroup, wave.wave_id, wave.pc).

    >>> # stats = run_dispatch(Program(image, base), KernelCode.from_descriptor(kd, kd_addr), memory=mem,
    >>> #                      kernarg_addr=args, grid=(1024,), workgroup_size=(256,))
    """
    wg = _dims(workgroup_size, "workgroup_size")
    g = _dims(grid, "grid", least=0)
    if wg[0] * wg[1] * wg[2] > 1024:
        raise ValueError(f"run_dispatch: workgroup_size {wg} has more than 1024 work-items")
    if grid_in == "workgroups":
        items = (g[0] * wg[0], g[1] * wg[1], g[2] * wg[2])
    elif grid_in == "workitems":
        items = g
    else:
        raise ValueError(f"run_dispatch: grid_in must be 'workitems' or 'workgroups', got {grid_in!r}")
    lds_bytes = kernel.group_segment_size if lds_size is None else lds_size
    if not kernel.group_segment_size <= lds_bytes <= MAX_LDS:
        raise ValueError(f"run_dispatch: lds_size {lds_bytes} must cover the kernel's {kernel.group_segment_size} "
                         f"bytes and be at most {MAX_LDS}")
    props, rsrc2 = kernel.code_properties, kernel.rsrc2
    if props & 0x1 or props & 0x20:
        raise NotImplementedError("private segment buffer / flat scratch init user SGPRs (gfx942 uses architected "
                                  "flat scratch; clang never enables them)")
    if props & 0x400:
        raise NotImplementedError("wave32 kernels (kernel_code_properties WAVEFRONT_SIZE32)")
    if rsrc2 & (1 << 10):
        raise NotImplementedError("the workgroup info system SGPR (rsrc2 TG_SIZE_EN)")
    if kernel.float_mode & 0xF:
        raise NotImplementedError(f"float round mode {kernel.float_mode & 0xF:#x} in rsrc1 "
                                  "(only round-to-nearest-even)")
    user: list[int] = []
    if props & 0x2:
        if dispatch_ptr is None:
            raise ValueError("run_dispatch: the kernel reads the dispatch packet (DISPATCH_PTR); pass dispatch_ptr")
        user += [dispatch_ptr & M32, dispatch_ptr >> 32]
    if props & 0x4:
        if queue_ptr is None:
            raise ValueError("run_dispatch: the kernel reads the queue (QUEUE_PTR); pass queue_ptr")
        user += [queue_ptr & M32, queue_ptr >> 32]
    if props & 0x8:
        user += [kernarg_addr & M32, kernarg_addr >> 32]
    if props & 0x10:
        user += [dispatch_id & M32, dispatch_id >> 32]
    if props & 0x40:
        user += [kernel.private_segment_size]
    preload_len, preload_off = kernel.kernarg_preload & 0x7F, kernel.kernarg_preload >> 7
    if preload_len:
        data = memory.read(kernarg_addr + 4 * preload_off, 4 * preload_len)
        user += np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), "<u4").tolist()
    if user_sgprs is not None:
        user = [int(x) & M32 for x in user_sgprs]
    if len(user) > kernel.user_sgpr_count:
        raise ValueError(f"run_dispatch: the descriptor enables {len(user)} user SGPRs but rsrc2 USER_SGPR_COUNT "
                         f"is {kernel.user_sgpr_count}")
    if 0 in items:
        return DispatchStats(0, 0, 0)  # an empty grid launches nothing
    with np.errstate(all="ignore"):  # float exceptions are the kernel's business, not warnings
        return _run_workgroups(program, kernel, memory, items, wg, lds_bytes, user, max_instructions_per_wave,
                               trace)


def _run_workgroups(program: Program, kernel: KernelCode, memory: GlobalMemory, items: tuple[int, int, int],
                    wg: tuple[int, int, int], lds_bytes: int, user: list[int], limit: int,
                    trace: Tracer | None) -> DispatchStats:
    rsrc2 = kernel.rsrc2
    n_groups = tuple(-(-items[i] // wg[i]) for i in range(3))
    waves_run = instructions = 0
    mode = kernel.float_mode
    for gz in range(n_groups[2]):
        for gy in range(n_groups[1]):
            for gx in range(n_groups[0]):
                gid = (gx, gy, gz)
                local = tuple(min(wg[i], items[i] - gid[i] * wg[i]) for i in range(3))
                n_threads = local[0] * local[1] * local[2]
                lds = np.zeros(lds_bytes, np.uint8)
                waves = []
                for wi in range(-(-n_threads // WAVE_SIZE)):
                    w = Wave(memory, lds, mode, wave_id=wi)
                    w.workgroup = gid
                    w.s[:len(user)] = user
                    sys_sgpr = kernel.user_sgpr_count
                    for dim in range(3):
                        if rsrc2 & (1 << (7 + dim)):
                            w.s[sys_sgpr] = gid[dim]
                            sys_sgpr += 1
                    flat = np.arange(wi * WAVE_SIZE, (wi + 1) * WAVE_SIZE)
                    present = flat < n_threads
                    x = flat % local[0]
                    y = (flat // local[0]) % local[1]
                    z = flat // (local[0] * local[1])
                    w.v[0] = np.where(present, x | (y << 10) | (z << 20), 0).astype(np.uint32)
                    w.exec = int(np.packbits(present, bitorder="little").view("<u8")[0])
                    w.pc = kernel.entry
                    if kernel.private_segment_size:
                        w.scratch = np.zeros((WAVE_SIZE, kernel.private_segment_size), np.uint8)
                    waves.append(w)
                live = waves
                while live:  # each round: every live wave runs to its next s_barrier or s_endpgm
                    for w in live:
                        program.run_wave(w, limit, trace)
                    live = [w for w in live if not w.done]
                waves_run += len(waves)
                instructions += sum(w.count for w in waves)
    return DispatchStats(n_groups[0] * n_groups[1] * n_groups[2], waves_run, instructions)
