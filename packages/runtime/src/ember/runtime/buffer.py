"""`Buffer`: `size` elements of `dtype` on a device, allocated on first use, with views and host copies."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from ember.runtime.allocator import Allocator
from ember.runtime.device import Device
from ember.uops import DType, PtrDType, dtypes, to_numpy_dtype


def _check_size(what: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"Buffer: {what} must be an int >= 0, got {value!r}")
    return int(value)


def _as_bytes(src: memoryview | bytes | bytearray | np.ndarray, dtype: DType) -> memoryview:
    if isinstance(src, np.ndarray):
        if dtype.name in _NUMPY_NAMES and src.dtype != to_numpy_dtype(dtype):
            raise TypeError(f"copyin: a numpy array of {src.dtype} cannot fill a buffer of {dtype!r}; "
                            f"convert it with .astype(np.{to_numpy_dtype(dtype)}) first")
        src = np.ascontiguousarray(src).reshape(-1).view(np.uint8).data
    elif isinstance(src, (bytes, bytearray)):
        src = memoryview(src)
    elif not isinstance(src, memoryview):
        raise TypeError(f"copyin: src must be a memoryview, bytes, bytearray or numpy array, got {type(src).__name__}")
    if not src.c_contiguous:
        raise ValueError("copyin: src must be C-contiguous")
    return src.cast("B") if src.format != "B" or src.ndim != 1 else src


_NUMPY_NAMES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                          "float16", "float32", "float64"})


class Buffer:
    """`size` elements of `dtype` on `device`. Memory is allocated on first use (`allocate()`, or any copy or
    launch) and given back to the device's allocator when the Buffer is garbage collected.

    A view (`base` given, or `buf.view(size, dtype, offset)`) shares the memory of its base at byte `offset`.

        buf = Buffer("CPU", 4, dtypes.float32).copyin(np.arange(4, dtype=np.float32))
        buf.numpy()  # array([0., 1., 2., 3.], dtype=float32)"""

    base: Buffer | None

    def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None, offset: int = 0,
                 options: Hashable | None = None):
        if not isinstance(dtype, DType) or isinstance(dtype, PtrDType) or dtype == dtypes.void:
            raise TypeError(f"Buffer: dtype must be a value DType like dtypes.float32, got {dtype!r}")
        self.device = Device.canonicalize(device)
        self.size, self.dtype, self.options = _check_size("size", size), dtype, options
        self.offset = _check_size("offset", offset)
        if base is not None:
            if base.device != self.device:
                raise ValueError(f"Buffer: a view on {self.device} cannot have its base on {base.device}")
            if base.base is not None:  # a view of a view is a view of the root
                self.offset, base = self.offset + base.offset, base.base
            if self.offset + self.nbytes > base.nbytes:
                raise ValueError(f"Buffer: a view of {self.nbytes} bytes at offset {self.offset} does not fit in its "
                                 f"base of {base.nbytes} bytes")
        elif self.offset:
            raise ValueError(f"Buffer: offset {self.offset} given without a base buffer")
        self.base = base
        self.allocator: Allocator = Device[self.device].allocator
        self._raw: Any = None

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_allocated(self) -> bool:
        return self._raw is not None

    def allocate(self) -> Buffer:
        """Allocate the memory now (a view allocates its base). Allocating twice is an error."""
        if self._raw is not None:
            raise RuntimeError(f"allocate: {self!r} is already allocated")
        if self.base is not None:
            self._raw = self.allocator.offset(self.base.ensure_allocated().raw, self.nbytes, self.offset)
        else:
            self._raw = self.allocator.alloc(self.nbytes, self.options)
        return self

    def ensure_allocated(self) -> Buffer:
        return self if self._raw is not None else self.allocate()

    def deallocate(self) -> None:
        """Give the memory back to the allocator now (a view only drops its handle)."""
        if self._raw is not None and self.base is None:
            self.allocator.free(self._raw, self.nbytes, self.options)
        self._raw = None

    def __del__(self) -> None:
        try:
            self.deallocate()
        except (AttributeError, TypeError):  # a half-built Buffer, or interpreter shutdown
            pass

    @property
    def raw(self) -> Any:
        """The allocator's handle of this buffer's memory (what Programs and the allocator operate on)."""
        if self._raw is None:
            raise RuntimeError(f"{self!r} is not allocated")
        return self._raw

    def view(self, size: int, dtype: DType, offset: int = 0) -> Buffer:
        """`size` elements of `dtype` at byte `offset` into this buffer's memory (shared, not copied)."""
        return Buffer(self.device, size, dtype, base=self, offset=offset, options=self.options)

    def copyin(self, src: memoryview | bytes | bytearray | np.ndarray) -> Buffer:
        """Fill the buffer from host memory of exactly `nbytes` bytes (a numpy array must have the buffer's dtype)."""
        mv = _as_bytes(src, self.dtype)
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin: src has {mv.nbytes} bytes but {self!r} holds {self.nbytes} bytes")
        self.ensure_allocated()
        if self.nbytes:
            self.allocator.copyin(self._raw, mv)
        return self

    def copyout(self, dest: memoryview) -> memoryview:
        """Copy the buffer into the host memory `dest` of exactly `nbytes` bytes; returns dest."""
        if not isinstance(dest, memoryview):
            raise TypeError(f"copyout: dest must be a memoryview, got {type(dest).__name__}")
        mv = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        if mv.readonly:
            raise ValueError("copyout: dest is read-only")
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyout: dest has {mv.nbytes} bytes but {self!r} holds {self.nbytes} bytes")
        if self._raw is None and self.base is not None and self.base.is_allocated:
            self.allocate()  # a view of memory that exists
        if self._raw is None:
            raise RuntimeError(f"copyout: {self!r} is not allocated (nothing was ever written to it)")
        if self.nbytes:
            self.allocator.copyout(mv, self._raw)
        return dest

    def copy_from(self, src: Buffer) -> Buffer:
        """Fill this buffer with the bytes of `src` (same size, any devices): straight into host-addressable memory,
        else through a host staging copy."""
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy_from: {src!r} has {src.nbytes} bytes, {self!r} holds {self.nbytes}")
        if not self.nbytes:
            return self
        self.ensure_allocated()
        if (host := self.allocator.as_host(self._raw)) is not None:
            src.copyout(host)
        else:
            staging = bytearray(src.nbytes)
            src.copyout(memoryview(staging))
            self.copyin(memoryview(staging))
        return self

    def numpy(self) -> np.ndarray:
        """A host copy as a 1-d numpy array of the buffer's dtype (bfloat16/fp8 have none: TypeError)."""
        if self.dtype.name not in _NUMPY_NAMES or self.dtype.count != 1:
            raise TypeError(f"numpy: {self.dtype!r} has no numpy dtype; copy the raw bytes out with "
                            f"copyout(memoryview(np.empty({self.nbytes}, np.uint8)))")
        out = np.empty(self.size, to_numpy_dtype(self.dtype))
        self.copyout(out.data)
        return out

    def __repr__(self) -> str:
        view = f" view of {self.base.nbytes} B at {self.offset}" if self.base is not None else ""
        state = "" if self.is_allocated else " (not allocated)"
        return f"<Buffer {self.device} {self.size} x {self.dtype!r}{view}{state}>"
