"""The fake GPU behind a `FakeKfd`: a command processor for the PM4 and AQL compute queues and an SDMA engine, each
reading the real bytes the runtime wrote into its rings, decoding them with `pm4`/`aql`/`sdma` (a packet those
modules do not know is an error) and executing them on the fake driver's memory as that GPU sees it.

    platform = MockPlatform([MI300X])
    gpu = FakeGpu(platform.kfd, gpu_id)       # attaches to the doorbell and progress hooks

* By default execution is synchronous: a doorbell runs the queue until it is empty or blocked on a wait; WAIT_EVENTS
  (the driver's progress hooks) retries blocked queues, so a signal the CPU sets late releases them. With
  `threaded=True` the engines run on their own thread beside the host (a doorbell wakes it, it polls blocked
  waits), so the host's ordering of ring writes, write pointer and doorbell is exercised the way hardware sees it.
* RELEASE_MEM with int_sel 2 and SDMA TRAP raise an interrupt (`FakeKfd.signal_interrupt`), which is what wakes the
  host's waits; a RELEASE_MEM with data_sel 3 and SDMA TIMESTAMP write the synthetic 100 MHz clock (`clock`), which
  advances by one tick per packet, one per wave instruction a dispatch ran and one per KiB an SDMA copy moved.
* Kernels run on the gfx942 wave64 interpreter (`mock.isa`): AQL KERNEL_DISPATCH through `run_aql_dispatch`,
  PM4 DISPATCH_DIRECT from the SH registers (COMPUTE_PGM_LO/HI, RSRC1-3, USER_DATA, NUM_THREAD, TMPRING).
* A GPU access to an unmapped address stops the queue (`FaultedQueue`) and raises the MEMORY event with the address;
  a malformed or unknown packet raises `CommandError` to whoever made the GPU run (the doorbell or WAIT_EVENTS).
"""

from __future__ import annotations

import struct
import threading
import time
import weakref
from dataclasses import dataclass, field

from ember.amd_runtime import aql, pm4, sdma
from ember.amd_runtime.kfd import Kfd, QueueType
from ember.amd_runtime.kfd_queue import DoorbellPages, create_queue
from ember.amd_runtime.memory import GpuBuffer, GpuMemory
from ember.amd_runtime.mock.driver import FakeKfd, MockBo, MockPlatform, MockQueue
from ember.amd_runtime.mock.isa import KernelCode, MemoryFault, MemoryProgram, run_aql_dispatch, run_dispatch
from ember.amd_runtime.mock.topologies import MI300X_CPX, TopologyProfile
from ember.amd_runtime.queue import (
    COMPUTE_DISPATCH_SCRATCH_BASE_LO,
    COMPUTE_NUM_THREAD_X,
    COMPUTE_PGM_LO,
    COMPUTE_PGM_RSRC1,
    COMPUTE_PGM_RSRC2,
    COMPUTE_PGM_RSRC3,
    COMPUTE_TMPRING_SIZE,
    COMPUTE_USER_DATA_0,
    HDP_FLUSH_DONE,
    HDP_FLUSH_REQ,
    IB_ARENA_SIZE,
    LDS_GRANULE,
    AQLQueue,
    PM4ComputeQueue,
    SDMAQueue,
)
from ember.amd_runtime.signal import SIGNAL_PAGE_SIZE, DeviceEvents, SignalPool
from ember.amd_runtime.topology import GpuNode, discover_gpus

TICKS_PER_PACKET = 1
BYTES_PER_TICK = 1024
_RELEASE_EVENTS = frozenset({pm4.CACHE_FLUSH_AND_INV_TS_EVENT, pm4.CS_PARTIAL_FLUSH})


class CommandError(RuntimeError):
    """The fake GPU met a packet it cannot execute (unknown, malformed, or a feature it does not model)."""


@dataclass(eq=False)
class _QueueState:
    """The engine's private state for one queue: registers and an indirect buffer in progress."""

    queue: MockQueue
    regs: dict[int, int] = field(default_factory=dict)
    ib: tuple[int, int, int] | None = None  # (address, size in dwords, dwords done)
    fault: MemoryFault | None = None
    error: CommandError | None = None  # the queue hit a packet it cannot run: it is stopped


