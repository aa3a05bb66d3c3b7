"""Signals, the signal pool, the timeline and the KFD events waits sleep on, against the mock KFD. The "GPU" here is a
progress hook that writes memory and raises interrupts the way the fake command processor will."""

import threading
import time
from dataclasses import dataclass

import pytest

from ember.amd_runtime.kfd import Kfd
from ember.amd_runtime.memory import GpuMemory
from ember.amd_runtime.mock import MI300X, MockPlatform
from ember.amd_runtime.signal import (
    EVENT_PAGE_SIZE,
    SIGNAL_PAGE_SIZE,
    TIMELINE_WRAP,
    DeviceEvents,
    Signal,
    SignalPool,
    Timeline,
)
from ember.amd_runtime.topology import discover_gpus


@dataclass
class Device:
    platform: MockPlatform
    memory: GpuMemory
    events: DeviceEvents
    pool: SignalPool

    def gpu_signal(self, signal: Signal, value: int, interrupt: bool = True) -> None:
        """What a timeline RELEASE_MEM pair does: write the value, write the event id to the mailbox, interrupt."""
        fake = self.platform.kfd
        fake.write_u64(signal.va, value)
        if interrupt:
            fake.write_u64(self.events.mailbox_va, self.events.event_id)
            fake.signal_interrupt(self.memory.gpu_id)


@pytest.fixture
def dev() -> Device:
    platform = MockPlatform([MI300X])
    node, kfd = discover_gpus(platform, visible=())[0], Kfd.open(platform)
    memory = GpuMemory(kfd, node.gpu_id, kfd.open_gpu(node.gpu_id, node.render_minor), "AMD:0")
    events = DeviceEvents.create(kfd, memory, "AMD:0")
    return Device(platform, memory, events, SignalPool(
        lambda: memory.alloc(SIGNAL_PAGE_SIZE, uncached=True, cpu_access=True)))


def test_pool_slots_are_16_bytes_and_pages_grow(dev):
    sigs = [dev.pool.new(value=i) for i in range(257)]
    assert [s.va - sigs[0].va for s in sigs[:3]] == [0, 16, 32]
    assert sigs[0].va % SIGNAL_PAGE_SIZE == 0 and len(dev.pool.pages) == 2
    assert sigs[256].va == dev.pool.pages[1].va
    assert [s.value for s in sigs[:3]] == [0, 1, 2] and sigs[2].timestamp_ticks == 0
    sigs[5].free()
    assert dev.pool.new(value=9).va == sigs[5].va
    sigs[7].free()
    with pytest.raises(ValueError, match="is not an allocated slot of this pool"):
        sigs[7].free()


def test_signal_layout_value_then_timestamp(dev):
    sig = dev.pool.new()
    dev.platform.kfd.write_u64(sig.va, 77)
    dev.platform.kfd.write_u64(sig.timestamp_va, 12345)
    assert (sig.value, sig.timestamp_ticks, sig.timestamp_us) == (77, 12345, 123.45)
    sig.value = 5
    assert dev.platform.kfd.read_u64(sig.va) == 5


def test_signal_needs_a_16_byte_u64_view(dev):
    page = dev.pool.new().view
    with pytest.raises(ValueError, match="needs a 16-byte, 16-byte-aligned u64 view; got 8 bytes"):
        Signal(page.addr, page.view(0, 8, "Q"))


def test_wait_returns_at_once_when_reached(dev):
    sig = dev.pool.new(value=4)
    mark = len(dev.platform.trace)
    sig.wait(4, waiter=dev.events)
    assert dev.platform.ioctl_names()[mark:] == []  # no sleep needed


def test_wait_sleeps_in_wait_events_and_the_gpu_completes(dev):
    sig = dev.pool.new()
    calls = []

    def gpu():  # the fake GPU runs when the host sleeps
        calls.append(1)
        if len(calls) == 1:
            dev.gpu_signal(sig, 3)
            return True
        return False

    dev.platform.kfd.progress_hooks.append(gpu)
    sig.wait(3, waiter=dev.events, queue="compute")
    assert dev.platform.ioctl_names()[-1] == "WAIT_EVENTS"
    wait = dev.platform.trace[-1]
    assert (wait.args["num_events"], wait.args["wait_for_all"], wait.args["timeout"]) == (3, 0, 200)
    assert wait.out["wait_result"] == 0  # COMPLETE: woken by the interrupt, not at the end of the 200 ms sleep


def test_wait_late_set(dev):
    sig = dev.pool.new()
    calls = []

    def gpu():
        calls.append(1)
        if len(calls) == 20:  # set well after the wait started sleeping
            dev.gpu_signal(sig, 1)
        return False

    dev.platform.kfd.progress_hooks.append(gpu)
    sig.wait(1, timeout_ms=2000, waiter=dev.events)
    assert sig.value == 1 and len(calls) >= 20


def test_timeout_raises_hang_detected(dev):
    sig = dev.pool.new(value=3)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"^AMD:0: hang detected: the compute queue did not bring signal "
                                           rf"0x{sig.va:x} to 5 within 50 ms \(it holds 3\)$"):
        sig.wait(5, timeout_ms=50, waiter=dev.events, queue="compute")
    assert 0.05 <= time.monotonic() - start < 1.0


def test_progress_restarts_the_timeout(dev):
    sig = dev.pool.new()
    last = [time.monotonic()]

    def gpu():  # one step every 15 ms, no interrupt: the host only sees it move between sleeps
        if time.monotonic() - last[0] >= 0.015:
            last[0] = time.monotonic()
            dev.gpu_signal(sig, sig.value + 1, interrupt=False)
        return False

    dev.platform.kfd.progress_hooks.append(gpu)
    start = time.monotonic()
    sig.wait(6, timeout_ms=40, waiter=dev.events)  # ~90 ms in all, more than the timeout, but it keeps moving
    assert sig.value >= 6 and time.monotonic() - start > 0.04


