"""The `CUDA` device (being built: see the package README)."""

from __future__ import annotations


class CUDADevice:
    def __init__(self, name: str):
        raise NotImplementedError(f"{name}: the CUDA device (driver API + NVRTC) is not implemented yet")
