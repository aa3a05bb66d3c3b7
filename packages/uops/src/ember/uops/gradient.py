"""Reverse-mode autodiff on tensor-level UOps: one rule table of vector-Jacobian products.

Each rule gets the upstream gradient `ctx` (a UOp of the node's shape) and returns one gradient per source (None
for a source that gets none, e.g. a comparison's inputs or an integer index).
"""

from __future__ import annotations

import math

from ember.uops.dtype import dtypes
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.ops import UOp
from ember.uops.rewrite import PatternMatcher, UPat

_LN2 = math.log(2)


def _const_like(x: UOp, value: float) -> UOp:
    """A constant broadcast to x's shape (on x's device)."""
    c = UOp.const(x.dtype, value, x.device)  # type: ignore[arg-type]
    return c.reshape((1,) * len(x.shape)).expand(x.shape) if x.shape else c  # type: ignore[arg-type]


def _unexpand(g: UOp, shape: tuple) -> UOp:
    # the gradient of an EXPAND sums over the axes it broadcast
    axes = tuple(i for i, (s, n) in enumerate(zip(shape, g.shape)) if s != n)  # type: ignore[arg-type]
    return g.reduce_axis(Ops.ADD, axes) if axes else g


def _permute_back(order: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return tuple(inv)


RELU_TAG = "relu"  # the tag of Tensor.relu's MAX(x, 0): its gradient is torch's threshold, 0 at x == 0


def _max_grad(ctx: UOp, ret: UOp, a: UOp, b: UOp) -> tuple[UOp | None, UOp | None]:
    # the larger source takes the gradient; a tie splits it evenly (as torch.maximum). A relu's x takes it only where
    # strictly larger than 0 (as torch.relu); its 0 gets none
    one, zero = _const_like(a, 1.0), _const_like(a, 0.0)
    if ret.tag == RELU_TAG:
        return ctx * (b < a).where(one, zero), None
    wa = (b < a).where(one, a.eq(b).where(_const_like(a, 0.5), zero))
    return ctx * wa, ctx * (one + -wa)


def _reduce_max_grad(ctx: UOp, ret: UOp, x: UOp) -> tuple[UOp]:
    # every position holding the max shares the gradient equally; a NaN max is held by the NaNs (as torch)
    axes = ret.arg[1]
    r = ret.expand(x.shape)
    held = x.eq(r) | (x.ne(x) & r.ne(r)) if dtypes.is_float(x.dtype) else x.eq(r)
    mask = held.where(_const_like(x, 1.0), _const_like(x, 0.0))
    count = mask.reduce_axis(Ops.ADD, axes)
    return ((ctx * count.reciprocal()).expand(x.shape) * mask,)


def _pow_grad(ctx: UOp, ret: UOp, a: UOp, b: UOp) -> tuple[UOp, UOp]:
    # PyTorch's: d/da is 0 where b == 0 (0 ** 0 included), d/db is 0 where a == 0 and b >= 0 (no 0 * log(0) NaN)
    zero = _const_like(a, 0.0)
    da = b.eq(zero).where(zero, b * a.pow(b + -_const_like(b, 1.0)))
    db = (a.eq(zero) & (b < zero).logical_not()).where(zero, ret * (a.log2() * _const_like(a, _LN2)))
    return ctx * da, ctx * db


def _reduce_mul_grad(ctx: UOp, ret: UOp, x: UOp) -> tuple[UOp]:
    # d prod / d x_i is the product of the others: ret / x_i without zeros, else the product of the nonzero elements at
    # a lone zero and 0 everywhere when two or more are zero (ret / x_i would be 0 / 0)
    axes = ret.arg[1]
    zero, one = _const_like(x, 0.0), _const_like(x, 1.0)
    is_zero = x.eq(zero)
    nonzero_prod = is_zero.where(one, x).reduce_axis(Ops.MUL, axes).expand(x.shape)
    zeros = is_zero.where(one, zero).reduce_axis(Ops.ADD, axes).expand(x.shape)
    others = zeros.eq(zero).where(nonzero_prod * is_zero.where(one, x).reciprocal(),
                                  (zeros.eq(one) & is_zero).where(nonzero_prod, zero))
    return (ctx.expand(x.shape) * others,)


pm_gradient = PatternMatcher([
    # a cast to an int or bool is a step function: no gradient (as torch, where integer tensors carry none)
    (UPat(Ops.CAST, src=(UPat.var("x"),), name="ret"),
     lambda ctx, ret, x: (ctx.cast(x.dtype) if dtypes.is_float(x.dtype) and dtypes.is_float(ret.dtype) else None,)),
    (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
    (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx * (ret + ret).reciprocal(),)),
    (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * _const_like(ret, _LN2),)),
    (UPat(Ops.LOG2, src=(UPat.var("x"),)), lambda ctx, x: (ctx * (x * _const_like(x, _LN2)).reciprocal(),)),
    (UPat(Ops.SIN, src=(UPat.var("x"),)),
     lambda ctx, x: (ctx * (_const_like(x, math.pi / 2) + -x).sin(),)),
    (UPat(Ops.NEG), lambda ctx: (-ctx,)),
    # a step function: no gradient at all (a zero would meet an inf below it: x // 0 gave NaN gradients, torch's are 0)
    (UPat(Ops.TRUNC), lambda ctx: (None,)),
    (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
    (UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))), lambda ctx, a, b: (ctx * b, ctx * a)),
    (UPat(Ops.FDIV, src=(UPat.var("a"), UPat.var("b"))),
     lambda ctx, a, b: (ctx / b, -ctx * a / (b * b))),
    (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b")), name="ret"), _max_grad),
    (UPat(Ops.POW, src=(UPat.var("a"), UPat.var("b")), name="ret"), _pow_grad),
    (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("b"))),
     lambda ctx, c, a, b: (None, c.where(ctx, _const_like(a, 0.0)), c.where(_const_like(b, 0.0), ctx))),
    (UPat(Ops.MOD, dtype=dtypes.floats, src=(UPat.var("a"), UPat.var("b"))),  # C's fmod: a - trunc(a / b) * b
     lambda ctx, a, b: (ctx, -ctx * (a / b).trunc())),
    (UPat(GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST},
          name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
    # reductions
    (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x"),), name="ret"),
     lambda ctx, ret, x: (ctx.expand(x.shape),) if ret.arg[0] is Ops.ADD else
     _reduce_max_grad(ctx, ret, x) if ret.arg[0] is Ops.MAX else _reduce_mul_grad(ctx, ret, x)),
    # movement
    (UPat(Ops.RESHAPE, src=(UPat.var("x"),)), lambda ctx, x: (ctx.reshape(x.shape),)),
    (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(_permute_back(ret.arg)),)),
    (UPat(Ops.EXPAND, src=(UPat.var("x"),)), lambda ctx, x: (_unexpand(ctx, x.shape),)),
    (UPat(Ops.PAD, name="ret"),
     lambda ctx, ret: (ctx.shrink(tuple((b, s - a) for (b, a), s in zip(ret.arg, ret.shape))),)),
    (UPat(Ops.SHRINK, src=(UPat.var("x"),), name="ret"),
     lambda ctx, ret, x: (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, x.shape))),)),
    (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
    # tensor-level
    (UPat((Ops.CONTIGUOUS,)), lambda ctx: (ctx,)),
    (UPat(Ops.COPY, src=(UPat.var("x"), UPat(Ops.DEVICE))), lambda ctx, x: (ctx.copy_to_device(x.device), None)),
    (UPat(Ops.DETACH), lambda ctx: (None,)),
    # multi-device: a shard's gradient is that shard of the gradient. Replicated parts are copies of one value (the
    # first part stands for it): a gradient for each would count the value once per device
    (UPat(Ops.MSTACK, name="ret"), lambda ctx, ret: tuple(ctx.mselect(i, ret.arg) if ret.arg is not None or i == 0
                                                          else None for i in range(len(ret.src)))),
    (UPat(Ops.MSELECT, src=(UPat.var("x"),), name="ret"), lambda ctx, ret, x: (_mselect_grad(ctx, ret, x),)),
])


