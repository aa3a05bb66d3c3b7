"""Signals: 16-byte slots `{u64 value, u64 timestamp}` in host-visible uncached memory that queues write and the CPU
waits on, the pool they come from, the per-device timeline, and the KFD events a wait sleeps on.

A wait polls the value (for `Platform.spin_wait_ms`), then sleeps in KFD WAIT_EVENTS (`SignalWaiter.sleep`); on the
mock that call is what advances the fake GPU. Any change of the value restarts the timeout; when it runs out the wait
raises RuntimeError("... hang detected ...") naming the device, the queue and the value.

    pool = SignalPool(lambda: memory.alloc(SIGNAL_PAGE_SIZE, uncached=True, cpu_access=True))
    timeline = Timeline(pool.new(), pool.new())
    value = timeline.next()          # a queue's signal(timeline.signal, value)
    timeline.signal.wait(value, waiter=events, queue="compute")
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from typing import Protocol

from ember.amd_runtime.kfd import EventData, EventType, Kfd
from ember.amd_runtime.memory import GpuBuffer, GpuMemory
from ember.amd_runtime.platform import Mmio

SIGNAL_SIZE = 16  # value u64 @0, timestamp u64 @8
SIGNAL_PAGE_SIZE = 0x1000  # 256 slots per page
TIMESTAMP_DIVIDER = 100.0  # the GPU's timestamp counter runs at 100 MHz: ticks per microsecond
DEFAULT_TIMEOUT_MS = 30_000
SLEEP_CHUNK_MS = 200  # the longest single WAIT_EVENTS sleep, so progress is seen and the timeout honoured
TIMELINE_WRAP = 1 << 31  # GPU waits compare 32 bits: a timeline is restarted before its value passes this
EVENT_PAGE_SIZE = 0x8000  # KFD_SIGNAL_EVENT_LIMIT (4096) mailbox slots of 8 bytes


class SignalWaiter(Protocol):
    """Where a signal wait sleeps: the device's KFD events (or anything with the same shape)."""

    device: str
    spin_ms: int

    def sleep(self, timeout_ms: int) -> None:
        """Block until the device raises an interrupt or `timeout_ms` passes; raise on a device fault."""
        ...


class Signal:
    """One 16-byte signal slot at GPU/CPU address `va`."""

    def __init__(self, va: int, view: Mmio, pool: SignalPool | None = None):
        if view.nbytes != SIGNAL_SIZE or view.fmt != "Q" or va % SIGNAL_SIZE:
            raise ValueError(f"Signal: needs a 16-byte, 16-byte-aligned u64 view; got {view.nbytes} bytes "
                             f"({view.fmt!r}) at 0x{va:x}")
        self.va, self.view, self.pool = va, view, pool

    @property
    def value(self) -> int:
        return int(self.view[0])  # type: ignore[arg-type]

    @value.setter
    def value(self, value: int) -> None:
        self.view[0] = value & 0xFFFF_FFFF_FFFF_FFFF

    @property
    def timestamp_va(self) -> int:
        """Where a queue's timestamp command writes the GPU clock."""
        return self.va + 8

    @property
    def timestamp_ticks(self) -> int:
        """The raw 100 MHz counter value a queue wrote into the timestamp slot."""
        return int(self.view[1])  # type: ignore[arg-type]

    @property
    def timestamp_us(self) -> float:
        """The timestamp slot in microseconds."""
        return self.timestamp_ticks / TIMESTAMP_DIVIDER

    def wait(self, value: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, *, waiter: SignalWaiter,
             queue: str = "any") -> None:
        """Return once the signal holds >= `value`. Polls for `waiter.spin_ms`, then sleeps through `waiter.sleep`;
        the timeout restarts whenever the value moves. Raises RuntimeError ("hang detected") on timeout."""
        start = last_move = time.monotonic()
        seen = self.value
        while (current := self.value) < value:
            now = time.monotonic()
            if current != seen:
                seen, last_move = current, now
            left_ms = timeout_ms - (now - last_move) * 1000
            if left_ms <= 0:
                raise RuntimeError(f"{waiter.device}: hang detected: the {queue} queue did not bring signal "
                                   f"0x{self.va:x} to {value} within {timeout_ms} ms (it holds {current})")
            if (now - start) * 1000 >= waiter.spin_ms:
                waiter.sleep(max(1, min(SLEEP_CHUNK_MS, math.ceil(left_ms))))

    def free(self) -> None:
        """Give the slot back to its pool."""
        if self.pool is None:
            raise ValueError(f"Signal 0x{self.va:x} has no pool to return to")
        self.pool.free(self)

    def __repr__(self) -> str:
        return f"Signal(va=0x{self.va:x}, value={self.value})"


