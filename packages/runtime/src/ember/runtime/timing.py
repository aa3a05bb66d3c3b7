"""`time_program`: how long one launch of a ProgramSpec takes on a device, on scratch buffers (BEAM's timer).

    scratch = {}  # one per kernel: its candidates reuse the buffers
    seconds = time_program("CPU", spec, scratch=scratch)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.runtime.buffer import Buffer
from ember.runtime.compiler import CompileError
from ember.runtime.device import Device

if TYPE_CHECKING:
    from ember.codegen import ProgramSpec


def time_program(device: str, spec: ProgramSpec, runs: int = 3,
                 scratch: dict[tuple[int, int, Any], Buffer] | None = None) -> float:
    """Seconds of one launch of `spec` on scratch buffers (zeroed, so gathers index in bounds): the fastest of
    `runs`; inf if the program does not compile or uses variables. `scratch` keeps the buffers for the next
    candidate of the same kernel (by slot: what a candidate writes is only ever read back as data)."""
    dev = Device[device]
    if spec.vars:
        return float("inf")
    try:
        prg = dev.runtime(spec.function, dev.compiler.compile_cached(spec.src))
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
