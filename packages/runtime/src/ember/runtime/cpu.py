"""The CPU device: C from `CRenderer`, compiled by the system C compiler to a shared object, called through ctypes.

Kernels are C functions `void name(float* restrict data0, const float* restrict data1, ..., long long var0, ...)`:
buffer pointers in slot order, then the int variables. The renderer puts `#pragma omp parallel for` on the THREAD
loop; libgomp keeps its worker threads alive between kernels, so a launch costs no thread start. Before the first
kernel loads libgomp, the device writes the OpenMP settings it chose into the environment (`openmp_environment`),
each only where the user set none: the thread count (the usable cores) and a passive wait (an idle thread sleeps, so
the threads do not starve other work on a shared machine, nor wait on a descheduled spinner).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import queue
import shlex
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ember.runtime.allocator import LRUAllocator
from ember.runtime.compiler import CompileError, Compiler
from ember.runtime.device import CompiledDevice
from ember.runtime.program import Program
from ember.uops import settings

ALIGNMENT = 64  # a cache line, and the widest vector load (AVX-512)


class HostMemory:
    """A block of host memory at `addr` (for ctypes calls). A view keeps its `owner` block referenced."""

    __slots__ = ("addr", "nbytes", "owner")

    def __init__(self, addr: int, nbytes: int, owner: HostMemory | None = None):
        self.addr, self.nbytes, self.owner = addr, nbytes, owner

    def numpy(self) -> np.ndarray:
        """The bytes as a uint8 array over this memory (no copy)."""
        return np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.addr))

    def __repr__(self) -> str:
        return f"<HostMemory {self.nbytes} B at {self.addr:#x}>"


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
    libc.posix_memalign.restype = ctypes.c_int
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free.restype = None
    return libc


@functools.cache
def _madvise() -> Any:
    """libc's madvise, None where there is none (not Linux)."""
    if platform.system() != "Linux":
        return None
    madvise = _libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _address(mv: memoryview) -> int:
    return int(np.frombuffer(mv, np.uint8).ctypes.data) if mv.nbytes else 0


HUGE_PAGE = 2 << 20  # x86-64 and aarch64 transparent huge pages
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux
# buffers from this size on ask for huge pages: far past the reach of a core's TLB in 4 KiB pages (~12 MiB), where
# they pay; below it the first touch of each 2 MiB page (zeroed, maybe compacted for) cost more than they saved (the
# tiny Llama's first step 0.2 s slower with 4 MiB, its later steps no faster)
HUGE_PAGE_MIN = 32 << 20


PAGE = 4096
MADV_POPULATE_WRITE = 23  # <sys/mman.h>, Linux 5.14+: fault the pages in, writable, without touching their data
PREFAULT_MIN = 1 << 20  # smaller blocks are left to fault in on first touch (a few pages: not worth the hand-off)
# the prefault thread starts once no block came for this long: a schedule allocates its buffers in one burst
# (~1 ms for the tiny Llama's 120), and populating while they were still being allocated made the allocations wait on
# it (the mmap lock, the GIL between populate calls): 50-90 ms of the warm first step, on a 2-core AMD EPYC VM
PREFAULT_QUIET_S = 0.002


class _Prefaulter:
    """A thread that faults in the pages of fresh blocks (`MADV_POPULATE_WRITE`) while the caller goes on: a kernel
    that touches a page first otherwise takes the fault (~1.4 us a 4 KiB page on this VM: the tiny Llama's first step
    faults ~210 MB, ~50 ms of its launches) on its own time. It waits for a burst of allocations to end
    (`PREFAULT_QUIET_S` without a new block) before it populates the burst's blocks. A page the kernel reaches first is
    simply faulted there; a block freed meanwhile is harmless to populate (its data is never written)."""

    def __init__(self) -> None:
        self.blocks: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def submit(self, addr: int, nbytes: int) -> None:
        """Fault in the whole pages of the block at `addr` soon, on the prefault thread (started on first use)."""
        start, end = -(-addr // PAGE) * PAGE, (addr + nbytes) // PAGE * PAGE
        if end <= start or _madvise() is None:
            return
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True, name="ember-prefault")
                self.thread.start()
        self.blocks.put((start, end - start))

    def _run(self) -> None:
        while True:
            burst = [self.blocks.get()]
            while True:
                try:
                    burst.append(self.blocks.get(timeout=PREFAULT_QUIET_S))
                except queue.Empty:
                    break
            for start, length in burst:  # (ctypes releases the GIL; an old kernel's EINVAL: no-op)
                _madvise()(start, length, MADV_POPULATE_WRITE)