def test_wait_without_interrupt_does_not_wake_early(dev):
    sig = dev.pool.new()
    fired = []

    def gpu():  # writes the value but raises no interrupt (int_sel=0): WAIT_EVENTS sleeps its whole timeout
        if not fired:
            fired.append(1)
            dev.gpu_signal(sig, 1, interrupt=False)
        return False

    dev.platform.kfd.progress_hooks.append(gpu)
    sig.wait(1, timeout_ms=1000, waiter=dev.events)
    assert dev.platform.trace[-1].out["wait_result"] == 1  # TIMEOUT: the host saw the value only after the sleep


def test_memory_fault_during_a_wait(dev):
    sig = dev.pool.new()
    dev.platform.kfd.progress_hooks.append(
        lambda: dev.platform.kfd.raise_memory_fault(dev.memory.gpu_id, 0xDEAD000) or False)
    with pytest.raises(RuntimeError, match=rf"^AMD:0: GPU memory fault at 0xdead000 \(page not present\) on gpu "
                                           rf"0x{dev.memory.gpu_id:x}$"):
        sig.wait(1, timeout_ms=1000, waiter=dev.events)


def test_hw_exception_during_a_wait(dev):
    sig = dev.pool.new()
    dev.platform.kfd.progress_hooks.append(lambda: dev.platform.kfd.raise_hw_exception(dev.memory.gpu_id, 2) or False)
    with pytest.raises(RuntimeError, match=r"GPU hardware exception on gpu 0x[0-9a-f]+ \(reset_cause 2"):
        sig.wait(1, timeout_ms=1000, waiter=dev.events)


def test_device_events_mailbox_and_ids(dev):
    ev = dev.events
    assert (ev.slot, ev.event_id) == (0, 0)  # the first signal event takes slot 0 of the event page
    assert ev.event_page.size == EVENT_PAGE_SIZE and ev.mailbox_va == ev.event_page.va
    assert ev.memory_event_id >= 0x80000000 and ev.hw_event_id == ev.memory_event_id + 1
    assert dev.platform.kfd.read_u64(ev.mailbox_va + 8) == (1 << 64) - 1  # idle slots hold UNSIGNALED
    ev.close()
    assert dev.platform.kfd.events == {}


def test_timeline_next_and_synchronize(dev):
    tl = Timeline(dev.pool.new(value=99), dev.pool.new())
    assert (tl.signal.value, tl.value, tl.last) == (0, 1, 0)
    assert [tl.next(), tl.next()] == [1, 2] and tl.last == 2
    dev.platform.kfd.progress_hooks.append(lambda: dev.gpu_signal(tl.signal, 2) or False)
    tl.synchronize(dev.events, timeout_ms=1000)
    assert tl.value == 3  # no wrap below 2^31


def test_timeline_wraps_past_2_31(dev):
    tl = Timeline(dev.pool.new(), dev.pool.new())
    first, shadow = tl.signal, tl.shadow
    tl.value = TIMELINE_WRAP + 1
    tl.signal.value = TIMELINE_WRAP - 1
    with pytest.raises(RuntimeError, match=r"work is in flight \(signal holds 2147483647, the last submission "
                                           r"signals 2147483648\)"):
        tl.wrap()
    first.value = TIMELINE_WRAP
    tl.synchronize(dev.events, timeout_ms=100)
    assert (tl.signal, tl.shadow, tl.value, tl.signal.value) == (shadow, first, 1, 0)
    assert first.value == TIMELINE_WRAP and tl.next() == 1


def test_a_second_device_shares_the_event_page(dev):
    platform = MockPlatform([MI300X, MI300X])
    nodes, kfd = discover_gpus(platform, visible=()), Kfd.open(platform)
    mems = [GpuMemory(kfd, n.gpu_id, kfd.open_gpu(n.gpu_id, n.render_minor), f"AMD:{i}") for i, n in enumerate(nodes)]
    first = DeviceEvents.create(kfd, mems[0], "AMD:0")
    second = DeviceEvents.create(kfd, mems[1], "AMD:1", event_page=first.event_page)
    assert first.event_page.mapped_gpus == [nodes[0].gpu_id, nodes[1].gpu_id]
    assert (second.slot, second.mailbox_va) == (1, first.mailbox_va + 8)
    registered = [t.args["event_page_offset"] for t in platform.trace if t.name == "CREATE_EVENT"]
    assert registered == [first.event_page.handle, 0, 0, 0, 0, 0]  # only the first CREATE_EVENT sets the page
    platform.kfd.write_u64(second.mailbox_va, second.event_id, gpu_id=nodes[1].gpu_id)  # AMD:1's queue signals
    platform.kfd.signal_interrupt(nodes[1].gpu_id)
    assert [platform.kfd.events[e].signaled for e in (first.event_id, second.event_id)] == [False, True]


def test_a_gpu_thread_wakes_the_wait(dev):
    sig = dev.pool.new()

    def gpu_thread():
        time.sleep(0.02)
        with dev.platform.kfd.lock:  # a threaded fake GPU holds the driver lock while it touches memory and events
            dev.gpu_signal(sig, 1)

    worker = threading.Thread(target=gpu_thread)
    worker.start()
    sig.wait(1, timeout_ms=2000, waiter=dev.events)
    worker.join()
    assert sig.value == 1 and dev.platform.trace[-1].out["wait_result"] == 0  # COMPLETE: woken by the interrupt
