"""ember.uops: dtypes, the UOp IR, pattern matching and graph rewriting, symbolic simplification, movement-op index
math, and per-stage verifiers. Every other Ember package builds on this one."""

__version__ = "0.9.1"

from ember.uops import files, settings, table  # noqa: E402
from ember.uops.dtype import (  # noqa: E402
                              AddrSpace,
                              DType,
                              PtrDType,
                              dtypes,
                              from_numpy_dtype,
                              least_upper_dtype,
                              sum_acc_dtype,
                              to_numpy_dtype,
                              truncate,
)
from ember.uops.gradient import gradient, pm_gradient  # noqa: E402
from ember.uops.mixin import ElementwiseMixin  # noqa: E402
from ember.uops.movement import movement_index, view_index  # noqa: E402
from ember.uops.opcodes import GroupOp, Ops  # noqa: E402
from ember.uops.ops import AxisType, UOp  # noqa: E402
from ember.uops.render import render, render_expr  # noqa: E402
from ember.uops.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite  # noqa: E402
from ember.uops.shape import broadcast_shape, prod, shard_bounds, shard_shape, sint  # noqa: E402
from ember.uops.spec import SpecError, verify  # noqa: E402
from ember.uops.symbolic import exec_alu, gate_loads, linear_terms, pm_divmod, symbolic, symbolic_simple  # noqa: E402

__all__ = [
    "AxisType", "AddrSpace", "DType", "PtrDType", "dtypes", "from_numpy_dtype", "least_upper_dtype", "sum_acc_dtype",
    "to_numpy_dtype", "truncate", "gradient", "pm_gradient", "movement_index", "view_index", "ElementwiseMixin",
    "GroupOp", "Ops", "UOp", "render", "render_expr", "shard_bounds", "shard_shape",
    "PatternMatcher", "RewriteLoopError", "UPat", "graph_rewrite", "broadcast_shape", "prod", "sint", "SpecError",
    "verify", "exec_alu", "linear_terms", "symbolic", "symbolic_simple", "gate_loads", "pm_divmod", "settings", "files",
    "table",
]
