"""The CUDA driver API (libcuda.so.1) through ctypes: one `Driver` per library file, one `CUDAContext` per GPU.

The library is loaded on first use from `$CUDA_DRIVER_PATH` (a path to a libcuda.so.1, e.g. a test's fake), else
`libcuda.so.1` from the loader's search path. Every entry point is declared with its exact exported symbol (the
`_v2` names that cuda.h maps the API names to) and argument types, and every call is checked: a failure raises
`CUDAError` naming the call and the driver's error name and text. Waits never block in the driver: they poll
`cuStreamQuery`/`cuEventQuery` against a deadline, so a kernel that never finishes is reported as a hang.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
from collections.abc import Callable
from typing import Any

DRIVER_PATH_ENV = "CUDA_DRIVER_PATH"
TIMEOUT_ENV = "CUDA_TIMEOUT"
DEFAULT_TIMEOUT = 300.0  # seconds a wait may take before it is reported as a hang

CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_READY = 0, 1, 2, 600
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING = 0, 2
CU_MEMHOSTALLOC_PORTABLE = 1

# CUdevice_attribute
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_BLOCK_DIM = (2, 3, 4)
ATTR_MAX_GRID_DIM = (5, 6, 7)
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR, ATTR_COMPUTE_CAPABILITY_MINOR = 75, 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8  # without opt-in (48 KiB)
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
# CUfunction_attribute
FUNC_MAX_THREADS_PER_BLOCK, FUNC_SHARED_SIZE_BYTES, FUNC_NUM_REGS = 0, 1, 4
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

_p, _u32, _i32, _u64, _sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t
_pp, _pi, _psz, _pu64 = ctypes.POINTER(_p), ctypes.POINTER(_i32), ctypes.POINTER(_sz), ctypes.POINTER(_u64)

# exported symbol -> argument types (every one returns CUresult, an int); see cuda.h's API-version #defines
SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [_u32],
    "cuDriverGetVersion": [_pi],
    "cuGetErrorName": [_i32, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [_i32, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGetCount": [_pi],
    "cuDeviceGet": [_pi, _i32],
    "cuDeviceGetName": [ctypes.c_char_p, _i32, _i32],
    "cuDeviceGetAttribute": [_pi, _i32, _i32],
    "cuDeviceTotalMem_v2": [_psz, _i32],
    "cuDeviceCanAccessPeer": [_pi, _i32, _i32],
    "cuDevicePrimaryCtxRetain": [_pp, _i32],
    "cuDevicePrimaryCtxRelease_v2": [_i32],
    "cuCtxSetCurrent": [_p],
    "cuCtxSynchronize": [],
    "cuCtxEnablePeerAccess": [_p, _u32],
    "cuMemGetInfo_v2": [_psz, _psz],
    "cuMemAlloc_v2": [_pu64, _sz],
    "cuMemFree_v2": [_u64],
    "cuMemHostAlloc": [_pp, _sz, _u32],
    "cuMemFreeHost": [_p],
    "cuMemcpyHtoDAsync_v2": [_u64, _p, _sz, _p],
    "cuMemcpyDtoHAsync_v2": [_p, _u64, _sz, _p],
    "cuMemcpyDtoDAsync_v2": [_u64, _u64, _sz, _p],
    "cuMemcpyPeerAsync": [_u64, _p, _u64, _p, _sz, _p],
    "cuModuleLoadData": [_pp, _p],
    "cuModuleUnload": [_p],
    "cuModuleGetFunction": [_pp, _p, ctypes.c_char_p],
    "cuFuncGetAttribute": [_pi, _i32, _p],
    "cuFuncSetAttribute": [_p, _i32, _i32],
    "cuLaunchKernel": [_p, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _p, _pp, _pp],
    "cuStreamCreate": [_pp, _u32],
    "cuStreamDestroy_v2": [_p],
    "cuStreamQuery": [_p],
    "cuStreamWaitEvent": [_p, _p, _u32],
    "cuEventCreate": [_pp, _u32],
    "cuEventRecord": [_p, _p],
    "cuEventQuery": [_p],
    "cuEventDestroy_v2": [_p],
}


class KernelNodeParams(ctypes.Structure):
    """cuda.h's `CUDA_KERNEL_NODE_PARAMS_v2` (what `CUDA_KERNEL_NODE_PARAMS` means in the CUDA 12 and 13 headers, and
    what the `_v2` graph entry points take): 72 bytes on x86-64, kernelParams at 40. `kern` and `ctx` stay NULL:
    `func` is used, in the current context (the header: kern "will only be referenced if func is NULL", ctx "is
    ignored if func is set"). See ../shared/specs/cuda.md §1.5."""

    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.POINTER(ctypes.c_void_p)),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


