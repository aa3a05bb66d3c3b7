"""`Renderer`: what a target can do (read by the opts and the lowering), and how a linear UOp program becomes its
source (`render`; the C-style targets do it with a rule table, see cstyle.py)."""

from __future__ import annotations

from ember.uops import DType, Ops, UOp, dtypes


class Renderer:
    """Describes a target to codegen and renders linear programs for it. Subclasses set the capabilities.

    The vector capabilities decide what `vectorize` makes: values of `vector_dtypes` in vectors of `max_vector`
    float32s' bytes, and an op on vectors only where `vector_alu[op]` lists its dtype (for CAST and comparisons the
    dtype of the source). A vector of bools is a mask of `mask_itemsize`-byte ints: comparisons and selects of values
    that wide, and the logic of `mask_alu` on masks, are vectorized (0: no masks)."""

    device: str = ""
    has_local: bool = False  # GPU-style workgroups: output axes on thread ids, opts LOCAL/GROUP, shared memory
    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)  # workgroups per launch, per dimension
    local_max: tuple[int, ...] = (1024, 1024, 64)  # threads per workgroup, per dimension
    max_workgroup_threads: int = 1024  # threads per workgroup in all
    shared_max: int = 48 * 1024  # bytes of shared memory a workgroup may declare
    has_threads: bool = False  # CPU cores split the outermost output axis
    max_threads: int = 1
    max_vector: int = 1  # widest vector of float32 the target holds in a register
    supports_dtypes: tuple[DType, ...] = dtypes.all
    vector_dtypes: tuple[DType, ...] = ()
    vector_alu: dict[Ops, tuple[DType, ...]] = {}
    mask_itemsize: int = 0
    mask_alu: frozenset[Ops] = frozenset()
    has_atomic_add: bool = False  # atomic float32/int32 adds to memory: scatter kernels run on a workgroup (gpudims)
    tensor_cores: tuple[str, ...] = ()  # names of the matrix instructions it has (tc.py), the preferred first
    # dtypes the target stores but does not compute in: their math runs in float32, rounded back after each op
    compute_via_float32: tuple[DType, ...] = (dtypes.bfloat16,)

    @property
    def vector_bytes(self) -> int:
        """Bytes of the widest vector the lowering makes (0: none)."""
        return self.max_vector * 4 if self.max_vector > 1 else 0

    def render(self, name: str, uops: tuple[UOp, ...]) -> str:
        """The source of `uops` as a function called `name`."""
        raise NotImplementedError(f"{type(self).__name__}.render: this target renders no source")

    def render_program(self, name: str, uops: tuple[UOp, ...]) -> tuple[str, str]:
        """The function name and the source of the program `uops`, a kernel shown as `name`: here `name` itself. A
        target whose compiler builds many programs into one library names each function apart (`CRenderer`: kernels
        of one shape share a display name)."""
        return name, self.render(name, uops)
