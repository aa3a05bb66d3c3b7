"""`Renderer`: what a target can do, and how a linear UOp program becomes its source."""

from __future__ import annotations

from ember.uops import DType, UOp, dtypes


class Renderer:
    """Describes a target to codegen and renders linear programs for it. Subclasses set the capabilities."""

    device: str = ""
    has_local: bool = False  # GPU-style workgroups
    has_threads: bool = False  # CPU cores split the outermost output axis
    max_threads: int = 1
    max_vector: int = 1  # widest vector of float32 the target holds in a register
    supports_dtypes: tuple[DType, ...] = dtypes.all

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        raise NotImplementedError(f"{type(self).__name__}.render: this target renders no source")
