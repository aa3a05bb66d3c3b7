"""The realize engine: schedule a set of tensors, compile each kernel once, run the schedule on the devices."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future
from typing import Any

import numpy as np

from ember.codegen import CodegenPool, ProgramSpec, beam_search, cached_program, load_program
from ember.runtime import Buffer, CompileError, Device
from ember.schedule import ExecItem, Schedule, schedule
from ember.uops import Ops, UOp, to_numpy_dtype

# the device memory behind each BUFFER UOp: it lives exactly as long as the UOp does
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def debug_level() -> int:
    return int(os.environ.get("DEBUG", "0") or 0)


def buffer_for(u: UOp) -> Buffer:
    """The runtime Buffer of a BUFFER UOp, allocated on first use."""
    if (b := buffers.get(u)) is None:
        b = buffers[u] = Buffer(u.src[1].arg, u.arg, u.dtype)
    if not b.is_allocated:
        b.allocate()
    return b


class CompiledKernel:
    """A ProgramSpec compiled for one device, callable on Buffers."""

    def __init__(self, device: str, spec: ProgramSpec, lib: bytes | None = None):
        self.device, self.spec = device, spec
        dev = Device[device]
        self.program = dev.runtime(spec.name, lib if lib is not None else dev.compiler.compile_cached(spec.src))

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
        vals = tuple((var_vals or {})[v] for v in self.spec.vars)
        return self.program(*bufs, global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vals,
                            wait=wait)


_kernel_cache: dict[tuple[UOp, str], CompiledKernel] = {}


def beam_width() -> int:
    """`BEAM=n`: kernels get their opts from a search of width n, timed on the device (0: the heuristic)."""
    try:
        width = int(os.environ.get("BEAM", "0") or 0)
    except ValueError:
        raise ValueError(f"BEAM must be an integer width, got {os.environ['BEAM']!r}") from None
    if width < 0:
        raise ValueError(f"BEAM must be >= 0, got {width}")
    return width


def time_program(device: str, spec: ProgramSpec, runs: int = 3,
                 scratch: dict[tuple[int, int, Any], Buffer] | None = None) -> float:
    """Seconds of one launch of `spec` on scratch buffers (zeroed, so gathers index in bounds): the fastest of
    `runs`; inf if the program does not compile or uses variables. `scratch` keeps the buffers for the next
    candidate of the same kernel (by slot: what a candidate writes is only ever read back as data)."""
    dev = Device[device]
    if spec.vars:
        return float("inf")
    try:
        prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    except CompileError:
        return float("inf")
    scratch = {} if scratch is None else scratch
    bufs = []
    for b in spec.bufs:
        if (buf := scratch.get(key := (b.slot, b.size, b.dtype))) is None:
            buf = scratch[key] = Buffer(device, b.size, b.dtype).allocate()
            buf.copyin(bytes(buf.nbytes))
        bufs.append(buf)
    return min(prg(*bufs, global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True) or 0.0
               for _ in range(runs))


def codegen(ast: UOp, device: str) -> ProgramSpec:
    """The program of a kernel: opts from the heuristic, or from a BEAM search when BEAM is set (both the search's
    winner and the program are cached on disk)."""
    renderer = Device[device].renderer
    opts = None
    if (width := beam_width()) > 0 and not any(u.op is Ops.DEFINE_VAR for u in ast.toposort()):
        dev, scratch = Device[device], {}
        opts = beam_search(ast, renderer, lambda spec: time_program(device, spec, scratch=scratch), width,
                           device_key=f"{device} {dev.compiler.cachekey}")
    return cached_program(ast, renderer, opts)


def get_kernel(ast: UOp, device: str) -> CompiledKernel:
    """Codegen + compile, once per (AST, device): identical kernels over different buffers share one program."""
    key = (ast, device)
    if (k := _kernel_cache.get(key)) is None:
        k = _kernel_cache[key] = CompiledKernel(device, codegen(ast, device))
    return k


class CompileQueue:
    """C compiles in the background while the codegen of the next kernels runs: `submit` a rendered source, get a
    Future of its library. A worker thread takes what is waiting once there are `min_batch` sources (or the queue is
    closed, then its share: `ceil(waiting / idle workers)`), at most `max_batch`, and compiles them with one
    `compile_cached_many`: a compiler that batches then starts (and links) once for many kernels. While sources are
    still coming, one worker fewer than `workers` compiles: the codegen that renders them keeps a core."""

    def __init__(self, workers: int, min_batch: int = 4, max_batch: int = 16):
        self.min_batch, self.max_batch = min_batch, max_batch
        self.waiting: list[tuple[str, str, str, Future[bytes]]] = []  # (device, name, src, its library)
        self.idle, self.closed = 0, False
        self.cond = threading.Condition()
        self.while_coming = max(workers - 1, 1)
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def submit(self, device: str, name: str, src: str) -> Future[bytes]:
        fut: Future[bytes] = Future()
        with self.cond:
            self.waiting.append((device, name, src, fut))
            if len(self.waiting) >= self.min_batch:
                self.cond.notify_all()
        return fut

    def close(self) -> None:
        """Compile what is left and stop the threads (returns when every Future is resolved)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()

    def _take(self, worker: int) -> list[tuple[str, str, str, Future[bytes]]]:
        with self.cond:
            self.idle += 1
            while not self.closed and (len(self.waiting) < self.min_batch or worker >= self.while_coming):
                self.cond.wait()
            self.idle -= 1
            if not self.waiting:
                return []
            device = self.waiting[0][0]
            same = [i for i, w in enumerate(self.waiting) if w[0] == device]
            share = -(-len(same) // (self.idle + 1)) if self.closed else len(same)
            taken = set(same[:min(self.max_batch, share)])
            batch = [self.waiting[i] for i in sorted(taken)]
            self.waiting = [w for i, w in enumerate(self.waiting) if i not in taken]
            if len(self.waiting) >= self.min_batch:
                self.cond.notify_all()
            return batch

    def _work(self, worker: int) -> None:
        while batch := self._take(worker):
            try:
                libs = Device[batch[0][0]].compiler.compile_cached_many([(name, src) for _, name, src, _ in batch])
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the kernel
                for *_, fut in batch:
                    fut.set_exception(e)
                continue
            for (*_, fut), lib in zip(batch, libs):
                fut.set_result(lib)


def codegen_workers() -> int:
    """`CODEGEN_WORKERS=n`: helper processes that codegen a schedule's kernels beside this one (default: one per
    core but this one's; 0: codegen here only)."""
    try:
        n = int(os.environ.get("CODEGEN_WORKERS", (os.cpu_count() or 1) - 1))
    except ValueError:
        raise ValueError(f"CODEGEN_WORKERS must be an integer, got {os.environ['CODEGEN_WORKERS']!r}") from None
    if n < 0:
        raise ValueError(f"CODEGEN_WORKERS must be >= 0, got {n}")
    return n


_pools: dict[int, CodegenPool] = {}
POOL_MIN_KERNELS = 8  # fewer kernels than this are built here: a worker's round trip would not pay


def prepare_kernels(sched: Schedule) -> None:
    """Codegen every kernel of a schedule that is not compiled yet, here and in helper processes (`CODEGEN_WORKERS`;
    not with BEAM, which times candidates on this process's device), each source handed to the compile queue as soon
    as it is rendered: the compiles overlap the codegen of the next kernels and release the GIL; identical sources
    compile once."""
    pending = [(item.ast, item.bufs[0].src[1].arg) for item in sched.items if item.ast.op is not Ops.COPY]
    pending = [key for key in dict.fromkeys(pending) if key not in _kernel_cache]
    if len(pending) < 2:
        return
    todo: dict[tuple[UOp, str], tuple[ProgramSpec, Future[bytes]]] = {}
    libs: dict[tuple[str, str], Future[bytes]] = {}
    lock = threading.Lock()
    queue = CompileQueue(workers=os.cpu_count() or 1)

    def rendered(key: tuple[UOp, str], spec: ProgramSpec) -> None:
        with lock:
            if (ds := (key[1], spec.src)) not in libs:
                libs[ds] = queue.submit(key[1], spec.name, spec.src)
            todo[key] = (spec, libs[ds])

    searching = beam_width() > 0  # (BEAM's opts come from timing on this process's device: built here, each)
    work: deque[tuple[UOp, str]] = deque()
    for key in pending:  # programs on disk are read here: only the others are worth a helper's round trip
        if not searching and (spec := load_program(key[0], Device[key[1]].renderer)) is not None:
            rendered(key, spec)
        else:
            work.append(key)
    helpers = None
    if len(work) >= POOL_MIN_KERNELS and not searching and (n := codegen_workers()) > 0:
        pool = _pools.setdefault(n, CodegenPool(n))
        helpers = pool.drain(work, lambda key: (key[0], Device[key[1]].renderer, None), rendered)
    try:
        while True:
            try:
                key = work.popleft()
            except IndexError:
                break
            rendered(key, codegen(key[0], key[1]))
        for key in helpers.join() if helpers is not None else ():  # what a helper could not build
            rendered(key, codegen(key[0], key[1]))
    finally:
        work.clear()  # (after an error: the helpers stop after the kernel they are on)
        if helpers is not None:
            helpers.join()
        queue.close()
    for (ast, dev), (spec, lib) in todo.items():
        _kernel_cache[(ast, dev)] = CompiledKernel(dev, spec, lib.result())


def run_copy(item: ExecItem, bufs: list[Buffer] | None = None) -> None:
    dst, src = bufs if bufs is not None else (buffer_for(b) for b in item.bufs)
    host = bytearray(src.nbytes)  # through the host, as raw bytes (any dtype)
    src.copyout(memoryview(host))
    dst.copyin(memoryview(host))


# while a jit captures, every launch is recorded here: (kernel or None for a copy, item, buffers)
capturing: list[tuple[CompiledKernel | None, ExecItem, list[Buffer]]] | None = None


def run_schedule(sched: Schedule, var_vals: dict[UOp, int] | None = None) -> None:
    """Run every ExecItem in order (DEBUG>=2 prints each kernel with its time)."""
    prepare_kernels(sched)
    for i, item in enumerate(sched.items):
        if item.ast.op is Ops.COPY:
            if capturing is not None:
                capturing.append((None, item, [buffer_for(b) for b in item.bufs]))
            run_copy(item)
            if debug_level() >= 2:
                src_dev, dst_dev = item.bufs[1].src[1].arg, item.bufs[0].src[1].arg
                print(f"*** {i:4d} copy {item.ast.arg:10d} bytes  {src_dev} -> {dst_dev}")
            continue
        device = item.bufs[0].src[1].arg
        kernel = get_kernel(item.ast, device)
        bufs = [buffer_for(b) for b in item.bufs]
        if capturing is not None:
            capturing.append((kernel, item, bufs))
        timing = debug_level() >= 2
        t = kernel(bufs, var_vals, wait=timing)
        if timing:
            est = kernel.spec.estimates
            secs = t or 0.0
            print(f"*** {device:8s} {i:4d} {kernel.spec.name:30s} {secs * 1e3:9.3f} ms  "
                  f"{est.flops / max(secs, 1e-9) / 1e9:8.2f} GFLOP/s  {est.bytes / max(secs, 1e-9) / 1e9:8.2f} GB/s")


def realize_uops(uops: list[UOp], hold: frozenset[UOp]) -> dict[UOp, UOp]:
    """Schedule and run the tensors `uops`; returns what each realized tensor UOp became."""
    start = time.perf_counter()
    sched = schedule(UOp.sink(*uops), hold=hold)
    if debug_level() >= 2:
        print(f"scheduled {len(sched.items)} items in {(time.perf_counter() - start) * 1e3:.2f} ms")
    run_schedule(sched)
    return sched.becomes


# shared storage: a BUFFER made as a view of another one's memory -> (that root BUFFER); root -> its views
_view_root: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
_views: weakref.WeakKeyDictionary[UOp, weakref.WeakSet[UOp]] = weakref.WeakKeyDictionary()


def register_view(view: UOp, root: UOp, offset: int) -> None:
    """Make the BUFFER `view` use root's memory from element `offset` on (the scheduler sees two buffers; the tensor
    layer orders their reads and writes, see `aliases`)."""
    assert view.op is Ops.BUFFER and root.op is Ops.BUFFER and root not in _view_root, "register_view: bad buffers"
    assert view not in buffers, "register_view: the view already has memory"
    base = buffer_for(root)
    buffers[view] = Buffer(base.device, view.arg, view.dtype, base=base, offset=offset * view.dtype.itemsize)
    _view_root[view] = root
    _views.setdefault(root, weakref.WeakSet()).add(view)


def has_views() -> bool:
    return len(_view_root) > 0


def aliases(buf: UOp) -> set[UOp]:
    """The other BUFFERs that share memory with `buf` (its root and the root's views)."""
    root = _view_root.get(buf, buf)
    return {root, *_views.get(root, ())} - {buf}


def buffer_base(view: UOp) -> UOp | None:
    """The BUFFER under a chain of RESHAPEs (how a realized tensor looks: row-major over a whole buffer), else None."""
    while view.op is Ops.RESHAPE:
        view = view.src[0]
    return view if view.op is Ops.BUFFER else None


def copyout_bytes(view: UOp) -> bytearray:
    """The raw bytes of a realized tensor (any dtype)."""
    base = buffer_base(view)
    assert base is not None, f"copyout: {view.op} is not realized"
    out = bytearray(base.arg * base.dtype.itemsize)
    if out:
        buffer_for(base).copyout(memoryview(out))
    return out


def copyout(view: UOp) -> Any:
    """The host copy (numpy) of a realized tensor."""
    base = buffer_base(view)
    assert base is not None, f"copyout: {view.op} is not realized"
    return np.frombuffer(copyout_bytes(view), to_numpy_dtype(base.dtype)).reshape(view.shape)