def _compare(function: int, value: int, reference: int) -> bool:
    if function == pm4.FUNC_ALWAYS:
        return True
    return {pm4.FUNC_LT: value < reference, pm4.FUNC_LE: value <= reference, pm4.FUNC_EQ: value == reference,
            pm4.FUNC_NE: value != reference, pm4.FUNC_GE: value >= reference,
            pm4.FUNC_GT: value > reference}[function]


class FakeGpu:
    """The engines of one GPU `gpu_id` of `fake`. `packets` counts executed packets by name; `dispatches` counts
    kernels run; `clock` is the 100 MHz counter."""

    def __init__(self, fake: FakeKfd, gpu_id: int, threaded: bool = False, poll_s: float = 0.0005):
        if gpu_id not in fake.gpus:
            raise ValueError(f"FakeGpu: gpu 0x{gpu_id:x} is not a GPU of this fake KFD")
        self.fake, self.gpu_id = fake, gpu_id
        self.vm = fake.gpu_vm(gpu_id)
        self.clock = 0
        self.packets: dict[str, int] = {}
        self.dispatches = 0
        self.instructions = 0
        self.busy_s = 0.0  # host seconds spent executing packets (what a benchmark subtracts to get host overhead)
        self._states: dict[int, _QueueState] = {}  # by queue id
        self._programs: weakref.WeakKeyDictionary[MockBo, MemoryProgram] = weakref.WeakKeyDictionary()
        self._running = False
        self.threaded, self.poll_s = threaded, poll_s
        self.thread_error: BaseException | None = None  # what stopped the GPU thread
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        fake.on_doorbell.append(self._on_doorbell)
        if threaded:  # the GPU runs beside the host: a doorbell only wakes it, WAIT_EVENTS just sleeps
            self._thread = threading.Thread(target=self._gpu_thread, name=f"fake-gpu-{gpu_id:x}", daemon=True)
            self._thread.start()
        else:
            fake.progress_hooks.append(self.progress)

    def detach(self) -> None:
        """Stop listening to the fake driver's doorbells and progress (and stop the GPU thread)."""
        self.fake.on_doorbell.remove(self._on_doorbell)
        if self._thread is not None:
            self._stop.set()
            self._kick.set()
            self._thread.join()
            self._thread = None
        else:
            self.fake.progress_hooks.remove(self.progress)

    def _gpu_thread(self) -> None:
        """The threaded mode's engine loop: run the queues whenever a doorbell rings, and keep polling the waits
        that block them (the CPU may release one with a plain store). A packet it cannot run is a hardware
        exception for the host (`thread_error` holds it)."""
        while not self._stop.is_set():
            self._kick.wait(self.poll_s)
            self._kick.clear()
            try:
                with self.fake.lock:
                    self.progress()
            except CommandError as e:
                self.thread_error = e
                self.fake.raise_hw_exception(self.gpu_id)

    # ---- scheduling ----------------------------------------------------------------------------------------------

    def _on_doorbell(self, queue: MockQueue, value: int) -> None:
        if queue.gpu_id == self.gpu_id:
            if self.threaded:
                self._kick.set()
            else:
                self.progress()

    def _queues(self) -> list[_QueueState]:
        live = {q.queue_id: q for q in self.fake.queues.values() if q.gpu_id == self.gpu_id}
        for qid in [qid for qid, st in self._states.items() if live.get(qid) is not st.queue]:
            del self._states[qid]
        return [self._states.setdefault(qid, _QueueState(q)) for qid, q in sorted(live.items())]

    def progress(self) -> bool:
        """Run every queue of this GPU until each is empty, blocked or faulted; True if any packet ran."""
        if self._running:  # a doorbell rung from inside execution (never by our own packets) waits for this loop
            return False
        self._running = True
        any_work, start = False, time.perf_counter()
        try:
            with self.fake.lock:
                while True:
                    moved = False
                    for st in self._queues():
                        moved |= self._run_queue(st)
                    if not moved:
                        break
                    any_work = True
        finally:
            self._running = False
            self.busy_s += time.perf_counter() - start
        return any_work

    def _run_queue(self, st: _QueueState) -> bool:
        if st.fault is not None or st.error is not None:
            return False
        try:
            if st.queue.queue_type == QueueType.COMPUTE:
                return self._run_pm4_queue(st)
            if st.queue.queue_type == QueueType.COMPUTE_AQL:
                return self._run_aql_queue(st)
            return self._run_sdma_queue(st)
        except MemoryFault as e:
            st.fault = e
            self.fake.raise_memory_fault(self.gpu_id, e.address, e.write)
            return True
        except CommandError as e:
            st.error = e
            raise

    def _count(self, name: str) -> None:
        self.packets[name] = self.packets.get(name, 0) + 1

    def _ptrs(self, q: MockQueue) -> tuple[int, int]:
        return self.fake.read_u64(q.rptr_va, self.gpu_id), self.fake.read_u64(q.wptr_va, self.gpu_id)

    def _u32(self, addr: int) -> int:
        return int(struct.unpack("<I", self.fake.read(addr, 4, self.gpu_id))[0])

    # ---- PM4 -------------------------------------------------------------------------------------------------------

    def _ring_dwords(self, q: MockQueue, start: int, count: int) -> list[int]:
        """`count` dwords of a dword-addressed ring from dword index `start` (modulo the ring)."""
        n = q.ring_size // 4
        first = min(count, n - start % n)
        raw = self.fake.read(q.ring_va + (start % n) * 4, first * 4, self.gpu_id)
        if count > first:
            raw += self.fake.read(q.ring_va, (count - first) * 4, self.gpu_id)
        return list(struct.unpack(f"<{count}I", raw))

    def _run_pm4_queue(self, st: _QueueState) -> bool:
        q, moved = st.queue, False
        rptr, wptr = self._ptrs(q)
        dwords = self._ring_dwords(q, rptr, wptr - rptr) if wptr > rptr else []  # what the host published
        pos = 0
        while pos < len(dwords) or st.ib is not None:
            if st.ib is not None:
                if not self._run_ib(st):
                    break
                moved = True
                continue
            hdr = dwords[pos]
            if hdr >> 30 != 3:
                raise CommandError(f"gpu 0x{self.gpu_id:x} queue {q.queue_id}: ring dword {rptr + pos} ({hdr:#010x}) "
                                   "is not a type-3 PM4 packet")
            size = self._pm4_size(dwords, pos)
            if pos + size > len(dwords):
                raise CommandError(f"gpu 0x{self.gpu_id:x} queue {q.queue_id}: the packet at ring dword {rptr + pos} "
                                   f"needs {size} dwords, the write pointer publishes {len(dwords) - pos}")
            if not self._pm4_packet(st, self._decode_pm4(dwords, pos, st), in_ib=False):
                break
            pos += size
            self.fake.write_u64(q.rptr_va, rptr + pos, self.gpu_id)
            moved = True
        return moved

    def _run_ib(self, st: _QueueState) -> bool:
        """Run the indirect buffer in progress to its end (True) or to a blocked wait (False)."""
        assert st.ib is not None
        addr, size, done = st.ib
        raw = self.fake.read(addr, size * 4, self.gpu_id)
        dwords = list(struct.unpack(f"<{size}I", raw))
        while done < size:
            pkt = self._decode_pm4(dwords, done, st)
            if isinstance(pkt, pm4.PredExec) and not pkt.xcc_mask & 1:  # one XCC: the block is for the others
                done += pkt.size + pkt.dword_count
                st.ib = (addr, size, done)
                continue
            if not self._pm4_packet(st, pkt, in_ib=True):
                return False
            done += pkt.size
            st.ib = (addr, size, done)
        st.ib = None
        return True

    @staticmethod
    def _pm4_size(dwords: list[int], offset: int) -> int:
        hdr = dwords[offset]
        if (hdr >> 8) & 0xFF == pm4.NOP and (hdr >> 16) & 0x3FFF == 0x3FFF:
            return 1
        return ((hdr >> 16) & 0x3FFF) + 2

    def _decode_pm4(self, dwords: list[int], offset: int, st: _QueueState) -> pm4.Packet:
        try:
            return pm4.decode_one(dwords, offset)
        except ValueError as e:
            raise CommandError(f"gpu 0x{self.gpu_id:x} queue {st.queue.queue_id}: {e}") from None

    def _pm4_packet(self, st: _QueueState, pkt: pm4.Packet, in_ib: bool) -> bool:
        """Execute a decoded PM4 packet; False when it is a wait that is not satisfied yet."""
        self.clock += TICKS_PER_PACKET
        where = f"gpu 0x{self.gpu_id:x} queue {st.queue.queue_id}"
        if isinstance(pkt, pm4.WaitRegMem):
            if pkt.mem_space == pm4.MEM_SPACE_MEMORY:
                if not _compare(pkt.function, self._u32(pkt.addr) & pkt.mask, pkt.reference & pkt.mask):
                    return False
            elif (pkt.operation, pkt.addr & 0xFFFFFFFF, pkt.addr >> 32) != \
                    (pm4.OPERATION_WRITE_WAIT, HDP_FLUSH_REQ, HDP_FLUSH_DONE):
                raise CommandError(f"{where}: WAIT_REG_MEM on register {pkt.addr & 0xFFFFFFFF:#x} (only the HDP "
                                   "flush handshake is modelled)")
        elif isinstance(pkt, pm4.ReleaseMem):
            self._release_mem(pkt, where)
        elif isinstance(pkt, pm4.SetShReg):
            for i, v in enumerate(pkt.values):
                st.regs[pkt.reg + i] = v
        elif isinstance(pkt, pm4.SetUconfigReg):
            for i, v in enumerate(pkt.values):
                st.regs[pkt.reg + i] = v
        elif isinstance(pkt, pm4.DispatchDirect):
            self._dispatch_direct(st, pkt)
        elif isinstance(pkt, pm4.IndirectBuffer):
            if in_ib:
                raise CommandError(f"{where}: nested INDIRECT_BUFFER (chained IBs are not modelled)")
            if not pkt.valid:
                raise CommandError(f"{where}: INDIRECT_BUFFER without the VALID bit")
            st.ib = (pkt.addr, pkt.size_dw, 0)
        elif isinstance(pkt, pm4.EventWrite):
            if pkt.event_type != pm4.CS_PARTIAL_FLUSH:
                raise CommandError(f"{where}: EVENT_WRITE of event {pkt.event_type:#x} (only CS_PARTIAL_FLUSH)")
        elif isinstance(pkt, pm4.WriteData):
            if pkt.dst_sel not in (pm4.WRITE_DATA_DST_SEL_MEMORY, pm4.WRITE_DATA_DST_SEL_TC_L2):
                raise CommandError(f"{where}: WRITE_DATA to dst_sel {pkt.dst_sel} (only memory)")
            data = struct.pack(f"<{len(pkt.data)}I", *pkt.data)
            self.fake.write(pkt.addr, data[:4] * len(pkt.data) if pkt.one_addr else data, self.gpu_id)
        elif isinstance(pkt, pm4.PredExec):
            if not in_ib:
                raise CommandError(f"{where}: PRED_EXEC outside an indirect buffer (the CP ignores it there)")
        elif not isinstance(pkt, (pm4.Nop, pm4.AcquireMem)):
            raise CommandError(f"{where}: {type(pkt).__name__} is not executed by the fake command processor")
        self._count(type(pkt).__name__)
        return True

    def _release_mem(self, pkt: pm4.ReleaseMem, where: str) -> None:
        if pkt.event_type not in _RELEASE_EVENTS or pkt.dst_sel != pm4.DST_SEL_MEMORY:
            raise CommandError(f"{where}: RELEASE_MEM event {pkt.event_type:#x} dst_sel {pkt.dst_sel} is not modelled")
        if pkt.data_sel == pm4.DATA_SEL_32BIT_LOW:
            self.fake.write(pkt.addr, struct.pack("<I", pkt.data & 0xFFFFFFFF), self.gpu_id)
        elif pkt.data_sel == pm4.DATA_SEL_64BIT:
            self.fake.write_u64(pkt.addr, pkt.data, self.gpu_id)
        elif pkt.data_sel == pm4.DATA_SEL_GPU_CLOCK:
            self.fake.write_u64(pkt.addr, self.clock, self.gpu_id)
        if pkt.int_sel == pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM:
            self.fake.signal_interrupt(self.gpu_id, pkt.ctxid)
        elif pkt.int_sel != pm4.INT_SEL_NONE:
            raise CommandError(f"{where}: RELEASE_MEM int_sel {pkt.int_sel} is not modelled")

    def _program_for(self, code_addr: int) -> MemoryProgram:
        """The decoded-instruction cache of the BO holding the code at `code_addr` (a new BO gets a new cache)."""
        bo = self.fake.gpus[self.gpu_id].lookup(code_addr)
        if bo is None:
            raise MemoryFault(code_addr, 4, False)
        if (prog := self._programs.get(bo)) is None:
            prog = self._programs[bo] = MemoryProgram(self.vm)
        return prog

    def _dispatch_direct(self, st: _QueueState, pkt: pm4.DispatchDirect) -> None:
        r = st.regs
        where = f"gpu 0x{self.gpu_id:x} queue {st.queue.queue_id}: DISPATCH_DIRECT"
        try:
            entry = (r[COMPUTE_PGM_LO] | r[COMPUTE_PGM_LO + 1] << 32) << 8
            rsrc1, rsrc2 = r[COMPUTE_PGM_RSRC1], r[COMPUTE_PGM_RSRC2]
            local = tuple(r[COMPUTE_NUM_THREAD_X + i] for i in range(3))
        except KeyError as e:
            raise CommandError(f"{where} before register {e.args[0]:#x} was set") from None
        user_count = (rsrc2 >> 1) & 0x1F
        user = [r.get(COMPUTE_USER_DATA_0 + i, 0) for i in range(user_count)]
        tmpring = r.get(COMPUTE_TMPRING_SIZE, 0)
        scratch_per_lane = ((tmpring >> 12) & 0x1FFF) * 1024 // 64
        if scratch_per_lane and not r.get(COMPUTE_DISPATCH_SCRATCH_BASE_LO, 0):
            raise CommandError(f"{where}: TMPRING_SIZE asks for scratch but no scratch base is set")
        if rsrc2 & 1 and not scratch_per_lane:  # SCRATCH_EN: the waves address private memory
            raise CommandError(f"{where}: the kernel uses scratch (rsrc2 SCRATCH_EN) but COMPUTE_TMPRING_SIZE gives "
                               "its waves none")
        lds = ((rsrc2 >> 15) & 0x1FF) * LDS_GRANULE
        kernel = KernelCode(entry, rsrc1, rsrc2, r.get(COMPUTE_PGM_RSRC3, 0), code_properties=0,
                            group_segment_size=lds, private_segment_size=scratch_per_lane)
        if pkt.initiator & 1 == 0:
            raise CommandError(f"{where}: initiator {pkt.initiator:#x} lacks COMPUTE_SHADER_EN")
        stats = run_dispatch(self._program_for(entry), kernel, memory=self.vm, kernarg_addr=0,
                             grid=(pkt.x, pkt.y, pkt.z), grid_in="workgroups", workgroup_size=local,
                             user_sgprs=user)
        self._account(stats.instructions)

    def _account(self, instructions: int) -> None:
        self.dispatches += 1
        self.instructions += instructions
        self.clock += instructions

    # ---- AQL -------------------------------------------------------------------------------------------------------

    def _run_aql_queue(self, st: _QueueState) -> bool:
        q, moved = st.queue, False
        slots = q.ring_size // aql.PACKET_SIZE
        rptr, wptr = self._ptrs(q)
        while rptr < wptr:
            addr = q.ring_va + (rptr % slots) * aql.PACKET_SIZE
            where = f"gpu 0x{self.gpu_id:x} queue {q.queue_id} packet {rptr}"
            if st.ib is None:
                try:
                    pkt = aql.decode(self.fake.read(addr, aql.PACKET_SIZE, self.gpu_id))
                except ValueError as e:
                    raise CommandError(f"{where}: {e}") from None
                if isinstance(pkt, aql.Invalid):
                    raise CommandError(f"{where}: the write pointer publishes an INVALID packet (header written "
                                       "before the body, or not at all)")
                self.clock += TICKS_PER_PACKET
                if isinstance(pkt, aql.KernelDispatch):
                    if pkt.completion_signal:
                        raise CommandError(f"{where}: HSA completion signals are not modelled (use PM4 signals)")
                    self._check_aql_scratch(q, pkt, where)
                    stats = run_aql_dispatch(self.vm, addr, self._program_for(pkt.kernel_object))
                    self._account(stats.instructions)
                    self._count("KERNEL_DISPATCH")
                elif isinstance(pkt, aql.Pm4Ib):
                    if pkt.completion_signal:
                        raise CommandError(f"{where}: HSA completion signals are not modelled")
                    st.ib = (pkt.ib.addr, pkt.ib.size_dw, 0)
                    self._count("PM4_IB")
                else:
                    raise CommandError(f"{where}: {type(pkt).__name__} packets are not executed by the fake CP")
            if st.ib is not None and not self._run_ib(st):
                break
            # the packet processor hands the slot back: INVALID header, then the read index moves on
            self.fake.write(addr, struct.pack("<H", aql.PACKET_TYPE_INVALID), self.gpu_id)
            rptr += 1
            self.fake.write_u64(q.rptr_va, rptr, self.gpu_id)
            moved = True
        return moved

    def _check_aql_scratch(self, q: MockQueue, pkt: aql.KernelDispatch, where: str) -> None:
        """A kernel with private memory needs the scratch the queue's amd_queue_t describes (the CP programs the
        waves' scratch from it): backing memory, and lanes at least as large as the kernel's private segment."""
        private = max(pkt.private_segment_size, struct.unpack("<I", self.fake.read(pkt.kernel_object + 4, 4,
                                                                                     self.gpu_id))[0])
        if not private:
            return
        base = q.wptr_va - aql.AMD_QUEUE.write_dispatch_id
        location, size = struct.unpack("<QQ", self.fake.read(base + aql.AMD_QUEUE.scratch_backing_memory_location, 16,
                                                             self.gpu_id))
        (lane,) = struct.unpack("<I", self.fake.read(base + aql.AMD_QUEUE.scratch_wave64_lane_byte_size, 4,
                                                     self.gpu_id))
        if not location or lane < private or self.fake.gpus[self.gpu_id].lookup(location) is None:
            raise CommandError(f"{where}: the kernel needs {private} bytes of scratch per lane, but the queue's "
                               f"amd_queue_t has scratch at 0x{location:x} ({size} bytes, {lane} per lane)")

    # ---- SDMA ------------------------------------------------------------------------------------------------------

    def _run_sdma_queue(self, st: _QueueState) -> bool:
        q, moved = st.queue, False
        rptr, wptr = self._ptrs(q)
        while rptr < wptr:
            off = rptr % q.ring_size
            where = f"gpu 0x{self.gpu_id:x} sdma queue {q.queue_id} byte {rptr}"
            avail = min(wptr - rptr, q.ring_size - off)  # packets never straddle the end of the ring
            if avail % 4 or off % 4:
                raise CommandError(f"{where}: the write pointer is not dword aligned ({wptr})")
            raw = self.fake.read(q.ring_va + off, min(avail, 4096), self.gpu_id)
            dwords = struct.unpack(f"<{len(raw) // 4}I", raw)
            try:
                pkt = sdma.decode_one(dwords, 0)
            except ValueError as e:
                if "truncated" in str(e) and len(raw) < avail:
                    raw = self.fake.read(q.ring_va + off, avail, self.gpu_id)
                    pkt = sdma.decode_one(struct.unpack(f"<{len(raw) // 4}I", raw), 0)
                else:
                    raise CommandError(f"{where}: {e}") from None
            if not self._sdma_packet(pkt, where):
                break
            rptr += 4 * pkt.size
            self.fake.write_u64(q.rptr_va, rptr, self.gpu_id)
            moved = True
        return moved

    def _sdma_packet(self, pkt: sdma.Packet, where: str) -> bool:
        fake, gpu = self.fake, self.gpu_id
        self.clock += TICKS_PER_PACKET
        if isinstance(pkt, sdma.CopyLinear):
            fake.write(pkt.dst, fake.read(pkt.src, pkt.nbytes, gpu), gpu)
            self.clock += pkt.nbytes // BYTES_PER_TICK
        elif isinstance(pkt, sdma.Fence):
            fake.write(pkt.addr, struct.pack("<I", pkt.value), gpu)
        elif isinstance(pkt, sdma.Trap):
            fake.signal_interrupt(gpu, pkt.int_ctx)
        elif isinstance(pkt, sdma.PollRegmem):
            if pkt.hdp_flush:
                pass  # the HDP flush form: nothing is cached between host and this fake memory
            elif not pkt.mem_poll:
                raise CommandError(f"{where}: POLL_REGMEM on a register is not modelled")
            elif not _compare(pkt.function, self._u32(pkt.addr) & pkt.mask, pkt.value & pkt.mask):
                return False
        elif isinstance(pkt, sdma.Timestamp):
            fake.write_u64(pkt.addr, self.clock, gpu)
        elif isinstance(pkt, sdma.Write):
            fake.write(pkt.addr, struct.pack(f"<{len(pkt.data)}I", *pkt.data), gpu)
        elif isinstance(pkt, sdma.Atomic):
            if pkt.operation != sdma.ATOMIC_ADD64:
                raise CommandError(f"{where}: ATOMIC operation {pkt.operation} (only ADD64)")
            fake.write_u64(pkt.addr, fake.read_u64(pkt.addr, gpu) + pkt.src, gpu)
        elif not isinstance(pkt, sdma.Nop):
            raise CommandError(f"{where}: {type(pkt).__name__} is not executed by the fake SDMA engine")
        self._count(type(pkt).__name__)
        return True


