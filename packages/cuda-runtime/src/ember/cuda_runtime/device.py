"""The `CUDA` device (`CUDA`, `CUDA:1`, ...): one GPU through the driver API, kernels compiled by NVRTC to cubins.

Each device owns the GPU's primary context and one stream: copies and launches are queued on it in order, so a
kernel sees the copies before it and a copy out sees the kernels before it. Host copies go through two pinned
staging buffers (the next chunk's copy overlaps this chunk's memmove). A program is launched with
grid = global_size blocks of block = local_size threads; buffers are passed as device addresses, then the int
variables, packed as cuLaunchKernel's kernelParams (one pointer per parameter, sized as the kernel declares them
when the driver can tell). Every wait polls against `$CUDA_TIMEOUT` seconds (default 300) and reports a hang.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import operator
import os
import threading
import weakref
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ember.codegen import CUDARenderer, Renderer
from ember.cuda_runtime.compiler import NVRTCCompiler, cubin_arch, cubin_global
from ember.cuda_runtime.driver import (
    FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    FUNC_MAX_THREADS_PER_BLOCK,
    CUDAContext,
    KernelNodeParams,
    load_driver,
)
from ember.runtime import Buffer, CompiledDevice, LRUAllocator, Program

GRAPH_ENV = "CUDA_GRAPH"  # 0: a jit replays as batched launches, not CUDA graphs
STAGING_BYTES = 16 << 20  # each of the two pinned staging buffers of host copies


class CUDAMemory:
    """`nbytes` of device memory at address `ptr` on GPU `ordinal`. A view keeps its `owner` allocation referenced."""

    __slots__ = ("ptr", "nbytes", "ordinal", "owner")

    def __init__(self, ptr: int, nbytes: int, ordinal: int, owner: CUDAMemory | None = None):
        self.ptr, self.nbytes, self.ordinal, self.owner = ptr, nbytes, ordinal, owner

    def __repr__(self) -> str:
        return f"<CUDAMemory {self.nbytes} B at {self.ptr:#x} on CUDA:{self.ordinal}>"


def _host_address(mv: memoryview) -> int:
    return int(np.frombuffer(mv, np.uint8).ctypes.data) if mv.nbytes else 0


class CUDAAllocator(LRUAllocator):
    """Device memory from cuMemAlloc (freed buffers kept by the LRU cache), host copies staged through pinned
    memory, and `transfer` for copies between GPUs (or within one) that never touch the host."""

    def __init__(self, context: CUDAContext, staging_bytes: int = STAGING_BYTES):
        super().__init__()
        self.context, self.staging_bytes = context, staging_bytes
        self._staging: list[tuple[int, ctypes.c_void_p]] = []  # (pinned address, event of its last copy)
        self._lock = threading.Lock()

    def _alloc(self, nbytes: int, options: Hashable | None) -> CUDAMemory:
        return CUDAMemory(self.context.alloc(nbytes), nbytes, self.context.ordinal)

    def _free(self, buf: CUDAMemory, nbytes: int, options: Hashable | None) -> None:
        self.context.free(buf.ptr)

    def offset(self, buf: CUDAMemory, nbytes: int, offset: int) -> CUDAMemory:
        """A view of `nbytes` at byte `offset` into `buf` (the same device memory)."""
        return CUDAMemory(buf.ptr + offset, nbytes, buf.ordinal, buf.owner or buf)

    def _slots(self) -> list[tuple[int, ctypes.c_void_p]]:
        if not self._staging:
            self._staging = [(self.context.host_alloc(self.staging_bytes), self.context.event(timing=False))
                             for _ in range(2)]
        return self._staging

    def copyin(self, dest: CUDAMemory, src: memoryview) -> None:
        """Copy host bytes into `dest` through the pinned staging buffers; returns once `src` may be reused (the
        last chunk's DMA may still be running, ordered before anything queued next)."""
        assert src.nbytes == dest.nbytes, f"CUDA copyin: {src.nbytes} bytes into a buffer of {dest.nbytes}"
        ctx, host = self.context, _host_address(src)
        with self._lock:
            slots = self._slots()
            for i, start in enumerate(range(0, src.nbytes, self.staging_bytes)):
                pinned, done = slots[i % 2]
                ctx.wait_event(done, "a copy to the GPU")  # its last copy out of this staging buffer
                n = min(self.staging_bytes, src.nbytes - start)
                ctypes.memmove(pinned, host + start, n)
                ctx.copy_htod(dest.ptr + start, pinned, n)
                ctx.record(done)

    def copyout(self, dest: memoryview, src: CUDAMemory) -> None:
        """Copy `src` into host bytes after the work queued before it; returns when `dest` holds them."""
        assert dest.nbytes == src.nbytes, f"CUDA copyout: a buffer of {src.nbytes} bytes into {dest.nbytes}"
        ctx, host = self.context, _host_address(dest)
        with self._lock:
            slots, pending = self._slots(), deque[tuple[int, ctypes.c_void_p, int, int]]()
            for i, start in enumerate(range(0, src.nbytes, self.staging_bytes)):
                if len(pending) == len(slots):
                    self._drain(pending.popleft(), host)
                pinned, done = slots[i % 2]
                n = min(self.staging_bytes, src.nbytes - start)
                ctx.copy_dtoh(pinned, src.ptr + start, n)
                ctx.record(done)
                pending.append((pinned, done, start, n))
            while pending:
                self._drain(pending.popleft(), host)

    def _drain(self, chunk: tuple[int, ctypes.c_void_p, int, int], host: int) -> None:
        pinned, done, start, n = chunk
        self.context.wait_event(done, "a copy from the GPU")
        ctypes.memmove(host + start, pinned, n)

    def transfer(self, dest: CUDAMemory, src: CUDAMemory, src_allocator: CUDAAllocator) -> None:
        """Copy `src` (memory of `src_allocator`'s GPU) into `dest` on this GPU: cuMemcpyPeerAsync between two GPUs
        (ordered after both streams' work so far), cuMemcpyDtoDAsync within one."""
        if dest.nbytes != src.nbytes:
            raise ValueError(f"transfer: {src!r} has {src.nbytes} bytes, {dest!r} holds {dest.nbytes}")
        if src.ordinal == dest.ordinal:
            self.context.copy_dtod(dest.ptr, src.ptr, dest.nbytes)
        else:
            self.context.copy_peer(dest.ptr, src.ptr, src_allocator.context, dest.nbytes)

    def free_cache(self) -> None:
        """Release the cached buffers to the driver, once the queued work that may use them has finished."""
        self.context.synchronize()  # a cached buffer may still be read by a queued kernel
        super().free_cache()


def _dims(what: str, size: tuple[int, ...], limits: tuple[int, ...], kernel: str) -> tuple[int, int, int]:
    try:
        dims = tuple(operator.index(s) for s in size)
    except TypeError:
        dims = ()
    if not 1 <= len(size) <= 3 or len(dims) != len(size) or any(d < 0 for d in dims):
        raise ValueError(f"{kernel}: {what} must be 1 to 3 ints >= 0, got {size!r}")
    dims = (*dims, 1, 1)[:3]
    if any(d > limit for d, limit in zip(dims, limits)):
        raise ValueError(f"{kernel}: {what} {dims} exceeds the GPU's limits {limits}")
    return dims  # type: ignore[return-value]


class CUDAProgram(Program):
    """A kernel of a cubin loaded into the device's context, launched on its stream; `wait` times it with events."""

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        assert isinstance(device, CUDADevice), f"CUDAProgram needs a CUDADevice, got {device!r}"
        self.context = ctx = device.context
        if lib[:4] == b"\x7fELF":  # a cubin runs on its own major architecture, minor version or newer
            built, (major, minor) = cubin_arch(lib), ctx.compute_capability
            if built // 10 != major or built % 10 > minor:
                raise RuntimeError(f"{device.name}: kernel {name!r} is a cubin for sm_{built}; the GPU "
                                   f"({ctx.name}) is {ctx.arch}: compile it with NVRTCCompiler({ctx.arch!r})")
        self.module = device.load_module(lib)
        self.function = ctx.function(self.module.handle, name)
        self.max_threads = ctx.function_attribute(self.function, FUNC_MAX_THREADS_PER_BLOCK)
        self.param_sizes = ctx.parameter_sizes(self.function)
        self.shared_bytes = dynamic_shared_bytes(lib, name)
        if self.shared_bytes:  # (over 48 KiB a kernel must opt in first: cuda.md §1.3, §3.2)
            if self.shared_bytes > ctx.max_shared_optin:
                raise ValueError(f"{device.name}: kernel {name!r} needs {self.shared_bytes} bytes of shared memory, "
                                 f"{ctx.name} allows {ctx.max_shared_optin} per block")
            ctx.set_function_attribute(self.function, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared_bytes)
        self._events: tuple[ctypes.c_void_p, ctypes.c_void_p] | None = None
        # (global_size, local_size) -> (grid, block), checked against the limits once per shape
        self._launch_dims: dict[tuple[Any, Any], tuple[tuple[int, int, int], tuple[int, int, int]]] = {}

    def launch(self, bufs: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...], wait: bool) -> float | None:
        """Queue the kernel on the stream; with `wait`, wait for it and return its GPU time in seconds."""
        ctx = self.context
        if (dims := self._launch_dims.get((global_size, local_size))) is None:
            dims = self._launch_dims[(global_size, local_size)] = self._check_dims(global_size, local_size)
        grid, block = dims
        args = self._arguments(bufs, vals)
        params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        if 0 in grid or 0 in block:
            return 0.0 if wait else None  # no threads: nothing to run (the driver refuses a zero dimension)
        if not wait:
            ctx.launch(self.function, grid, block, params, self.shared_bytes)
            return None
        if self._events is None:
            self._events = (ctx.event(), ctx.event())
        start, end = self._events
        ctx.record(start)
        ctx.launch(self.function, grid, block, params, self.shared_bytes)
        ctx.record(end)
        ctx.wait_event(end, f"kernel {self.name}")
        return ctx.elapsed(start, end)

    def _check_dims(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None) \
            -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        ctx = self.context
        grid = _dims("global_size", global_size, ctx.max_grid, self.name)
        block = _dims("local_size", local_size or (1,), ctx.max_block, self.name)
        if (threads := math.prod(block)) > self.max_threads:
            raise ValueError(f"{self.name}: local_size {block} is {threads} threads; this kernel allows "
                             f"{self.max_threads} per block")
        return grid, block

    def _arguments(self, bufs: list[Any], vals: tuple[int, ...]) -> list[ctypes.c_uint64 | ctypes.c_int32
                                                                          | ctypes.c_int64]:
        for i, b in enumerate(bufs):
            if not isinstance(b, CUDAMemory) or b.ordinal != self.context.ordinal:
                raise ValueError(f"{self.name}: buffer argument {i} ({b!r}) is not memory of {self.context.label}")
        sizes = self.param_sizes
        if sizes is not None and len(sizes) != len(bufs) + len(vals):
            raise ValueError(f"{self.name}: the kernel takes {len(sizes)} parameters, given {len(bufs)} buffers and "
                             f"{len(vals)} values")
        args: list[ctypes.c_uint64 | ctypes.c_int32 | ctypes.c_int64] = [ctypes.c_uint64(b.ptr) for b in bufs]
        for i, v in enumerate(vals):
            size = 8 if sizes is None else sizes[len(bufs) + i]
            if size == 4:
                if not -2**31 <= v < 2**31:
                    raise ValueError(f"{self.name}: value {i} ({v}) does not fit the kernel's 32-bit parameter")
                args.append(ctypes.c_int32(v))
            else:  # 8 bytes; with no layout from the driver, the low 4 of these little-endian bytes fill an int
                args.append(ctypes.c_int64(v))
        return args

    def __del__(self) -> None:
        try:
            if self._events is not None:
                for ev in self._events:
                    self.context.destroy_event(ev)
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a context already gone
            pass


