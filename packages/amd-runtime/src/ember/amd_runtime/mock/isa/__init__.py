"""A wave64 interpreter of gfx942 (CDNA3) machine code for the mock AMD GPU.

    program = Program.from_code_object(co, base)        # decodes/compiles each instruction once, on first use
    kernel = KernelCode.from_code_object(co, "add", base)
    run_dispatch(program, kernel, memory=mem, kernarg_addr=args, grid=(n,), workgroup_size=(256,))
    run_aql_dispatch(mem, packet_addr)                  # or straight from an HSA dispatch packet in device memory

`mem` implements `GlobalMemory` (`read(addr, n)`, `write(addr, data)`, raising `MemoryFault` on unmapped bytes);
`SparseMemory` is a simple implementation. Workgroups run one after another; the waves of a workgroup run in turn,
each until s_barrier or s_endpgm.

Lanes are NumPy vectors. Integer ops are bit-exact. f32/f64/f16 add/mul/fma/sqrt and conversions are IEEE
round-to-nearest-even (fma rounds once: f32/f16 through round-to-odd float64 sums, f64 from error-free
transformations). v_exp/v_log/v_rcp/v_rsq/v_sin/v_cos are the correctly rounded results of the exact functions
(hardware: within 1 ulp); v_div_fixup returns the IEEE quotient; MFMA sums in f64 (the hardware's accumulation order
differs). Denormal flushing follows MODE (from rsrc1, s_setreg); only round-to-nearest-even is modelled.

A wave that exceeds `max_instructions_per_wave` raises `InstructionLimitExceeded`; an encoding the decoder does not
know raises `UnknownInstruction`; a known opcode without semantics here raises NotImplementedError naming it.
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
