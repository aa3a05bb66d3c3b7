"""User-mode queues at the KFD level: the buffers a queue needs, CREATE_QUEUE, the doorbell mapping, teardown.

A queue is a ring (uncached GTT, a power of two long), one uncached page holding the read and write pointers at
`amd_queue_t`'s offsets, and for compute queues an EOP buffer and a CWSR (context save/restore) area sized the way
`kfd_queue_ctx_save_restore_size` sizes it, since KFD rejects anything else. What gets written into the ring is the
queue writer's business (pm4.py / sdma.py / aql.py); this module hands it the addresses.

    doorbells = DoorbellPages(kfd)
    q = create_queue(kfd, memory, node, doorbells, QueueType.COMPUTE_AQL)
    ... write packets at q.ring.view, q.wptr_view[0] = put, q.doorbell.ring(put - 1) ...
    destroy_queue(kfd, memory, q); doorbells.close()
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.amd_runtime.kfd import (
    DOORBELL_SLICE_SIZE,
    KFD_MAX_QUEUE_PERCENTAGE,
    KFD_MAX_QUEUE_PRIORITY,
    KFD_MIN_QUEUE_RING_SIZE,
    CreateQueueArgs,
    Kfd,
    QueueType,
)
from ember.amd_runtime.memory import GpuBuffer, GpuMemory
from ember.amd_runtime.platform import MAP_SHARED, PAGE_SIZE, PROT_READ, PROT_WRITE, Doorbell, Mmio, round_up
from ember.amd_runtime.topology import GpuNode

DEFAULT_RING_SIZE = 16 << 20  # bytes
DEFAULT_QUEUE_PRIORITY = 7
EOP_BUFFER_SIZE = 0x1000  # KFD's eop_buffer_size on gfx9
QUEUE_PAGE_SIZE = 0x1000  # the rptr/wptr page (for AQL it is the amd_queue_t); KFD wants a one-page mapping
WPTR_OFFSET = 56  # amd_queue_t.write_dispatch_id
RPTR_OFFSET = 128  # amd_queue_t.read_dispatch_id (+8 per XCC for a PM4 queue bound to that XCC)

# kfd_queue_ctx_save_restore_size on gfx9: the per-CU save area
CWSR_VGPR_SIZE_GFX9 = 0x80000
CWSR_SGPR_SIZE = 0x4000
CWSR_LDS_SIZE = 0x10000  # gfx950 uses its LDS size instead
CWSR_HWREG_SIZE = 0x1000
CWSR_WAVES_PER_CU = 40
CWSR_WAVES_PER_SE = 512
CWSR_CTL_STACK_HEADER = 8 + 40  # the control stack's header words (SIZEOF_HSA_USER_CONTEXT_SAVE_AREA_HEADER + 8)
CWSR_DEBUG_BYTES_PER_WAVE = 32


@dataclass(frozen=True)
class CwsrSizes:
    """Compute-wave save/restore sizes of one node (per XCC, except `alloc_size`)."""

    wg_data_size: int
    ctl_stack_size: int
    debug_memory_size: int
    wave_count: int
    xccs: int

    @property
    def ctx_save_restore_size(self) -> int:
        """What CREATE_QUEUE's ctx_save_restore_size carries (KFD's node cwsr_size)."""
        return self.wg_data_size + self.ctl_stack_size

    @property
    def alloc_size(self) -> int:
        """The CWSR area to allocate: every XCC's save area plus its debug memory, page-rounded."""
        return round_up((self.ctx_save_restore_size + self.debug_memory_size) * self.xccs, PAGE_SIZE)


def cwsr_sizes(node: GpuNode) -> CwsrSizes:
    """The node's CWSR sizes (gfx9: MI300X ctx_save_restore_size 0x1621000, MI350X 0x15A3000)."""
    if node.target[0] != 9:
        raise NotImplementedError(f"CWSR sizing for {node.arch}: only gfx9 (gfx942, gfx950) is implemented")
    lds = node.lds_size if node.target == (9, 5, 0) else CWSR_LDS_SIZE
    per_cu = CWSR_VGPR_SIZE_GFX9 + CWSR_SGPR_SIZE + lds + CWSR_HWREG_SIZE
    waves = min(node.cu_count * CWSR_WAVES_PER_CU, node.se_count * node.xccs * CWSR_WAVES_PER_SE)
    return CwsrSizes(wg_data_size=round_up(per_cu * node.cu_count, PAGE_SIZE),
                     ctl_stack_size=round_up(8 * waves + CWSR_CTL_STACK_HEADER, PAGE_SIZE),
                     debug_memory_size=round_up(waves * CWSR_DEBUG_BYTES_PER_WAVE, 64), wave_count=waves,
                     xccs=node.xccs)


