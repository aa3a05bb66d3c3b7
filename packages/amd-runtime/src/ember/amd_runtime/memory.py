"""GPU memory through KFD: every buffer has one address that is both its CPU VA and its GPU VA.

Allocation: reserve the VA range (an anonymous PROT_NONE mapping), ALLOC_MEMORY_OF_GPU at it, mmap the render node
over the reservation (MAP_FIXED, so the CPU address is the GPU address; USERPTR memory is the CPU pages themselves),
then MAP_MEMORY_TO_GPU. Freeing runs the reverse: UNMAP, munmap, FREE. The flags follow `alloc_flags`' policy table.

    mem = GpuMemory(kfd, gpu_id, render_fd, device="AMD:0")
    buf = mem.alloc(1 << 20, uncached=True, cpu_access=True)    # rings, signals: GTT, host-visible
    buf.view[0] = 42
    mem.map_to(buf, [peer_gpu_id]); mem.free(buf)
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass, field

from ember.amd_runtime.kfd import AllocFlag as F
from ember.amd_runtime.kfd import Kfd, KfdMapError
from ember.amd_runtime.platform import (
    MAP_ANONYMOUS,
    MAP_FIXED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    MAP_SHARED,
    PAGE_SIZE,
    PROT_NONE,
    PROT_READ,
    PROT_WRITE,
    Mmio,
    round_up,
)

BASE_FLAGS = F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE
"""Every allocation: GPU-writable, executable (code objects live anywhere), never silently placed elsewhere."""

FLAG_POLICY: dict[str, F] = {
    "uncached": F.GTT | F.COHERENT | F.UNCACHED,  # signals, rings, rptr/wptr page, event page
    "device": F.VRAM,  # the default
    "host": F.USERPTR,  # host memory the GPU reads through the CPU's pages
    "cpu_access": F.PUBLIC,  # host-visible (VRAM: needs a large/resizable BAR)
    "cpu_addr": F.USERPTR | F.COHERENT | F.UNCACHED,  # mapping memory the CPU already owns
}
"""The allocation flag policy (spec §2.3): what each request adds to BASE_FLAGS."""


def alloc_flags(*, host: bool = False, uncached: bool = False, cpu_access: bool = False,
                cpu_addr: int | None = None) -> F:
    """The KFD flags for a request. `uncached` wins over `host`; `cpu_addr` maps existing CPU memory (USERPTR)."""
    if cpu_addr is not None and uncached:
        raise ValueError("alloc_flags: cpu_addr (existing CPU memory, USERPTR) cannot also be uncached GTT memory")
    flags = BASE_FLAGS
    if cpu_addr is not None:
        flags |= FLAG_POLICY["cpu_addr"]
    elif uncached:
        flags |= FLAG_POLICY["uncached"]
    elif host:
        flags |= FLAG_POLICY["host"]
    else:
        flags |= FLAG_POLICY["device"]
    if cpu_access or host or cpu_addr is not None:
        flags |= FLAG_POLICY["cpu_access"]
    return flags


@dataclass(eq=False)
class GpuBuffer:
    """One KFD allocation. `va` is the CPU and GPU address; `view` is None when the CPU has no access."""

    va: int
    size: int  # bytes, a multiple of PAGE_SIZE
    handle: int
    flags: F
    gpu_id: int  # the owning GPU
    view: Mmio | None
    owns_cpu_pages: bool  # USERPTR pages we mmapped (munmapped on free)
    render_mapped: bool  # a render-node mapping at va (GTT/VRAM)
    mapped_gpus: list[int] = field(default_factory=list)
    freed: bool = False

    @property
    def kind(self) -> str:
        """'vram', 'gtt' or 'userptr'."""
        return "vram" if self.flags & F.VRAM else "gtt" if self.flags & F.GTT else "userptr"

    def __repr__(self) -> str:
        return f"GpuBuffer({self.kind}, va=0x{self.va:x}, size=0x{self.size:x}, handle=0x{self.handle:x})"


class GpuMemory:
    """The allocator of one GPU's memory in this process (one KFD fd, that GPU's render node)."""

    def __init__(self, kfd: Kfd, gpu_id: int, render_fd: int, device: str = "AMD"):
        self.kfd, self.platform, self.gpu_id, self.render_fd, self.device = kfd, kfd.platform, gpu_id, render_fd, device

    def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False,
              cpu_addr: int | None = None) -> GpuBuffer:
        """Allocate `size` bytes (rounded up to whole pages) mapped on this GPU.

        host: host memory (USERPTR); uncached: GTT, coherent and uncached (signals, rings); cpu_access: give the CPU
        a view (VRAM needs a large BAR); cpu_addr: map the page-aligned CPU memory at that address (not freed here).
        Raises MemoryError when the memory is not there, RuntimeError for other driver failures.
        """
        if size <= 0:
            raise ValueError(f"{self.device}: alloc size must be positive, got {size}")
        if cpu_addr is not None and cpu_addr % PAGE_SIZE:
            raise ValueError(f"{self.device}: cpu_addr 0x{cpu_addr:x} must be page-aligned (0x{PAGE_SIZE:x})")
        size, flags = round_up(size, PAGE_SIZE), alloc_flags(host=host, uncached=uncached, cpu_access=cpu_access,
                                                              cpu_addr=cpu_addr)
        userptr = bool(flags & F.USERPTR)
        if userptr:
            owns = cpu_addr is None
            addr = cpu_addr if cpu_addr is not None else self.platform.mmap(
                0, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
        else:
            owns, addr = False, self.platform.mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                                   -1, 0)
        try:
            args = self.kfd.alloc_memory(addr, size, self.gpu_id, flags, mmap_offset=addr if userptr else 0)
        except OSError as e:
            if owns or not userptr:
                self.platform.munmap(addr, size)
            raise self._alloc_error(e, size, flags) from e
        buf = GpuBuffer(addr, size, args.handle, flags, self.gpu_id, None, owns, False)
        try:
            if not userptr:
                mapped = self.platform.mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                                            self.render_fd, args.mmap_offset)
                buf.render_mapped = True
                if mapped != addr:
                    raise RuntimeError(f"{self.device}: the render node mapped BO 0x{args.handle:x} at 0x{mapped:x}, "
                                       f"not at its GPU VA 0x{addr:x}")
            self._map(buf, [self.gpu_id])
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: the original error is the one to report
                self._unmap(buf, list(buf.mapped_gpus))
                self._release(buf)
            raise
        if cpu_access or host or uncached or cpu_addr is not None:
            buf.view = self.platform.mmio(addr, size)
        return buf

    def _alloc_error(self, e: OSError, size: int, flags: F) -> Exception:
        if e.errno == errno.EINVAL and flags & F.VRAM and flags & F.PUBLIC:
            return MemoryError(f"{self.device}: cannot allocate {size} bytes of host-visible VRAM: the driver refused "
                               f"VRAM|PUBLIC; enable Resizable BAR (large BAR) in the firmware settings")
        if e.errno == errno.ENOMEM:
            domain = F(flags & (F.VRAM | F.GTT | F.USERPTR)).name
            return MemoryError(f"{self.device}: cannot allocate {size} bytes of {domain}: out of memory")
        return RuntimeError(f"{self.device}: ALLOC_MEMORY_OF_GPU of {size} bytes with flags 0x{int(flags):08x} "
                            f"failed: {e}")

    def _map(self, buf: GpuBuffer, gpu_ids: list[int]) -> None:
        todo = [g for g in gpu_ids if g not in buf.mapped_gpus]
        if not todo:
            return
        try:
            n_success = self.kfd.map_memory(buf.handle, todo)
        except KfdMapError as e:
            buf.mapped_gpus += todo[:e.n_success]
            raise RuntimeError(f"{self.device}: mapping {buf} on gpu(s) {', '.join(f'0x{g:x}' for g in todo)} "
                               f"failed: {e}") from e
        buf.mapped_gpus += todo
        assert n_success == len(todo), f"MAP_MEMORY_TO_GPU reported {n_success} of {len(todo)} devices"

    def map_to(self, buf: GpuBuffer, gpu_ids: list[int]) -> None:
        """Map `buf` into the VMs of other GPUs of this process (peer access); already-mapped ones are skipped."""
        if buf.freed:
            raise ValueError(f"{self.device}: map_to of freed {buf}")
        self._map(buf, gpu_ids)

    def unmap_from(self, buf: GpuBuffer, gpu_ids: list[int]) -> None:
        """Remove `buf` from peer GPUs' VMs (not from its owner's: free does that)."""
        if buf.gpu_id in gpu_ids:
            raise ValueError(f"{self.device}: unmap_from cannot remove {buf} from its owner gpu 0x{buf.gpu_id:x}; "
                             f"free it instead")
        self._unmap(buf, [g for g in gpu_ids if g in buf.mapped_gpus])

    def _unmap(self, buf: GpuBuffer, gpu_ids: list[int]) -> None:
        if not gpu_ids:
            return
        try:
            self.kfd.unmap_memory(buf.handle, gpu_ids)
        except KfdMapError as e:
            for g in gpu_ids[:e.n_success]:
                buf.mapped_gpus.remove(g)
            raise RuntimeError(f"{self.device}: unmapping {buf} failed: {e}") from e
        for g in gpu_ids:
            buf.mapped_gpus.remove(g)

    def free(self, buf: GpuBuffer) -> None:
        """UNMAP from every GPU, munmap the CPU side, FREE. The buffer must not be in use by a queue."""
        if buf.freed:
            raise ValueError(f"{self.device}: double free of {buf}")
        self._unmap(buf, list(buf.mapped_gpus))
        self._release(buf)

    def _release(self, buf: GpuBuffer) -> None:
        """munmap and FREE a buffer that is mapped on no GPU."""
        buf.view = None
        if not buf.flags & F.USERPTR or buf.owns_cpu_pages:  # the render mapping (or the bare VA reservation)
            self.platform.munmap(buf.va, buf.size)
        buf.render_mapped = False
        self.kfd.free_memory(buf.handle)
        buf.freed = True


__all__ = ["BASE_FLAGS", "FLAG_POLICY", "alloc_flags", "GpuBuffer", "GpuMemory"]
