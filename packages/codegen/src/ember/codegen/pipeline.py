"""`to_program`: the codegen pipeline, top to bottom."""

from __future__ import annotations

from ember.codegen.gpudims import launch_dims, sequential
from ember.codegen.heuristic import hand_coded_opts
from ember.codegen.linearize import linearize
from ember.codegen.lower import lower
from ember.codegen.opt import GPU_OPTS, KernelOptError, apply_opts, kernel_ranges, range_size
from ember.codegen.program import BufferArg, Estimates, Opt, OptOps, ProgramSpec
from ember.codegen.renderer import Renderer
from ember.codegen.tc import TENSOR_CORES
from ember.uops import AxisType, Ops, UOp, graph_rewrite, settings, symbolic, verify


def kernel_name(ast: UOp) -> str:
    """`E_` (elementwise) or `r_` (with a reduce), then the sizes of the axes: `r_64_32_4`."""
    rngs = kernel_ranges(ast)
    prefix = "r" if any(r.arg[1] in (AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP_REDUCE) for r in rngs) else "E"
    return "_".join([prefix] + [str(range_size(r) if range_size(r) is not None else "n") for r in rngs]) \
        if rngs else f"{prefix}_1"


def estimate(uops: tuple[UOp, ...]) -> Estimates:
    """FLOPs and buffer bytes (not panels) of one launch, counting each op once per iteration of the loops around it."""
    flops = read = written = 0
    mult, stack = 1, []
    for u in uops:
        if u.op is Ops.RANGE:
            stack.append(mult)
            mult *= u.src[0].arg if u.src[0].op is Ops.CONST else 1
        elif u.op is Ops.END:
            mult = stack.pop()
        elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM:
            read += mult * u.dtype.itemsize
        elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM:
            written += mult * u.src[1].dtype.itemsize
        elif u.op in _FLOP_OPS and not _is_index_math(u):
            flops += mult * u.dtype.count  # a vector op does one per lane
    return Estimates(flops, read, written)


def _is_index_math(u: UOp) -> bool:
    return u.dtype.scalar().name == "index" or (u.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) and
                                                 u.src[0].dtype.scalar().name == "index")


_FLOP_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.MUL,
                       Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.FDIV, Ops.POW, Ops.WHERE,
                       Ops.MULACC})


def check_target(ast: UOp, renderer: Renderer, opts: list[Opt]) -> None:
    """KernelOptError for opts the target cannot run: GPU opts without workgroups, on a GPU opts for a kernel with
    sequential LOOP ranges (it runs on one thread) and PACK (a panel private to a CPU thread), a tensor core the target
    does not have."""
    name = type(renderer).__name__
    if gpu := [o for o in opts if o.op in GPU_OPTS]:
        if not renderer.has_local:
            raise KernelOptError(f"{gpu}: {name} has no workgroups (LOCAL/GROUP/GROUPTOP/TC are GPU opts)")
        if sequential(kernel_ranges(ast)):
            raise KernelOptError(f"{gpu}: the kernel has sequential LOOP ranges (a scatter): a GPU runs it on one "
                                 "thread")
    if renderer.has_local and (pack := [o for o in opts if o.op is OptOps.PACK]):
        raise KernelOptError(f"{pack}: PACK stages a panel private to a CPU thread; {name} has workgroups (its local "
                             "memory is shared)")
    for o in opts:
        if o.op is OptOps.TC and (o.amount not in range(len(TENSOR_CORES)) or
                                  TENSOR_CORES[o.amount].name not in renderer.tensor_cores):
            raise KernelOptError(f"{o}: {name} has the tensor cores {renderer.tensor_cores}")


def to_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """Compile a kernel AST (a SINK of END(STORE(INDEX(PARAM, idx), value), *ranges)) for `renderer`.

    `opts=None` picks opts with the hand-coded heuristic (none under NOOPT); `opts=[]` applies none."""
    if ast.op is not Ops.SINK:
        raise ValueError(f"to_program: the kernel AST must be a SINK, got {ast.op}")
    if settings.SPEC.value:
        verify(ast, "kernel")
    if opts is None:
        opts = [] if settings.NOOPT.value else hand_coded_opts(ast, renderer)
    check_target(ast, renderer, opts)
    sink = apply_opts(ast, opts)
    sink = graph_rewrite(sink, symbolic, name="postopt symbolic")
    name = kernel_name(sink)
    sink = lower(sink, renderer)
    uops = linearize(sink)
    # every buffer slot stays an argument, read or not (a reduce over an empty range reads nothing of its input): the
    # runtimes pass the kernel's buffers by position
    kept = {u.arg for u in uops if u.op is Ops.PARAM}
    uops = tuple(p for p in sorted({u for u in ast.toposort() if u.op is Ops.PARAM}, key=lambda p: p.arg)
                 if p.arg not in kept) + tuple(uops)
    function, src = renderer.render_program(name, uops)
    if settings.DEBUG.value >= 4:
        print(src)
    written = {u.src[0].src[0] for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    bufs = tuple(BufferArg(u.arg, u.dtype.base, u.dtype.size, u in written)
                 for u in sorted((u for u in uops if u.op is Ops.PARAM), key=lambda p: p.arg))
    variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0]))
    global_size, local_size = launch_dims(uops) if renderer.has_local else ((1, 1, 1), None)
    return ProgramSpec(name, src, uops, bufs, variables, global_size, local_size, estimates=estimate(uops),
                       applied_opts=tuple(opts), function=function)
