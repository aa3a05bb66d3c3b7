"""The one OS boundary of the AMD runtime: every open, ioctl, mmap, sysfs read and doorbell store goes through a
`Platform` object that is passed in, never a module global.

`LinuxPlatform` is the real one (os, fcntl.ioctl, libc mmap through ctypes); `ember.amd_runtime.mock.MockPlatform`
is the in-process fake KFD that the tests run the same code against.

    platform = LinuxPlatform()
    fd = platform.open("/dev/kfd", os.O_RDWR)
    platform.ioctl(fd, AMDKFD_IOC_GET_VERSION, args := GetVersionArgs())
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import threading
from typing import Protocol, runtime_checkable

PAGE_SIZE = 0x1000  # the GPU page; KFD sizes and addresses are multiples of it
PROT_NONE, PROT_READ, PROT_WRITE = 0, mmap.PROT_READ, mmap.PROT_WRITE
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = mmap.MAP_SHARED, mmap.MAP_PRIVATE, mmap.MAP_ANONYMOUS
MAP_FIXED, MAP_NORESERVE = 0x10, 0x4000  # Linux x86-64 / arm64 values (the mmap module does not export them)

_FORMATS = {"B": 1, "H": 2, "I": 4, "Q": 8}


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= value."""
    return (value + multiple - 1) // multiple * multiple


class Mmio:
    """A typed view (`fmt` B/H/I/Q) over `nbytes` of process memory at `addr`: a ring, a signal, a write pointer.

        wptr = platform.mmio(gart_va + 56, 8, "Q")
        wptr[0] = put
    """

    def __init__(self, addr: int, nbytes: int, fmt: str = "B"):
        if fmt not in _FORMATS:
            raise ValueError(f"Mmio: fmt {fmt!r} is not one of {', '.join(_FORMATS)}")
        if nbytes % _FORMATS[fmt] or addr % _FORMATS[fmt]:
            raise ValueError(f"Mmio: {nbytes} bytes at 0x{addr:x} are not whole, aligned {fmt!r} items")
        self.addr, self.nbytes, self.fmt = addr, nbytes, fmt
        raw = memoryview((ctypes.c_char * nbytes).from_address(addr)).cast("B") if nbytes else memoryview(b"")
        self.mv = raw.cast(fmt) if nbytes else raw

    def __len__(self) -> int:
        return self.nbytes // _FORMATS[self.fmt]

    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self.mv[index] if isinstance(index, int) else self.mv[index].tolist()

    def __setitem__(self, index: int | slice, value: int | list[int] | bytes) -> None:
        if isinstance(value, list):  # whole items: through an array of this view's item type
            items = array.array(self.fmt, value)
            assert items.itemsize == _FORMATS[self.fmt], f"array item {self.fmt!r} is {items.itemsize} bytes"
            value = memoryview(items).cast("B").cast(self.fmt)  # type: ignore[assignment]
        self.mv[index] = value  # type: ignore[index]

    def view(self, offset: int = 0, size: int | None = None, fmt: str | None = None) -> Mmio:
        """A sub-view `size` bytes long (default: to the end) at byte `offset`, in `fmt` (default: this view's)."""
        size = self.nbytes - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise ValueError(f"Mmio.view: bytes [{offset}, {offset + size}) are outside this {self.nbytes}-byte view")
        return Mmio(self.addr + offset, size, fmt or self.fmt)

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """The raw bytes at byte `offset` (default: all of them)."""
        size = self.nbytes - offset if size is None else size
        return bytes(self.mv.cast("B")[offset:offset + size])

    def write(self, offset: int, data: bytes) -> None:
        """Store raw bytes at byte `offset`."""
        self.mv.cast("B")[offset:offset + len(data)] = data


class Doorbell:
    """One 64-bit doorbell slot: `ring(value)` stores the queue's new write pointer and makes the engine look at it."""

    def __init__(self, addr: int):
        if addr % 8:
            raise ValueError(f"Doorbell: address 0x{addr:x} is not 8-byte aligned")
        self.addr = addr
        self._slot = ctypes.c_uint64.from_address(addr)

    def ring(self, value: int) -> None:
        """Write `value` to the doorbell (one 64-bit store)."""
        self._slot.value = value

    @property
    def value(self) -> int:
        """The last value written."""
        return int(self._slot.value)