assert ctypes.sizeof(KernelNodeParams) == 72 and KernelNodeParams.kernelParams.offset == 40, \
    "KernelNodeParams must match CUDA_KERNEL_NODE_PARAMS_v2"
_pnode = ctypes.POINTER(KernelNodeParams)

# CUDA graphs, built node by node (cuda.h, CUDA 12.x/13.x; the API names map to these symbols):
#   cuGraphCreate(CUgraph *phGraph, unsigned int flags)
#   cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
#                           size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
#   cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
#   cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
#   cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p)
#   cuGraphExecDestroy(CUgraphExec hGraphExec), cuGraphDestroy(CUgraph hGraph)
GRAPH_SIGNATURES: dict[str, list[Any]] = {
    "cuGraphCreate": [_pp, _u32],
    "cuGraphAddKernelNode_v2": [_pp, _p, _pp, _sz, _pnode],
    "cuGraphInstantiateWithFlags": [_pp, _p, ctypes.c_ulonglong],
    "cuGraphLaunch": [_p, _p],
    "cuGraphExecKernelNodeSetParams_v2": [_p, _p, _pnode],
    "cuGraphExecDestroy": [_p],
    "cuGraphDestroy": [_p],
}

# present only in some drivers: the binding works without each (of the two elapsed-time symbols, one is needed;
# without every graph symbol, a jit replays as batched launches)
OPTIONAL = {
    "cuFuncGetParamInfo": [_p, _sz, _psz, _psz],  # CUDA 12.4+: the kernel's parameter layout
    "cuEventElapsedTime_v2": [ctypes.POINTER(ctypes.c_float), _p, _p],  # what CUDA 13's header calls
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _p, _p],  # CUDA 12's
    **GRAPH_SIGNATURES,
}


class CUDAError(RuntimeError):
    """A CUDA driver call failed: `call` is the entry point, `code` the CUresult."""

    def __init__(self, message: str, call: str, code: int):
        super().__init__(message)
        self.call, self.code = call, code


