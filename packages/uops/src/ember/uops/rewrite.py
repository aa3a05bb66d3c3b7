"""Pattern matching on UOps: `UPat`, `PatternMatcher` and `graph_rewrite`, the one graph-walking engine."""

from __future__ import annotations

import functools
import inspect
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ember.uops.dtype import DType
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.ops import UOp


class UPat:
    """A pattern over UOps.

    `op`/`dtype`: one or a collection (None: any). `arg`: equality (None: any). `name`: bind the match to this name;
    a name bound twice must bind the same UOp. `src`: None (any), a tuple (in order, same length unless
    `allow_any_len`), a list (in any order: commutative), or a single UPat (every src matches it).
    """

    __slots__ = ("op", "dtype", "arg", "name", "src", "allow_any_len", "_repeat", "_min_len", "_src_ops")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: UPat | tuple[UPat, ...] | list[UPat] | None = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False):
        self.op = None if op is None else frozenset([op]) if isinstance(op, Ops) else frozenset(op)
        self.dtype = None if dtype is None else frozenset([dtype]) if isinstance(dtype, DType) else frozenset(dtype)
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
        self._repeat: UPat | None = src if isinstance(src, UPat) else None
        if src is None or isinstance(src, UPat):
            self.src: list[tuple[UPat, ...]] | None = None
        elif isinstance(src, list):
            self.src = [tuple(p) for p in itertools.permutations(src)]
            self.src = list(dict.fromkeys(self.src))  # identical permutations (x op x) once
        elif isinstance(src, tuple):
            self.src = [src]
        else:
            raise TypeError(f"UPat: src must be None, a UPat, a tuple or a list of UPats, got {type(src).__name__}")
        self._min_len = len(self.src[0]) if self.src else 0
        # for each order of the sources: (position, allowed ops) of those with an op, checked before any matching
        self._src_ops = [tuple((i, p.op) for i, p in enumerate(pats) if p.op is not None) for pats in self.src or ()]

    # *** constructors ***
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any UOp, bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any CONST, bound to `name`."""
        return UPat(Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        """A CONST with exactly this value."""
        return UPat(Ops.CONST, dtype, arg=value)

    def named(self, name: str) -> UPat:
        ret = UPat.__new__(UPat)
        for k in UPat.__slots__:
            setattr(ret, k, getattr(self, k))
        ret.name = name
        return ret

    def alu(self, op: Ops, *srcs: Any) -> UPat:
        operands = [self, *(s if isinstance(s, UPat) else UPat.const(None, s) for s in srcs)]
        return UPat(op, src=operands if op in GroupOp.Commutative else tuple(operands))

    def __add__(self, x: Any) -> UPat: return self.alu(Ops.ADD, x)
    def __radd__(self, x: Any) -> UPat: return self.alu(Ops.ADD, x)
    def __mul__(self, x: Any) -> UPat: return self.alu(Ops.MUL, x)
    def __rmul__(self, x: Any) -> UPat: return self.alu(Ops.MUL, x)
    def __floordiv__(self, x: Any) -> UPat: return self.alu(Ops.IDIV, x)
    def __mod__(self, x: Any) -> UPat: return self.alu(Ops.MOD, x)
    def __truediv__(self, x: Any) -> UPat: return self.alu(Ops.FDIV, x)
    def __and__(self, x: Any) -> UPat: return self.alu(Ops.AND, x)
    def __or__(self, x: Any) -> UPat: return self.alu(Ops.OR, x)
    def __xor__(self, x: Any) -> UPat: return self.alu(Ops.XOR, x)
    def __lt__(self, x: Any) -> UPat: return self.alu(Ops.CMPLT, x)
    def eq(self, x: Any) -> UPat: return self.alu(Ops.CMPEQ, x)
    def ne(self, x: Any) -> UPat: return self.alu(Ops.CMPNE, x)
    def maximum(self, x: Any) -> UPat: return self.alu(Ops.MAX, x)
    def where(self, x: Any, y: Any) -> UPat: return self.alu(Ops.WHERE, x, y)
    def cast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.CAST, dtype, (self,))

    def __repr__(self) -> str:
        fields = [f"{sorted(o.name for o in self.op)}" if self.op else "any"]
        if self.name:
            fields.append(f"name={self.name!r}")
        if self.arg is not None:
            fields.append(f"arg={self.arg!r}")
        if self.src:
            fields.append(f"src={self.src[0]}{'*' if len(self.src) > 1 else ''}")
        return f"UPat({', '.join(fields)})"

    # *** matching ***
    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way this pattern matches `uop`, each a dict of bindings extending `store` (which it may modify)."""
        if (self.op is not None and uop.op not in self.op) or \
           (self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype) or \
           (self.arg is not None and self.arg != uop.arg) or \
           (self.name is not None and store.setdefault(self.name, uop) is not uop):
            return []
        if (rep := self._repeat) is not None:
            if rep.op is not None:
                for s in uop.src:  # (most matches fail at a source's op: look at those first, as below)
                    if s.op not in rep.op:
                        return []
            stores = [store]
            for s in uop.src:
                # (one binding so far, nearly always: its matches as they are, no list built around them)
                stores = rep.match(s, stores[0]) if len(stores) == 1 else \
                    [m for st in stores for m in rep.match(s, st)]
                if not stores:
                    return []
            return stores
        if self.src is None:
            return [store]
        n = len(uop.src)
        if n < self._min_len or (n != self._min_len and not self.allow_any_len):
            return []
        ret: list[dict[str, UOp]] = []
        for pats, src_ops in zip(self.src, self._src_ops):
            # (most matches fail at a source's op: look at those first, before any bindings are copied)
            for i, ops in src_ops:
                if uop.src[i].op not in ops:
                    break
            else:
                stores = [store.copy()] if len(self.src) > 1 else [store]
                for p, s in zip(pats, uop.src):
                    stores = p.match(s, stores[0]) if len(stores) == 1 else \
                        [m for st in stores for m in p.match(s, st)]
                    if not stores:
                        break
                ret.extend(stores)
        return ret