def _mselect_grad(ctx: UOp, ret: UOp, x: UOp) -> UOp:
    """The gradient of part i of a multi-device value: ctx in part i; in the others zeros (ctx is one shard), or copies
    of ctx (ctx is the whole value: every part of a replicated value holds all of it)."""
    i, axis = ret.arg
    assert isinstance(x.device, tuple)
    other = (lambda d: ctx.copy_to_device(d)) if axis is None else \
        (lambda d: UOp.const(ctx.dtype, 0.0, d).reshape((1,) * ctx.ndim).expand(ctx.shape))
    return UOp.mstack([ctx if j == i else other(d) for j, d in enumerate(x.device)], axis)


def gradient(root: UOp, targets: list[UOp], root_grad: UOp) -> dict[UOp, UOp]:
    """d(root)/d(target) for each target reachable from root, given the gradient of root (its shape). A target that
    root uses only through ops without a gradient (comparisons, integer ops) gets zeros, as in PyTorch; targets that
    root does not use (or only through DETACH) are left out."""
    # only the part of the graph between root and the targets carries gradients
    on_path: set[UOp] = set(targets)
    order = root.toposort(gate=lambda u: u.op is not Ops.DETACH)
    for u in order:
        if any(s in on_path for s in u.src) and u.op is not Ops.DETACH:
            on_path.add(u)
    grads: dict[UOp, UOp] = {root: root_grad}
    for u in reversed(order):
        if (g := grads.get(u)) is None or not u.src or u in targets and not any(s in on_path for s in u.src):
            continue
        if not any(s in on_path for s in u.src):
            continue
        src_grads = pm_gradient.rewrite(u, ctx=g)
        if src_grads is None:
            raise NotImplementedError(f"gradient: no rule for {u.op}")
        for s, sg in zip(u.src, src_grads):
            if sg is None or s not in on_path:
                continue
            grads[s] = sg if s not in grads else grads[s] + sg
    # (a multi-device target with no gradient is left out: its zeros would need its sharding)
    reached = set(order)
    zeros = {t: _const_like(t, 0) for t in targets
             if t not in grads and t in reached and not isinstance(t.device, tuple)}
    return {t: grads[t] if t in grads else zeros[t] for t in targets if t in grads or t in zeros}
