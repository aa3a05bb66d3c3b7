"""The realize engine: schedule a set of tensors, compile each kernel once, run the schedule on the devices.

One `Engine` owns the realization state (compiled kernels, codegen helper pools, the capture a jit has open); the
process's is `ENGINE`, which the module functions `realize_uops`, `run_schedule`, `get_kernel` and `capture` use.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

import numpy as np

from ember.codegen import CodegenPool, Drain, ProgramSpec, beam_search, cached_program, load_program
from ember.runtime import Buffer, CompileQueue, Device, time_program
from ember.schedule import ExecItem, Schedule, schedule
from ember.uops import Ops, UOp, dtypes, settings, to_numpy_dtype

# the device memory behind each BUFFER UOp: it lives exactly as long as the UOp does
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def buffer_for(u: UOp) -> Buffer:
    """The runtime Buffer of a BUFFER UOp (allocated on first use), or of a BUFFER_VIEW (its root's memory from the
    view's offset on)."""
    if (b := buffers.get(u)) is None:
        if u.op is Ops.BUFFER_VIEW:
            size, offset = u.arg
            b = buffers[u] = Buffer(u.device, size, u.dtype, base=buffer_for(u.src[0]),  # type: ignore[arg-type]
                                    offset=offset * u.dtype.itemsize)
        else:
            b = buffers[u] = Buffer(u.src[1].arg, u.arg, u.dtype)
    if not b.is_allocated:
        b.allocate()
    return b


class CompiledKernel:
    """A ProgramSpec compiled for one device, callable on Buffers."""

    def __init__(self, device: str, spec: ProgramSpec, lib: bytes | None = None):
        self.device, self.spec = device, spec
        dev = Device[device]
        if lib is None:  # (a program read back from the disk cache is rendered only if its library is not found)
            lib = dev.compiler.compile_cached(lambda: spec.src, spec.src_key)
        self.program = dev.runtime(spec.function, lib)

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
        vals = tuple((var_vals or {})[v] for v in self.spec.vars)
        return self.program(*bufs, global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vals,
                            wait=wait)


class ScalarKernel(CompiledKernel):
    """A kernel that runs a program of its scalar family (`scalar_constants`): the program takes some of the
    kernel's constants as arguments, this kernel passes its own values."""

    def __init__(self, shared: CompiledKernel, values: dict[UOp, int]):  # (no super().__init__: nothing to compile)
        self.device, self.spec, self.program, self.values = shared.device, shared.spec, shared.program, values

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False) -> float | None:
        return super().__call__(bufs, {**(var_vals or {}), **self.values}, wait)


# float constants whose bits an int32 kernel argument holds (every device passes int arguments of 32 bits at least);
# not bfloat16, which numpy cannot convert exactly
_SCALAR_BITS = {dtypes.float32: dtypes.int32, dtypes.float16: dtypes.int16}
_SCALAR_INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
                dtypes.uint64)
_I32 = (-(1 << 31), (1 << 31) - 1)


def _argument_value(u: UOp) -> int | None:
    """The int32 kernel argument that carries CONST `u` (a float's bits), None for a constant that stays one."""
    if u.dtype in _SCALAR_BITS:
        bits = _SCALAR_BITS[u.dtype]
        return int(np.array([u.arg], to_numpy_dtype(u.dtype)).view(to_numpy_dtype(bits))[0])
    if u.dtype in _SCALAR_INTS and isinstance(u.arg, int) and _I32[0] <= u.arg <= _I32[1]:
        return u.arg
    return None


def _from_argument(u: UOp, var: UOp) -> UOp:
    return var.cast(_SCALAR_BITS[u.dtype]).bitcast(u.dtype) if u.dtype in _SCALAR_BITS else var.cast(u.dtype)


def scalar_constants(ast: UOp) -> tuple[UOp, tuple[UOp, ...], tuple[int, ...]]:
    """The kernel's scalar constants (a Python number such as the 0.37 of `x * 0.37`: floats of 32 bits or less, ints
    that fit 32 bits), in graph order, with their argument values; and the kernel's family: the AST with every one
    of them made an argument. Kernels that differ only in such constants are one family."""
    found = [(u, v) for u in ast.toposort() if u.op is Ops.CONST and (v := _argument_value(u)) is not None]
    consts = tuple(u for u, _ in found)
    family = lift_scalars(ast, consts, range(len(consts)))[0] if consts else ast
    return family, consts, tuple(v for _, v in found)