class SignalPool:
    """Signal slots cut from host-visible pages. `alloc_page()` returns a new GpuBuffer of SIGNAL_PAGE_SIZE bytes
    (allocated uncached, with a CPU view, and mapped into every device of the peer group the pool serves)."""

    def __init__(self, alloc_page: Callable[[], GpuBuffer]):
        self.alloc_page = alloc_page
        self.pages: list[GpuBuffer] = []
        self._free: list[int] = []  # free slot addresses
        self._views: dict[int, Mmio] = {}  # page va -> its view

    def new(self, value: int = 0) -> Signal:
        """A signal holding `value` and a zero timestamp."""
        if not self._free:
            page = self.alloc_page()
            if page.view is None or page.size < SIGNAL_PAGE_SIZE:
                raise ValueError(f"SignalPool: alloc_page gave {page}, which has no CPU view of "
                                 f"{SIGNAL_PAGE_SIZE} bytes")
            self.pages.append(page)
            self._views[page.va] = page.view
            self._free += [page.va + off for off in range(SIGNAL_PAGE_SIZE - SIGNAL_SIZE, -1, -SIGNAL_SIZE)]
        va = self._free.pop()
        page_va = va - va % SIGNAL_PAGE_SIZE  # pages are page-aligned allocations
        sig = Signal(va, self._views[page_va].view(va - page_va, SIGNAL_SIZE, "Q"), self)
        sig.view[0:2] = [value, 0]
        return sig

    def free(self, signal: Signal) -> None:
        """Return a slot (its value is left as is until it is handed out again)."""
        if signal.pool is not self or signal.va in self._free:
            raise ValueError(f"SignalPool: {signal} is not an allocated slot of this pool")
        self._free.append(signal.va)

    def release(self, memory_free: Callable[[GpuBuffer], None]) -> None:
        """Free every page (all signals die with them)."""
        for page in self.pages:
            memory_free(page)
        self.pages.clear()
        self._free.clear()
        self._views.clear()


class Timeline:
    """The per-device timeline: a monotonically increasing value that every submission signals.

    Submissions wait for `last` and signal `next()`. GPU waits compare 32 bits, so once the value passes 2^31
    `synchronize` swaps in the shadow signal, zeroes it and restarts at 1.
    """

    def __init__(self, signal: Signal, shadow: Signal):
        self.signal, self.shadow = signal, shadow
        self.signal.value = 0
        self.value = 1  # the value the next submission signals

    @property
    def last(self) -> int:
        """The value the most recent submission signals (0: none yet)."""
        return self.value - 1

    def next(self) -> int:
        """Reserve the value for one submission."""
        value, self.value = self.value, self.value + 1
        return value

    def synchronize(self, waiter: SignalWaiter, timeout_ms: int = DEFAULT_TIMEOUT_MS, queue: str = "any") -> None:
        """Wait for every submission so far, then wrap the timeline if it has passed TIMELINE_WRAP."""
        self.signal.wait(self.last, timeout_ms, waiter=waiter, queue=queue)
        if self.value > TIMELINE_WRAP:
            self.wrap()

    def wrap(self) -> None:
        """Restart at 1 on the shadow signal. Only valid when the GPU has finished all work (after a wait)."""
        if self.signal.value < self.last:
            raise RuntimeError(f"Timeline.wrap: work is in flight (signal holds {self.signal.value}, the last "
                               f"submission signals {self.last}); synchronize first")
        self.signal, self.shadow = self.shadow, self.signal
        self.signal.value = 0
        self.value = 1


