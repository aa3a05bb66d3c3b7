"""Hardware queues: recorders of commands that write them into a KFD user-mode ring and ring its doorbell.

A queue records commands (`wait`, `signal`, `timestamp`, `memory_barrier`, `exec`, `copy`) as packets; `submit()`
writes the packets into the ring at the write pointer, publishes the new write pointer and rings the doorbell
(spec amd_hcq.md §2.4-2.8). The recorded packets stay on the queue until the next `submit` (`pending`), so the same
object is reused submission after submission.

* `PM4ComputeQueue`: PM4 dwords in a dword-addressed ring (rptr/wptr/doorbell count dwords; packets may run over the
  end of the ring, the CP reads it modulo its size). One XCC only: multi-XCC parts need PRED_EXEC-wrapped state and
  use the AQL queue instead (as ROCr and tinygrad do on MI300X/MI350X in SPX mode).
* `AQLQueue`: 64-byte AQL packets (units: packets; the doorbell gets the index of the last packet). Kernels are
  KERNEL_DISPATCH packets; signals, waits and timestamps are PM4 written to an indirect-buffer arena and run through
  the AMD vendor PM4-IB packet. Each packet is written body first, header last (`aql.publish_order`).
* `SDMAQueue`: SDMA packets in a byte-addressed ring; copies split at the packet limit (4 MiB on SDMA 4); a packet
  never straddles the end of the ring: the tail is zero-filled (1-dword NOPs) and the packet starts at offset 0.

A full ring makes `submit` wait (sleeping in KFD WAIT_EVENTS) until the engine has consumed enough; the wait raises
RuntimeError ("hang detected") after `timeout_ms` without progress.

    q = AQLQueue(kq, events, ib_arena)
    q.wait(timeline.signal, timeline.last).exec(launch).signal(timeline.signal, timeline.next()).submit()
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ember.amd_runtime import aql, pm4, sdma
from ember.amd_runtime.elf import KernelDescriptor
from ember.amd_runtime.kfd import QueueType
from ember.amd_runtime.kfd_queue import KfdQueue
from ember.amd_runtime.memory import GpuBuffer
from ember.amd_runtime.signal import DEFAULT_TIMEOUT_MS, SLEEP_CHUNK_MS, DeviceEvents, Signal

# gfx9 compute registers (absolute dword addresses, gc 9.4.3; spec §2.7)
COMPUTE_START_X = 0x2E04  # START_X..Z, NUM_THREAD_X..Z, PIPELINESTAT_ENABLE, PERFCOUNT_ENABLE follow
COMPUTE_NUM_THREAD_X = 0x2E07
COMPUTE_PGM_LO = 0x2E0C
COMPUTE_DISPATCH_SCRATCH_BASE_LO = 0x2E10
COMPUTE_PGM_RSRC1 = 0x2E12
COMPUTE_PGM_RSRC2 = 0x2E13
COMPUTE_RESOURCE_LIMITS = 0x2E15
COMPUTE_TMPRING_SIZE = 0x2E18
COMPUTE_RESTART_X = 0x2E1B
COMPUTE_PGM_RSRC3 = 0x2E2D
COMPUTE_USER_DATA_0 = 0x2E40
MAX_USER_SGPRS = 16
# HDP flush request/done of nbio 7.9 (segment 2 base 0xD20 + 0x106/0x107): the memory barrier's register handshake
HDP_FLUSH_REQ, HDP_FLUSH_DONE = 0xE26, 0xE27
LDS_GRANULE = 512  # rsrc2 LDS_SIZE units on gfx9 (128 dwords)
RSRC2_LDS_SHIFT, RSRC2_LDS_MASK = 15, 0x1FF
PRIVATE_SEGMENT_SWIZZLE = 1 << 31  # the scratch buffer resource's SWIZZLE_ENABLE (dword 1)
SCRATCH_RSRC_DWORD2, SCRATCH_RSRC_DWORD3 = 0xFFFFFFFF, 0x20C14000
IB_ARENA_SIZE = 1 << 20  # bytes of PM4 indirect buffers an AQL queue cycles through


@dataclass(frozen=True)
class KernelLaunch:
    """What a compute queue needs to dispatch one kernel: where its descriptor and code are, its kernarg block, and
    the launch shape (`global_size` in workgroups, `local_size` in work-items per workgroup)."""

    descriptor: KernelDescriptor
    descriptor_va: int  # the AQL kernel_object (64-byte aligned)
    entry_va: int  # the first instruction (256-byte aligned: COMPUTE_PGM_LO takes it >> 8)
    kernarg_va: int
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    group_segment_size: int = 0  # LDS bytes (at least the descriptor's)
    private_segment_size: int = 0  # scratch bytes per work-item
    dispatch_packet_va: int | None = None  # the dispatch packet the kernel reads through DISPATCH_PTR
    scratch_va: int = 0  # the scratch backing memory (PM4: COMPUTE_DISPATCH_SCRATCH_BASE)
    tmpring_size: int = 0  # COMPUTE_TMPRING_SIZE: WAVES[11:0] | WAVESIZE[24:12] (1 KiB units)


def _mask32(value: int) -> int:
    return value & 0xFFFFFFFF


class HWQueue:
    """The commands every queue records. `pending` holds the packets (dword lists) recorded since the last submit;
    `unit` is the ring's pointer unit in bytes (4 PM4, 64 AQL, 1 SDMA)."""

    unit = 4
    kind = "compute"

    def __init__(self, kq: KfdQueue, events: DeviceEvents | None, name: str = "queue",
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if kq.ring.view is None or kq.gart.view is None:
            raise ValueError(f"{name}: the queue's ring and pointer page need CPU views (allocate them cpu_access)")
        self.kq, self.events, self.name, self.timeout_ms = kq, events, name, timeout_ms
        self.ring = kq.ring.view.view(0, kq.ring_size, "B")
        self.ring_dwords = kq.ring.view.view(0, kq.ring_size, "I")
        self.rptr, self.wptr = kq.rptr_view, kq.wptr_view
        self.put = int(self.wptr[0])  # type: ignore[arg-type]
        self.pending: list[list[int]] = []
        self.submitted_packets = 0

    @property
    def ring_units(self) -> int:
        """The ring's size in pointer units."""
        return self.kq.ring_size // self.unit

    def _record(self, packet: list[int]) -> HWQueue:
        self.pending.append(packet)
        return self

    # ---- submission ----------------------------------------------------------------------------------------------

    def _wait_engine(self, done: Callable[[], bool], what: str) -> None:
        """Sleep in WAIT_EVENTS until `done()`; RuntimeError ("hang detected") after timeout_ms without progress."""
        last_move, seen = time.monotonic(), int(self.rptr[0])  # type: ignore[arg-type]
        while not done():
            now, current = time.monotonic(), int(self.rptr[0])  # type: ignore[arg-type]
            if current != seen:
                seen, last_move = current, now
            if (now - last_move) * 1000 >= self.timeout_ms:
                device = self.events.device if self.events is not None else f"gpu 0x{self.kq.gpu_id:x}"
                raise RuntimeError(f"{device}: hang detected: the {self.name} queue did not {what} within "
                                   f"{self.timeout_ms} ms (rptr {current}, wptr {self.put})")
            if self.events is not None:
                self.events.sleep(SLEEP_CHUNK_MS)
            else:
                time.sleep(0.001)

    def _reserve(self, units: int) -> None:
        """Wait until `units` more fit in the ring behind the engine's read pointer."""
        if units > self.ring_units:
            raise ValueError(f"{self.name}: {units} units do not fit in a ring of {self.ring_units}")
        if self.put + units - int(self.rptr[0]) > self.ring_units:  # type: ignore[arg-type]
            self._wait_engine(lambda: self.put + units - int(self.rptr[0]) <= self.ring_units,  # type: ignore
                              f"free {units} units of its ring")

    def idle(self) -> bool:
        """Whether the engine has consumed everything submitted."""
        return int(self.rptr[0]) >= self.put  # type: ignore[arg-type]

    def _publish(self) -> None:
        self.wptr[0] = self.put
        self.kq.doorbell.ring(self._doorbell_value())

    def _doorbell_value(self) -> int:
        return self.put

    def submit(self) -> None:
        """Write the recorded packets into the ring, publish the write pointer, ring the doorbell; forget them."""
        raise NotImplementedError(f"{type(self).__name__}: submit")

    def drain(self) -> None:
        """Wait until the engine has consumed every submitted packet."""
        if not self.idle():
            self._wait_engine(self.idle, "consume its ring")


class _PM4Commands(HWQueue):
    """Signals, waits, timestamps and barriers as PM4 (shared by the PM4 queue and the AQL queue's PM4 IBs)."""

    def wait(self, signal: Signal, value: int) -> _PM4Commands:
        """Stall the queue until `signal` >= `value` (32-bit compare: timelines wrap before 2**31)."""
        return self._record(pm4.wait_reg_mem(mem=signal.va, reference=_mask32(value)))  # type: ignore[return-value]

    def signal(self, signal: Signal, value: int, interrupt: bool = True) -> _PM4Commands:
        """Write `value` to `signal` once the work before it is done (caches written back); with `interrupt` (and
        device events) also write the event id to the device's mailbox and interrupt, which wakes host waits."""
        return self._record(pm4_signal(signal.va, value, self.events if interrupt else None))  # type: ignore

    def timestamp(self, signal: Signal) -> _PM4Commands:
        """Write the GPU's 100 MHz clock into `signal`'s timestamp slot once the work before it is done."""
        return self._record(pm4.release_mem(signal.timestamp_va, data_sel=pm4.DATA_SEL_GPU_CLOCK))  # type: ignore

    def memory_barrier(self) -> _PM4Commands:
        """Flush the HDP (host writes become visible to the GPU) and invalidate the GPU caches."""
        return self._record(memory_barrier())  # type: ignore[return-value]


@functools.cache
def _memory_barrier() -> tuple[int, ...]:
    return (*pm4.wait_reg_mem(reg_req=HDP_FLUSH_REQ, reg_done=HDP_FLUSH_DONE, reference=0xFFFFFFFF,
                              function=pm4.FUNC_EQ), *pm4.acquire_mem())


def memory_barrier() -> list[int]:
    """PM4 of a memory barrier: the HDP flush handshake (host writes through the BAR land), then ACQUIRE_MEM
    (invalidate the GPU's caches)."""
    return list(_memory_barrier())


def user_sgpr_values(launch: KernelLaunch, queue_va: int = 0) -> list[int]:
    """The user SGPRs the hardware loads for `launch`, in AMDHSA order (spec §2.7)."""
    out: list[int] = []
    for name, _ in launch.descriptor.user_sgprs():
        if name == "private_segment_buffer":
            out += [_mask32(launch.scratch_va), (launch.scratch_va >> 32) | PRIVATE_SEGMENT_SWIZZLE,
                    SCRATCH_RSRC_DWORD2, SCRATCH_RSRC_DWORD3]
        elif name == "dispatch_ptr":
            if launch.dispatch_packet_va is None:
                raise ValueError("user SGPRs: the kernel reads its dispatch packet (DISPATCH_PTR); the launch has "
                                 "none (kernargs.KernargLayout.dispatch_packet_address)")
            out += [_mask32(launch.dispatch_packet_va), launch.dispatch_packet_va >> 32]
        elif name == "queue_ptr":
            out += [_mask32(queue_va), queue_va >> 32]
        elif name == "kernarg_segment_ptr":
            out += [_mask32(launch.kernarg_va), launch.kernarg_va >> 32]
        elif name == "dispatch_id":
            out += [0, 0]
        elif name == "private_segment_size":
            out += [launch.private_segment_size]
        else:  # flat_scratch_init, kernarg_preload: gfx942 kernels from clang use neither
            raise NotImplementedError(f"user SGPRs: {name} is not provided by this runtime")
    if len(out) > MAX_USER_SGPRS:
        raise ValueError(f"user SGPRs: {len(out)} are more than the {MAX_USER_SGPRS} COMPUTE_USER_DATA registers")
    return out


def pm4_dispatch(launch: KernelLaunch) -> list[int]:
    """The PM4 dwords of one kernel dispatch on gfx9 (spec §2.7): registers, DISPATCH_DIRECT, CS_PARTIAL_FLUSH."""
    d = launch.descriptor
    lds = max(launch.group_segment_size, d.group_segment_fixed_size)
    rsrc2 = d.compute_pgm_rsrc2 & ~(RSRC2_LDS_MASK << RSRC2_LDS_SHIFT)
    rsrc2 |= (-(-lds // LDS_GRANULE) & RSRC2_LDS_MASK) << RSRC2_LDS_SHIFT
    if launch.entry_va % 256:
        raise ValueError(f"PM4 dispatch: kernel entry 0x{launch.entry_va:x} is not 256-byte aligned")
    prog = launch.entry_va >> 8
    out = [*pm4.acquire_mem(gli=False, gl2=False), *pm4.set_sh_reg(COMPUTE_PGM_LO, _mask32(prog), prog >> 32),
           *pm4.set_sh_reg(COMPUTE_PGM_RSRC1, d.compute_pgm_rsrc1, rsrc2),
           *pm4.set_sh_reg(COMPUTE_PGM_RSRC3, d.compute_pgm_rsrc3),
           *pm4.set_sh_reg(COMPUTE_TMPRING_SIZE, launch.tmpring_size)]
    if launch.scratch_va:
        out += pm4.set_sh_reg(COMPUTE_DISPATCH_SCRATCH_BASE_LO, _mask32(launch.scratch_va >> 8),
                              launch.scratch_va >> 40)
    out += pm4.set_sh_reg(COMPUTE_RESTART_X, 0, 0, 0)
    if user := user_sgpr_values(launch):
        out += pm4.set_sh_reg(COMPUTE_USER_DATA_0, *user)
    out += [*pm4.set_sh_reg(COMPUTE_RESOURCE_LIMITS, 0),
            *pm4.set_sh_reg(COMPUTE_START_X, 0, 0, 0, *launch.local_size, 0, 0),
            *pm4.dispatch_direct(*launch.global_size), *pm4.event_write()]
    return out


def aql_dispatch(launch: KernelLaunch) -> bytes:
    """The KERNEL_DISPATCH packet of one launch (barrier bit set: it starts after the packets before it finish)."""
    return aql.kernel_dispatch(launch.descriptor_va, launch.kernarg_va, launch.global_size, launch.local_size,
                               max(launch.group_segment_size, launch.descriptor.group_segment_fixed_size),
                               launch.private_segment_size)


def pm4_signal(signal_va: int, value: int, events: DeviceEvents | None) -> list[int]:
    """RELEASE_MEM of `value` to a signal, then (with `events`) the event id to its mailbox with an interrupt. The
    value's dword is at index PM4_SIGNAL_VALUE_DWORD."""
    out = pm4.release_mem(signal_va, _mask32(value), pm4.DATA_SEL_32BIT_LOW, cache_flush=True)
    if events is not None:
        out += pm4.release_mem(events.mailbox_va, events.event_id, pm4.DATA_SEL_32BIT_LOW,
                               pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM, ctxid=events.event_id)
    return out


PM4_WAIT_REFERENCE_DWORD = 4  # in wait_reg_mem: header, info, addr lo, addr hi, reference
PM4_SIGNAL_VALUE_DWORD = 5  # in release_mem: header, event, sel, addr lo, addr hi, data lo
SDMA_POLL_VALUE_DWORD = 3  # in poll_regmem: header, addr lo, addr hi, value
SDMA_FENCE_VALUE_DWORD = 3  # in fence: header, addr lo, addr hi, value


class PM4ComputeQueue(_PM4Commands):
    """A PM4 compute queue (KFD queue type COMPUTE) of a single-XCC node."""

    unit = 4

    def __init__(self, kq: KfdQueue, events: DeviceEvents | None, name: str = "compute", xccs: int = 1,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if kq.queue_type != QueueType.COMPUTE:
            raise ValueError(f"PM4ComputeQueue: KFD queue {kq.queue_id} is {kq.queue_type.name}, not COMPUTE")
        if xccs != 1:
            raise NotImplementedError(f"PM4ComputeQueue on a {xccs}-XCC node: per-XCC PRED_EXEC state and fake IBs "
                                      "(use AQLQueue, the default on multi-XCC parts)")
        super().__init__(kq, events, name, timeout_ms)

    def exec(self, launch: KernelLaunch) -> PM4ComputeQueue:
        """Dispatch a kernel: program the compute registers, DISPATCH_DIRECT, then wait for it (CS_PARTIAL_FLUSH)."""
        return self._record(pm4_dispatch(launch))  # type: ignore[return-value]

    def submit(self) -> None:
        dwords = [d for packet in self.pending for d in packet]
        self.pending = []
        if not dwords:
            return
        self._reserve(len(dwords))
        n, start = self.ring_units, self.put % self.ring_units
        first = min(len(dwords), n - start)
        self.ring_dwords[start:start + first] = dwords[:first]
        if first < len(dwords):  # the CP reads the ring modulo its size
            self.ring_dwords[0:len(dwords) - first] = dwords[first:]
        self.put += len(dwords)
        self.submitted_packets += 1
        self._publish()


class AQLQueue(_PM4Commands):
    """An AQL compute queue (KFD queue type COMPUTE_AQL): kernels as KERNEL_DISPATCH packets, everything else as PM4
    in `ib_arena` (a host-visible uncached buffer) run through vendor PM4-IB packets."""

    unit = aql.PACKET_SIZE

    def __init__(self, kq: KfdQueue, events: DeviceEvents | None, ib_arena: GpuBuffer, name: str = "compute",
                 max_cu_id: int = 0, max_wave_id: int = 0, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if kq.queue_type != QueueType.COMPUTE_AQL:
            raise ValueError(f"AQLQueue: KFD queue {kq.queue_id} is {kq.queue_type.name}, not COMPUTE_AQL")
        if ib_arena.view is None:
            raise ValueError("AQLQueue: the PM4 IB arena needs a CPU view")
        super().__init__(kq, events, name, timeout_ms)
        self.ib_arena, self.ib_put = ib_arena, 0
        self.ib_view = ib_arena.view.view(0, ib_arena.size, "I")
        self._ib_laps: list[int] = []  # the packet index when the arena last wrapped
        self._packets: list[bytes] = []
        self._pm4: list[int] = []
        assert kq.gart.view is not None
        if int(self.wptr[0]) == 0:  # type: ignore[arg-type]  # a new queue: every slot INVALID, as ROCr starts one
            kq.gart.view.write(0, aql.amd_queue(max_cu_id, max_wave_id))
            self.ring.write(0, aql.invalid() * self.ring_units)

    def _record(self, packet: list[int]) -> AQLQueue:
        self._pm4 += packet
        return self

    def _flush_pm4(self) -> None:
        """Move the PM4 recorded so far into the IB arena and queue a vendor packet that runs it."""
        if not self._pm4:
            return
        dwords, self._pm4 = self._pm4, []
        n = len(dwords)
        if n > len(self.ib_view):
            raise ValueError(f"{self.name}: {n} PM4 dwords exceed the {len(self.ib_view)}-dword IB arena")
        if self.ib_put + n > len(self.ib_view):  # wrap: the packets that used the arena's start must be done
            target = self.put + len(self._packets)
            if self._packets:
                self.submit()
            self._wait_engine(lambda: int(self.rptr[0]) >= target, "finish the PM4 IBs before the arena wraps")  # type: ignore
            self.ib_put = 0
        addr = self.ib_arena.va + self.ib_put * 4
        self.ib_view[self.ib_put:self.ib_put + n] = dwords
        self.ib_put += n + (-n % 8)  # keep IBs 32-byte aligned
        self._packets.append(aql.pm4_ib(addr, n))

    def exec(self, launch: KernelLaunch) -> AQLQueue:
        """A KERNEL_DISPATCH packet (barrier bit set: it starts after the packets before it finish)."""
        self._flush_pm4()
        self._packets.append(aql_dispatch(launch))
        return self

    def extend(self, packets: Sequence[bytes]) -> AQLQueue:
        """Queue prebuilt 64-byte AQL packets (a recorded batch) after what is recorded so far."""
        self._flush_pm4()
        for packet in packets:
            if len(packet) != aql.PACKET_SIZE:
                raise ValueError(f"{self.name}: an AQL packet is {aql.PACKET_SIZE} bytes, got {len(packet)}")
        self._packets += packets
        return self

    @property
    def pending_packets(self) -> list[bytes]:
        """The AQL packets recorded since the last submit (PM4 not yet flushed is not among them)."""
        return list(self._packets)

    def _doorbell_value(self) -> int:
        return self.put - 1

    def submit(self) -> None:
        self._flush_pm4()
        packets, self._packets = self._packets, []
        if not packets:
            return
        self._reserve(len(packets))
        for packet in packets:
            off = (self.put % self.ring_units) * aql.PACKET_SIZE
            body, first = aql.publish_order(packet)
            self.ring.write(off + 4, body)
            self.ring_dwords[off // 4] = first  # the header last: the packet becomes valid in one store
            self.put += 1
        self.submitted_packets += len(packets)
        self._publish()


class SDMAQueue(HWQueue):
    """An SDMA copy queue (KFD queue type SDMA): copies, fences (+ TRAP for host wake-ups), polls and timestamps."""

    unit = 1
    kind = "copy"

    def __init__(self, kq: KfdQueue, events: DeviceEvents | None, name: str = "copy",
                 max_copy: int = sdma.MAX_COPY_SIZE, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if kq.queue_type not in (QueueType.SDMA, QueueType.SDMA_XGMI, QueueType.SDMA_BY_ENG_ID):
            raise ValueError(f"SDMAQueue: KFD queue {kq.queue_id} is {kq.queue_type.name}, not an SDMA queue")
        super().__init__(kq, events, name, timeout_ms)
        self.max_copy = max_copy

    def copy(self, dest: int, src: int, nbytes: int) -> SDMAQueue:
        """Copy `nbytes` from GPU address `src` to `dest`, one COPY_LINEAR packet per `max_copy` bytes."""
        for off in range(0, nbytes, self.max_copy):
            n = min(self.max_copy, nbytes - off)
            self._record(sdma.copy_linear(dest + off, src + off, n, self.max_copy))
        return self

    def wait(self, signal: Signal, value: int) -> SDMAQueue:
        """Stall the engine until `signal` >= `value` (32-bit compare)."""
        return self._record(sdma.poll_regmem(signal.va, _mask32(value)))  # type: ignore[return-value]

    def signal(self, signal: Signal, value: int, interrupt: bool = True) -> SDMAQueue:
        """FENCE `value` into `signal`; with `interrupt` also the event id into the mailbox and a TRAP."""
        self._record(sdma.fence(signal.va, _mask32(value)))
        if interrupt and self.events is not None:
            self._record(sdma.fence(self.events.mailbox_va, self.events.event_id))
            self._record(sdma.trap(self.events.event_id))
        return self

    def timestamp(self, signal: Signal) -> SDMAQueue:
        """Write the global GPU timestamp into `signal`'s timestamp slot."""
        return self._record(sdma.timestamp(signal.timestamp_va))  # type: ignore[return-value]

    def submit(self) -> None:
        packets, self.pending = self.pending, []
        if not packets:
            return
        size = self.kq.ring_size
        for packet in packets:
            nbytes = 4 * len(packet)
            tail = size - self.put % size
            if nbytes > tail:  # never across the end: NOP-fill the tail (zero dwords are 1-dword NOPs)
                self._reserve(tail)
                self.ring.write(self.put % size, bytes(tail))
                self.put += tail
            self._reserve(nbytes)
            start = (self.put % size) // 4
            self.ring_dwords[start:start + len(packet)] = packet
            self.put += nbytes
        self.submitted_packets += len(packets)
        self._publish()


def ring_dwords(queue: HWQueue, start: int, count: int) -> list[int]:
    """`count` dwords of `queue`'s ring from dword `start` (modulo the ring), for tests and traces."""
    n = queue.kq.ring_size // 4
    return [int(queue.ring_dwords[(start + i) % n]) for i in range(count)]  # type: ignore[arg-type]


def split_copy(nbytes: int, max_copy: int = sdma.MAX_COPY_SIZE) -> Sequence[tuple[int, int]]:
    """The (offset, size) pieces an SDMA copy of `nbytes` is split into."""
    return [(off, min(max_copy, nbytes - off)) for off in range(0, nbytes, max_copy)]


__all__ = ["KernelLaunch", "HWQueue", "PM4ComputeQueue", "AQLQueue", "SDMAQueue", "user_sgpr_values", "ring_dwords",
           "pm4_dispatch", "aql_dispatch", "pm4_signal", "memory_barrier", "PM4_WAIT_REFERENCE_DWORD",
           "PM4_SIGNAL_VALUE_DWORD", "SDMA_POLL_VALUE_DWORD", "SDMA_FENCE_VALUE_DWORD",
           "split_copy", "COMPUTE_PGM_LO", "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2", "COMPUTE_PGM_RSRC3",
           "COMPUTE_USER_DATA_0", "COMPUTE_NUM_THREAD_X", "COMPUTE_START_X", "COMPUTE_TMPRING_SIZE",
           "COMPUTE_DISPATCH_SCRATCH_BASE_LO", "COMPUTE_RESTART_X", "COMPUTE_RESOURCE_LIMITS", "HDP_FLUSH_REQ",
           "HDP_FLUSH_DONE", "LDS_GRANULE", "IB_ARENA_SIZE"]
