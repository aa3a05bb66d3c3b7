"""Batched replay (the seed's hcq2, spec amd_hcq.md §1.4/§1.6): a list of kernel launches and copies of one AMD
device recorded once into per-queue packet batches, then replayed with new input buffers without recording again.

Recording:
* every kernel's kernarg block is packed once into the graph's own kernarg buffer; the buffer addresses of the
  graph's *inputs* (slots 0..n-1) are left as patch sites, and `exec` writes the new input addresses there
  (the input-address table: only addresses that changed since the last replay are written);
* jobs go to the compute queue (kernels) or the copy queue (copies); a job that touches memory a job on the other
  queue touched waits for that job's *signal slot* (one signal per queue, set to job index + 1 by the jobs others
  wait for); same-queue order is the queue's FIFO order. The compute batch ends by waiting for the copy batch;
* each queue's batch starts with a wait for the device timeline's previous value and the compute batch ends by
  signalling the next one (two patch sites, written at every replay);
* the PM4 queue's batch lives in an indirect buffer (a replay submits one INDIRECT_BUFFER packet); the AQL queue's
  batch is prebuilt 64-byte packets (dispatches, and PM4-IB packets for the waits, signals and timestamps) copied
  into the ring; the copy queue's packets are copied into its ring (KFD SDMA queues take no IBs).

`exec` first waits (with the hang timeout) until the GPU finished the previous replay, since that replay still reads
the kernargs, the IB and the slots that are about to be patched and reset. With `profile=True` every kernel is
bracketed by timestamps; `timings()` gives (kernel name, seconds) of the last replay.

    graph = AMDGraph(dev, [GraphKernel(prg, (0, out_mem), (4, 1, 1), (64, 1, 1))], n_inputs=1)
    graph.exec([x_mem]); graph.exec([y_mem], wait=True)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ember.amd_runtime import pm4, sdma
from ember.amd_runtime.queue import (
    PM4_SIGNAL_VALUE_DWORD,
    PM4_WAIT_REFERENCE_DWORD,
    SDMA_POLL_VALUE_DWORD,
    AQLQueue,
    KernelLaunch,
    PM4ComputeQueue,
    aql_dispatch,
    memory_barrier,
    pm4_dispatch,
    pm4_signal,
)
from ember.amd_runtime.signal import TIMESTAMP_DIVIDER, Signal

if TYPE_CHECKING:
    from ember.amd_runtime.device import AMDDevice, AMDMemory, AMDProgram
    from ember.amd_runtime.memory import GpuBuffer
    from ember.runtime import Buffer

@dataclass(frozen=True)
class GraphKernel:
    """One kernel launch of a graph: buffers are AMDMemory or an int, the index of a graph input."""

    program: AMDProgram
    bufs: tuple[AMDMemory | int, ...]
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    vals: tuple[int, ...] = ()


@dataclass(frozen=True)
class GraphCopy:
    """A copy of `nbytes` between two buffers of the graph's device (AMDMemory or input indices)."""

    dest: AMDMemory | int
    src: AMDMemory | int
    nbytes: int


GraphJob = GraphKernel | GraphCopy
LaunchRecord = tuple["AMDProgram | None", Sequence["Buffer"], Sequence[int], "Sequence[int] | None", Sequence[int]]


def _dims(size: Sequence[int]) -> tuple[int, int, int]:
    if not 1 <= len(size) <= 3:
        raise ValueError(f"AMDGraph: launch dimensions {tuple(size)} must be 1 to 3 sizes")
    return (*size, 1, 1)[:3]  # type: ignore[return-value]


@dataclass
class _Stream:
    """One queue's recorded batch: PM4 dwords (compute) or SDMA packets (copy), with its patch sites."""

    dwords: list[int]
    packets: list[list[int]]
    aql_items: list[bytes | list[int]]  # AQL: prebuilt packets and PM4 runs, in order
    timeline_wait: tuple[int, int] | None = None  # (item index or -1 for `dwords`, dword index of the value)
    timeline_signal: tuple[int, int] | None = None
    # the timeline's signal address sits before the value: WAIT_REG_MEM addr @2 (value @4), RELEASE_MEM addr @3
    # (value @5), POLL_REGMEM addr @1 (value @3); it changes when the timeline wraps onto its shadow signal