def timeout_seconds() -> float:
    """Seconds a wait on the GPU may take before it is a hang: `$CUDA_TIMEOUT` (a number > 0), default 300."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds > 0")
    return value


class Driver:
    """libcuda loaded from `path`, with every entry point of SIGNATURES declared; `call(name, *args)` checks.

        drv = load_driver()
        count = ctypes.c_int()
        drv.call("cuDeviceGetCount", ctypes.byref(count))"""

    def __init__(self, path: str):
        self.path = path
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(f"CUDA: cannot load the NVIDIA driver library {path!r} ({e}); install the NVIDIA "
                               f"driver, or set ${DRIVER_PATH_ENV} to the path of its libcuda.so.1") from None
        self.functions: dict[str, Any] = {}
        for name, argtypes in {**SIGNATURES, **OPTIONAL}.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                if name in OPTIONAL:
                    continue
                raise RuntimeError(f"CUDA: the driver library {path!r} has no entry point {name} (a driver older "
                                   f"than CUDA 11, or not libcuda)") from None
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self.functions[name] = fn
        if not (self.has("cuEventElapsedTime_v2") or self.has("cuEventElapsedTime")):
            raise RuntimeError(f"CUDA: the driver library {path!r} has neither cuEventElapsedTime_v2 nor "
                               f"cuEventElapsedTime")
        self.call("cuInit", 0)
        version = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(version))
        self.version = (version.value // 1000, version.value % 1000 // 10)

    def has(self, name: str) -> bool:
        """Whether the driver exports the (optional) entry point `name`."""
        return name in self.functions

    @property
    def has_graphs(self) -> bool:
        """Whether the driver has every CUDA graph entry point the device uses (GRAPH_SIGNATURES)."""
        return all(name in self.functions for name in GRAPH_SIGNATURES)

    def error_text(self, code: int) -> str:
        """`CUDA_ERROR_X (code): description` from the driver's own tables."""
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self.functions["cuGetErrorName"](code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return f"unknown CUresult {code}"
        self.functions["cuGetErrorString"](code, ctypes.byref(text))
        return f"{name.value.decode()} ({code}): {(text.value or b'').decode()}"

    def raw(self, name: str, *args: Any) -> int:
        """Call entry point `name` and return its CUresult unchecked (for queries whose NOT_READY is an answer)."""
        return int(self.functions[name](*args))

    def call(self, name: str, *args: Any) -> None:
        """Call entry point `name`; a result other than CUDA_SUCCESS raises CUDAError (MemoryError when out of
        memory, so that an allocator can free its cache and retry)."""
        if (code := int(self.functions[name](*args))) != CUDA_SUCCESS:
            message = f"CUDA: {name} failed: {self.error_text(code)}"
            if code == CUDA_ERROR_OUT_OF_MEMORY:
                raise MemoryError(message)
            raise CUDAError(message, name, code)


@functools.cache
def _load(path: str) -> Driver:
    return Driver(path)


def load_driver(path: str | None = None) -> Driver:
    """The driver library at `path`, else `$CUDA_DRIVER_PATH`, else `libcuda.so.1`: loaded and initialised once per
    path. No driver raises RuntimeError saying what is missing and how to point at one."""
    return _load(path or os.environ.get(DRIVER_PATH_ENV, "").strip() or "libcuda.so.1")


def wait_until(done: Callable[[], bool], timeout: float, what: str, device: str = "CUDA") -> None:
    """Poll `done()` until it is True: a few spins, then sleeps growing to 1 ms (a shared machine keeps its cores);
    past `timeout` seconds, RuntimeError '<device>: hang detected: <what> not finished after N s'."""
    deadline, sleep = time.monotonic() + timeout, 0.0
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{device}: hang detected: {what} not finished after {timeout:g} s "
                               f"(set ${TIMEOUT_ENV} to wait longer)")
        if sleep:
            time.sleep(sleep)
        sleep = min(max(sleep * 2, 2e-6), 1e-3)