class DoorbellPages:
    """The per-process doorbell slice of each GPU, mmapped from /dev/kfd once (KFD maps only the whole slice)."""

    def __init__(self, kfd: Kfd):
        self.kfd = kfd
        self._maps: dict[int, tuple[int, int]] = {}  # gpu_id -> (slice base offset, mapped address)

    def doorbell(self, gpu_id: int, doorbell_offset: int) -> tuple[int, Doorbell]:
        """(address, Doorbell) of the doorbell CREATE_QUEUE returned as `doorbell_offset`."""
        base = doorbell_offset & ~(DOORBELL_SLICE_SIZE - 1)
        if gpu_id not in self._maps:
            addr = self.kfd.platform.mmap(0, DOORBELL_SLICE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, self.kfd.fd,
                                          base)
            self._maps[gpu_id] = (base, addr)
        mapped_base, addr = self._maps[gpu_id]
        if mapped_base != base:
            raise RuntimeError(f"gpu 0x{gpu_id:x}: doorbell offset 0x{doorbell_offset:x} is outside the mapped "
                               f"doorbell slice at offset 0x{mapped_base:x}")
        va = addr + (doorbell_offset - base)
        return va, self.kfd.platform.doorbell(va)

    def close(self) -> None:
        """Unmap every doorbell slice (after the queues are destroyed)."""
        for _, addr in self._maps.values():
            self.kfd.platform.munmap(addr, DOORBELL_SLICE_SIZE)
        self._maps.clear()


@dataclass(eq=False)
class KfdQueue:
    """A created queue: its id and the addresses the queue writer needs."""

    queue_id: int
    queue_type: QueueType
    gpu_id: int
    xcc_id: int
    ring: GpuBuffer  # ring.va is the ring base; the ring is `ring_size` bytes
    ring_size: int
    gart: GpuBuffer  # the rptr/wptr page (amd_queue_t for AQL)
    rptr_va: int
    wptr_va: int
    doorbell_va: int
    doorbell: Doorbell
    eop: GpuBuffer | None
    cwsr: GpuBuffer | None
    cwsr_sizes: CwsrSizes | None
    destroyed: bool = False

    @property
    def ring_va(self) -> int:
        return self.ring.va

    @property
    def unit(self) -> str:
        """What rptr/wptr/doorbell values count: 'dword' (PM4), 'packet' (AQL, 64 bytes) or 'byte' (SDMA)."""
        return {QueueType.COMPUTE: "dword", QueueType.COMPUTE_AQL: "packet"}.get(self.queue_type, "byte")

    @property
    def ring_view(self) -> Mmio:
        """The ring as dwords."""
        assert self.ring.view is not None
        return self.ring.view.view(0, self.ring_size, "I")

    @property
    def rptr_view(self) -> Mmio:
        """The u64 read pointer the engine advances."""
        assert self.gart.view is not None
        return self.gart.view.view(self.rptr_va - self.gart.va, 8, "Q")

    @property
    def wptr_view(self) -> Mmio:
        """The u64 write pointer the host publishes before ringing the doorbell."""
        assert self.gart.view is not None
        return self.gart.view.view(self.wptr_va - self.gart.va, 8, "Q")


