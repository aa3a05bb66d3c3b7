"""Queue semantics: the real PM4/AQL/SDMA queues write their rings, the fake GPU (`mock.gpu.FakeGpu`) reads and runs
the bytes. Signals and waits, a wait released late by the CPU, the timeline wrap, SDMA copies over the packet limit
and across the ring's end, ordering between queues, timestamps, the hang timeout, unknown packets and GPU faults."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ember.amd_runtime import aql, pm4, sdma
from ember.amd_runtime.mock import MI300X, MI300X_CPX, TopologyProfile
from ember.amd_runtime.mock.gpu import CommandError, MockGpuRig, open_mock_gpu
from ember.amd_runtime.queue import HWQueue, PM4ComputeQueue, ring_dwords
from ember.amd_runtime.signal import TIMELINE_WRAP, Timeline

Rig = MockGpuRig


@pytest.fixture(params=[MI300X_CPX, MI300X], ids=["pm4", "aql"])
def rig(request: pytest.FixtureRequest) -> Rig:
    return open_mock_gpu(request.param)


def wait(rig: Rig, signal, value: int, queue: HWQueue, timeout_ms: int = 2000) -> None:  # noqa: ANN001
    signal.wait(value, timeout_ms, waiter=rig.events, queue=queue.name)


def test_signal_and_wait_on_every_queue_kind(rig: Rig):
    for q in (rig.compute(), rig.copy()):
        sig = rig.signals.new()
        q.signal(sig, 5).submit()
        wait(rig, sig, 5, q)
        assert sig.value == 5 and q.idle()
    # the compute ring holds what the queue recorded: PM4 (value, then mailbox + interrupt) or one PM4-IB packet
    if rig.node.xccs == 1:
        q = rig.compute()
        sig = rig.signals.new()
        q.signal(sig, 7).submit()
        packets = pm4.decode(ring_dwords(q, 0, q.put))
        assert [type(p).__name__ for p in packets] == ["ReleaseMem", "ReleaseMem"]
        assert (packets[0].addr, packets[0].data, packets[1].int_sel) == (sig.va, 7, 2)
        assert (packets[1].addr, packets[1].data) == (rig.events.mailbox_va, rig.events.event_id)
    else:
        q = rig.compute()
        sig = rig.signals.new()
        q.signal(sig, 7).submit()
        pkt = aql.decode(q.kq.ring.view.read(0, aql.PACKET_SIZE))
        # the packet processor hands the slot back once it ran the packet
        assert isinstance(pkt, aql.Invalid) and q.put == 1 and int(q.rptr[0]) == 1
        assert rig.gpu.packets["PM4_IB"] >= 1 and sig.value == 7


def test_wait_released_late_by_the_cpu(rig: Rig):
    for q in (rig.compute(), rig.copy()):
        gate, done = rig.signals.new(), rig.signals.new()
        q.wait(gate, 3).signal(done, 1).submit()
        assert done.value == 0 and not q.idle()  # blocked in the engine, not lost
        gate.value = 2
        rig.platform.kfd.progress()
        assert done.value == 0
        gate.value = 3  # a plain CPU store: the next WAIT_EVENTS round sees it
        wait(rig, done, 1, q)
        assert q.idle()


def test_never_signalled_wait_reports_a_hang(rig: Rig):
    q = rig.compute()
    gate, done = rig.signals.new(), rig.signals.new()
    q.wait(gate, 1).signal(done, 1).submit()
    with pytest.raises(RuntimeError, match=r"AMD:0: hang detected: the compute queue did not bring signal 0x[0-9a-f]+ "
                                           r"to 1 within 50 ms \(it holds 0\)"):
        done.wait(1, 50, waiter=rig.events, queue=q.name)


def test_timeline_wraps_before_32_bits_run_out(rig: Rig):
    q = rig.compute()
    timeline = Timeline(rig.signals.new(), rig.signals.new())
    timeline.value = TIMELINE_WRAP - 1
    timeline.signal.value = TIMELINE_WRAP - 2
    for _ in range(3):  # values 2**31-1, 2**31, 2**31+1: the waits compare the low 32 bits, which still grow
        value = timeline.next()
        q.wait(timeline.signal, value - 1).signal(timeline.signal, value).submit()
    old = timeline.signal
    timeline.synchronize(rig.events, queue=q.name)
    assert old.value == TIMELINE_WRAP + 1
    assert timeline.signal is not old and timeline.value == 1 and timeline.signal.value == 0
    value = timeline.next()
    q.wait(timeline.signal, value - 1).signal(timeline.signal, value).submit()
    timeline.synchronize(rig.events, queue=q.name)
    assert timeline.signal.value == 1


def test_sdma_copy_over_the_packet_limit():
    rig = open_mock_gpu()
    q = rig.copy()
    n = 2 * sdma.MAX_COPY_SIZE + 12345
    src, dst = rig.host(n), rig.host(n)
    data = np.random.default_rng(0).integers(0, 256, n, np.uint8)
    src.view.write(0, data.tobytes())
    done = rig.signals.new()
    q.copy(dst.va + 0, src.va, n).signal(done, 1)
    copies = [p for p in q.pending if p[0] & 0xFF == sdma.OP_COPY]
    assert [sdma.decode(p)[0].nbytes for p in copies] == [sdma.MAX_COPY_SIZE, sdma.MAX_COPY_SIZE, 12345]
    q.submit()
    wait(rig, done, 1, q)
    assert dst.view.read(0, n) == data.tobytes()
    assert rig.gpu.packets["CopyLinear"] == 3


def test_sdma_packets_never_straddle_the_ring_end():
    rig = open_mock_gpu()
    q = rig.copy(ring_size=1024)
    src, dst = rig.host(0x1000), rig.host(0x1000)
    src.view.write(0, bytes(range(256)) * 16)
    done = rig.signals.new()
    for i in range(1, 40):  # 7+4+4+2 dwords = 68 bytes per round: the tail of the ring gets NOP-filled
        q.copy(dst.va + 64 * (i % 32), src.va + 64 * (i % 32), 64).signal(done, i).submit()
        wait(rig, done, i, q)
    assert q.put > 2 * 1024 and rig.gpu.packets["Nop"] > 0
    assert dst.view.read(0, 0x800) == (bytes(range(256)) * 16)[:0x800]
    # every packet in the ring starts a decodable stream from its offset: decode the last lap from the ring start
    lap = q.put % 1024
    assert all(isinstance(p, (sdma.CopyLinear, sdma.Fence, sdma.Trap, sdma.Nop))
               for p in sdma.decode(ring_dwords(q, 0, lap // 4)))


def test_a_full_ring_waits_for_the_engine():
    rig = open_mock_gpu()
    q = rig.compute(ring_size=1024)  # 256 dwords: 16 dwords per signal round
    gate, done = rig.signals.new(), rig.signals.new()
    q.wait(gate, 1).submit()  # 7 dwords, then 15 rounds of 16: 247 of 256 used
    for i in range(1, 16):
        q.signal(done, i).submit()
    with pytest.raises(RuntimeError, match="hang detected: the compute queue did not free 16 units of its ring"):
        q.signal(done, 99).submit()  # the ring is full behind the blocked wait
    gate.value = 1
    q.signal(done, 100).submit()
    wait(rig, done, 100, q)


def test_queues_order_through_signals(rig: Rig):
    compute, copy = rig.compute(), rig.copy()
    src, dst = rig.host(0x1000), rig.host(0x1000)
    src.view.write(0, b"\x07" * 0x1000)
    handoff, done, t_compute, t_copy = (rig.signals.new() for _ in range(4))
    copy.wait(handoff, 1).timestamp(t_copy).copy(dst.va, src.va, 0x1000).signal(done, 1).submit()
    assert dst.view.read(0, 4) == b"\0\0\0\0"  # the copy waits for the compute queue
    compute.timestamp(t_compute).signal(handoff, 1).submit()
    wait(rig, done, 1, copy)
    assert dst.view.read(0, 0x1000) == b"\x07" * 0x1000
    assert 0 < t_compute.timestamp_ticks < t_copy.timestamp_ticks


def test_unknown_packets_are_errors(rig: Rig):
    q = rig.compute()
    if isinstance(q, PM4ComputeQueue):
        q.pending.append(pm4.packet3(0x99, 0))
        with pytest.raises(CommandError, match="unknown opcode 0x99"):
            q.submit()
    else:
        q._packets.append(struct.pack("<HH", aql.make_header(aql.PACKET_TYPE_BARRIER_OR), 0) + bytes(60))
        with pytest.raises(CommandError, match="packet type 5 is not supported"):
            q.submit()
    s = rig.copy()
    s.pending.append([0x3F])
    with pytest.raises(CommandError, match="SDMA: unknown op 63"):
        s.submit()


def test_a_gpu_page_fault_raises_the_memory_event():
    rig = open_mock_gpu()
    q = rig.copy()
    dst, done = rig.host(0x1000), rig.signals.new()
    q.copy(dst.va, 0x7000_0000_0000, 64).signal(done, 1).submit()
    with pytest.raises(RuntimeError, match=r"AMD:0: GPU memory fault at 0x700000000000 \(page not present\)"):
        wait(rig, done, 1, q)
    assert done.value == 0


@pytest.mark.parametrize("profile", [MI300X_CPX, MI300X], ids=["pm4", "aql"])
def test_a_gpu_on_its_own_thread(profile: TopologyProfile):
    """The engines beside the host: the host's ring writes, write pointer and doorbell race the GPU thread."""
    rig = open_mock_gpu(profile, threaded=True)
    try:
        compute, copy = rig.compute(ring_size=1024), rig.copy(ring_size=1024)
        src, dst = rig.host(0x1000), rig.host(0x1000)
        src.view.write(0, bytes(range(256)) * 16)
        gate, done, copied = rig.signals.new(), rig.signals.new(), rig.signals.new()
        for i in range(1, 60):  # both rings wrap several times while the GPU thread reads them
            copy.copy(dst.va + 64 * (i % 64), src.va + 64 * (i % 64), 64).signal(copied, i).submit()
            compute.wait(copied, i).signal(done, i).submit()
        wait(rig, done, 59, compute)
        assert dst.view.read(64, 59 * 64) == (bytes(range(256)) * 16)[64:60 * 64]
        compute.wait(gate, 1).signal(done, 100).submit()
        gate.value = 1  # released by a plain CPU store, seen by the polling GPU thread
        wait(rig, done, 100, compute)
        copy.pending.append([0x3F])
        copy.submit()
        with pytest.raises(RuntimeError, match="GPU hardware exception on gpu"):
            wait(rig, rig.signals.new(), 1, copy)
        assert isinstance(rig.gpu.thread_error, CommandError)
    finally:
        rig.gpu.detach()
