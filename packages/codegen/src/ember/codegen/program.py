"""What codegen hands to a device: `ProgramSpec`, a rendered kernel with its linear UOp program and launch facts.

A program read back from codegen's disk cache decodes its linear program and renders its source on first use of `uops`
or `src` (`ProgramSpec.read_later`), and names the source by `src_key`: the device's compile cache finds the library
compiled from it by that key, without either.

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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

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
    """A kernel ready to compile and launch.

    `name` is what it is shown as (`r_64_32_4`: its kind and axis sizes), `function` the name of its function in
    `src` (the name the runtime loads): `name`, or where the renderer names functions apart, a name of its own
    (`Renderer.render_program`).
    `src_key`, when set, names the source whatever process renders it: programs of one `src_key` have one source
    (codegen's cache sets it on the programs it stores and reads; it is not compared, and `dataclasses.replace` drops
    it, so a program made with another source never carries it)."""

    name: str
    src: str
    uops: tuple[UOp, ...]
    bufs: tuple[BufferArg, ...]
    vars: tuple[UOp, ...] = ()
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] | None = None
    estimates: Estimates = field(default_factory=Estimates)
    applied_opts: tuple[Opt, ...] = ()
    function: str = ""  # (empty: `name`)
    src_key: str | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        if not self.function:
            object.__setattr__(self, "function", self.name)

    @property
    def outs(self) -> tuple[int, ...]:
        return tuple(b.slot for b in self.bufs if b.written)

    @classmethod
    def read_later(cls, uops: Callable[[], tuple[UOp, ...]], render: Callable[[str, tuple[UOp, ...]], str],
                   src_key: str | None, name: str, bufs: tuple[BufferArg, ...], **fields: Any) -> ProgramSpec:
        """The program whose `uops` are `uops()` and whose `src` is `render(function, uops)`, each made on its first
        read (a program whose library is found by `src_key` needs neither). Reads from several threads may make one more
        than once: equal values."""
        spec = cls(name, "", (), bufs, **fields)
        later: dict[str, Callable[[ProgramSpec], Any]] = {"uops": lambda _: uops(),
                                                          "src": lambda spec: render(spec.function, spec.uops)}
        for attr in later:
            object.__delattr__(spec, attr)  # (until made, a read reaches __getattr__)
        object.__setattr__(spec, "_later", later)
        object.__setattr__(spec, "src_key", src_key)
        return spec

    def with_src_key(self, src_key: str) -> ProgramSpec:
        """This program, its source named by `src_key`."""
        spec = replace(self)
        object.__setattr__(spec, "src_key", src_key)
        return spec

    if not TYPE_CHECKING:  # (hidden from type checkers, which would then accept any attribute name)
        def __getattr__(self, attr: str) -> Any:
            # reached only for an attribute the instance lacks: a field of a `read_later` program not made yet
            later = self.__dict__.get("_later", {})
            if (make := later.get(attr)) is not None:
                object.__setattr__(self, attr, make(self))
                later.pop(attr, None)
            if attr not in self.__dict__:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
            return self.__dict__[attr]  # (made here, or meanwhile by another thread)

    def __getstate__(self) -> dict[str, Any]:
        # a pickle (a codegen helper's answer) holds the program and its source: the functions need not pickle
        return {**{k: v for k, v in self.__dict__.items() if k != "_later"}, "uops": self.uops, "src": self.src}