class DeviceEvents:
    """The KFD events one device's waits sleep on: the queue SIGNAL event (auto-reset; its mailbox is the slot in the
    event page that a timeline signal's second write targets), a MEMORY event (GPU page faults) and a HW_EXCEPTION
    event. The first device of the process registers the event page with its first CREATE_EVENT."""

    def __init__(self, kfd: Kfd, device: str, event_page: GpuBuffer, register_page: bool, spin_ms: int):
        self.kfd, self.device, self.event_page, self.spin_ms = kfd, device, event_page, spin_ms
        queue_event = kfd.create_event(EventType.SIGNAL, auto_reset=True,
                                       event_page_offset=event_page.handle if register_page else 0)
        self.event_id, self.slot = int(queue_event.event_id), int(queue_event.event_slot_index)
        self.memory_event_id = int(kfd.create_event(EventType.MEMORY).event_id)
        self.hw_event_id = int(kfd.create_event(EventType.HW_EXCEPTION).event_id)
        self._events = (EventData * 3)()
        for entry, event_id in zip(self._events, (self.event_id, self.memory_event_id, self.hw_event_id)):
            entry.event_id = event_id

    @classmethod
    def create(cls, kfd: Kfd, memory: GpuMemory, device: str, event_page: GpuBuffer | None = None) -> DeviceEvents:
        """Events for a device. Without `event_page` this allocates the process's event page (uncached, 0x8000
        bytes) on `memory`'s GPU and registers it; later devices pass that page, which is then mapped into their
        GPU too (their queues write its mailboxes). Free the page (through its owner's memory) after every
        device's events are closed."""
        if event_page is None:
            return cls(kfd, device, memory.alloc(EVENT_PAGE_SIZE, uncached=True, cpu_access=True), True,
                       kfd.platform.spin_wait_ms)
        memory.map_to(event_page, [memory.gpu_id])
        return cls(kfd, device, event_page, False, kfd.platform.spin_wait_ms)

    @property
    def mailbox_va(self) -> int:
        """Where a queue writes `event_id` (with an interrupt) to wake this device's waits."""
        return self.event_page.va + self.slot * 8

    def sleep(self, timeout_ms: int) -> None:
        """WAIT_EVENTS on the three events; raise RuntimeError naming the fault on a memory or hardware exception."""
        for entry in self._events:  # clear payloads from the previous wait
            ctypes.memset(ctypes.addressof(entry), 0, 40)
        self.kfd.wait_events(self._events, timeout_ms)
        fault, hw = self._events[1].memory_exception_data, self._events[2].hw_exception_data
        if fault.gpu_id:
            kind = "write to read-only page" if fault.failure.ReadOnly else "page not present" \
                if fault.failure.NotPresent else "access"
            raise RuntimeError(f"{self.device}: GPU memory fault at 0x{fault.va:x} ({kind}) on gpu 0x{fault.gpu_id:x}")
        if hw.gpu_id:
            raise RuntimeError(f"{self.device}: GPU hardware exception on gpu 0x{hw.gpu_id:x} (reset_cause "
                               f"{hw.reset_cause}, memory_lost {hw.memory_lost})")

    def close(self) -> None:
        """DESTROY_EVENT for the three events (the event page is the process's; free it separately)."""
        for event_id in (self.event_id, self.memory_event_id, self.hw_event_id):
            self.kfd.destroy_event(event_id)


__all__ = ["SIGNAL_SIZE", "SIGNAL_PAGE_SIZE", "TIMESTAMP_DIVIDER", "DEFAULT_TIMEOUT_MS", "SLEEP_CHUNK_MS",
           "TIMELINE_WRAP", "EVENT_PAGE_SIZE", "SignalWaiter", "Signal", "SignalPool", "Timeline", "DeviceEvents"]