def attach_fake_gpus(fake: FakeKfd) -> dict[int, FakeGpu]:
    """A FakeGpu for every GPU of `fake`, by gpu_id."""
    return {gpu_id: FakeGpu(fake, gpu_id) for gpu_id in fake.gpus}


@dataclass
class MockGpuRig:
    """One opened fake GPU below the device layer (tests, benchmarks): the driver objects in their wiring order
    (discover_gpus, Kfd.open, open_gpu, GpuMemory, DeviceEvents, SignalPool) and factories for queues."""

    platform: MockPlatform
    kfd: Kfd
    node: GpuNode
    memory: GpuMemory
    events: DeviceEvents
    signals: SignalPool
    doorbells: DoorbellPages
    gpu: FakeGpu
    timeout_ms: int = 500

    def compute(self, ring_size: int = 1 << 16) -> PM4ComputeQueue | AQLQueue:
        """A new compute queue: PM4 on a single-XCC node, AQL on a multi-XCC one."""
        if self.node.xccs == 1:
            kq = create_queue(self.kfd, self.memory, self.node, self.doorbells, QueueType.COMPUTE, ring_size=ring_size)
            return PM4ComputeQueue(kq, self.events, "compute", timeout_ms=self.timeout_ms)
        kq = create_queue(self.kfd, self.memory, self.node, self.doorbells, QueueType.COMPUTE_AQL, ring_size=ring_size)
        arena = self.memory.alloc(IB_ARENA_SIZE, uncached=True, cpu_access=True)
        return AQLQueue(kq, self.events, arena, "compute", timeout_ms=self.timeout_ms)

    def copy(self, ring_size: int = 1 << 16) -> SDMAQueue:
        """A new SDMA queue."""
        kq = create_queue(self.kfd, self.memory, self.node, self.doorbells, QueueType.SDMA, ring_size=ring_size)
        return SDMAQueue(kq, self.events, "copy", timeout_ms=self.timeout_ms)

    def host(self, nbytes: int) -> GpuBuffer:
        """Host memory the GPU can reach, with a CPU view."""
        return self.memory.alloc(nbytes, host=True)


def open_mock_gpu(profile: TopologyProfile = MI300X_CPX, device: str = "AMD:0", threaded: bool = False) -> MockGpuRig:
    """A one-GPU MockPlatform of `profile`, opened, with its FakeGpu attached (on its own thread if `threaded`)."""
    platform = MockPlatform([profile])
    node, kfd = discover_gpus(platform, visible=())[0], Kfd.open(platform)
    memory = GpuMemory(kfd, node.gpu_id, kfd.open_gpu(node.gpu_id, node.render_minor), device)
    events = DeviceEvents.create(kfd, memory, device)
    signals = SignalPool(lambda: memory.alloc(SIGNAL_PAGE_SIZE, uncached=True, cpu_access=True))
    return MockGpuRig(platform, kfd, node, memory, events, signals, DoorbellPages(kfd),
                      FakeGpu(platform.kfd, node.gpu_id, threaded))

__all__ = ["FakeGpu", "CommandError", "attach_fake_gpus", "MockGpuRig", "open_mock_gpu"]
