"""The PYTHON device: interprets linear UOp programs (`ProgramSpec.uops`, see ember.codegen.program) one scalar at a
time. It is slow and exact: the reference every renderer is tested against, and the kernel engine of the AMD mock.

- `PythonRenderer.render` serializes the program (a flat node table, pickled, base64); the compiler decodes it to
  bytes; `PythonProgram` rebuilds the UOps (re-interned), checks them and runs them with a program counter.
- ALU ops and CAST compute with `ember.uops.exec_alu` (an undefined result, such as int division by zero, is 0).
- Buffers are read and written element by element with their dtype; an address outside a buffer is an IndexError.
- Vectors: ALU/CAST work lane by lane, `VECTORIZE` builds a tuple, `GEP` (arg = lanes) picks lanes, a vector
  LOAD/STORE moves `count` consecutive elements starting at the element index.
- It is a GPU-style target (`PythonRenderer.has_local`): kernels get thread ids (`SPECIAL`, arg "gidx<d>", "lidx<d>"
  or "idx<d>", tinygrad's names) and the program runs once per workgroup (`global_size` counts workgroups) and
  thread of it (`local_size`). A workgroup's threads share its `DEFINE_LOCAL` buffers and take turns: each runs until
  it reaches a `BARRIER`, and when all of them have, they go on. A barrier that only some threads reach is an error.
  So the GPU half of codegen (workgroups, shared memory, reduces across threads) is checked here, with no GPU. A
  STORE with arg `ATOMIC_ADD` adds its value to memory (atomic, since threads only switch at barriers).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import pickle
import struct
import time
from collections.abc import Generator, Hashable, Sequence
from typing import Any

import numpy as np

from ember.codegen import ATOMIC_ADD, TC_BY_NAME, TENSOR_CORES, Renderer, wmma_reference
from ember.runtime.allocator import LRUAllocator
from ember.runtime.buffer import Buffer
from ember.runtime.compiler import CompileError, Compiler
from ember.runtime.device import CompiledDevice
from ember.runtime.program import Program
from ember.uops import DType, GroupOp, Ops, PtrDType, UOp, dtypes, exec_alu, to_numpy_dtype, truncate

# *** serialization: a flat table, so deep expression graphs do not recurse in pickle ***


def serialize(name: str, uops: Sequence[UOp]) -> bytes:
    """The bytes of a linear program: every node reachable from `uops` once, sources before users."""
    index: dict[UOp, int] = {}
    table: list[tuple[Ops, DType, tuple[int, ...], Any, Any]] = []
    for root in uops:
        for u in root.toposort(gate=lambda x: x not in index):
            index[u] = len(table)
            table.append((u.op, u.dtype, tuple(index[s] for s in u.src), u.arg, u.tag))
    return pickle.dumps((name, table, [index[u] for u in uops]), protocol=pickle.HIGHEST_PROTOCOL)


def deserialize(lib: bytes) -> tuple[str, tuple[UOp, ...]]:
    name, table, program = pickle.loads(lib)
    nodes: list[UOp] = []
    for op, dtype, src, arg, tag in table:
        nodes.append(UOp(op, dtype, tuple(nodes[i] for i in src), arg, tag))
    return name, tuple(nodes[i] for i in program)


class PythonRenderer(Renderer):
    """Renders a linear program for the PYTHON device: the serialized UOps, as base64 text. A GPU-style target."""

    device = "PYTHON"
    has_local = True
    tensor_cores = tuple(tc.name for tc in TENSOR_CORES)  # each emulated by its vendor's lane layout
    supports_dtypes = tuple(d for d in dtypes.all if d not in dtypes.fp8s)

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        return base64.b64encode(serialize(name, uops)).decode()


class PythonCompiler(Compiler):
    """Decodes the rendered text; nothing to cache."""

    def __init__(self) -> None:
        super().__init__(None)

    def compile(self, src: str) -> bytes:
        try:
            return base64.b64decode(src, validate=True)
        except (binascii.Error, ValueError) as e:
            raise CompileError(f"PYTHON: the source is not a rendered PYTHON program ({e}):\n{src[:200]}") from e


class PythonAllocator(LRUAllocator):
    """PYTHON device memory: bytearrays, handled as memoryviews (views are slices of them)."""

    def _alloc(self, nbytes: int, options: Hashable | None) -> memoryview:
        return memoryview(bytearray(nbytes))

    def _free(self, buf: memoryview, nbytes: int, options: Hashable | None) -> None:
        pass  # the bytearray goes with its last reference (a numpy array over it may still hold one)

    def copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def offset(self, buf: memoryview, nbytes: int, offset: int) -> memoryview:
        return buf[offset:offset + nbytes]


# *** element access ***
def _fmt(dt: DType) -> str:
    if dt == dtypes.index:
        return "q"
    if dt == dtypes.bfloat16:
        return "H"
    if dt.fmt is None:
        raise NotImplementedError(f"PYTHON: values of {dt!r} are not supported")
    return dt.fmt


def _to_bits(dt: DType, value: Any) -> bytes:
    if dt == dtypes.bfloat16:
        return struct.pack("<H", struct.unpack("<I", struct.pack("<f", value))[0] >> 16)
    return struct.pack("<" + _fmt(dt), value)


def _from_bits(dt: DType, data: bytes) -> Any:
    if dt == dtypes.bfloat16:
        return struct.unpack("<f", struct.pack("<I", struct.unpack("<H", data)[0] << 16))[0]
    return struct.unpack("<" + _fmt(dt), data)[0]


class _Memory:
    """A buffer argument as elements of its dtype, with bounds checks."""

    def __init__(self, raw: memoryview, dtype: DType, label: str):
        self.dtype, self.label = dtype, label
        self.bf16 = dtype == dtypes.bfloat16
        npdt = np.uint16 if self.bf16 else to_numpy_dtype(dtype) if dtype.fmt else None
        if npdt is None:
            raise NotImplementedError(f"PYTHON: buffers of {dtype!r} are not supported")
        self.array = np.frombuffer(raw, npdt)
        self.size = len(self.array)

    def check(self, idx: int, count: int, op: str) -> None:
        if not (isinstance(idx, int) and 0 <= idx and idx + count <= self.size):
            span = f"[{idx}]" if count == 1 else f"[{idx}:{idx}+{count}]"
            raise IndexError(f"PYTHON: {op} of {self.label}{span} is out of bounds (size {self.size})")

    def read(self, idx: int) -> Any:
        v = self.array.item(idx)
        return _from_bits(dtypes.bfloat16, struct.pack("<H", v)) if self.bf16 else v

    def write(self, idx: int, value: Any) -> None:
        self.array[idx] = struct.unpack("<H", _to_bits(dtypes.bfloat16, value))[0] if self.bf16 else value


# *** the interpreter ***
# the sources each op computes with (the rest only order it)
_VALUE_SRCS = {Ops.LOAD: 1, Ops.IF: 1, Ops.ENDIF: 1, Ops.END: 1, Ops.SINK: 0, Ops.NOOP: 0, Ops.BARRIER: 0}
# the ops of a linear kernel program: anything else (a tensor-level op) is refused on load
_PROGRAM_OPS = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONST, Ops.VCONST, Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG,
                              Ops.DEFINE_LOCAL, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF,
                              Ops.SPECIAL, Ops.BARRIER, Ops.WMMA, Ops.VECTORIZE, Ops.GEP, Ops.SINK, Ops.NOOP}


def _zero(dt: DType) -> Any:
    z = truncate(dt.scalar(), 0)
    return z if dt.count == 1 else (z,) * dt.count


def _alu(op: Ops, dt: DType, operands: tuple[Any, ...]) -> Any:
    if dt.count == 1:
        v = exec_alu(op, dt, operands)
        return _zero(dt) if v is None else v
    lanes = [[x[i] if isinstance(x, tuple) else x for x in operands] for i in range(dt.count)]
    return tuple(_alu(op, dt.scalar(), tuple(lane)) for lane in lanes)


def _bitcast(src: DType, dst: DType, value: Any) -> Any:
    data = b"".join(_to_bits(src.scalar(), v) for v in (value if isinstance(value, tuple) else (value,)))
    if len(data) != dst.itemsize:
        raise ValueError(f"PYTHON: cannot bitcast {src!r} ({len(data)} bytes) to {dst!r} ({dst.itemsize} bytes)")
    step = dst.scalar().itemsize
    lanes = tuple(_from_bits(dst.scalar(), data[i:i + step]) for i in range(0, len(data), step))
    return lanes[0] if dst.count == 1 else lanes


class PythonProgram(Program):
    """A linear UOp program, checked on load and interpreted on each call."""

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        try:
            lib_name, self.uops = deserialize(lib)
        except Exception as e:  # any failure to unpickle means the bytes are not a program
            raise RuntimeError(f"PYTHON: cannot load {name!r}: the library is not a PYTHON program ({e})") from e
        if lib_name != name:
            raise RuntimeError(f"PYTHON: the library holds the program {lib_name!r}, not {name!r}")
        self._prepare()

    def _prepare(self) -> None:
        uops = self.uops
        pos = {u: i for i, u in enumerate(uops)}
        self.code: list[tuple[Ops, DType, tuple[int, ...], Any]] = []
        self.jump: dict[int, int] = {}  # RANGE -> its END, END -> its RANGE, IF -> its ENDIF
        loops: list[int] = []
        ifs: list[int] = []
        for i, u in enumerate(uops):
            if u.op not in _PROGRAM_OPS:
                raise NotImplementedError(f"PYTHON: {u.op!r} is not supported by the PYTHON device")
            n_value = _VALUE_SRCS.get(u.op, 2 if u.op is Ops.STORE else len(u.src))
            srcs = u.src[:n_value]
            for s in srcs:
                if pos.get(s, i) >= i:
                    raise ValueError(f"PYTHON {self.name}: uop {i} ({u.op!r}) uses a {s.op.name} that is not computed "
                                     "before it in the program")
            self.code.append((u.op, u.dtype, tuple(pos[s] for s in srcs), u.arg))
            if u.op is Ops.RANGE:
                loops.append(i)
            elif u.op is Ops.END:
                if not loops or uops[loops[-1]] is not u.src[0]:
                    raise ValueError(f"PYTHON {self.name}: END at {i} does not close the innermost open RANGE")
                start = loops.pop()
                self.jump[start], self.jump[i] = i, start
            elif u.op is Ops.IF:
                ifs.append(i)
            elif u.op is Ops.ENDIF:
                if not ifs or uops[ifs[-1]] is not u.src[0]:
                    raise ValueError(f"PYTHON {self.name}: ENDIF at {i} does not close the innermost open IF")
                self.jump[ifs.pop()] = i
        if loops or ifs:
            raise ValueError(f"PYTHON {self.name}: {len(loops)} RANGE(s) and {len(ifs)} IF(s) are never closed")
        self.params = sorted((u for u in uops if u.op is Ops.PARAM), key=lambda p: p.arg)
        self.param_types: list[PtrDType] = []
        for p in self.params:
            if not isinstance(p.dtype, PtrDType):
                raise ValueError(f"PYTHON {self.name}: PARAM {p.arg} has dtype {p.dtype!r}, not a pointer")
            self.param_types.append(p.dtype)
        slots = [p.arg for p in self.params]
        if len(set(slots)) != len(slots) or any(not isinstance(a, int) or a < 0 for a in slots):
            raise ValueError(f"PYTHON {self.name}: PARAM slots {slots} are not distinct slots >= 0")
        # (a kernel may not read every buffer it is given: a reduce over an empty range reads none of its inputs)
        self.n_bufs = max(slots, default=-1) + 1
        # ProgramSpec.vars order: by name
        self.variables = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])
        self.has_special = any(u.op is Ops.SPECIAL for u in uops)

    def __call__(self, *bufs: Buffer, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        if len(bufs) < self.n_bufs:
            raise ValueError(f"PYTHON {self.name}: takes {self.n_bufs} buffers, got {len(bufs)}")
        for slot, pt in zip((p.arg for p in self.params), self.param_types):
            if isinstance(b := bufs[slot], Buffer) and b.dtype != pt.base:
                raise TypeError(f"PYTHON {self.name}: data{slot} is {pt.base!r}, the buffer is {b.dtype!r}")
        return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)

    def launch(self, bufs: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...], wait: bool) -> float | None:
        if len(vals) != len(self.variables):
            raise ValueError(f"PYTHON {self.name}: takes {len(self.variables)} vals "
                             f"({[v.arg[0] for v in self.variables]}), got {len(vals)}")
        var_vals: dict[UOp, int] = {}
        for v, x in zip(self.variables, vals):
            name, lo, hi = v.arg
            if not lo <= x <= hi:
                raise ValueError(f"PYTHON {self.name}: variable {name} = {x} is outside [{lo}, {hi}]")
            var_vals[v] = x
        memory: dict[int, _Memory] = {}
        for slot, pt in zip((p.arg for p in self.params), self.param_types):
            memory[slot] = mem = _Memory(bufs[slot], pt.base, f"data{slot}")
            if pt.size >= 0 and mem.size < pt.size:
                raise ValueError(f"PYTHON {self.name}: data{slot} needs {pt.size} elements, the buffer holds "
                                 f"{mem.size}")
        start = time.perf_counter()
        if self.has_special:
            locals_ = tuple(local_size or (1,) * len(global_size))
            for gid in itertools.product(*(range(g) for g in global_size)):
                shared = self._shared()
                # (linear thread order, x fastest: a warp is consecutive threads)
                self._workgroup([self._run(memory, var_vals, (gid, lid[::-1], locals_), shared)
                                 for lid in itertools.product(*(range(n) for n in reversed(locals_)))], gid)
        else:
            self._workgroup([self._run(memory, var_vals, None, self._shared())], ())
        return time.perf_counter() - start if wait else None

    def _shared(self) -> dict[int, _Memory]:
        """A workgroup's DEFINE_LOCAL buffers (zeroed), by program position."""
        ret = {}
        for i, u in enumerate(self.uops):
            if u.op is Ops.DEFINE_LOCAL:
                assert isinstance(u.dtype, PtrDType)
                ret[i] = _Memory(memoryview(bytearray(u.dtype.size * u.dtype.base.itemsize)), u.dtype.base,
                                 f"local{u.arg}")
        return ret

    def _workgroup(self, threads: list[Generator[Any, Any, None]], gid: tuple[int, ...]) -> None:
        """Run the threads of a workgroup (listed in linear thread order: x fastest) in turns, each until it waits at a
        BARRIER or a WMMA; when all of them do, they go on (a WMMA's lanes get their part of the tile)."""
        sent: list[Any] = [None] * len(threads)
        live = list(range(len(threads)))
        while live:
            waits = {}
            for i in live:
                try:
                    waits[i] = threads[i].send(sent[i])
                except StopIteration:
                    pass
            if waits and len(waits) != len(live):
                raise RuntimeError(f"PYTHON {self.name}: in workgroup {gid}, {len(waits)} of {len(live)} threads "
                                   "wait at a barrier the others never reach")
            if waits and (kinds := {w[0] if w else None for w in waits.values()}) != {None}:
                if len(kinds) != 1:
                    raise RuntimeError(f"PYTHON {self.name}: in workgroup {gid}, threads wait at different "
                                       f"barriers/tensor cores {sorted(map(str, kinds))}")
                tc = TC_BY_NAME[next(iter(kinds))]
                for warp in range(0, len(live), tc.threads):
                    lanes = live[warp:warp + tc.threads]
                    if len(lanes) != tc.threads:
                        raise RuntimeError(f"PYTHON {self.name}: {tc.name} needs warps of {tc.threads} threads, the "
                                           f"workgroup has {len(live)}")
                    d = wmma_reference(tc, *([waits[i][1][j] for i in lanes] for j in range(3)))
                    for i, out in zip(lanes, d):
                        sent[i] = tuple(truncate(tc.dtype_out, v) for v in out)
            live = list(waits)

    def _run(self, memory: dict[int, _Memory], var_vals: dict[UOp, int],
             thread: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None,
             shared: dict[int, _Memory]) -> Generator[Any, Any, None]:
        """One thread of the program, yielding at each BARRIER (None) and WMMA (its name and fragments)."""
        code, jump, uops = self.code, self.jump, self.uops
        values: list[Any] = [None] * len(code)
        ends: dict[int, int] = {}
        pc = 0
        while pc < len(code):
            op, dt, src, arg = code[pc]
            if op in GroupOp.ALU or op is Ops.CAST:
                values[pc] = _alu(op, dt, tuple(values[s] for s in src))
            elif op is Ops.INDEX:
                valid = values[src[2]] if len(src) > 2 else True
                values[pc] = (values[src[0]], values[src[1]], valid)
            elif op is Ops.LOAD:
                target = uops[src[0]]
                if target.op is Ops.DEFINE_REG:
                    values[pc] = values[src[0]]
                else:
                    mem, idx, valid = values[src[0]]
                    if not valid:
                        values[pc] = _zero(dt)
                    else:
                        mem.check(idx, dt.count, "LOAD")
                        values[pc] = mem.read(idx) if dt.count == 1 else \
                            tuple(mem.read(idx + i) for i in range(dt.count))
            elif op is Ops.STORE:
                if uops[src[0]].op is Ops.DEFINE_REG:
                    values[src[0]] = values[src[1]]
                else:
                    (mem, idx, valid), value = values[src[0]], values[src[1]]
                    if valid and arg == ATOMIC_ADD:  # (atomic here: threads take turns only at barriers)
                        mem.check(idx, 1, "STORE")
                        mem.write(idx, _alu(Ops.ADD, uops[src[1]].dtype, (mem.read(idx), value)))
                    elif valid:
                        lanes = value if isinstance(value, tuple) else (value,)
                        mem.check(idx, len(lanes), "STORE")
                        for i, x in enumerate(lanes):
                            mem.write(idx + i, x)
            elif op is Ops.RANGE:
                ends[pc] = values[src[0]]
                if ends[pc] <= 0:
                    pc = jump[pc] + 1
                    continue
                values[pc] = 0
            elif op is Ops.END:
                start = jump[pc]
                values[start] += 1
                if values[start] < ends[start]:
                    pc = start + 1
                    continue
            elif op is Ops.CONST:
                values[pc] = arg if dt.count == 1 else (arg,) * dt.count
            elif op is Ops.VCONST:
                values[pc] = tuple(arg)
            elif op is Ops.PARAM:
                values[pc] = memory[arg]
            elif op is Ops.DEFINE_VAR:
                values[pc] = var_vals[uops[pc]]
            elif op is Ops.DEFINE_REG:
                values[pc] = values[src[0]]
            elif op is Ops.DEFINE_LOCAL:
                values[pc] = shared[pc]
            elif op is Ops.BARRIER:
                yield None
            elif op is Ops.WMMA:  # the lanes of the warp meet here: the workgroup computes their tile
                values[pc] = yield (arg, tuple(values[s] for s in src))
            elif op is Ops.BITCAST:
                values[pc] = _bitcast(uops[src[0]].dtype, dt, values[src[0]])
            elif op is Ops.VECTORIZE:
                values[pc] = tuple(values[s] for s in src)
            elif op is Ops.GEP:
                vec = values[src[0]]
                lanes = arg if isinstance(arg, tuple) else (arg,)
                values[pc] = vec[lanes[0]] if len(lanes) == 1 else tuple(vec[i] for i in lanes)
            elif op is Ops.IF:
                if not values[src[0]]:
                    pc = jump[pc] + 1
                    continue
            elif op is Ops.SPECIAL:
                values[pc] = self._special(arg, thread)
            elif op in (Ops.ENDIF, Ops.SINK, Ops.NOOP):
                pass
            else:
                raise NotImplementedError(f"PYTHON: {op!r} is not supported by the PYTHON device")
            pc += 1

    def _special(self, arg: Any, thread: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None) -> int:
        assert thread is not None, "SPECIAL outside a launch with thread ids"
        gid, lid, local_size = thread
        kind, dim = str(arg).rstrip("0123456789"), int(str(arg)[len(str(arg).rstrip("0123456789")):] or 0)
        if kind == "gidx":
            return gid[dim]
        if kind == "lidx":
            return lid[dim]
        if kind == "idx":
            return gid[dim] * local_size[dim] + lid[dim]
        raise NotImplementedError(f"PYTHON: SPECIAL {arg!r} is not a gidx/lidx/idx thread id")


class PythonDevice(CompiledDevice):
    """`Device["PYTHON"]`: the reference interpreter, host memory, synchronous."""

    def __init__(self, name: str = "PYTHON"):
        super().__init__(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)