_prefaulter = _Prefaulter()


class CPUAllocator(LRUAllocator):
    """Host memory from posix_memalign, 64-byte aligned; freed with free() when the LRU cache is released.

    A buffer of HUGE_PAGE_MIN or more is aligned to 2 MiB and asked for transparent huge pages
    (`madvise(MADV_HUGEPAGE)`; the kernel's default is often "madvise only"): a stream over 4 KiB pages stops the
    hardware prefetcher at every page and misses the TLB (a 64 MiB sum: ~31 -> ~37 GB/s)."""

    def _alloc(self, nbytes: int, options: Hashable | None) -> HostMemory:
        ptr = ctypes.c_void_p()
        huge = nbytes >= HUGE_PAGE_MIN
        if (err := _libc().posix_memalign(ctypes.byref(ptr), HUGE_PAGE if huge else ALIGNMENT, max(nbytes, 1))) != 0 \
                or not ptr.value:
            raise MemoryError(f"CPU: cannot allocate {nbytes} bytes (posix_memalign error {err})")
        if huge and (madvise := _madvise()) is not None:
            madvise(ptr.value, nbytes - nbytes % HUGE_PAGE, MADV_HUGEPAGE)  # a hint: its failure changes nothing
        if nbytes >= PREFAULT_MIN:
            _prefaulter.submit(ptr.value, nbytes)
        return HostMemory(ptr.value, nbytes)

    def _free(self, buf: HostMemory, nbytes: int, options: Hashable | None) -> None:
        _libc().free(buf.addr)

    def copyin(self, dest: HostMemory, src: memoryview) -> None:
        assert src.nbytes == dest.nbytes, f"CPU copyin: {src.nbytes} bytes into a buffer of {dest.nbytes}"
        ctypes.memmove(dest.addr, _address(src), dest.nbytes)

    def copyout(self, dest: memoryview, src: HostMemory) -> None:
        assert dest.nbytes == src.nbytes, f"CPU copyout: a buffer of {src.nbytes} bytes into {dest.nbytes}"
        ctypes.memmove(_address(dest), src.addr, src.nbytes)

    def as_host(self, buf: HostMemory) -> memoryview:
        return memoryview((ctypes.c_uint8 * buf.nbytes).from_address(buf.addr)).cast("B")

    def offset(self, buf: HostMemory, nbytes: int, offset: int) -> HostMemory:
        return HostMemory(buf.addr + offset, nbytes, buf.owner or buf)


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo (empty where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[:64]) if k.strip()}


@functools.cache
def _host_cpu() -> str:
    # -march=native code is only valid on this kind of CPU: key the cache by its model and feature flags
    if not (info := _cpuinfo()):
        return platform.machine()
    ident = f"{info.get('model name', '')} {info.get('flags', info.get('Features', ''))}"
    return f"{platform.machine()} {hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _host_flags() -> tuple[str, ...]:
    """Flags for this CPU's quirks. With AVX512-FP16 (Sapphire Rapids and later), gcc 12's SLP vectorizer drops the
    `(float)(_Float16)x` round trip of a float16 result stored as float (`x.cast(float16).cumsum().float()` came out
    unrounded); without the native half instructions the conversions go through F16C and stay. Our float16 math is
    float math rounded after every op either way, so nothing else changes."""
    return ("-mno-avx512fp16",) if "avx512_fp16" in _cpuinfo().get("flags", "").split() else ()