def dynamic_shared_bytes(lib: bytes, name: str) -> int:
    """Bytes of dynamic shared memory kernel `name` of a cubin needs per block: the value of its
    `emb_dynamic_shared_<name>` variable (CUDARenderer defines it for a kernel over the 48 KiB of static shared
    memory), else 0."""
    if lib[:4] != b"\x7fELF":
        return 0
    value = cubin_global(lib, f"emb_dynamic_shared_{name}")
    return int.from_bytes(value, "little") if value is not None and len(value) == 4 else 0


class LoadedModule:
    """A cubin loaded into a context; unloaded when the last program using it is gone."""

    def __init__(self, context: CUDAContext, image: bytes):
        self.context, self.handle = context, context.load_module(image)

    def __del__(self) -> None:
        try:
            self.context.unload_module(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a context already gone
            pass


class _NoRenderer:
    """Stands in for `CUDARenderer` on a GPU it does not target (before sm_80): any use says what is missing."""

    def __init__(self, arch: str, why: str):
        self.arch, self.why = arch, why

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"CUDA: tensor kernels cannot be rendered for {self.arch} ({self.why}); hand-"
                                  f"written CUDA C runs through dev.runtime(name, dev.compiler.compile_cached(src))")


def renderer_for(arch: str, shared_max: int | None = None) -> Renderer | _NoRenderer:
    """`CUDARenderer(arch, shared_max)`, or a stand-in that raises NotImplementedError on use where it cannot target
    `arch`."""
    try:
        return CUDARenderer(arch, shared_max)
    except ValueError as e:
        return _NoRenderer(arch, str(e))


