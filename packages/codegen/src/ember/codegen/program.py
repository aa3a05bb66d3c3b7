"""What codegen hands to a device: `ProgramSpec`, a rendered kernel with its linear UOp program and launch facts.

The linear program (`ProgramSpec.uops`) is a flat tuple of UOps, executed top to bottom:
- `PARAM` (dtype `dt.ptr(size)`, arg = slot): buffer argument `slot`. `DEFINE_VAR` (arg = (name, lo, hi)): an int
  argument, passed in `ProgramSpec.vars` order.
- `CONST` (arg = value). ALU ops, `CAST`, `BITCAST` compute values from earlier UOps.
- `RANGE` (src = (end,), arg = (axis_id, AxisType)) opens a loop `for r in range(end)`; `END` (src = (range,)) closes
  it. Loops nest properly; everything between runs once per iteration.
- `INDEX(param, idx)` or `INDEX(param, idx, valid)` is an element address; `LOAD(index)` reads it (0 where `valid` is
  False, and then the address is not touched); `STORE(index, value)` writes it (skipped where `valid` is False).
- `DEFINE_REG` (dtype = value dtype, src = (init CONST,), arg = id) declares an accumulator set to init;
  `LOAD(reg, *order)` reads its current value; `STORE(reg, value, *order)` sets it (a reduce re-initializes its
  accumulator with such a STORE before each of its loops). The `order` srcs (ranges, stores, ENDs) only pin where the
  UOp sits in the program: an executor ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto

from ember.uops import DType, UOp


class OptOps(Enum):
    UPCAST = auto()  # split an output axis; the inner part is unrolled (and vectorized by the C compiler)
    UNROLL = auto()  # split a reduce axis; the inner part is unrolled
    PARTIAL = auto()  # split a reduce axis into `amount` interleaved partial sums, added up after the loop
    LOCAL = auto()  # split an output axis; the inner part runs on the threads of a GPU workgroup
    GROUP = auto()  # split a reduce axis; the inner part runs on workgroup threads (thread t sums t, t+amount, ...)
    GROUPTOP = auto()  # as GROUP, but thread t sums one contiguous chunk of the axis
    THREAD = auto()  # split the outermost output axis across CPU threads
    PADTO = auto()  # run an axis to the next multiple of `amount`, the padded iterations gated off (remainders)
    SWAP = auto()  # exchange the loop positions of two output axes (`amount` is the other axis)
    PACK = auto()  # stage the loads the loop of an output axis reuses into a thread-local panel, filled before it
    TC = auto()


@dataclass(frozen=True)
class Opt:
    """One optimization step: apply `op` to axis `axis` (index into the kernel's ranges) with `amount`."""

    op: OptOps
    axis: int
    amount: int


@dataclass(frozen=True)
class Estimates:
    """Counted work of one launch: ALU operations and memory traffic (bytes read and written to buffers)."""

    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class BufferArg:
    """A buffer argument of a kernel: its slot, element dtype, element count, and whether the kernel writes it."""

    slot: int
    dtype: DType
    size: int
    written: bool


@dataclass(frozen=True)
class ProgramSpec:
    """A kernel ready to compile and launch."""

    name: str
    src: str
    uops: tuple[UOp, ...]
    bufs: tuple[BufferArg, ...]
    vars: tuple[UOp, ...] = ()
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] | None = None
    estimates: Estimates = field(default_factory=Estimates)
    applied_opts: tuple[Opt, ...] = ()

    @property
    def outs(self) -> tuple[int, ...]:
        return tuple(b.slot for b in self.bufs if b.written)
