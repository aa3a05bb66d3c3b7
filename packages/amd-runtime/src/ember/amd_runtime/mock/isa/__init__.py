"""A wave64 interpreter of gfx942 (CDNA3) machine code for the mock AMD GPU.

    program = Program(image, base)                      # a loaded code object; decodes/compiles lazily, once
    kernel = KernelCode.from_descriptor(kd_bytes, kd_addr)
    run_dispatch(program, kernel, memory=mem, kernarg_addr=args, grid=(n,), workgroup_size=(256,))

`mem` implements `GlobalMemory` (read/write, raising `MemoryFault` on unmapped bytes); `SparseMemory` is a
simple implementation.
"""

from ember.amd_runtime.mock.isa.decode import Instruction, UnknownInstruction, decode
from ember.amd_runtime.mock.isa.dispatch import DispatchStats, KernelCode, run_aql_dispatch, run_dispatch
from ember.amd_runtime.mock.isa.memory import GlobalMemory, MemoryFault, SparseMemory
from ember.amd_runtime.mock.isa.program import InstructionLimitExceeded, MemoryProgram, Program
from ember.amd_runtime.mock.isa.salu import WaveTrap
from ember.amd_runtime.mock.isa.state import Wave

__all__ = [
    "DispatchStats", "GlobalMemory", "Instruction", "InstructionLimitExceeded", "KernelCode", "MemoryFault",
    "MemoryProgram", "Program", "SparseMemory", "UnknownInstruction", "Wave", "WaveTrap", "decode", "run_aql_dispatch",
    "run_dispatch",
]
