"""Global memory seen by the interpreter: the `GlobalMemory` protocol, its fault, and a sparse test implementation.

The mock GPU's memory implements `GlobalMemory`; the interpreter only ever calls `read` and `write` (vector loads and
stores are coalesced into as few calls as the lane addresses allow). An access touching an unmapped byte raises
`MemoryFault` carrying the first unmapped address.
"""

from __future__ import annotations

import bisect
from typing import Protocol, runtime_checkable

import numpy as np


class MemoryFault(RuntimeError):
    """An access to unmapped GPU memory. `address` is the faulting byte address; the interpreter re-raises it with
    the wave's program counter and instruction filled in."""

    def __init__(self, address: int, nbytes: int = 0, write: bool = False, *, pc: int | None = None,
                 instruction: str | None = None):
        self.address, self.nbytes, self.write, self.pc, self.instruction = address, nbytes, write, pc, instruction
        where = f" at pc {pc:#x} ({instruction})" if pc is not None else ""
        super().__init__(f"memory fault: {'write' if write else 'read'} of {nbytes} bytes at address {address:#x}"
                         f" is not mapped{where}")


@runtime_checkable
class GlobalMemory(Protocol):
    """What the interpreter needs from device memory (the mock GPU's virtual address space)."""

    def read(self, addr: int, nbytes: int) -> bytes | bytearray | memoryview | np.ndarray:
        """Return `nbytes` bytes at `addr`; raise `MemoryFault` if any byte is unmapped."""
        ...

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Store `data` at `addr`; raise `MemoryFault` (writing nothing) if any byte is unmapped."""
        ...


class SparseMemory:
    """A `GlobalMemory` made of separately mapped regions, each a NumPy byte array (tests and benchmarks).

    >>> mem = SparseMemory(); buf = mem.alloc(16); mem.write(buf, b"abcd"); bytes(mem.read(buf, 2))
    b'ab'
    """

    def __init__(self, first_address: int = 0x1_0000_0000):
        self._bases: list[int] = []
        self._regions: list[np.ndarray] = []
        self._next = first_address

    def map(self, addr: int, size: int) -> np.ndarray:
        """Map `size` zeroed bytes at `addr` (must not overlap a mapped region); return the region's array."""
        if size <= 0:
            raise ValueError(f"SparseMemory.map: size must be positive, got {size}")
        i = bisect.bisect_right(self._bases, addr)
        if (i > 0 and self._bases[i - 1] + self._regions[i - 1].size > addr) or \
                (i < len(self._bases) and addr + size > self._bases[i]):
            raise ValueError(f"SparseMemory.map: [{addr:#x}, {addr + size:#x}) overlaps a mapped region")
        region = np.zeros(size, np.uint8)
        self._bases.insert(i, addr)
        self._regions.insert(i, region)
        return region

    def alloc(self, size: int, align: int = 256) -> int:
        """Map a fresh region of `size` bytes after every earlier allocation (with an unmapped guard page between)."""
        addr = (self._next + align - 1) // align * align
        self.map(addr, size)
        self._next = addr + size + 4096
        return addr

    def _find(self, addr: int, nbytes: int, write: bool) -> tuple[np.ndarray, int]:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0 or addr >= self._bases[i] + self._regions[i].size:
            raise MemoryFault(addr, nbytes, write)
        off = addr - self._bases[i]
        region = self._regions[i]
        if off + nbytes > region.size:
            raise MemoryFault(self._bases[i] + region.size, nbytes, write)
        return region, off

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of `nbytes` bytes at `addr` as a uint8 array."""
        region, off = self._find(addr, nbytes, False)
        return region[off:off + nbytes].copy()

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Store the bytes of `data` at `addr`."""
        arr = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
        region, off = self._find(addr, arr.size, True)
        region[off:off + arr.size] = arr

    def read_array(self, addr: int, dtype: np.dtype | type, count: int) -> np.ndarray:
        """`count` elements of `dtype` at `addr` (a copy)."""
        dt = np.dtype(dtype)
        return self.read(addr, dt.itemsize * count).view(dt)

    def write_array(self, addr: int, values: np.ndarray) -> None:
        """Store a NumPy array's bytes at `addr`."""
        self.write(addr, np.ascontiguousarray(values).view(np.uint8).reshape(-1))