@functools.cache
def _compiler_version(cc: tuple[str, ...]) -> str:
    try:
        out = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "unknown"


class CPUCompiler(Compiler):
    """C source to the bytes of a shared object, with `$CC` (default `cc`) and IEEE-preserving flags (no
    -ffast-math). The machine (`-march=native`) and the compiler's version are part of the cache key.

    A batch is the sources one after the other in one translation unit: `CRenderer` guards every definition outside
    a kernel's function, so the sources of several kernels (with distinct function names) concatenate. One run of
    the compiler then pays its start-up and the link of the shared object once for all of them."""

    # -O1 plus the -O2 passes our kernels need: inlining the vector helpers, FMA contraction of a*b+c
    # (-fexpensive-optimizations), redundancy elimination of the address math (-ftree-pre -fgcse) and SLP
    # vectorization of scalar gathers (a RoPE kernel: 1.7x). The kernels arrive vectorized and unrolled; the rest of
    # -O2 made none of the tiny Llama's kernels faster (timed one by one) and cost a quarter of the compile time.
    # -fira-region=one: register allocation over the whole function, not region by region: the step's batches in
    # ~3% less compile time (the RoPE backward's 128 gathered loads ~11%), its innermost loops as short or shorter.
    # -falign-loops=32: a loop starts on a 32-byte boundary, wherever the kernel lands in its batch's library (the
    # attention's dq kernel ran 7.5 ms alone and 9.2-11 ms in a batch, the same instructions placed otherwise).
    flags = ("-O1", "-finline-small-functions", "-fexpensive-optimizations", "-ftree-pre", "-fgcse",
             "-ftree-slp-vectorize", "-fira-region=one", "-falign-loops=32", "-march=native", "-fPIC", "-shared",
             "-fopenmp")
    batches = True
    invocations: ClassVar[int] = 0  # times the C compiler really ran in this process (cache hits do not count)

    def __init__(self) -> None:
        self.cc = tuple(shlex.split(settings.CC.value))
        self.flags = (*type(self).flags, *_host_flags())
        super().__init__(f"cpu {_host_cpu()} {' '.join(self.cc)} {_compiler_version(self.cc)}")

    def compile_batch(self, srcs: Sequence[str]) -> bytes:
        return self.compile("\n".join(srcs))

    def check_binary(self, lib: bytes) -> None:
        """A cached library must be what `compile` makes: a 64-bit ELF shared object (e_type ET_DYN)."""
        if len(lib) < 64 or lib[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        if lib[4] != 2 or int.from_bytes(lib[16:18], "little" if lib[5] == 1 else "big") != 3:
            raise ValueError("not a 64-bit ELF shared object")

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="ember-cc-") as tmp:
            (Path(tmp) / "kernel.c").write_text(src)
            # relative names in a fixed folder layout: the output does not depend on the temp folder's name
            cmd = [*self.cc, *self.flags, "kernel.c", "-o", "kernel.so", "-lm"]
            CPUCompiler.invocations += 1
            try:
                proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            except FileNotFoundError:
                raise CompileError(f"CPU: the C compiler {self.cc[0]!r} was not found; set $CC to a C compiler") \
                    from None
            if proc.returncode != 0:
                raise CompileError(f"CPU: `{' '.join(cmd)}` failed with exit code {proc.returncode}:\n"
                                   f"{proc.stderr}{proc.stdout}\n--- source ---\n{src}")
            return (Path(tmp) / "kernel.so").read_bytes()


# the shared objects loaded in this process, by the hash of their bytes: the kernels of one batch load it once
_libraries: weakref.WeakValueDictionary[bytes, ctypes.CDLL] = weakref.WeakValueDictionary()
_libraries_lock = threading.Lock()