RuleFn = Callable[..., "UOp | None"]
_op_of = operator.attrgetter("op")


@functools.cache
def _takes_ctx(fn: RuleFn) -> bool:  # (inspect.signature is slow, and matchers are added together often)
    return "ctx" in inspect.signature(fn).parameters


class PatternMatcher:
    """An ordered table of (UPat, function) rules, indexed by op. The first rule whose function returns a UOp other
    than its input wins. Functions take the bound names as keyword arguments, plus `ctx` if they declare it."""

    def __init__(self, rules: Sequence[tuple[UPat, RuleFn]]):
        self.rules = list(rules)
        self.pdict: dict[Ops, list[tuple[UPat, RuleFn, bool]]] = {}
        for pat, fn in self.rules:
            if not isinstance(pat, UPat) or not callable(fn):
                raise TypeError(f"PatternMatcher: each rule is (UPat, callable), got ({pat!r}, {fn!r})")
            entry = (pat, fn, _takes_ctx(fn))
            for op in pat.op if pat.op is not None else Ops:
                self.pdict.setdefault(op, []).append(entry)
        # the rules that may match a node, by its op, its dtype and its sources' ops (most rules fail at a source's op
        # or the dtype: a node tries only those that fit, with no call of UPat.match for the others); filled as nodes
        # come
        self._candidates: dict[tuple[Any, ...], list[tuple[UPat, RuleFn, bool]]] = {}

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The result of the first rule that rewrites `uop`, or None."""
        if uop.op not in self.pdict:
            return None
        key = (uop.op, uop.dtype, *map(_op_of, uop.src))
        if (rules := self._candidates.get(key)) is None:
            rules = self._candidates[key] = [e for e in self.pdict[uop.op] if _may_match(e[0], uop.dtype, key[2:])]
        for pat, fn, has_ctx in rules:
            for match in pat.match(uop, {}):
                ret = fn(**match, ctx=ctx) if has_ctx else fn(**match)
                if ret is not None and ret is not uop:
                    return ret
        return None


def _may_match(pat: UPat, dtype: DType, src_ops: tuple[Ops, ...]) -> bool:
    """False when `pat` cannot match a node (of one of its ops) of `dtype` whose sources have the ops `src_ops`, as
    UPat.match checks them first (the dtype, the number of sources, the op of each, in some order of a commutative
    pattern)."""
    if pat.dtype is not None and dtype not in pat.dtype and dtype.scalar() not in pat.dtype:
        return False
    if (rep := pat._repeat) is not None:
        return rep.op is None or all(op in rep.op for op in src_ops)
    if pat.src is None:
        return True
    n = len(src_ops)
    if n < pat._min_len or (n != pat._min_len and not pat.allow_any_len):
        return False
    return any(all(src_ops[i] in ops for i, ops in checks) for checks in pat._src_ops)


class RewriteLoopError(RuntimeError):
    """graph_rewrite did not reach a fixed point: a rule (or a set of rules) keeps rewriting."""


REWRITE_LIMIT = 1_000_000  # rewrites in one graph_rewrite call before it is declared a loop


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  limit: int = REWRITE_LIMIT, memo: dict[UOp, UOp] | None = None) -> UOp:
    """Rewrite the graph under `sink` with `pm` to a fixed point; each node is visited once per result.

    Default order: a node's sources are rewritten before the node. `bottom_up=True`: a node is rewritten (to a fixed
    point) before its sources are visited. Every replacement is itself rewritten again, so the result has no node
    that a rule still matches. A rule that rewrites back and forth raises RewriteLoopError.
    `memo`: the results of earlier calls with the same `pm`, order and no ctx, read and extended here (a node's
    result depends on its own graph only): shared subgraphs are rewritten once across calls.
    """
    replace: dict[UOp, UOp] = {} if memo is None else memo
    on_stack: set[UOp] = set()  # nodes whose result is still being computed
    stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
    rewrites = 0
    # (the methods called once or twice per node, looked up once)
    push, pop, result, rewrite = stack.append, stack.pop, replace.__getitem__, pm.rewrite
    while stack:
        n, stage, new_n = pop()
        if n in replace:
            continue
        if stage == 0:
            if bottom_up:
                seen = {new_n}
                while (r := rewrite(new_n, ctx)) is not None:
                    if r in seen or (rewrites := rewrites + 1) > limit:
                        _loop_error(name, new_n, r, rewrites > limit, limit)
                    seen.add(new_n := r)
                if new_n is not n and new_n in replace:
                    replace[n] = replace[new_n]
                    continue
            push((n, 1, new_n))
            waiting = len(stack)
            for s in reversed(new_n.src):  # (a loop, not a generator: this runs once per node)
                if s not in replace:
                    push((s, 0, s))
            if len(stack) != waiting:
                on_stack.add(n)
                continue
            pop()  # every source is done (a leaf, a shared node, a rule's result): on to stage 1 at once
            stage = 1
        if stage == 1:
            src = tuple(map(result, new_n.src))
            if src != new_n.src:  # (UOps compare by identity: this is `any(a is not b)`, in C)
                r: UOp | None = UOp(new_n.op, new_n.dtype, src, new_n.arg, new_n.tag)
            elif not bottom_up:
                r = rewrite(new_n, ctx)
            else:
                r = None
            if r is None or r is new_n:
                replace[n] = new_n
                on_stack.discard(n)
            else:
                on_stack.add(n)
                if r in on_stack or (rewrites := rewrites + 1) > limit:
                    _loop_error(name, new_n, r, rewrites > limit, limit)
                push((n, 2, r))
                push((r, 0, r))
        else:
            replace[n] = replace[new_n]
            on_stack.discard(n)
    return replace[sink]


def _loop_error(name: str | None, frm: UOp, to: UOp, over_limit: bool, limit: int) -> None:
    what = f"more than {limit} rewrites" if over_limit else "a rule rewrote a node back to an earlier form"
    raise RewriteLoopError(f"graph_rewrite{f' ({name})' if name else ''}: no fixed point, {what}; "
                           f"last rewrite: {frm.op} -> {to.op}")