class AMDGraph:
    """A recorded batch of `jobs` on `device` taking `n_inputs` input buffers; `exec(inputs)` replays it."""

    def __init__(self, device: AMDDevice, jobs: Sequence[GraphJob], n_inputs: int, profile: bool = False):
        self.device, self.jobs, self.n_inputs, self.profile = device, list(jobs), n_inputs, profile
        if not self.jobs:
            raise ValueError("AMDGraph: a graph needs at least one kernel or copy")
        self._check_buffers()
        self.queue_of = ["copy" if isinstance(j, GraphCopy) else "compute" for j in self.jobs]
        self.waits, self.signalled = self._dependencies()
        self.slots = {"compute": device.signals.new(), "copy": device.signals.new()}
        self.prof: list[tuple[Signal, Signal]] = []
        self.input_table: list[int] = [0] * n_inputs  # the input addresses the kernargs and copies hold now
        self._kernarg_patches: list[list[int]] = [[] for _ in range(n_inputs)]  # offsets into the kernarg buffer
        self._copy_patches: list[list[tuple[int, int, int]]] = [[] for _ in range(n_inputs)]  # (packet, dword, off)
        self._owned: list[GpuBuffer] = []
        self.kernargs = self._pack_kernargs()
        self.compute_stream, self.copy_stream = self._record()
        self.ib: GpuBuffer | None = None
        self._aql_packets: list[bytes] = []
        self._ib_patch: dict[str, int] = {}  # "wait"/"signal" -> dword index in the IB
        self._bind()
        self._done = 0  # the ticket of the last replay (AMDDevice.wait)

    @classmethod
    def from_launches(cls, device: AMDDevice, launches: Sequence[LaunchRecord], inputs: Sequence[Buffer],
                      profile: bool = False) -> AMDGraph:
        """The graph of recorded launches (what a jit captured): each is (program, buffers, global_size,
        local_size, vals), with program None for a copy (buffers: dest, src). Buffers that are `inputs` (by
        identity) become input slots; replay with `exec_buffers`."""
        slot = {id(b): i for i, b in enumerate(inputs)}

        def mem(b: Buffer) -> AMDMemory | int:
            if id(b) in slot:
                return slot[id(b)]
            if b.device.split(":")[0] != "AMD" or b.allocator is not device.allocator:
                raise NotImplementedError(f"AMDGraph: {b!r} is not memory of {device.name} (graphs spanning "
                                          "devices are not implemented)")
            return b.ensure_allocated().raw  # type: ignore[no-any-return]

        jobs: list[GraphJob] = []
        for program, bufs, global_size, local_size, vals in launches:
            if program is None:
                dest, src = bufs
                if dest.nbytes != src.nbytes:
                    raise ValueError(f"AMDGraph: copy of {src.nbytes} bytes into {dest.nbytes}")
                jobs.append(GraphCopy(mem(dest), mem(src), dest.nbytes))
            else:
                jobs.append(GraphKernel(program, tuple(mem(b) for b in bufs), _dims(global_size),  # type: ignore
                                        _dims(local_size or (1,)), tuple(vals)))
        return cls(device, jobs, len(inputs), profile)

    def exec_buffers(self, inputs: Sequence[Buffer], wait: bool = False) -> float | None:
        """`exec` on runtime Buffers of this device (allocated if they are not yet)."""
        return self.exec([b.ensure_allocated().raw for b in inputs], wait)

    # ---- recording ---------------------------------------------------------------------------------------------

    def _check_buffers(self) -> None:
        from ember.amd_runtime.device import AMDMemory

        for i, job in enumerate(self.jobs):
            bufs = job.bufs if isinstance(job, GraphKernel) else (job.dest, job.src)
            for b in bufs:
                if isinstance(b, int):
                    if not 0 <= b < self.n_inputs:
                        raise ValueError(f"AMDGraph: job {i} names input {b}; the graph has {self.n_inputs} inputs")
                elif not isinstance(b, AMDMemory) or b.owner.gpu_id != self.device.node.gpu_id:
                    raise ValueError(f"AMDGraph: job {i} buffer {b!r} is not memory of {self.device.name}")
            if isinstance(job, GraphKernel) and job.program.amd is not self.device:
                raise ValueError(f"AMDGraph: job {i} ({job.program.name}) is a program of {job.program.amd.name}")

    @staticmethod
    def _key(b: AMDMemory | int) -> object:
        return ("input", b) if isinstance(b, int) else id(b.owner)

    def _dependencies(self) -> tuple[list[list[tuple[str, int]]], set[int]]:
        """Per job, the (other queue, job index) it must wait for; and the jobs that signal their queue's slot.
        Every buffer a kernel gets counts as read and written (the program does not say which)."""
        last: dict[object, dict[str, int]] = {}  # buffer -> queue -> last job touching it
        waits: list[list[tuple[str, int]]] = []
        signalled: set[int] = set()
        for i, job in enumerate(self.jobs):
            q = self.queue_of[i]
            bufs = job.bufs if isinstance(job, GraphKernel) else (job.dest, job.src)
            need: dict[str, int] = {}
            for b in bufs:
                for other, j in last.get(self._key(b), {}).items():
                    if other != q:
                        need[other] = max(need.get(other, -1), j)
                last.setdefault(self._key(b), {})[q] = i
            waits.append(sorted(need.items()))
            signalled |= {j for _, j in need.items()}
        copies = [i for i, q in enumerate(self.queue_of) if q == "copy"]
        if copies:
            signalled.add(copies[-1])  # the compute batch's end waits for the last copy
        return waits, signalled

    def _pack_kernargs(self) -> GpuBuffer | None:
        kernels = [(i, j) for i, j in enumerate(self.jobs) if isinstance(j, GraphKernel)]
        if not kernels:
            return None
        layouts = [j.program.layout(len(j.bufs), len(j.vals)) for _, j in kernels]
        offsets, end = [], 0
        for lay in layouts:
            end = -(-end // lay.align) * lay.align
            offsets.append(end)
            end += lay.alloc_size
        buf = self.device.memory.alloc(end, cpu_access=True)
        self._owned.append(buf)
        assert buf.view is not None
        self._launches: dict[int, KernelLaunch] = {}
        for (i, job), lay, off in zip(kernels, layouts, offsets):
            prg, d = job.program, job.program.kernel.descriptor
            va = buf.va + off
            addrs = [0 if isinstance(b, int) else b.va for b in job.bufs]
            blob = lay.pack(addrs, job.vals, job.global_size, job.local_size, kernarg_address=va,
                            kernel_object=prg.descriptor_va, group_segment_size=d.group_segment_fixed_size,
                            private_segment_size=d.private_segment_fixed_size)
            buf.view.write(off, blob)
            for b, boff in zip(job.bufs, lay.buffer_offsets):
                if isinstance(b, int):
                    self._kernarg_patches[b].append(off + boff)
            private = d.private_segment_fixed_size
            scratch_va, tmpring = self.device.ensure_scratch(private) if private else (0, 0)
            self._launches[i] = KernelLaunch(d, prg.descriptor_va, prg.entry_va, va, job.global_size,
                                             job.local_size, d.group_segment_fixed_size, private,
                                             lay.dispatch_packet_address(va), scratch_va, tmpring)
        return buf

    def _record(self) -> tuple[_Stream, _Stream]:
        dev = self.device
        timeline, events, aql = dev.timeline.signal, dev.events, isinstance(dev.compute, AQLQueue)
        compute = _Stream([], [], [])
        pm4_run: list[int] = []  # PM4 dwords not yet put into an AQL item

        def emit_pm4(dwords: list[int], patch: str | None = None, at: int = 0) -> None:
            base = len(pm4_run) if aql else len(compute.dwords)
            if patch is not None:
                site = (-2 if aql else -1, base + at)  # -2: the PM4 run being built (fixed up when it is closed)
                setattr(compute, patch, site)
            (pm4_run if aql else compute.dwords).extend(dwords)

        def close_run() -> None:
            if pm4_run:
                idx = len(compute.aql_items)
                for name in ("timeline_wait", "timeline_signal"):
                    site = getattr(compute, name)
                    if site is not None and site[0] == -2:
                        setattr(compute, name, (idx, site[1]))
                compute.aql_items.append(list(pm4_run))
                pm4_run.clear()

        emit_pm4(pm4.wait_reg_mem(mem=timeline.va, reference=0), "timeline_wait", PM4_WAIT_REFERENCE_DWORD)
        emit_pm4(memory_barrier())  # the kernargs and inputs the CPU patched become visible to the GPU
        copy = _Stream([], [], [])
        copy.timeline_wait = (len(copy.packets), SDMA_POLL_VALUE_DWORD)
        copy.packets.append(sdma.poll_regmem(timeline.va, 0))
        for i, job in enumerate(self.jobs):
            waits = [pm4.wait_reg_mem(mem=self.slots[q].va, reference=j + 1) if self.queue_of[i] == "compute"
                     else sdma.poll_regmem(self.slots[q].va, j + 1) for q, j in self.waits[i]]
            if isinstance(job, GraphKernel):
                for w in waits:
                    emit_pm4(w)
                launch = self._launches[i]
                if self.profile:
                    st, en = dev.signals.new(), dev.signals.new()
                    self.prof.append((st, en))
                    emit_pm4(pm4.release_mem(st.timestamp_va, data_sel=pm4.DATA_SEL_GPU_CLOCK))
                if aql:
                    close_run()
                    compute.aql_items.append(aql_dispatch(launch))
                else:
                    emit_pm4(pm4_dispatch(launch))
                if self.profile:
                    emit_pm4(pm4.release_mem(en.timestamp_va, data_sel=pm4.DATA_SEL_GPU_CLOCK))
                if i in self.signalled:
                    emit_pm4(pm4_signal(self.slots["compute"].va, i + 1, None))
            else:
                copy.packets += waits
                for off in range(0, job.nbytes, sdma.MAX_COPY_SIZE):
                    n = min(sdma.MAX_COPY_SIZE, job.nbytes - off)
                    dst = 0 if isinstance(job.dest, int) else job.dest.va + off
                    src = 0 if isinstance(job.src, int) else job.src.va + off
                    for end, dword in ((job.src, 3), (job.dest, 5)):  # COPY_LINEAR: src lo/hi @3, dst lo/hi @5
                        if isinstance(end, int):
                            self._copy_patches[end].append((len(copy.packets), dword, off))
                    copy.packets.append(sdma.copy_linear(dst, src, n))
                if i in self.signalled:
                    copy.packets.append(sdma.fence(self.slots["copy"].va, i + 1))
        copies = [i for i, q in enumerate(self.queue_of) if q == "copy"]
        if copies:
            emit_pm4(pm4.wait_reg_mem(mem=self.slots["copy"].va, reference=copies[-1] + 1))
        emit_pm4(pm4_signal(timeline.va, 0, events), "timeline_signal", PM4_SIGNAL_VALUE_DWORD)
        close_run()
        return compute, copy

    def _bind(self) -> None:
        """Put the compute batch where the GPU reads it: one IB (PM4 queue), or IBs behind prebuilt AQL packets."""
        from ember.amd_runtime import aql

        c, dev = self.compute_stream, self.device
        if isinstance(dev.compute, PM4ComputeQueue):
            runs = [c.dwords]
        else:
            runs = [item for item in c.aql_items if isinstance(item, list)]
        total = sum(len(r) + (-len(r) % 8) for r in runs)
        if total > pm4.IB_MAX_DWORDS:
            raise ValueError(f"AMDGraph: {total} PM4 dwords exceed one indirect buffer ({pm4.IB_MAX_DWORDS})")
        self.ib = dev.memory.alloc(4 * total, uncached=True, cpu_access=True)
        self._owned.append(self.ib)
        assert self.ib.view is not None
        ib = self.ib.view.view(0, 4 * total, "I")
        starts: dict[int, int] = {}
        pos = 0
        for idx, item in enumerate(c.aql_items if isinstance(dev.compute, AQLQueue) else [c.dwords]):
            if isinstance(item, list):
                ib[pos:pos + len(item)] = item
                starts[idx] = pos
                if isinstance(dev.compute, AQLQueue):
                    self._aql_packets.append(aql.pm4_ib(self.ib.va + 4 * pos, len(item)))
                pos += len(item) + (-len(item) % 8)
            else:
                self._aql_packets.append(item)
        for name, site in (("wait", c.timeline_wait), ("signal", c.timeline_signal)):
            assert site is not None
            self._ib_patch[name] = (starts[site[0]] if isinstance(dev.compute, AQLQueue) else 0) + site[1]
        self._ib_dwords = pos

    # ---- replay ------------------------------------------------------------------------------------------------

    def exec(self, inputs: Sequence[AMDMemory], wait: bool = False) -> float | None:
        """Replay the batch on `inputs` (AMDMemory of this device, one per input slot). With `wait`, wait for it
        and return the seconds from the first kernel's start to the last kernel's end (profile) or None."""
        from ember.amd_runtime.device import AMDMemory

        dev = self.device
        if len(inputs) != self.n_inputs:
            raise ValueError(f"AMDGraph.exec: {len(inputs)} inputs given, the graph takes {self.n_inputs}")
        for i, mem in enumerate(inputs):
            if not isinstance(mem, AMDMemory) or mem.owner.gpu_id != dev.node.gpu_id:
                raise ValueError(f"AMDGraph.exec: input {i} ({mem!r}) is not memory of {dev.name}")
        dev.wait(self._done)  # the previous replay still reads the kernargs, the IB and the slots
        for i, mem in enumerate(inputs):
            if self.input_table[i] != mem.va:
                self.input_table[i] = mem.va
                if self.kernargs is not None:
                    assert self.kernargs.view is not None
                    for off in self._kernarg_patches[i]:
                        self.kernargs.view.write(off, struct.pack("<Q", mem.va))
                for pkt, dword, off in self._copy_patches[i]:
                    addr = mem.va + off
                    self.copy_stream.packets[pkt][dword:dword + 2] = [addr & 0xFFFFFFFF, addr >> 32]
        for slot in self.slots.values():
            slot.value = 0
        value = dev.reserve()
        assert self.ib is not None and self.ib.view is not None
        ib = self.ib.view.view(0, 4 * self._ib_dwords, "I")
        sig = dev.timeline.signal.va
        w, s = self._ib_patch["wait"], self._ib_patch["signal"]
        ib[w - 2:w + 1] = [sig & 0xFFFFFFFF, sig >> 32, (value - 1) & 0xFFFFFFFF]
        ib[s - 2:s + 1] = [sig & 0xFFFFFFFF, sig >> 32, value & 0xFFFFFFFF]
        if any(q == "copy" for q in self.queue_of):
            pkt, dword = self.copy_stream.timeline_wait  # type: ignore[misc]
            self.copy_stream.packets[pkt][dword - 2:dword + 1] = [sig & 0xFFFFFFFF, sig >> 32,
                                                                  (value - 1) & 0xFFFFFFFF]
            dev.sdma.pending.extend(self.copy_stream.packets)
            dev.sdma.submit()
        if isinstance(dev.compute, AQLQueue):
            dev.compute.extend(self._aql_packets).submit()
        else:
            dev.compute.pending.append(pm4.indirect_buffer(self.ib.va, len(self.compute_stream.dwords)))
            dev.compute.submit()
        dev._last_queue = dev.compute
        self._done = dev.ticket(value)
        if not wait:
            return None
        dev.wait(self._done)
        if not self.prof:
            return None
        return (self.prof[-1][1].timestamp_ticks - self.prof[0][0].timestamp_ticks) / TIMESTAMP_DIVIDER / 1e6

    def timings(self) -> list[tuple[str, float]]:
        """(kernel name, seconds) of every kernel of the last replay (needs profile=True); waits for it."""
        if not self.profile:
            raise ValueError("AMDGraph.timings: the graph was recorded without profile=True")
        self.device.wait(self._done)
        names = [j.program.name for j in self.jobs if isinstance(j, GraphKernel)]
        return [(n, (en.timestamp_ticks - st.timestamp_ticks) / TIMESTAMP_DIVIDER / 1e6)
                for n, (st, en) in zip(names, self.prof)]

    def free(self) -> None:
        """Give back the graph's kernargs, IB and signals (after its last replay finished)."""
        self.device.wait(self._done)
        for buf in self._owned:
            self.device.memory.free(buf)
        self._owned = []
        for sig in [*self.slots.values(), *(s for pair in self.prof for s in pair)]:
            sig.free()


__all__ = ["AMDGraph", "GraphKernel", "GraphCopy", "GraphJob"]