@runtime_checkable
class Platform(Protocol):
    """What the AMD runtime needs from the OS. Errors are `OSError` with the errno the kernel would give."""

    spin_wait_ms: int
    """How long a signal wait polls memory before it sleeps in KFD WAIT_EVENTS."""

    def open(self, path: str, flags: int) -> int:
        """Open a device node; returns the fd."""
        ...

    def close(self, fd: int) -> None:
        """Close an fd from `open`."""
        ...

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        """Issue `request` (the full _IOC number) with `arg`, which the driver may update in place."""
        ...

    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        """mmap(2): fd -1 is an anonymous mapping. Returns the address."""
        ...

    def munmap(self, addr: int, size: int) -> None:
        """munmap(2)."""
        ...

    def read_text(self, path: str) -> str:
        """The contents of a (sysfs) text file."""
        ...

    def listdir(self, path: str) -> list[str]:
        """The entries of a (sysfs) directory, sorted."""
        ...

    def exists(self, path: str) -> bool:
        """Whether a path exists."""
        ...

    def mmio(self, addr: int, size: int, fmt: str = "B") -> Mmio:
        """A typed view over mapped memory."""
        ...

    def doorbell(self, addr: int) -> Doorbell:
        """The doorbell slot at `addr` inside a mapped doorbell page."""
        ...


class _Libc:
    """libc's mmap and munmap through ctypes (the mmap module cannot map at a fixed address or with PROT_NONE)."""

    _lock = threading.Lock()
    _lib: ctypes.CDLL | None = None

    @classmethod
    def lib(cls) -> ctypes.CDLL:
        with cls._lock:
            if cls._lib is None:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                lib.mmap.restype = ctypes.c_void_p
                lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_long]
                lib.munmap.restype = ctypes.c_int
                lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
                cls._lib = lib
            return cls._lib


def libc_mmap(addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
    """mmap(2) through libc; raises OSError with errno on MAP_FAILED."""
    res = _Libc.lib().mmap(addr or None, size, prot, flags, fd, offset)
    if res is None or res == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap(0x{addr:x}, 0x{size:x}, prot={prot}, flags=0x{flags:x}, fd={fd}, "
                           f"offset=0x{offset:x}): {os.strerror(err)}")
    return int(res)


def libc_munmap(addr: int, size: int) -> None:
    """munmap(2) through libc; raises OSError with errno on failure."""
    if _Libc.lib().munmap(addr, size) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"munmap(0x{addr:x}, 0x{size:x}): {os.strerror(err)}")


class LinuxPlatform:
    """The real OS: /dev/kfd, the DRM render node and sysfs."""

    spin_wait_ms = 200

    def open(self, path: str, flags: int) -> int:
        return os.open(path, flags | os.O_CLOEXEC)

    def close(self, fd: int) -> None:
        os.close(fd)

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        # mutate_flag=True: the kernel's output fields are copied back into `arg`
        fcntl.ioctl(fd, request, arg, True)  # type: ignore[call-overload]

    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        return libc_mmap(addr, size, prot, flags, fd, offset)

    def munmap(self, addr: int, size: int) -> None:
        libc_munmap(addr, size)

    def read_text(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mmio(self, addr: int, size: int, fmt: str = "B") -> Mmio:
        return Mmio(addr, size, fmt)

    def doorbell(self, addr: int) -> Doorbell:
        return Doorbell(addr)


def oserror(code: int, message: str) -> OSError:
    """An OSError carrying `code` (an errno) and a message that names what was wrong."""
    return OSError(code, f"{message} ({errno.errorcode.get(code, code)})")


__all__ = ["PAGE_SIZE", "PROT_NONE", "PROT_READ", "PROT_WRITE", "MAP_SHARED", "MAP_PRIVATE", "MAP_ANONYMOUS",
           "MAP_FIXED", "MAP_NORESERVE", "round_up", "Mmio", "Doorbell", "Platform", "LinuxPlatform", "libc_mmap",
           "libc_munmap", "oserror"]
