"""ember.cuda_runtime: the NVIDIA device through the CUDA driver API (libcuda) and NVRTC, by ctypes.

    from ember.runtime import Device
    dev = Device["CUDA"]                         # or CUDA:1, ...; $CUDA_DRIVER_PATH overrides libcuda.so.1
    cubin = dev.compiler.compile_cached(src)     # NVRTC, for the GPU's own sm_XY, cached on disk
    dev.runtime("add", cubin)(out, a, b, global_size=(64,), local_size=(256,), vals=(n,), wait=True)
"""

__version__ = "0.3.3"

from ember.cuda_runtime.compiler import (  # noqa: E402
    NVRTC,
    NVRTCCompiler,
    cubin_arch,
    cubin_global,
    cuda_include_dirs,
    load_nvrtc,
)
from ember.cuda_runtime.device import CUDAAllocator, CUDADevice, CUDAGraph, CUDAMemory, CUDAProgram  # noqa: E402
from ember.cuda_runtime.driver import (  # noqa: E402
    CUDAContext,
    CUDAError,
    Driver,
    KernelNodeParams,
    load_driver,
    timeout_seconds,
)

__all__ = ["CUDAAllocator", "CUDAContext", "CUDADevice", "CUDAError", "CUDAGraph", "CUDAMemory", "CUDAProgram",
           "Driver", "KernelNodeParams", "NVRTC", "NVRTCCompiler", "cubin_arch", "cubin_global", "cuda_include_dirs",
           "load_driver", "load_nvrtc", "timeout_seconds"]
