"""A code object's instructions, decoded and compiled once per address, and the loop that runs a wave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.amd_runtime.mock.isa.decode import Instruction, decode
from ember.amd_runtime.mock.isa.memory import GlobalMemory, MemoryFault
from ember.amd_runtime.mock.isa.salu import compile_salu
from ember.amd_runtime.mock.isa.state import BARRIER, Wave
from ember.amd_runtime.mock.isa.valu import compile_valu
from ember.amd_runtime.mock.isa.vmem import compile_vmem

_SCALAR = frozenset({"SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM"})
_MEMORY = frozenset({"FLAT", "GLOBAL", "SCRATCH", "DS", "MUBUF"})


Tracer = Callable[[Wave, Instruction], None]


class InstructionLimitExceeded(RuntimeError):
    """A wave ran more instructions than the dispatch allows (a runaway loop)."""


def compile_instruction(ins: Instruction) -> Callable[[Wave], int | None]:
    """The function executing `ins` on a wave: returns None (next), a jump target, END or BARRIER."""
    if ins.fmt in _SCALAR:
        return compile_salu(ins)
    if ins.fmt in _MEMORY:
        return compile_vmem(ins)  # type: ignore[return-value]
    return compile_valu(ins)  # type: ignore[return-value]


class Program:
    """The machine code of one code object mapped at `base`, with a per-address decode/compile cache.

    `code` holds the bytes of the loaded image from `base` on (a laid-out code object, or just its .text with
    `base` = the address of .text). Build one per loaded code object and reuse it across dispatches.
    """

    def __init__(self, code: bytes | bytearray | memoryview, base: int = 0):
        self.code = bytes(code)
        self.base = base
        self._cache: dict[int, tuple[Callable[[Wave], int | None], int, Instruction]] = {}

    @classmethod
    def from_memory(cls, memory: GlobalMemory, addr: int, size: int) -> Program:
        """A program over `size` bytes of device memory at `addr`."""
        data = memory.read(addr, size)
        return cls(data.tobytes() if hasattr(data, "tobytes") else bytes(data), addr)

    @classmethod
    def from_code_object(cls, code_object: Any, base: int) -> Program:
        """The image of an `ember.amd_runtime.elf.CodeObject` loaded (and relocated) at `base`."""
        return cls(code_object.relocated(base), base)

    def decode(self, addr: int) -> Instruction:
        """The instruction at device address `addr`."""
        return decode(self.code, addr - self.base, addr)

    def _entry(self, addr: int) -> tuple[Callable[[Wave], int | None], int, Instruction]:
        entry = self._cache.get(addr)
        if entry is None:
            ins = self.decode(addr)
            entry = (compile_instruction(ins), addr + ins.size, ins)
            self._cache[addr] = entry
        return entry

    def run_wave(self, w: Wave, limit: int, trace: Tracer | None = None) -> bool:
        """Run `w` until s_endpgm (returns True) or s_barrier (returns False, the wave waits past it).

        `trace(wave, instruction)` is called before each instruction executes (debugging; slower)."""
        cache = self._cache
        pc, count = w.pc, w.count
        try:
            while True:
                entry = cache.get(pc) or self._entry(pc)
                if trace is not None:
                    w.pc = pc
                    trace(w, entry[2])
                r = entry[0](w)
                count += 1
                if r is None:
                    pc = entry[1]
                elif r >= 0:
                    pc = r
                elif r == BARRIER:
                    pc = entry[1]
                    return False
                else:
                    w.done = True
                    return True
                if count >= limit:
                    raise InstructionLimitExceeded(
                        f"wave {w.wave_id} of workgroup {w.workgroup} ran {count} instructions without reaching "
                        f"s_endpgm (limit {limit}; pc {pc:#x}): a runaway loop, or raise max_instructions_per_wave")
        except MemoryFault as e:
            if e.pc is None:  # the memory's own fault (subclasses kept): add where the wave was
                e.pc, e.instruction = pc, str(self._entry(pc)[2])
                e.args = (f"{e.args[0] if e.args else 'memory fault'} at pc {pc:#x} ({e.instruction})",)
            raise
        finally:
            w.pc, w.count = pc, count

    def invalidate(self) -> None:
        """Forget every decoded instruction (the code's memory was rewritten)."""
        self._cache.clear()


class MemoryProgram(Program):
    """Instructions fetched from device memory on first execution (the mock GPU's view: it knows only addresses).

    Keep one per loaded code object, or call `invalidate()` when code memory is reused."""

    def __init__(self, memory: GlobalMemory):
        super().__init__(b"", 0)
        self.memory = memory

    def decode(self, addr: int) -> Instruction:
        for size in (16, 8, 4):  # the longest instruction is 8 bytes + a literal; stop short of unmapped memory
            try:
                data = self.memory.read(addr, size)
            except MemoryFault:
                if size == 4:
                    raise
                continue
            raw = data.tobytes() if hasattr(data, "tobytes") else bytes(data)
            return decode(raw, 0, addr)
        raise AssertionError("unreachable")