class CUDAContext:
    """GPU `ordinal`'s primary context and the one stream that all its copies and launches go to, in order.

    Each method makes the context current first (the driver's current context is per thread), then calls.
    Device facts are read once: `name`, `arch` ('sm_90'), `total_memory`, `multiprocessors`, the block and grid
    limits, and the opt-in shared memory per block."""

    def __init__(self, driver: Driver, ordinal: int):
        self.driver, self.ordinal, self.label = driver, ordinal, f"CUDA:{ordinal}"
        count = ctypes.c_int()
        driver.call("cuDeviceGetCount", ctypes.byref(count))
        if not 0 <= ordinal < count.value:
            raise ValueError(f"{self.label}: no such device; this machine has {count.value} CUDA device(s) "
                             f"(CUDA, CUDA:1, ... up to CUDA:{max(count.value - 1, 0)})")
        device = ctypes.c_int()
        driver.call("cuDeviceGet", ctypes.byref(device), ordinal)
        self.device = device.value
        self.context = ctypes.c_void_p()
        driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        self.activate()
        name = ctypes.create_string_buffer(256)
        driver.call("cuDeviceGetName", name, len(name), self.device)
        self.name = name.value.decode(errors="replace")
        self.compute_capability = (self.attribute(ATTR_COMPUTE_CAPABILITY_MAJOR),
                                   self.attribute(ATTR_COMPUTE_CAPABILITY_MINOR))
        self.arch = f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"
        total = ctypes.c_size_t()
        driver.call("cuDeviceTotalMem_v2", ctypes.byref(total), self.device)
        self.total_memory = total.value
        self.multiprocessors = self.attribute(ATTR_MULTIPROCESSOR_COUNT)
        self.max_threads_per_block = self.attribute(ATTR_MAX_THREADS_PER_BLOCK)
        self.max_block = tuple(self.attribute(a) for a in ATTR_MAX_BLOCK_DIM)
        self.max_grid = tuple(self.attribute(a) for a in ATTR_MAX_GRID_DIM)
        self.max_shared_optin = self.attribute(ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.stream = ctypes.c_void_p()
        driver.call("cuStreamCreate", ctypes.byref(self.stream), CU_STREAM_NON_BLOCKING)
        self.peers: set[int] = set()  # ordinals this context has peer access to

    def activate(self) -> None:
        """Make this context current on the calling thread."""
        self.driver.call("cuCtxSetCurrent", self.context)

    def attribute(self, attribute: int) -> int:
        """A CUdevice_attribute of this GPU."""
        value = ctypes.c_int()
        self.driver.call("cuDeviceGetAttribute", ctypes.byref(value), attribute, self.device)
        return value.value

    # *** memory ***
    def alloc(self, nbytes: int) -> int:
        """`nbytes` of device memory (its address); MemoryError when the GPU is full."""
        self.activate()
        ptr = ctypes.c_uint64()
        self.driver.call("cuMemAlloc_v2", ctypes.byref(ptr), max(nbytes, 1))
        return ptr.value

    def free(self, ptr: int) -> None:
        """Give back device memory from `alloc`."""
        self.activate()
        self.driver.call("cuMemFree_v2", ptr)

    def host_alloc(self, nbytes: int) -> int:
        """`nbytes` of pinned (page-locked) host memory, the staging area of async copies."""
        self.activate()
        ptr = ctypes.c_void_p()
        self.driver.call("cuMemHostAlloc", ctypes.byref(ptr), nbytes, CU_MEMHOSTALLOC_PORTABLE)
        assert ptr.value, "cuMemHostAlloc returned NULL"
        return ptr.value

    def free_host(self, ptr: int) -> None:
        """Give back pinned host memory from `host_alloc`."""
        self.activate()
        self.driver.call("cuMemFreeHost", ptr)

    def copy_htod(self, dest: int, src_host: int, nbytes: int) -> None:
        """Queue a copy of pinned host memory into device memory on the stream."""
        self.activate()
        self.driver.call("cuMemcpyHtoDAsync_v2", dest, src_host, nbytes, self.stream)

    def copy_dtoh(self, dest_host: int, src: int, nbytes: int) -> None:
        """Queue a copy of device memory into pinned host memory on the stream."""
        self.activate()
        self.driver.call("cuMemcpyDtoHAsync_v2", dest_host, src, nbytes, self.stream)

    def copy_dtod(self, dest: int, src: int, nbytes: int) -> None:
        """Queue a copy within this GPU's memory on the stream."""
        self.activate()
        self.driver.call("cuMemcpyDtoDAsync_v2", dest, src, nbytes, self.stream)

    def copy_peer(self, dest: int, src: int, src_context: CUDAContext, nbytes: int) -> None:
        """Queue a copy from `src` on another GPU into `dest` here, ordered after the work queued on both streams
        so far, and before what either queues next. Peer access is enabled first where the GPUs allow it (else the
        driver stages the copy through the host itself)."""
        self.enable_peer(src_context)
        after_src = self.event(timing=False)
        src_context.record(after_src)
        self.activate()
        self.driver.call("cuStreamWaitEvent", self.stream, after_src, 0)
        self.driver.call("cuMemcpyPeerAsync", dest, self.context, src, src_context.context, nbytes, self.stream)
        copied = self.event(timing=False)
        self.record(copied)
        src_context.activate()
        self.driver.call("cuStreamWaitEvent", src_context.stream, copied, 0)
        self.destroy_event(after_src)  # destroying a recorded event is legal: the driver frees it once complete
        self.destroy_event(copied)

    def enable_peer(self, other: CUDAContext) -> None:
        """Let this GPU read `other`'s memory directly (NVLink/PCIe peer access), where the pair supports it."""
        if other.ordinal in self.peers or other.ordinal == self.ordinal:
            return
        can = ctypes.c_int()
        self.driver.call("cuDeviceCanAccessPeer", ctypes.byref(can), self.device, other.device)
        if can.value:
            self.activate()
            code = self.driver.raw("cuCtxEnablePeerAccess", other.context, 0)
            if code not in (CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
                raise CUDAError(f"CUDA: cuCtxEnablePeerAccess failed: {self.driver.error_text(code)}",
                                "cuCtxEnablePeerAccess", code)
        self.peers.add(other.ordinal)

    # *** modules and launches ***
    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """Load a cubin (or fatbin, or NUL-terminated PTX) into this context."""
        self.activate()
        module = ctypes.c_void_p()
        self.driver.call("cuModuleLoadData", ctypes.byref(module), image)
        return module

    def unload_module(self, module: ctypes.c_void_p) -> None:
        """Unload a module from `load_module` (its kernels are then gone)."""
        self.activate()
        self.driver.call("cuModuleUnload", module)

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        """The kernel `name` (its `extern "C"` name) of a loaded module."""
        fn = ctypes.c_void_p()
        self.activate()
        self.driver.call("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn

    def function_attribute(self, fn: ctypes.c_void_p, attribute: int) -> int:
        """A CUfunction_attribute of a kernel."""
        value = ctypes.c_int()
        self.driver.call("cuFuncGetAttribute", ctypes.byref(value), attribute, fn)
        return value.value

    def set_function_attribute(self, fn: ctypes.c_void_p, attribute: int, value: int) -> None:
        """Set a CUfunction_attribute of a kernel (e.g. 8: its dynamic shared memory ceiling)."""
        self.activate()
        self.driver.call("cuFuncSetAttribute", fn, attribute, value)

    def parameter_sizes(self, fn: ctypes.c_void_p) -> list[int] | None:
        """The byte size of each of the kernel's parameters, in order (None when the driver cannot tell: before
        CUDA 12.4)."""
        if not self.driver.has("cuFuncGetParamInfo"):
            return None
        sizes, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
        while (code := self.driver.raw("cuFuncGetParamInfo", fn, len(sizes), ctypes.byref(offset),
                                       ctypes.byref(size))) == CUDA_SUCCESS:
            sizes.append(size.value)
        return sizes if code == CUDA_ERROR_INVALID_VALUE else None  # INVALID_VALUE: past the last parameter

    def launch(self, fn: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int],
               params: ctypes.Array[ctypes.c_void_p], shared_bytes: int = 0) -> None:
        """Queue kernel `fn` on the stream: `grid` blocks of `block` threads; `params` holds one pointer per kernel
        parameter, each to host storage holding that argument's value (cuLaunchKernel's kernelParams);
        `shared_bytes` of dynamic shared memory per block."""
        self.activate()
        self.driver.call("cuLaunchKernel", fn, *grid, *block, shared_bytes, self.stream, params, None)

    # *** CUDA graphs (the driver has them: driver.has_graphs) ***
    def graph_create(self) -> ctypes.c_void_p:
        """A new empty CUDA graph."""
        self.activate()
        graph = ctypes.c_void_p()
        self.driver.call("cuGraphCreate", ctypes.byref(graph), 0)
        return graph

    def graph_add_kernel(self, graph: ctypes.c_void_p, params: KernelNodeParams,
                         after: ctypes.c_void_p | None = None) -> ctypes.c_void_p:
        """Add a kernel node to `graph` (run after node `after`, if given); the driver copies the argument values
        that `params.kernelParams` points at now."""
        self.activate()
        node = ctypes.c_void_p()
        deps = (ctypes.c_void_p * 1)(after.value) if after is not None else None
        self.driver.call("cuGraphAddKernelNode_v2", ctypes.byref(node), graph, deps, 0 if after is None else 1,
                         ctypes.byref(params))
        return node

    def graph_instantiate(self, graph: ctypes.c_void_p) -> ctypes.c_void_p:
        """The executable graph of `graph` (its nodes' parameters as they are now)."""
        self.activate()
        graph_exec = ctypes.c_void_p()
        self.driver.call("cuGraphInstantiateWithFlags", ctypes.byref(graph_exec), graph, 0)
        return graph_exec

    def graph_set_kernel(self, graph_exec: ctypes.c_void_p, node: ctypes.c_void_p, params: KernelNodeParams) -> None:
        """Give kernel node `node` of an executable graph new parameters (argument values copied now); the graph's
        next launch uses them."""
        self.activate()
        self.driver.call("cuGraphExecKernelNodeSetParams_v2", graph_exec, node, ctypes.byref(params))

    def graph_launch(self, graph_exec: ctypes.c_void_p) -> None:
        """Queue an executable graph on the stream (after everything queued before it)."""
        self.activate()
        self.driver.call("cuGraphLaunch", graph_exec, self.stream)

    def graph_destroy(self, graph: ctypes.c_void_p, graph_exec: ctypes.c_void_p | None) -> None:
        """Destroy an executable graph (once what was launched of it has finished) and its graph."""
        self.activate()
        if graph_exec is not None:
            self.driver.call("cuGraphExecDestroy", graph_exec)
        self.driver.call("cuGraphDestroy", graph)

    # *** events and waits ***
    def event(self, timing: bool = True) -> ctypes.c_void_p:
        """A new event (with timestamps when `timing`)."""
        self.activate()
        ev = ctypes.c_void_p()
        self.driver.call("cuEventCreate", ctypes.byref(ev), CU_EVENT_DEFAULT if timing else CU_EVENT_DISABLE_TIMING)
        return ev

    def destroy_event(self, ev: ctypes.c_void_p) -> None:
        """Destroy an event (one still pending is freed by the driver once it completes)."""
        self.activate()
        self.driver.call("cuEventDestroy_v2", ev)

    def record(self, ev: ctypes.c_void_p) -> None:
        """Record `ev` on the stream: it completes when everything queued before it has."""
        self.activate()
        self.driver.call("cuEventRecord", ev, self.stream)

    def _ready(self, name: str, handle: ctypes.c_void_p) -> bool:
        code = self.driver.raw(name, handle)
        if code == CUDA_ERROR_NOT_READY:
            return False
        if code != CUDA_SUCCESS:
            raise CUDAError(f"{self.label}: {name} failed: {self.driver.error_text(code)} (an earlier launch or "
                            f"copy failed on the GPU)", name, code)
        return True

    def wait_event(self, ev: ctypes.c_void_p, what: str, timeout: float | None = None) -> None:
        """Wait until `ev` completes; past the timeout (`$CUDA_TIMEOUT`), RuntimeError 'CUDA:n: hang detected'."""
        self.activate()
        wait_until(lambda: self._ready("cuEventQuery", ev), timeout_seconds() if timeout is None else timeout,
                   f"{what} on {self.name}", self.label)

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until everything queued on the stream has finished (hang detection as in `wait_event`)."""
        self.activate()
        wait_until(lambda: self._ready("cuStreamQuery", self.stream), timeout_seconds() if timeout is None else timeout,
                   f"the work queued on {self.name}", self.label)

    def elapsed(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        """Seconds between two completed timing events."""
        ms = ctypes.c_float()
        name = "cuEventElapsedTime_v2" if self.driver.has("cuEventElapsedTime_v2") else "cuEventElapsedTime"
        self.driver.call(name, ctypes.byref(ms), start, end)
        return ms.value / 1e3

    def close(self) -> None:
        """Finish the queued work, destroy the stream and release the primary context."""
        self.synchronize()
        self.driver.call("cuStreamDestroy_v2", self.stream)
        self.driver.call("cuDevicePrimaryCtxRelease_v2", self.device)


__all__ = ["CUDAContext", "CUDAError", "Driver", "KernelNodeParams", "load_driver", "timeout_seconds", "wait_until",
           "DRIVER_PATH_ENV",
           "TIMEOUT_ENV"]