def lift_scalars(ast: UOp, consts: tuple[UOp, ...], positions: Iterable[int]) -> tuple[UOp, dict[int, UOp]]:
    """The kernel with the constants at `positions` (of `scalar_constants`) made arguments: DEFINE_VARs `fconst<i>`
    (a float's bits, bitcast back); returns it and the argument of each position."""
    variables = {i: UOp.variable(f"fconst{i}", *_I32) for i in positions}
    lifted = ast.substitute({consts[i]: _from_argument(consts[i], v) for i, v in variables.items()})
    return lifted, variables


def codegen(ast: UOp, device: str) -> ProgramSpec:
    """The program of a kernel: opts from the heuristic, or from a BEAM search when BEAM is set (both the search's
    winner and the program are cached on disk)."""
    renderer = Device[device].renderer
    opts = None
    if (width := settings.BEAM.value) > 0 and not any(u.op is Ops.DEFINE_VAR for u in ast.toposort()):
        dev, scratch = Device[device], {}
        opts = beam_search(ast, renderer, lambda spec: time_program(device, spec, scratch=scratch), width,
                           device_key=f"{device} {dev.compiler.cachekey}")
    return cached_program(ast, renderer, opts)


POOL_MIN_KERNELS = 8  # fewer kernels than this are built here: a worker's round trip would not pay


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block (unless it already was). Scheduling and codegen build
    many UOps, which live on in caches: each burst of them set off full collections over the whole heap (the tiny
    Llama's cold first step: 3-4 of ~50-70 ms, finding nothing: UOp graphs hold no cycles)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_copy(item: ExecItem, bufs: list[Buffer] | None = None) -> None:
    dst, src = bufs if bufs is not None else (buffer_for(b) for b in item.bufs)
    dst.copy_from(src)  # raw bytes (any dtype)


class Launch(NamedTuple):
    """One launch of a captured schedule: its kernel (None for a copy), the ExecItem, the Buffers it ran on."""

    kernel: CompiledKernel | None
    item: ExecItem
    bufs: list[Buffer]


class Capture:
    """The launches of the schedules run while a capture is open, in order: what a jit replays.

        with engine.capture() as cap:
            out = step(x, y).realize()
        cap.launches  # [Launch(kernel, item, bufs), ...]
    """

    def __init__(self, outer: Capture | None = None) -> None:
        self.launches: list[Launch] = []
        self.outer = outer  # the capture this one was opened in: it records the same launches

    def add(self, kernel: CompiledKernel | None, item: ExecItem, bufs: list[Buffer]) -> None:
        self.launches.append(Launch(kernel, item, bufs))
        if self.outer is not None:
            self.outer.add(kernel, item, bufs)

    @property
    def kernel_count(self) -> int:
        """The kernels launched (copies not counted)."""
        return sum(launch.kernel is not None for launch in self.launches)


class Engine:
    """The realization state, with one owner: the compiled kernels by (AST, device), the codegen helper pools by
    size, and the capture a jit has open (`capture()`). The process's engine is `ENGINE`; `Tensor.realize` reaches it
    through the module function `realize_uops`, jit through `capture`."""

    def __init__(self) -> None:
        self.kernels: dict[tuple[UOp, str], CompiledKernel] = {}
        # scalar families (scalar_constants): the first kernel of a family is compiled with its constants in the
        # source; a later one runs a program of the family that takes as arguments the constants in which it differs
        # from the first (the others stay in the source, so the program computes what a compiled-in value would,
        # unless codegen would have folded that constant with another one):
        # 100 distinct scalars in `x * s`, 2 programs
        self.families: dict[tuple[UOp, str], tuple[int, ...]] = {}  # (family, device) -> the first kernel's values
        # (family, device) -> each program made so far: the positions it takes as arguments, its (lifted) AST, which
        # is compiled as a kernel of its own (self.kernels)
        self.family_programs: dict[tuple[UOp, str], list[tuple[frozenset[int], UOp]]] = {}
        # kernel -> None (compiled itself), or the AST of the family program it runs and the values it passes
        self.sharing: dict[tuple[UOp, str], tuple[UOp, dict[UOp, int]] | None] = {}
        self.pools: dict[int, CodegenPool] = {}  # helper processes for codegen, by their number
        self.schedule_count = 0  # schedules made by realize_uops (a jit replay makes none)
        self._capture: Capture | None = None

    def get_kernel(self, ast: UOp, device: str) -> CompiledKernel:
        """Codegen + compile, once per (AST, device): identical kernels over different buffers share one program."""
        key = (ast, device)
        if (k := self.kernels.get(key)) is None:
            k = self.kernels[key] = self._new_kernel(ast, device)
        return k

    def family_program(self, ast: UOp, device: str) -> tuple[UOp, dict[UOp, int]] | None:
        """The kernel of `ast` as a program of its scalar family: the AST of that program (`lift_scalars`: the
        constants in which this kernel differs from the family's first made arguments) and the values this kernel
        passes; None when `ast` is compiled itself (the first of its family, or a kernel with no scalars). Decided
        once per kernel. The program is compiled as it is and kept in `kernels` under its AST, so a `KernelBuild`
        builds it beside the schedule's other kernels."""
        key = (ast, device)
        if key in self.sharing:
            return self.sharing[key]
        family, consts, values = scalar_constants(ast)
        first = self.families.setdefault((family, device), values) if consts else values
        differ = frozenset(i for i, (v, w) in enumerate(zip(values, first)) if v != w)
        # none: the first of its family, a kernel with no scalars, or one with the first's very constants in other
        # nodes (a NaN is never one node with another)
        if not differ:
            self.sharing[key] = None
            return None
        programs = self.family_programs.setdefault((family, device), [])
        # a program that takes (at least) these constants as arguments, the rest compiled in as the first kernel's
        positions = next((p for p, _ in programs if differ <= p), differ)
        lifted, variables = lift_scalars(ast, consts, sorted(positions))
        if positions is differ:
            programs.append((positions, lifted))
        shared = self.sharing[key] = (lifted, {variables[i]: values[i] for i in positions})
        return shared

    def _new_kernel(self, ast: UOp, device: str) -> CompiledKernel:
        if (family := self.family_program(ast, device)) is None:
            return CompiledKernel(device, codegen(ast, device))
        # (the family's program is compiled as it is, never itself a member of a family: built by a KernelBuild, or
        # here)
        if (program := self.kernels.get(key := (family[0], device))) is None:
            program = self.kernels[key] = CompiledKernel(device, codegen(family[0], device))
        return ScalarKernel(program, family[1])

    def prepare_kernels(self, sched: Schedule, build: KernelBuild | None = None) -> None:
        """Codegen and compile every kernel of a schedule that is not compiled yet (`KernelBuild`; `build`: the one
        that already had the kernels the schedule made as it made them)."""
        build = build if build is not None else KernelBuild(self)
        for item in sched.items:
            build.add(item)
        build.finish()

    def run_schedule(self, sched: Schedule, var_vals: dict[UOp, int] | None = None,
                     capture: Capture | None = None, build: KernelBuild | None = None) -> None:
        """Run every ExecItem in order, each launch recorded in `capture` when one is given (DEBUG>=2 prints each
        kernel with its time). `build`: the programs started while the schedule was made (`realize_uops`)."""
        for item in sched.items:  # (memory first: a device may ready it in the background while programs are built)
            for b in item.bufs:
                buffer_for(b)
        self.prepare_kernels(sched, build)
        verbose = settings.DEBUG.value >= 2
        for i, item in enumerate(sched.items):
            if item.ast.op is Ops.COPY:
                if capture is not None:
                    capture.add(None, item, [buffer_for(b) for b in item.bufs])
                run_copy(item)
                if verbose:
                    src_dev, dst_dev = item.bufs[1].device, item.bufs[0].device
                    print(f"*** {i:4d} copy {item.ast.arg:10d} bytes  {src_dev} -> {dst_dev}")
                continue
            device = item.bufs[0].device
            kernel = self.get_kernel(item.ast, device)
            bufs = [buffer_for(b) for b in item.bufs]
            if capture is not None:
                capture.add(kernel, item, bufs)
            t = kernel(bufs, var_vals, wait=verbose)
            if verbose:
                est = kernel.spec.estimates
                secs = t or 0.0
                print(f"*** {device:8s} {i:4d} {kernel.spec.name:30s} {secs * 1e3:9.3f} ms  "
                      f"{est.flops / max(secs, 1e-9) / 1e9:8.2f} GFLOP/s  "
                      f"{est.bytes / max(secs, 1e-9) / 1e9:8.2f} GB/s")

    def realize_uops(self, uops: list[UOp], hold: frozenset[UOp], capture: Capture | None = None) -> dict[UOp, UOp]:
        """Schedule and run the tensors `uops` (launches recorded in `capture`, else in the open capture if any);
        returns what each realized tensor UOp became."""
        start = time.perf_counter()
        with gc_paused():
            build = KernelBuild(self)  # (the codegen helpers start on the kernels made first while the rest is made)
            try:
                sched = schedule(UOp.sink(*uops), hold=hold, on_item=build.add)
                self.schedule_count += 1
                if settings.DEBUG.value >= 2:
                    print(f"scheduled {len(sched.items)} items in {(time.perf_counter() - start) * 1e3:.2f} ms")
                self.run_schedule(sched, capture=capture if capture is not None else self._capture, build=build)
            finally:
                build.abandon()  # (after an error before the build finished: its helpers and compiles stop)
        return sched.becomes

    @contextmanager
    def capture(self) -> Iterator[Capture]:
        """Record the launches of everything this engine realizes inside the `with` block (a capture opened inside
        another records into both)."""
        outer = self._capture
        self._capture = cap = Capture(outer)
        try:
            yield cap
        finally:
            self._capture = outer

    def close(self) -> None:
        """Stop the codegen helper processes (compiled kernels stay)."""
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()



class KernelBuild:
    """The programs of a schedule's kernels that are not compiled yet: each program read from the disk cache or built
    by codegen, here and in helper processes (`CODEGEN_WORKERS`; not with BEAM, which times candidates on this
    process's device), its source handed to a compile queue as soon as it is rendered (the compiles overlap the
    codegen of the next kernels and release the GIL; identical sources compile once; a program read back from disk is
    not rendered when its library is found by its `src_key`).

    `add` takes the kernels one by one, also while the schedule is still being made (its `on_item`): from the
    POOL_MIN_KERNELS-th kernel to build on, the helpers build them as they come, on the cores the scheduling (one
    thread) leaves idle. `finish` builds the rest here, beside the helpers, waits for the compiles and hands the
    engine its kernels; `abandon` stops the helpers and the compiles after an error."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seen: set[tuple[UOp, str]] = set()
        self.pending = 0  # kernels of the schedule to be compiled (with a program of their own)
        self.todo: dict[tuple[UOp, str], tuple[ProgramSpec, Future[bytes]]] = {}
        self.libs: dict[tuple[str, str, str], Future[bytes]] = {}  # by device and source (or the key that names it)
        self.lock = threading.Lock()
        self.queue: CompileQueue | None = None
        self.loaded: list[tuple[tuple[UOp, str], ProgramSpec]] = []  # programs read from disk (compiled in finish)
        self.work: deque[tuple[UOp, str]] = deque()
        self.helpers: Drain[tuple[UOp, str]] | None = None
        self.searching = settings.BEAM.value > 0  # (BEAM's opts come from timing on this process's device: built here)

    def add(self, item: ExecItem) -> None:
        """A kernel of the schedule (a copy, a kernel compiled already or by this build, or one that runs a program
        of its scalar family: nothing to do)."""
        if item.ast.op is Ops.COPY:
            return
        key = (item.ast, item.bufs[0].device)
        if key in self.seen or key in self.engine.kernels:
            return
        self.seen.add(key)
        if (family := self.engine.family_program(*key)) is not None:  # (it runs its family's program: built here)
            if (key := (family[0], key[1])) in self.seen or key in self.engine.kernels:
                return
            self.seen.add(key)
        self.pending += 1
        # programs on disk are read here: only the others are worth a helper's round trip
        if not self.searching and (spec := load_program(key[0], Device[key[1]].renderer)) is not None:
            self.loaded.append((key, spec))
        elif self.helpers is not None:
            self.helpers.put(key)
        else:
            self.work.append(key)
            if len(self.work) >= POOL_MIN_KERNELS and not self.searching and \
                    (n := settings.CODEGEN_WORKERS.value) > 0:
                if (pool := self.engine.pools.get(n)) is None:
                    pool = self.engine.pools[n] = CodegenPool(n)
                self.helpers = pool.drain(self.work, lambda key: (key[0], Device[key[1]].renderer, None), self.built,
                                          more=True)

    def built(self, key: tuple[UOp, str], spec: ProgramSpec) -> None:
        """A kernel's program (from any thread): its source goes to the compile queue."""
        ident = (key[1], "key", spec.src_key) if spec.src_key is not None else (key[1], "src", spec.src)
        with self.lock:
            if self.queue is None:  # (a cpuset or container quota: fewer compilers)
                self.queue = CompileQueue(workers=settings.usable_cores())
            if ident not in self.libs:
                self.libs[ident] = self.queue.submit(key[1], spec.function, lambda: spec.src, spec.src_key)
            self.todo[key] = (spec, self.libs[ident])

    def finish(self) -> None:
        """Build what is left, wait for the helpers and the compiles, and give the engine its kernels. With fewer
        than 2 kernels to compile nothing is done here: the engine builds one when it runs it."""
        if self.pending < 2 and self.helpers is None:
            return
        try:
            if self.helpers is not None:
                self.helpers.close()
            for key, spec in self.loaded:
                self.built(key, spec)
            while True:
                try:
                    key = self.work.popleft()
                except IndexError:
                    break
                self.built(key, codegen(key[0], key[1]))
            for key in self.helpers.join() if self.helpers is not None else ():  # what a helper could not build
                self.built(key, codegen(key[0], key[1]))
        finally:
            self.abandon()
        for (ast, dev), (spec, lib) in self.todo.items():
            self.engine.kernels[(ast, dev)] = CompiledKernel(dev, spec, lib.result())

    def abandon(self) -> None:
        """Stop the helpers (after the kernel each is on) and finish the compiles (idempotent)."""
        self.work.clear()
        if self.helpers is not None:
            self.helpers.join()
        if self.queue is not None:
            self.queue.close()


ENGINE = Engine()  # the process's engine: every realize and capture goes through it


def get_kernel(ast: UOp, device: str) -> CompiledKernel:
    """`ENGINE.get_kernel`: the compiled kernel of an AST on a device."""
    return ENGINE.get_kernel(ast, device)


def run_schedule(sched: Schedule, var_vals: dict[UOp, int] | None = None, capture: Capture | None = None) -> None:
    """`ENGINE.run_schedule`: run a schedule, its launches recorded in `capture` when one is given."""
    ENGINE.run_schedule(sched, var_vals, capture)


def realize_uops(uops: list[UOp], hold: frozenset[UOp], capture: Capture | None = None) -> dict[UOp, UOp]:
    """`ENGINE.realize_uops`: schedule and run the tensors `uops`; returns what each realized tensor UOp became."""
    return ENGINE.realize_uops(uops, hold, capture)


def capture() -> AbstractContextManager[Capture]:
    """`ENGINE.capture()`: `with engine.capture() as cap:` records every launch realized inside the block."""
    return ENGINE.capture()


def buffer_base(view: UOp) -> UOp | None:
    """The BUFFER (or BUFFER_VIEW) under a chain of RESHAPEs (how a realized tensor looks: row-major over a whole
    buffer), else None."""
    while view.op is Ops.RESHAPE:
        view = view.src[0]
    return view if view.op in (Ops.BUFFER, Ops.BUFFER_VIEW) else None


def _undetached(view: UOp) -> UOp:
    while view.op is Ops.DETACH:  # (a detached realized tensor reads the same memory)
        view = view.src[0]
    return view


def buffers_of(view: UOp) -> list[Buffer]:
    """The device buffers of a realized tensor: one, or one per device of a multi-device tensor (MSTACK)."""
    view = _undetached(view)
    bases = [buffer_base(p) for p in (view.src if view.op is Ops.MSTACK else (view,))]
    if any(b is None for b in bases):
        raise ValueError(f"buffers_of: the tensor ({view.op}) is not realized")
    return [buffer_for(b) for b in bases]  # type: ignore[arg-type]


def copyout_bytes(view: UOp) -> bytearray:
    """The raw bytes of a realized tensor (any dtype)."""
    view = _undetached(view)
    base = buffer_base(view)
    assert base is not None, f"copyout: {view.op} is not realized"
    out = bytearray(base.shape[0] * base.dtype.itemsize)
    if out:
        buffer_for(base).copyout(memoryview(out))
    return out


def copyout(view: UOp) -> Any:
    """The host copy (numpy) of a realized tensor (of a multi-device one: its parts put together)."""
    view = _undetached(view)
    if view.op is Ops.MSTACK:
        parts = [copyout(p) for p in view.src]
        return parts[0] if view.arg is None else np.concatenate(parts, axis=view.arg)
    base = buffer_base(view)
    assert base is not None, f"copyout: {view.op} is not realized"
    return np.frombuffer(copyout_bytes(view), to_numpy_dtype(base.dtype)).reshape(view.shape)
