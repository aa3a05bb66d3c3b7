"""ember.codegen: a kernel AST becomes a program: opts (heuristic, BEAM search or given), lower, linearize, render."""

__version__ = "0.11.0"

from ember.codegen.cache import cached_program, load_program  # noqa: E402
from ember.codegen.cstyle import CRenderer, CStyleLanguage, RenderContext, base_rewrite  # noqa: E402
from ember.codegen.gpu import CUDARenderer, GPURenderer, HIPRenderer  # noqa: E402
from ember.codegen.gpudims import ATOMIC_ADD  # noqa: E402
from ember.codegen.heuristic import hand_coded_opts  # noqa: E402
from ember.codegen.linearize import linearize  # noqa: E402
from ember.codegen.lower import lower  # noqa: E402
from ember.codegen.opt import KernelOptError, apply_opts, kernel_ranges  # noqa: E402
from ember.codegen.pipeline import to_program  # noqa: E402
from ember.codegen.pool import CodegenPool, Drain  # noqa: E402
from ember.codegen.program import BufferArg, Estimates, Opt, OptOps, ProgramSpec  # noqa: E402
from ember.codegen.renderer import Renderer  # noqa: E402
from ember.codegen.search import beam_search  # noqa: E402
from ember.codegen.tc import BY_NAME as TC_BY_NAME  # noqa: E402
from ember.codegen.tc import TENSOR_CORES, TensorCore, wmma_reference  # noqa: E402

__all__ = ["ATOMIC_ADD", "cached_program", "load_program", "CodegenPool", "Drain", "CRenderer",
           "CUDARenderer", "GPURenderer", "HIPRenderer", "CStyleLanguage", "RenderContext",
           "base_rewrite", "linearize", "lower", "KernelOptError", "apply_opts", "hand_coded_opts", "kernel_ranges",
           "BufferArg", "Estimates", "Opt", "OptOps", "ProgramSpec", "Renderer", "beam_search", "to_program",
           "TC_BY_NAME", "TENSOR_CORES", "TensorCore", "wmma_reference"]
