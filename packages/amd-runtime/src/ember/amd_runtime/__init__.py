"""ember.amd_runtime: the AMD device through KFD and hardware command queues (HCQ), with a mock driver and GPU.

    from ember.runtime import Device
    dev = Device["AMD"]          # AMD:1, ...; MOCKGPU=1 runs the whole path on the in-process fake KFD + GPU
    lib = dev.compiler.compile_cached(src)      # HIP -> gfx942 code object (comgr, else clang-19 + ld.lld-19)
    dev.runtime("E_64_32", lib)(out, a, global_size=(64, 1, 1), local_size=(32, 1, 1))

Layers (each its module): platform (the one OS boundary), kfd (ioctls), topology (GPUs from sysfs), memory
(VRAM/GTT, CPU VA == GPU VA), signal (timeline signals, waits with "hang detected"), kfd_queue (KFD queues), pm4 /
sdma / aql (packet builders and decoders), queue (PM4, AQL and SDMA rings), elf / kernargs (code objects,
descriptors, arguments), comgr / clang_compiler (HIP compilers), device (`AMDDevice`), graph (batched replay of a
jit's launches). `ember.amd_runtime.mock`: the fake KFD and GPU (command processor, SDMA, a gfx942 wave64 interpreter
in `mock.isa`).
"""

__version__ = "0.1.5"

from ember.amd_runtime.comgr import ComgrError, HIPCompiler  # noqa: E402
from ember.amd_runtime.device import AMDAllocator, AMDDevice, AMDMemory, AMDProgram  # noqa: E402
from ember.amd_runtime.elf import CodeObject, KernelDescriptor, load_code_object  # noqa: E402
from ember.amd_runtime.graph import AMDGraph, GraphCopy, GraphKernel  # noqa: E402
from ember.amd_runtime.kernargs import kernarg_layout  # noqa: E402
from ember.amd_runtime.queue import AQLQueue, PM4ComputeQueue, SDMAQueue  # noqa: E402

__all__ = ["AMDAllocator", "AMDDevice", "AMDGraph", "AMDMemory", "AMDProgram", "AQLQueue", "CodeObject", "ComgrError",
           "GraphCopy", "GraphKernel", "HIPCompiler", "KernelDescriptor", "PM4ComputeQueue", "SDMAQueue",
           "kernarg_layout", "load_code_object"]