def create_queue(kfd: Kfd, memory: GpuMemory, node: GpuNode, doorbells: DoorbellPages, queue_type: QueueType, *,
                 ring_size: int = DEFAULT_RING_SIZE, xcc_id: int = 0, priority: int = DEFAULT_QUEUE_PRIORITY,
                 sdma_engine_id: int = 0) -> KfdQueue:
    """Allocate a queue's buffers on `memory`'s GPU, CREATE_QUEUE, and map its doorbell.

    ring_size: bytes, a power of two >= 1024; xcc_id: the XCC a PM4 queue feeds (queue_percentage bits 15:8);
    priority: 0..15. Raises ValueError for bad arguments, RuntimeError if KFD refuses (buffers are freed again).
    """
    if ring_size < KFD_MIN_QUEUE_RING_SIZE or ring_size & (ring_size - 1):
        raise ValueError(f"create_queue: ring_size {ring_size} must be a power of two >= {KFD_MIN_QUEUE_RING_SIZE}")
    if not 0 <= priority <= KFD_MAX_QUEUE_PRIORITY:
        raise ValueError(f"create_queue: priority {priority} is outside 0..{KFD_MAX_QUEUE_PRIORITY}")
    if not 0 <= xcc_id < node.xccs:
        raise ValueError(f"create_queue: xcc_id {xcc_id} is outside 0..{node.xccs - 1} ({node.arch} node)")
    if node.gpu_id != memory.gpu_id:
        raise ValueError(f"create_queue: node gpu 0x{node.gpu_id:x} is not the memory's gpu 0x{memory.gpu_id:x}")
    sizes = cwsr_sizes(node) if queue_type.is_compute else None
    owned: list[GpuBuffer] = []
    try:
        ring = memory.alloc(ring_size, uncached=True, cpu_access=True)
        owned.append(ring)
        gart = memory.alloc(QUEUE_PAGE_SIZE, uncached=True, cpu_access=True)
        owned.append(gart)
        eop = cwsr = None
        if sizes is not None:
            eop = memory.alloc(EOP_BUFFER_SIZE)
            owned.append(eop)
            cwsr = memory.alloc(sizes.alloc_size)
            owned.append(cwsr)
        rptr_va, wptr_va = gart.va + RPTR_OFFSET + 8 * xcc_id, gart.va + WPTR_OFFSET
        args = CreateQueueArgs(
            ring_base_address=ring.va, ring_size=ring_size, write_pointer_address=wptr_va,
            read_pointer_address=rptr_va, gpu_id=node.gpu_id, queue_type=int(queue_type),
            queue_percentage=KFD_MAX_QUEUE_PERCENTAGE | (xcc_id << 8), queue_priority=priority,
            eop_buffer_address=eop.va if eop else 0, eop_buffer_size=EOP_BUFFER_SIZE if eop else 0,
            ctx_save_restore_address=cwsr.va if cwsr else 0,
            ctx_save_restore_size=sizes.ctx_save_restore_size if sizes else 0,
            ctl_stack_size=sizes.ctl_stack_size if sizes else 0, sdma_engine_id=sdma_engine_id)
        try:
            kfd.create_queue(args)
        except OSError as e:
            raise RuntimeError(f"{memory.device}: CREATE_QUEUE ({queue_type.name}, ring 0x{ring_size:x} bytes) "
                               f"failed: {e}") from e
    except BaseException:
        for buf in reversed(owned):
            memory.free(buf)
        raise
    try:
        doorbell_va, doorbell = doorbells.doorbell(node.gpu_id, args.doorbell_offset)
    except BaseException:
        kfd.destroy_queue(args.queue_id)
        for buf in reversed(owned):
            memory.free(buf)
        raise
    return KfdQueue(args.queue_id, queue_type, node.gpu_id, xcc_id, ring, ring_size, gart, rptr_va, wptr_va,
                    doorbell_va, doorbell, eop, cwsr, sizes)


def destroy_queue(kfd: Kfd, memory: GpuMemory, queue: KfdQueue) -> None:
    """DESTROY_QUEUE, then free its ring, pointer page, EOP buffer and CWSR area."""
    if queue.destroyed:
        raise ValueError(f"destroy_queue: queue {queue.queue_id} is already destroyed")
    kfd.destroy_queue(queue.queue_id)
    queue.destroyed = True
    for buf in (queue.cwsr, queue.eop, queue.gart, queue.ring):
        if buf is not None:
            memory.free(buf)


__all__ = ["DEFAULT_RING_SIZE", "DEFAULT_QUEUE_PRIORITY", "EOP_BUFFER_SIZE", "QUEUE_PAGE_SIZE", "WPTR_OFFSET",
           "RPTR_OFFSET", "CwsrSizes", "cwsr_sizes", "DoorbellPages", "KfdQueue", "create_queue", "destroy_queue"]
