"""Optimizations on a kernel AST: `Opt`s split and re-kind its RANGEs; `hand_coded_opts` picks them without search."""

from __future__ import annotations

from ember.codegen.program import Opt, OptOps
from ember.codegen.renderer import Renderer
from ember.uops import AxisType, Ops, UOp, linear_terms


class KernelOptError(ValueError):
    """An Opt that does not apply to the kernel (bad axis, amount that does not divide, wrong axis kind)."""


_KIND_ORDER = {AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOCAL: 2, AxisType.LOOP: 3, AxisType.UPCAST: 4,
               AxisType.GROUP_REDUCE: 5, AxisType.REDUCE: 6, AxisType.UNROLL: 7}
OUTPUT_KINDS = (AxisType.THREAD, AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP, AxisType.UPCAST)
REDUCE_KINDS = (AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL)


def kernel_ranges(ast: UOp) -> list[UOp]:
    """The RANGEs of a kernel in opt-axis order: output axes first, then reduce axes, each by axis id."""
    rngs = {u for u in ast.toposort() if u.op is Ops.RANGE}
    return sorted(rngs, key=lambda r: (_KIND_ORDER[r.arg[1]], r.arg[0]))


def range_size(r: UOp) -> int | None:
    return r.src[0].arg if r.src[0].op is Ops.CONST else None


def split_range(ast: UOp, r: UOp, outer: UOp, inner: UOp, amount: int) -> UOp:
    """Replace range r by outer*amount + inner everywhere; REDUCE and END list (outer, inner) in r's place."""
    value = outer * amount + inner
    new: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u is r:
            new[u] = value
            continue
        if u.op in (Ops.REDUCE, Ops.END):
            src: tuple[UOp, ...] = (new[u.src[0]],)
            for s in u.src[1:]:
                src += (outer, inner) if s is r else (new[s],)
        else:
            src = tuple(new[s] for s in u.src)
        new[u] = u if src == u.src else u.replace(src=src)
    return new[ast]


def apply_opt(ast: UOp, opt: Opt) -> UOp:
    """The kernel with one Opt applied (KernelOptError if it does not apply)."""
    rngs = kernel_ranges(ast)
    if not 0 <= opt.axis < len(rngs):
        raise KernelOptError(f"{opt}: axis {opt.axis} out of range, the kernel has {len(rngs)} axes")
    r = rngs[opt.axis]
    size, kind = range_size(r), r.arg[1]
    if opt.op is OptOps.THREAD:
        if kind is not AxisType.GLOBAL or opt.amount < 1:
            raise KernelOptError(f"{opt}: THREAD needs a GLOBAL axis and amount >= 1, axis {opt.axis} is {kind}")
        # the whole range is shared out across `amount` threads (the renderer splits it, remainders included)
        return ast.substitute({r: UOp.range(r.src[0], r.arg[0], AxisType.THREAD)})
    if opt.op not in (OptOps.UPCAST, OptOps.UNROLL):
        raise KernelOptError(f"{opt}: {opt.op.name} is not supported on this target")
    want = (AxisType.GLOBAL, AxisType.LOOP) if opt.op is OptOps.UPCAST else (AxisType.REDUCE,)
    if kind not in want:
        raise KernelOptError(f"{opt}: {opt.op.name} needs an axis of kind {[k.name for k in want]}, got {kind.name}")
    if size is None or opt.amount < 2 or size % opt.amount:
        raise KernelOptError(f"{opt}: amount {opt.amount} must be >= 2 and divide the axis size {size}")
    new_kind = AxisType.UPCAST if opt.op is OptOps.UPCAST else AxisType.UNROLL
    if opt.amount == size:  # the whole axis: no split, only the kind changes
        return ast.substitute({r: UOp.range(size, r.arg[0], new_kind)})
    outer = UOp.range(size // opt.amount, r.arg[0], kind)
    inner = UOp.range(opt.amount, max(x.arg[0] for x in rngs) + 1, new_kind)
    return split_range(ast, r, outer, inner, opt.amount)


def apply_opts(ast: UOp, opts: list[Opt]) -> UOp:
    for opt in opts:
        ast = apply_opt(ast, opt)
    return ast


def _output_strides(ast: UOp) -> dict[UOp, int]:
    """For each range, its coefficient in the first store's flat index (0 where the store does not vary with it)."""
    store = next((u for u in ast.toposort() if u.op is Ops.STORE), None)
    if store is None or len(store.src[0].src) < 2:
        return {}
    terms, _ = linear_terms(store.src[0].src[1].simplify())
    return {b: m for b, m in terms if b.op is Ops.RANGE}


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """A simple default: upcast the innermost contiguous output axis, unroll a small innermost reduce axis, and share
    the outermost output axis out across threads when the kernel is big enough to pay for waking them."""
    opts: list[Opt] = []

    def add(opt: Opt) -> None:
        nonlocal ast
        ast = apply_opt(ast, opt)
        opts.append(opt)

    rngs = kernel_ranges(ast)
    work = 1
    for r in rngs:
        work *= range_size(r) or 1
    # upcast the output axis that is contiguous in the store (stride 1)
    strides = _output_strides(ast)
    for i, r in reversed(list(enumerate(rngs))):
        if r.arg[1] is AxisType.GLOBAL and strides.get(r) == 1 and (size := range_size(r)) is not None:
            if (amt := next((a for a in (8, 4, 2) if size % a == 0 and size > a), None)) is not None:
                add(Opt(OptOps.UPCAST, i, amt))
            break
    # unroll the innermost reduce axis: fully when small, else by 4 or 2
    rngs = kernel_ranges(ast)
    reduces = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.REDUCE]
    if reduces and (size := range_size(rngs[reduces[-1]])) is not None and size >= 2:
        if (amt := size if size <= 8 else next((a for a in (4, 2) if size % a == 0), None)) is not None:
            add(Opt(OptOps.UNROLL, reduces[-1], amt))
    rngs = kernel_ranges(ast)
    outputs = [i for i, r in enumerate(rngs) if r.arg[1] is AxisType.GLOBAL]
    if renderer.has_threads and renderer.max_threads > 1 and outputs and work >= 32768 and \
            (range_size(rngs[outputs[0]]) or 0) >= 2:
        add(Opt(OptOps.THREAD, outputs[0], renderer.max_threads))
    return opts
