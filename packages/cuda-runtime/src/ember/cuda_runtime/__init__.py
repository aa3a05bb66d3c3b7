"""ember.cuda_runtime: the NVIDIA device through the CUDA driver API (libcuda) and NVRTC, by ctypes."""

__version__ = "0.0.1"
