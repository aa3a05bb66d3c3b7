"""Allocators: device memory by the byte, and `LRUAllocator`, which keeps freed buffers for reuse."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class Allocator:
    """Device memory. Subclasses implement `_alloc`/`_free`, `copyin`/`copyout` and, for views, `offset`.

    A raw buffer (what `alloc` returns) is whatever handle the device uses; only its allocator looks inside it.
    `options` is a hashable description of special memory (host-visible, uncached, ...) or None."""

    def alloc(self, nbytes: int, options: Hashable | None = None) -> Any:
        """A new raw buffer of `nbytes` bytes (contents undefined)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise ValueError(f"alloc: nbytes must be an int >= 0, got {nbytes!r}")
        return self._alloc(nbytes, options)

    def free(self, buf: Any, nbytes: int, options: Hashable | None = None) -> None:
        """Give back a raw buffer from `alloc(nbytes, options)`."""
        self._free(buf, nbytes, options)

    def _alloc(self, nbytes: int, options: Hashable | None) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: _alloc is not implemented")

    def _free(self, buf: Any, nbytes: int, options: Hashable | None) -> None:
        raise NotImplementedError(f"{type(self).__name__}: _free is not implemented")

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy host bytes `src` (format "B", exactly the size of dest) into the raw buffer `dest`."""
        raise NotImplementedError(f"{type(self).__name__}: copyin is not implemented")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy the raw buffer `src` into host bytes `dest` (format "B", exactly the size of src)."""
        raise NotImplementedError(f"{type(self).__name__}: copyout is not implemented")

    def as_host(self, buf: Any) -> memoryview | None:
        """The raw buffer's memory as host bytes, where the host can address it (CPU memory), else None: a copy
        between two such buffers is one move, not a trip through a staging buffer."""
        return None

    def offset(self, buf: Any, nbytes: int, offset: int) -> Any:
        """A raw buffer of `nbytes` bytes at byte `offset` into `buf`, sharing its memory (never freed itself)."""
        raise NotImplementedError(f"{type(self).__name__}: views (offset) are not supported")


class LRUAllocator(Allocator):
    """An allocator that keeps freed buffers, keyed by (nbytes, options), and hands them out again.

    Kernels allocate the same sizes over and over (one training step is like the last), so most allocations are
    served from the cache without calling the device. When the device is out of memory, the cache is released and
    the allocation retried once."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, Hashable | None], list[Any]] = {}

    def alloc(self, nbytes: int, options: Hashable | None = None) -> Any:
        if cached := self.cache.get((nbytes, options)):
            return cached.pop()
        try:
            return super().alloc(nbytes, options)
        except MemoryError:
            self.free_cache()
            return super().alloc(nbytes, options)

    def free(self, buf: Any, nbytes: int, options: Hashable | None = None) -> None:
        self.cache.setdefault((nbytes, options), []).append(buf)

    def free_cache(self) -> None:
        """Release every cached buffer to the device."""
        for (nbytes, options), bufs in self.cache.items():
            for buf in bufs:
                self._free(buf, nbytes, options)
        self.cache.clear()

    @property
    def cached_bytes(self) -> int:
        """Bytes held in the cache (freed by their users, not yet returned to the device)."""
        return sum(nbytes * len(bufs) for (nbytes, _), bufs in self.cache.items())