def load_library(lib: bytes, name: str) -> ctypes.CDLL:
    """The shared object `lib` loaded (once per process while a program uses it); `name` is for the error."""
    key = hashlib.sha256(lib).digest()
    with _libraries_lock:
        if (library := _libraries.get(key)) is None:
            # dlopen keeps the mapping after the file is gone
            with tempfile.NamedTemporaryFile(prefix="ember-", suffix=".so") as f:
                f.write(lib)
                f.flush()
                try:
                    library = _libraries[key] = ctypes.CDLL(f.name)
                except OSError as e:
                    raise RuntimeError(f"CPU: cannot load the library of {name!r}: {e}") from e
    return library


class CPUProgram(Program):
    """A function of a compiled shared object, called with ctypes (which releases the GIL during the call)."""

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.library = load_library(lib, name)
        try:
            self.function: Any = getattr(self.library, name)
        except AttributeError:
            raise RuntimeError(f"CPU: the compiled library has no function {name!r}") from None
        self.function.restype = None

    def launch(self, bufs: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...], wait: bool) -> float | None:
        args = [ctypes.c_void_p(b.addr) for b in bufs] + [ctypes.c_int64(v) for v in vals]
        start = time.perf_counter()
        self.function(*args)
        return time.perf_counter() - start if wait else None


def cpu_threads() -> int:
    """The number of OpenMP threads kernels use: `$OMP_NUM_THREADS` (its first level), else the usable cores
    (`ember.uops.settings.usable_cores()`: the CPU affinity capped by a cgroup CPU quota)."""
    return settings.OMP_NUM_THREADS.value


# How an idle libgomp thread waits for the next kernel when the user chose nothing: passive, it sleeps on a futex at
# once. libgomp's default spins ~300,000 pause loops first (milliseconds): on a machine shared with other work a
# worker spins away its time slice while the thread a kernel's barrier waits for is descheduled. Measured with
# tools/bench/bench_llama_step.py --load against spins of 1,000 to 300,000 (RESULTS.md, "Threads on a shared
# machine"): passive held the tiny Llama's step at 1.4-2.4x its unloaded time where spinning went 3-10x, and was
# the fastest even "unloaded" while other jobs ran; on a quiet machine it cost 6-20% (a futex wake per kernel).
WAIT_POLICY = "passive"


def openmp_environment() -> dict[str, str]:
    """The OpenMP variables the CPU device adds to the environment (where the user set none) before libgomp reads
    them: `OMP_NUM_THREADS` = `cpu_threads()`, and how an idle thread waits: the `OMP_WAIT_POLICY` setting (a
    `Context` too), by default `WAIT_POLICY` (passive), unless the user set `GOMP_SPINCOUNT` (libgomp lets it override
    a policy's spin: theirs is kept alone). `OMP_DYNAMIC` is left off: libgomp sizes a team by the 15-minute load
    average, which lags the machine's load by minutes and counts our own threads' past work."""
    env = {}
    if not os.environ.get("OMP_NUM_THREADS", "").strip():
        env["OMP_NUM_THREADS"] = str(cpu_threads())
    policy = settings.OMP_WAIT_POLICY.value
    if not policy and os.environ.get("GOMP_SPINCOUNT", "").strip():
        return env
    policy = policy or WAIT_POLICY
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() != policy:
        env["OMP_WAIT_POLICY"] = policy
    return env


def libgomp_loaded() -> bool:
    """Whether libgomp is already in this process (e.g. PyTorch's copy, imported earlier: it has the same soname,
    so our kernels use it): then it read its settings when it loaded, and the device's environment comes too late."""
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


class CPUDevice(CompiledDevice):
    """`Device["CPU"]`: the host. Programs run synchronously; `synchronize()` has nothing to wait for.

    `openmp_env` is what the device added to the environment (`openmp_environment`), `openmp_preloaded` whether
    libgomp had loaded before (with the settings of that moment)."""

    def __init__(self, name: str = "CPU"):
        from ember.codegen import CRenderer

        self.threads = cpu_threads()
        # libgomp reads these once, when the first kernel's library loads it
        self.openmp_preloaded = libgomp_loaded()
        self.openmp_env = openmp_environment()
        os.environ.update(self.openmp_env)
        super().__init__(name, CPUAllocator(), CRenderer(), CPUCompiler(), CPUProgram)