def device_ordinal(name: str) -> int:
    """The GPU number of a device name: 'CUDA' -> 0, 'CUDA:1' -> 1."""
    base, sep, index = name.partition(":")
    if base.upper() != "CUDA" or (sep and not index.isdigit()):
        raise ValueError(f"CUDADevice: a name is 'CUDA' or 'CUDA:<n>', got {name!r}")
    return int(index) if sep else 0


class CUDADevice(CompiledDevice):
    """`Device["CUDA"]`, `Device["CUDA:1"]`: one NVIDIA GPU. `context` holds the driver state and the device facts
    (`context.arch`, `context.name`, `context.total_memory`); `synchronize()` waits for the stream, reporting a hang
    after `$CUDA_TIMEOUT` seconds.

        dev = Device["CUDA"]
        prg = dev.runtime("add", dev.compiler.compile_cached(cuda_src))
        prg(out, a, b, global_size=(n // 256,), local_size=(256,), vals=(n,), wait=True)"""

    def __init__(self, name: str = "CUDA", driver_path: str | None = None):
        ordinal = device_ordinal(name)
        driver = load_driver(driver_path)
        self.context = CUDAContext(driver, ordinal)
        self.arch = self.context.arch
        renderer = renderer_for(self.arch, self.context.max_shared_optin)
        super().__init__(name, CUDAAllocator(self.context), renderer,  # type: ignore[arg-type]
                         NVRTCCompiler(self.arch, prefer_major=driver.version[0]), CUDAProgram)
        # the cubins loaded, by content: the kernels of one compiled batch share one module
        self._modules: weakref.WeakValueDictionary[bytes, LoadedModule] = weakref.WeakValueDictionary()
        self._modules_lock = threading.Lock()

    def load_module(self, image: bytes) -> LoadedModule:
        """The cubin `image` loaded into this GPU's context (once while a program holds it)."""
        key = hashlib.sha256(image).digest()
        with self._modules_lock:
            if (module := self._modules.get(key)) is None:
                module = self._modules[key] = LoadedModule(self.context, image)
        return module

    def synchronize(self) -> None:
        """Wait until every copy and kernel queued on this GPU has finished."""
        self.context.synchronize()

    def copy(self, dest: Buffer, src: Buffer) -> Buffer:
        """Copy `src` into `dest` (this device's Buffer) on the GPUs, with no trip through the host: from another
        CUDA device by a peer copy, from this one by a device-to-device copy."""
        if not isinstance(src.allocator, CUDAAllocator) or dest.allocator is not self.allocator:
            raise ValueError(f"copy: dest must be a Buffer of {self.name} and src of a CUDA device, got {dest!r} "
                             f"and {src!r}")
        if not src.is_allocated:
            raise RuntimeError(f"copy: {src!r} is not allocated (nothing was ever written to it)")
        assert isinstance(self.allocator, CUDAAllocator)
        self.allocator.transfer(dest.ensure_allocated().raw, src.raw, src.allocator)
        return dest

    def graph(self, launches: Sequence[tuple[Any, ...]], inputs: Sequence[Buffer]) -> CUDAGraph | None:
        """A jit's launches as a `CUDAGraph` (CUDA graphs, or batched launches where the driver has no graphs or
        `$CUDA_GRAPH=0`), or None when one touches another device's memory."""
        buffers = [b for launch in launches for b in launch[1]]
        if any(not isinstance(b.allocator, CUDAAllocator) or b.device != self.name for b in (*buffers, *inputs)):
            return None
        if (flag := os.environ.get(GRAPH_ENV, "1").strip() or "1") not in ("0", "1"):
            raise ValueError(f"{GRAPH_ENV}={flag!r}: expected 1 (CUDA graphs, the default) or 0 (batched launches)")
        return CUDAGraph(self, launches, inputs, batched=flag == "0")


