"""Symbolic simplification: constant folding with dtype semantics, identities, and range-analysis folding of // and %.

`exec_alu` is the reference semantics of every ALU op (C-style integer division and modulo, wrapping ints, IEEE
floats); constant folding and the PYTHON device both use it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from ember.uops.dtype import DType, dtypes, truncate
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.ops import UOp
from ember.uops.rewrite import PatternMatcher, UPat

# *** reference semantics ***


def _cdiv(a: int, b: int) -> int | None:
    if b == 0:
        return None
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _cmod(a: int, b: int) -> int | None:
    return None if (q := _cdiv(a, b)) is None else a - b * q


def _fdiv(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _log2(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log2(x)


def _exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _sin(x: float) -> float:
    return math.nan if math.isinf(x) else math.sin(x)


def _max(a: Any, b: Any) -> Any:
    return a if isinstance(a, float) and math.isnan(a) else b if isinstance(b, float) and math.isnan(b) else max(a, b)


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a**b if b >= 0 else None
    try:
        r = math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan
    return r


def _trunc(x: Any) -> Any:
    return x if isinstance(x, int) or math.isinf(x) or math.isnan(x) else float(math.trunc(x))


_FLOAT_OPS: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.TRUNC: _trunc,
    Ops.SQRT: lambda x: math.nan if math.isnan(x) or x < 0 else math.sqrt(x),
    Ops.RECIPROCAL: lambda x: _fdiv(1.0, x), Ops.FDIV: _fdiv, Ops.POW: _pow,
    Ops.MOD: lambda a, b: math.nan if b == 0 or math.isinf(a) else math.fmod(a, b),
}
_OPS: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: operator.neg, Ops.TRUNC: _trunc, Ops.ADD: operator.add, Ops.MUL: operator.mul,
    Ops.IDIV: _cdiv, Ops.MOD: _cmod, Ops.MAX: _max, Ops.POW: _pow,
    Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq,
    Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor,
    Ops.SHL: lambda a, b: a << b if b >= 0 else None, Ops.SHR: lambda a, b: a >> b if b >= 0 else None,
    Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c,
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    """The value of `op` on Python `operands` as computed in `dtype` (the result's dtype), or None when the result is
    undefined (integer division by zero, a float that does not fit an int cast)."""
    if op is Ops.CAST:
        x = operands[0]
        if dtypes.is_int(dtype) and isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return None
            x = math.trunc(x)
        return truncate(dtype, x)
    is_float = dtypes.is_float(dtype) or (op in GroupOp.Comparison and any(isinstance(v, float) for v in operands))
    fn = _FLOAT_OPS.get(op) if is_float else None
    if fn is None and (fn := _OPS.get(op)) is None:
        raise NotImplementedError(f"exec_alu: {op} is not defined for {dtype!r}")
    if is_float and op not in GroupOp.Comparison:
        operands = tuple(float(v) for v in operands) if op is not Ops.WHERE else operands
    ret = fn(*operands)
    return None if ret is None else truncate(dtype, ret)


# *** rule helpers ***
_INTS = tuple(dtypes.ints)
_INTS_BOOL = _INTS + (dtypes.bool,)


def fold_const(a: UOp) -> UOp | None:
    if a.dtype.count != 1:
        return None
    v = exec_alu(a.op, a.dtype, tuple(s.arg for s in a.src))
    return None if v is None else UOp.const(a.dtype, v)


def fold_known_value(x: UOp) -> UOp | None:
    # range analysis pinned an int/bool expression to one value
    return UOp.const(x.dtype, x.vmin) if x.vmin == x.vmax else None


def linear_terms(x: UOp) -> tuple[list[tuple[UOp, int]], int]:
    """x as sum(base * coeff) + const, looking through ADD and multiplication by constants (`x*4 + y + 3` ->
    ([(x, 4), (y, 1)], 3))."""
    terms: list[tuple[UOp, int]] = []
    const = 0
    stack: list[tuple[UOp, int]] = [(x, 1)]
    while stack:
        u, m = stack.pop()
        if u.op is Ops.CONST:
            const += u.arg * m
        elif u.op is Ops.ADD:
            stack.extend((s, m) for s in reversed(u.src))
        elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
            stack.append((u.src[0], m * u.src[1].arg))
        else:
            terms.append((u, m))
    return terms, const


def _build_sum(dtype: DType, terms: list[tuple[UOp, int]], const: int) -> UOp:
    ret: UOp | None = None
    for base, m in terms:
        if m == 0:
            continue
        t = base if m == 1 else base * m
        ret = t if ret is None else ret + t
    if ret is None:
        return UOp.const(dtype, const)
    return ret + const if const != 0 else ret


def _count_above(u: UOp, bases: set[UOp], limit: int) -> int:
    """How many nodes of u's graph lie above `bases` (u's gated toposort), counted up to limit + 1 at most."""
    if u in bases:
        return 0
    seen, stack = {u}, [u]
    while stack:
        for s in stack.pop().src:
            if s not in seen and s not in bases:
                if len(seen) > limit:
                    return len(seen)
                seen.add(s)
                stack.append(s)
    return len(seen)


def _not_larger(new: UOp, old: UOp, bases: set[UOp]) -> UOp | None:
    # count only what lies above the terms' bases: the graphs below them are shared (and may be deep); the new graph
    # only until it is larger
    limit = _count_above(old, bases, 1 << 62)
    return new if _count_above(new, bases, limit) <= limit else None


def fold_divmod(d: UOp, x: UOp, c: UOp) -> UOp | None:
    """x // c and x % c for x >= 0 and c > 0: write x = c*q + r and fold when the remainder r is known in range."""
    if c.arg <= 0 or x.vmin < 0:
        return None
    terms, k = linear_terms(x)
    quot = [(b, m // c.arg) for b, m in terms if m // c.arg != 0]  # m = c*(m//c) + m%c for every term
    rem = [(b, m % c.arg) for b, m in terms if m % c.arg != 0]
    for rem_k in (k % c.arg, k % c.arg - c.arg):
        r = _build_sum(x.dtype, rem, rem_k)
        if 0 <= r.vmin and r.vmax < c.arg:  # r in [0, c): it is x % c, and x // c is q alone
            ret = r if d.op is Ops.MOD else _build_sum(x.dtype, quot, (k - rem_k) // c.arg)
            return _not_larger(ret, d, {b for b, _ in terms})
    r = _build_sum(x.dtype, rem, k % c.arg)
    if r.vmin < 0 or (not quot and k % c.arg != 0):
        return None  # nothing split off (only a smaller constant: (a+3)%2 stays, so (x//c)*c + x%c still pairs up)
    if d.op is Ops.MOD:
        return _not_larger(r % c.arg, d, {b for b, _ in terms})
    return _not_larger(_build_sum(x.dtype, quot, k // c.arg) + r // c.arg, d, {b for b, _ in terms})


def fold_nested_div(d: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    # (x // c1) // c2 -> x // (c1 * c2) for x >= 0 and positive divisors (unless x // c1 is shared: then it grows)
    return _not_larger(x // (c1.arg * c2.arg), d, {x}) if x.vmin >= 0 and c1.arg > 0 and c2.arg > 0 else None


def fold_mod_of_div(d: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x // c1) % c2 drops the terms of x that are multiples of c1*c2: x = c1*c2*k + r with r >= 0 gives
    (c2*k + r//c1) % c2 = (r//c1) % c2. A reshape that splits a merged index makes this: ((b*256 + i)//32) % 8 is
    (i//32) % 8, where x // c1 alone was not folded (b*8 + i//32 is not smaller than the shared (b*256 + i)//32)."""
    if x.vmin < 0 or c1.arg <= 0 or c2.arg <= 0:
        return None
    terms, k = linear_terms(x)
    step = c1.arg * c2.arg
    rest = [(b, m) for b, m in terms if m % step != 0]
    if len(rest) == len(terms) and 0 <= k < step:
        return None
    r = _build_sum(x.dtype, rest, k % step)
    return None if r.vmin < 0 else _not_larger((r // c1.arg) % c2.arg, d, {b for b, _ in terms})


def fold_nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    # (x % c1) % c2 -> x % c2 when c2 divides c1, x >= 0
    return x % c2.arg if x.vmin >= 0 and c2.arg > 0 and c1.arg > 0 and c1.arg % c2.arg == 0 else None


def recombine_divmod(a: UOp) -> UOp | None:
    """Undo the index split of a reshape: (x//c)*c*m + (x%c)*m -> x*m and ((x//c)%b)*c*m + (x%c)*m -> (x%(c*b))*m."""
    if not any(s.op is Ops.MOD or (s.op is Ops.MUL and s.src[0].op is Ops.MOD) for s in a.src):
        return None  # cheap reject: the modulo term of the pair is added last when a reshape builds the index
    terms, k = linear_terms(a)
    mods = {(b.src[0], b.src[1].arg): i for i, (b, _) in enumerate(terms)
            if b.op is Ops.MOD and b.src[1].op is Ops.CONST and b.src[1].arg > 0}
    if not mods:
        return None
    for i, (b, m) in enumerate(terms):
        if b.op is Ops.IDIV and b.src[1].op is Ops.CONST:  # (x//c)*c*m
            x, c = b.src[0], b.src[1].arg
            new = x
        elif b.op is Ops.MOD and b.src[0].op is Ops.IDIV and b.src[0].src[1].op is Ops.CONST and \
                b.src[1].op is Ops.CONST:  # ((x//c)%n)*c*m
            x, c = b.src[0].src[0], b.src[0].src[1].arg
            new = x % (c * b.src[1].arg)
        else:
            continue
        if (j := mods.get((x, c))) is None and b.op is Ops.IDIV:
            # (x//(a*n))*n*m + ((x//a)%n)*m -> (x//a)*m: the inner (x//a)//n had been folded to x//(a*n) already
            j = next((n for (y, nn), n in mods.items() if y.op is Ops.IDIV and y.src[0] is x and
                      y.src[1].op is Ops.CONST and y.src[1].arg * nn == c), None)
            if j is not None:
                x, c = terms[j][0].src[0], terms[j][0].src[1].arg
                new = x
        if j is None or x.vmin < 0 or m != c * terms[j][1]:
            continue
        rest = [t for n, t in enumerate(terms) if n not in (i, j)] + [(new, terms[j][1])]
        bases = {t for n, (t, _) in enumerate(terms) if n not in (i, j)} | {x}
        return _not_larger(_build_sum(a.dtype, rest, k), a, bases)
    return None


def combine_terms(x: UOp, c1: UOp, c2: UOp) -> UOp:
    return x * (c1.arg + c2.arg)


def fold_max(a: UOp, x: UOp, y: UOp) -> UOp | None:
    # max(x, y) is x when x >= y everywhere
    if x.vmin >= y.vmax:
        return x
    return y if y.vmin >= x.vmax else None


def fold_where_same(c: UOp, x: UOp) -> UOp:
    return x


def canonicalize_const_right(a: UOp, c: UOp, x: UOp) -> UOp | None:
    return None if x.op is Ops.CONST else UOp(a.op, a.dtype, (x, c))


ivar = UPat.var("x", dtype=_INTS)
icst = UPat.cvar("c", dtype=_INTS)
bvar = UPat.var("x", dtype=dtypes.bool)

symbolic_simple = PatternMatcher([
    # constant folding
    (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="a"), fold_const),
    (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="a"),
     lambda a, c: None if (v := exec_alu(Ops.CAST, a.dtype, (c.arg,))) is None else UOp.const(a.dtype, v)),
    # constants on the right of commutative ops
    (UPat(GroupOp.Commutative, src=(UPat.cvar("c"), UPat.var("x")), name="a"), canonicalize_const_right),
    # identities
    (UPat.var("x") * 1, lambda x: x),
    (ivar + 0, lambda x: x),
    (ivar * 0, lambda x: x.const_like(0)),
    (ivar // 1, lambda x: x),
    (ivar % 1, lambda x: x.const_like(0)),
    (bvar & True, lambda x: x), (bvar & False, lambda x: x.const_like(False)),
    (bvar | False, lambda x: x), (bvar | True, lambda x: x.const_like(True)),
    (bvar ^ False, lambda x: x),
    (UPat(GroupOp.Idempotent, src=(UPat.var("x"), UPat.var("x")), dtype=_INTS_BOOL), lambda x: x),
    (UPat(Ops.CMPNE, src=(ivar, ivar)), lambda x: UOp.const(dtypes.bool, False)),
    (UPat(Ops.CMPEQ, src=(ivar, ivar)), lambda x: UOp.const(dtypes.bool, True)),
    (UPat(Ops.CMPLT, src=(ivar, ivar)), lambda x: UOp.const(dtypes.bool, False)),
    (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("x"), UPat.var("x"))), fold_where_same),
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), UPat.var("x"), UPat.var())), lambda x: x),
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), UPat.var(), UPat.var("x"))), lambda x: x),
    # associativity of constants: (x op c1) op c2 -> x op (c1 op c2)
    ((ivar + UPat.cvar("c1")) + UPat.cvar("c2"), lambda x, c1, c2: x + (c1.arg + c2.arg)),
    ((ivar * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),
])

# division and modulo by constants, on non-negative numerators (range analysis of the numerator)
pm_divmod = PatternMatcher([
    (UPat(Ops.MOD, src=(ivar // UPat.cvar("c1"), UPat.cvar("c2")), name="d"), fold_mod_of_div),
    (UPat((Ops.IDIV, Ops.MOD), src=(ivar, icst), name="d"), fold_divmod),
    (UPat(Ops.IDIV, src=(ivar // UPat.cvar("c1"), UPat.cvar("c2")), name="d"), fold_nested_div),
    ((ivar % UPat.cvar("c1")) % UPat.cvar("c2"), fold_nested_mod),
])

symbolic = symbolic_simple + PatternMatcher([
    # range analysis: an int/bool expression with one possible value is that constant
    (UPat(GroupOp.ALU, dtype=_INTS_BOOL, name="x"), fold_known_value),
    (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y")), dtype=_INTS, name="a"), fold_max),
    # constants move to the outside of sums: (x + c) + y -> (x + y) + c
    ((ivar + UPat.cvar("c")) + UPat.var("y"),
     lambda x, c, y: None if y.op is Ops.CONST else (x + y) + c),
    # combine like terms
    (ivar * UPat.cvar("c1") + ivar * UPat.cvar("c2"), combine_terms),
    (ivar * UPat.cvar("c1") + ivar, lambda x, c1: x * (c1.arg + 1)),
    ((UPat.var("y") + ivar * UPat.cvar("c1")) + ivar * UPat.cvar("c2"),
     lambda y, x, c1, c2: y + x * (c1.arg + c2.arg)),
    ((UPat.var("y") + ivar) + ivar * UPat.cvar("c1"), lambda y, x, c1: y + x * (c1.arg + 1)),
    ((UPat.var("y") + ivar * UPat.cvar("c1")) + ivar, lambda y, x, c1: y + x * (c1.arg + 1)),
    (UPat(Ops.ADD, dtype=_INTS, name="a"), recombine_divmod),
]) + pm_divmod


# *** gated loads ***
def gate_loads(x: UOp, dep: UOp, valid: UOp) -> UOp:
    """x with every INDEX whose address depends on `dep` gated by `valid`, a load's or a store's (a gated address is
    never touched)."""
    gated = {u: u.replace(src=(*u.src[:2], (u.src[2] & valid) if len(u.src) > 2 else valid))
             for u in x.toposort() if u.op is Ops.INDEX and len(u.src) >= 2 and dep in u.src[1].toposort()}
    return x.substitute(gated) if gated else x