class CUDAGraph:
    """A jit's recorded launches, replayed with new input Buffers.

    Each run of kernels between two copies is one CUDA graph (`mode` "cuda-graph"): a chain of kernel nodes built
    once (cuGraphAddKernelNode_v2, each after the one before), instantiated once, and launched per replay with one
    cuGraphLaunch. At a replay, the kernel nodes whose arguments hold an input Buffer whose address changed since the
    last replay get their new arguments (cuGraphExecKernelNodeSetParams_v2); the others are left as they are. Copies
    run through the allocators between the graphs, in order. A driver without the graph entry points (or
    `batched=True`) gets batched launches instead (`mode` "batched"): the same parameter blocks, one cuLaunchKernel
    each, with no per-launch work in Python beyond the driver call."""

    def __init__(self, device: CUDADevice, launches: Sequence[tuple[Any, ...]], inputs: Sequence[Buffer],
                 batched: bool = False):
        self.device, self.context = device, device.context
        self.mode = "batched" if batched or not self.context.driver.has_graphs else "cuda-graph"
        slot = {id(b): i for i, b in enumerate(inputs)}
        self.patches: list[list[ctypes.c_uint64]] = [[] for _ in inputs]  # per input: the parameters holding it
        self.jobs: list[tuple[Any, ...]] = []  # kernels: (function, grid, block, params, args, shared, node params)
        uses: list[list[int]] = [[] for _ in inputs]  # per input: the jobs whose arguments hold it
        for program, bufs, global_size, local_size, vals in launches:
            if program is None:  # a copy: (dest, src), inputs resolved at exec
                self.jobs.append((None, [slot.get(id(b), b) for b in bufs]))
                continue
            if not isinstance(program, CUDAProgram):
                raise TypeError(f"CUDAGraph: {program!r} is not a CUDA program")
            grid, block = program._check_dims(tuple(global_size), None if local_size is None else tuple(local_size))
            args = program._arguments([b.ensure_allocated().raw for b in bufs], tuple(vals))
            if 0 in grid or 0 in block:
                continue  # (no threads: nothing to run)
            for j, b in enumerate(bufs):
                if id(b) in slot:
                    self.patches[slot[id(b)]].append(args[j])  # type: ignore[arg-type]
                    uses[slot[id(b)]].append(len(self.jobs))
            params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
            node = KernelNodeParams(program.function.value, *grid, *block, program.shared_bytes,
                                    ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p)), None, None, None)
            # (the program too: its module stays loaded while the graph may launch it)
            self.jobs.append((program.function, grid, block, params, args, program.shared_bytes, node, program))
        self.last = [b.ensure_allocated().raw.ptr for b in inputs]  # the input addresses the graphs' nodes hold now
        self.uses = [sorted(set(u)) for u in uses]
        # the CUDA graphs: per run of kernels, (its first and last job, graph, executable, nodes)
        self.graphs: list[tuple[int, int, ctypes.c_void_p, ctypes.c_void_p, list[ctypes.c_void_p]]] = []
        self.node_of: dict[int, tuple[int, int]] = {}  # kernel job -> (graph, node)
        if self.mode == "cuda-graph":
            self._build_graphs()

    def _build_graphs(self) -> None:
        ctx, i = self.context, 0
        while i < len(self.jobs):
            if self.jobs[i][0] is None:
                i += 1
                continue
            first = i
            graph, nodes = ctx.graph_create(), []
            while i < len(self.jobs) and self.jobs[i][0] is not None:
                nodes.append(ctx.graph_add_kernel(graph, self.jobs[i][6], nodes[-1] if nodes else None))
                self.node_of[i] = (len(self.graphs), len(nodes) - 1)
                i += 1
            self.graphs.append((first, i, graph, ctx.graph_instantiate(graph), nodes))

    def exec_buffers(self, inputs: Sequence[Buffer], wait: bool = False) -> None:
        """Replay on new input Buffers (the recorded ones' shapes); `wait`: until the GPU has finished."""
        if len(inputs) != len(self.patches):
            raise ValueError(f"CUDAGraph: takes {len(self.patches)} inputs, got {len(inputs)}")
        changed: set[int] = set()
        for k, (storage, b) in enumerate(zip(self.patches, inputs)):
            ptr = b.ensure_allocated().raw.ptr
            if ptr != self.last[k]:
                self.last[k] = ptr
                for s in storage:
                    s.value = ptr
                changed.update(self.uses[k])
        if self.mode == "cuda-graph":
            self._exec_graphs(inputs, changed)
        else:
            self._exec_batched(inputs)
        if wait:
            self.device.synchronize()

    def _copy(self, job: tuple[Any, ...], inputs: Sequence[Buffer]) -> None:
        dest, src = (inputs[x] if isinstance(x, int) else x for x in job[1])
        dest.copy_from(src)

    def _exec_batched(self, inputs: Sequence[Buffer]) -> None:
        launch = self.context.launch
        for job in self.jobs:
            if job[0] is None:
                self._copy(job, inputs)
            else:
                launch(job[0], job[1], job[2], job[3], job[5])

    def _exec_graphs(self, inputs: Sequence[Buffer], changed: set[int]) -> None:
        ctx = self.context
        for i in sorted(changed):  # (the driver copies the argument values now)
            g, n = self.node_of[i]
            ctx.graph_set_kernel(self.graphs[g][3], self.graphs[g][4][n], self.jobs[i][6])
        at = 0
        for first, last, _, graph_exec, _ in self.graphs:
            for job in self.jobs[at:first]:
                self._copy(job, inputs)
            ctx.graph_launch(graph_exec)
            at = last
        for job in self.jobs[at:]:
            self._copy(job, inputs)

    def __del__(self) -> None:
        try:
            for _, _, graph, graph_exec, _ in self.graphs:  # (an executable still running is freed once it is done)
                self.context.graph_destroy(graph, graph_exec)
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a context already gone
            pass


__all__ = ["CUDAAllocator", "CUDADevice", "CUDAGraph", "CUDAMemory", "CUDAProgram", "device_ordinal"]
