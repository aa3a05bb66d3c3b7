"""The UOp IR: the immutable, hash-consed `UOp` with its builders, and `AxisType` (the op codes are in `opcodes`, the
operators UOp shares with Tensor in `mixin`)."""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import Enum, auto
from typing import Any

from ember.uops import shape as shp
from ember.uops.dtype import DType, PtrDType, dtypes, truncate
from ember.uops.mixin import ElementwiseMixin
from ember.uops.opcodes import GroupOp, Ops
from ember.uops.shape import Shape, sint


class AxisType(Enum):
    """How codegen treats a RANGE: output axes are GLOBAL (LOOP once split off for threads), reduce axes REDUCE; opts
    split off UPCAST (output) and UNROLL (reduce) inner ranges of a constant size, THREAD ranges go to CPU cores, LOCAL
    and GROUP_REDUCE ranges to the threads of a GPU workgroup, WARP to the lanes of a tensor-core instruction."""

    GLOBAL = auto()
    LOCAL = auto()
    WARP = auto()  # the lanes of a warp (wavefront) running one tensor-core instruction together: innermost thread ids
    LOOP = auto()
    THREAD = auto()
    REDUCE = auto()
    GROUP_REDUCE = auto()
    UPCAST = auto()
    UNROLL = auto()

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"


# *** hash-consing ***
class UOpMetaClass(type):
    ucache: dict[tuple[Any, ...], weakref.ReferenceType[UOp]] = {}

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> UOp:
        # floats compare equal across the sign of zero: keep -0.0 and 0.0 apart in the key
        key = (op, dtype, src, arg, tag)
        if type(arg) is float:
            key += (math.copysign(1, arg),)
        if (ref := UOpMetaClass.ucache.get(key)) is not None and (ret := ref()) is not None:
            return ret
        ret = super().__call__(op, dtype, src, arg, tag)
        UOpMetaClass.ucache[key] = weakref.ref(ret)
        return ret


_NOT_COMPUTED: Any = object()
_unique_ids = itertools.count()  # UOp.unique()'s: one id space for every package's buffers
# simplify()'s rewrites of every node seen, by table (symbolic, symbolic_simple): the index expressions of a schedule
# share most of their terms, and each simplify() call walked them again (nine visits in ten were repeats)
_simplify_memos: tuple[dict[UOp, UOp], dict[UOp, UOp]] = ({}, {})
_SIMPLIFY_MEMO_MAX = 1 << 16
_SELF: Any = object()


class UOp(ElementwiseMixin, metaclass=UOpMetaClass):
    """An immutable node of the IR. Building the same (op, dtype, src, arg, tag) twice returns the same object, so
    `==` and `hash` are identity and structural at once."""

    __slots__ = ("op", "dtype", "src", "arg", "tag", "_shape", "_mm", "_device", "_simple", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None):
        self.op, self.dtype, self.src, self.arg, self.tag = op, dtype, src, arg, tag
        self._shape: Any = _NOT_COMPUTED
        self._mm: Any = None
        self._device: Any = _NOT_COMPUTED
        self._simple: Any = None  # simplify()'s result (self: `_SELF`, no reference cycle)

    def __del__(self) -> None:
        try:
            key = (self.op, self.dtype, self.src, self.arg, self.tag)
            if type(self.arg) is float:
                key += (math.copysign(1, self.arg),)
            if (ref := UOpMetaClass.ucache.get(key)) is not None and ref() is self:
                del UOpMetaClass.ucache[key]
        except (AttributeError, TypeError):  # interpreter shutdown
            pass

    def __reduce__(self) -> tuple[Any, ...]:
        return UOp, (self.op, self.dtype, self.src, self.arg, self.tag)

    def __repr__(self) -> str:
        from ember.uops.render import render

        return render(self)

    def replace(self, **kwargs: Any) -> UOp:
        """This UOp with some of op/dtype/src/arg/tag replaced (itself if nothing changes)."""
        new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src),
               kwargs.pop("arg", self.arg), kwargs.pop("tag", self.tag))
        if kwargs:
            raise TypeError(f"replace: unknown fields {sorted(kwargs)}")
        # (spelled out, not all() over a zip: replace is on the hot path of every rewrite)
        if new[0] is self.op and new[1] is self.dtype and new[2] is self.src and new[3] is self.arg and \
                new[4] is self.tag:
            return self
        return UOp(*new)

    # *** graph walking ***
    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> list[UOp]:
        """Every node reachable from this one, each once, sources before users. `gate(u)` False stops the walk at u
        (u and what is only reachable through it are left out)."""
        if gate is not None and not gate(self):
            return []
        visited: set[UOp] = {self}
        order: list[UOp] = []
        # each entry: a node and the iterator over its sources not yet walked (one entry per node, not two per edge)
        stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
        while stack:
            u, srcs = stack[-1]
            for s in srcs:
                if s not in visited and (gate is None or gate(s)):
                    visited.add(s)
                    stack.append((s, iter(s.src)))
                    break
            else:
                stack.pop()
                order.append(u)
        return order

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """This graph with each key of `mapping` replaced by its value (a single pass: values are not rewritten)."""
        if not mapping:
            return self
        # the walk stops at the keys: what lies only below a replaced node is never rebuilt (replacing the stores at
        # the top of a big kernel walks the few nodes above them, not the kernel)
        if self in mapping:
            return mapping[self]
        new: dict[UOp, UOp] = {}
        stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]  # (as in toposort)
        while stack:
            u, srcs = stack[-1]
            for s in srcs:
                if s not in new:
                    if s not in mapping:
                        stack.append((s, iter(s.src)))
                        break
                    new[s] = mapping[s]
            else:
                stack.pop()
                src = tuple(map(new.__getitem__, u.src))
                new[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg, u.tag)  # (UOps compare by identity)
        return new[self]

    def simplify(self) -> UOp:
        """This expression rewritten by the symbolic rules to a fixed point; never a larger graph than itself."""
        from ember.uops.rewrite import graph_rewrite
        from ember.uops.symbolic import symbolic, symbolic_simple

        if self._simple is not None:  # (a node is immutable: its simplified form is computed once)
            return self if self._simple is _SELF else self._simple
        # local rules cannot see sharing: a fold that keeps a shared sub-expression alive may grow the whole graph;
        # then the plain folds alone (constants, identities) are kept, and failing those, the input
        ret, size = self, len(self.toposort())
        for pm, memo in zip((symbolic, symbolic_simple), _simplify_memos):
            if len(memo) > _SIMPLIFY_MEMO_MAX:
                memo.clear()
            if len((new := graph_rewrite(self, pm, name="simplify", memo=memo)).toposort()) <= size:
                ret = new
                break
        self._simple = _SELF if ret is self else ret
        return ret

    @property
    def size_of_graph(self) -> int:
        return len(self.toposort())

    # *** shape (tensor-level ops) ***
    @property
    def shape(self) -> Shape | None:
        """The tensor shape of this node, None for nodes that have none (index math, kernel-level ops)."""
        if self._shape is _NOT_COMPUTED:
            for u in self.toposort(gate=lambda u: u._shape is _NOT_COMPUTED) if _NOT_COMPUTED in \
                    [s._shape for s in self.src] else (self,):  # (a new node over known ones: no walk)
                u._shape = _infer_shape(u)
        return self._shape

    @property
    def ndim(self) -> int:
        if (s := self.shape) is None:
            raise ValueError(f"ndim: {self.op} has no shape")
        return len(s)

    @property
    def device(self) -> str | tuple[str, ...] | None:
        """The device of a tensor-level node: the arg of the DEVICE it was built on."""
        if self._device is _NOT_COMPUTED:
            for u in self.toposort(gate=lambda u: u._device is _NOT_COMPUTED) if _NOT_COMPUTED in \
                    [s._device for s in self.src] else (self,):  # (a new node over known ones: no walk)
                u._device = _infer_device(u)
        return self._device

    # *** range analysis ***
    @property
    def vmin(self) -> int | float | bool:
        """A lower bound of every value this (integer or bool) expression can take."""
        return self._min_max[0]

    @property
    def vmax(self) -> int | float | bool:
        """An upper bound of every value this (integer or bool) expression can take."""
        return self._min_max[1]

    @property
    def _min_max(self) -> tuple[Any, Any]:
        if self._mm is None:
            if None in [s._mm for s in self.src]:
                for u in self.toposort(gate=lambda u: u._mm is None):
                    u._mm = _min_max(u)
            else:  # (a new node over analyzed ones, as a rewrite builds them: no walk)
                self._mm = _min_max(self)
        return self._mm

    def const_factor(self) -> int:
        """The largest integer known to divide this expression (for gcd folding)."""
        if self.op is Ops.CONST:
            return abs(int(self.arg))
        if self.op is Ops.ADD:
            return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
        if self.op is Ops.MUL:
            return self.src[0].const_factor() * self.src[1].const_factor() if self.src[1].op is Ops.CONST else (
                self.src[0].const_factor() if self.src[0].op is Ops.CONST else 1)
        return 1

    # *** evaluation ***
    def evaluate(self, var_vals: dict[UOp, Any] | None = None) -> Any:
        """The value of this expression with DEFINE_VAR/RANGE/SPECIAL nodes bound by `var_vals` (dtype semantics)."""
        from ember.uops.symbolic import exec_alu

        vals: dict[UOp, Any] = dict(var_vals or {})
        for u in self.toposort(gate=lambda u: u not in vals):
            if u.op is Ops.CONST:
                vals[u] = u.arg
            elif u.op is Ops.BIND:
                vals[u] = vals[u.src[1]]
            elif u.op in GroupOp.ALU or u.op is Ops.CAST:
                vals[u] = exec_alu(u.op, u.dtype, tuple(vals[s] for s in u.src))
            else:
                raise ValueError(f"evaluate: no value for {u.op.name} (pass it in var_vals)")
        return vals[self]

    # *** builders: buffers ***
    @staticmethod
    def unique() -> UOp:
        """A fresh UNIQUE, never returned before in this process: the identity of a new buffer, so that two buffers of
        the same dtype, device and size stay two nodes.

            buf = UOp(Ops.BUFFER, dtypes.float32, (UOp.unique(), UOp(Ops.DEVICE, arg="CPU")), 16)
        """
        return UOp(Ops.UNIQUE, arg=next(_unique_ids))

    # *** builders: values ***
    @staticmethod
    def const(dtype: DType, value: Any, device: str | None = None) -> UOp:
        """A constant of `dtype` (value converted with the dtype's semantics). With a device it is a 0-d tensor."""
        if isinstance(value, UOp):
            return value
        value = truncate(dtype, value) if not isinstance(dtype, PtrDType) else value
        return UOp(Ops.CONST, dtype, () if device is None else (UOp(Ops.DEVICE, arg=device),), value)

    @staticmethod
    def iota(n: int, dtype: DType, device: str | tuple[str, ...]) -> UOp:
        """The 1-d tensor 0, 1, ..., n-1 of an int dtype on `device`: no buffer, each kernel computes it from its
        index."""
        return UOp(Ops.IOTA, dtype, (UOp(Ops.DEVICE, arg=device),), n)

    def const_like(self, value: Any) -> UOp:
        """A constant of this node's dtype (on its device when it is a tensor)."""
        return UOp.const(self.dtype, value)

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer `name` with min_val <= name <= max_val."""
        if not (shp.is_int(min_val) and shp.is_int(max_val)) or min_val > max_val:
            raise ValueError(f"variable {name!r}: bounds must be ints with min <= max, got [{min_val}, {max_val}]")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

    def bind(self, value: int) -> UOp:
        """This variable bound to a value (BIND); its bounds are checked."""
        if self.op is not Ops.DEFINE_VAR:
            raise ValueError(f"bind: only a DEFINE_VAR can be bound, got {self.op}")
        name, lo, hi = self.arg
        if not shp.is_int(value) or not lo <= value <= hi:
            raise ValueError(f"bind: value {value!r} of variable {name!r} is outside [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))

    def unbind(self) -> tuple[UOp, int]:
        if self.op is not Ops.BIND:
            raise ValueError(f"unbind: not a BIND, got {self.op}")
        return self.src[0], self.src[1].arg

    @staticmethod
    def range(end: sint, axis_id: int, kind: Any = None) -> UOp:
        """A loop index 0 <= r < end; `axis_id` tells ranges apart, `kind` says how codegen treats it."""
        end_uop = UOp.const(dtypes.index, end) if shp.is_int(end) else end
        return UOp(Ops.RANGE, dtypes.index, (end_uop,), (axis_id, kind))

    @staticmethod
    def sink(*srcs: UOp, arg: Any = None) -> UOp:
        return UOp(Ops.SINK, dtypes.void, tuple(srcs), arg)

    # *** builders: ALU (the operators, `where`, `maximum`, `exp2`... come from ElementwiseMixin through these) ***
    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        """`op` applied to this node and `srcs`, with dtype checks (same dtypes; comparisons give bool)."""
        operands = (self, *srcs)
        base = operands[-1].dtype if op is Ops.WHERE else self.dtype
        if op is Ops.WHERE:
            if self.dtype.scalar() != dtypes.bool:
                raise TypeError(f"WHERE: condition must be bool, got {self.dtype!r}")
            if srcs[0].dtype != srcs[1].dtype:
                raise TypeError(f"WHERE: branches must have the same dtype, got {srcs[0].dtype!r} and "
                                f"{srcs[1].dtype!r}")
        elif op not in (Ops.SHL, Ops.SHR) and any(s.dtype != self.dtype for s in srcs):
            raise TypeError(f"{op.name}: operands must have the same dtype, got {[s.dtype for s in operands]}")
        out = dtypes.bool.vec(base.count) if op in GroupOp.Comparison else base
        return _check_shape(UOp(op, out, operands))

    def _scalar(self, value: Any) -> UOp:
        """A Python scalar as a constant of its own dtype (bool, int32 or float32)."""
        return UOp.const(dtypes.from_py(value), value)

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else _check_shape(UOp(Ops.CAST, dtype, (self,)))

    def bitcast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else _check_shape(UOp(Ops.BITCAST, dtype, (self,)))

    # *** builders: movement (validated now, so a bad shape fails where it was written) ***
    def _movement(self, op: Ops, arg: Any, rule: Callable[[Shape, Any], Shape]) -> UOp:
        if (s := self.shape) is None:
            raise ValueError(f"{op.name.lower()}: {self.op} has no shape")
        new_shape = rule(s, arg)
        if (ret := UOp(op, self.dtype, (self,), arg))._shape is _NOT_COMPUTED:
            ret._shape = new_shape
        return ret

    def reshape(self, new_shape: Iterable[sint]) -> UOp:
        new_shape = tuple(new_shape)
        return self if self.shape == new_shape else self._movement(Ops.RESHAPE, new_shape, shp.reshape_shape)

    def permute(self, order: Iterable[int]) -> UOp:
        order = tuple(order)
        return self if order == tuple(range(len(order))) and self.shape is not None and len(order) == self.ndim \
            else self._movement(Ops.PERMUTE, order, shp.permute_shape)

    def expand(self, new_shape: Iterable[sint]) -> UOp:
        new_shape = tuple(new_shape)
        return self if self.shape == new_shape else self._movement(Ops.EXPAND, new_shape, shp.expand_shape)

    def pad(self, padding: Iterable[tuple[sint, sint]]) -> UOp:
        padding = tuple(tuple(p) for p in padding)
        return self if all(p == (0, 0) for p in padding) and len(padding) == self.ndim \
            else self._movement(Ops.PAD, padding, shp.pad_shape)

    def shrink(self, bounds: Iterable[tuple[sint, sint]]) -> UOp:
        bounds = tuple(tuple(b) for b in bounds)
        s = self.shape
        return self if s is not None and len(bounds) == len(s) and all(b == (0, n) for b, n in zip(bounds, s)) \
            else self._movement(Ops.SHRINK, bounds, shp.shrink_shape)

    def flip(self, flips: Iterable[bool]) -> UOp:
        flips = tuple(flips)
        return self if not any(flips) and len(flips) == self.ndim else self._movement(Ops.FLIP, flips, shp.flip_shape)

    def reduce_axis(self, op: Ops, axes: Iterable[int]) -> UOp:
        """REDUCE_AXIS: reduce `axes` with `op` (ADD, MUL or MAX), keeping them as size-1 dims."""
        if op not in GroupOp.Reduce:
            raise ValueError(f"reduce_axis: op must be one of {sorted(o.name for o in GroupOp.Reduce)}, got {op}")
        axes = tuple(sorted(axes))
        return self._movement(Ops.REDUCE_AXIS, (op, axes), lambda s, a: shp.reduce_shape(s, a[1]))

    # *** builders: tensor level ***
    def contiguous(self) -> UOp:
        return _check_shape(UOp(Ops.CONTIGUOUS, self.dtype, (self,)))

    def detach(self) -> UOp:
        return _check_shape(UOp(Ops.DETACH, self.dtype, (self,)))

    def copy_to_device(self, device: str) -> UOp:
        return _check_shape(UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, arg=device))))

    @staticmethod
    def mstack(parts: Sequence[UOp], axis: int | None) -> UOp:
        """MSTACK: one value over several devices, part i on the device of `parts[i]`: the parts side by side along
        `axis` (each a shard of that axis), or each a whole copy (`axis=None`, replicated)."""
        return _check_shape(UOp(Ops.MSTACK, parts[0].dtype, tuple(parts), axis))

    def mselect(self, i: int, axis: int | None) -> UOp:
        """MSELECT: the part of this multi-device value on its i-th device, as sharded along `axis` (None: a whole
        copy)."""
        return _check_shape(UOp(Ops.MSELECT, self.dtype, (self,), (i, axis)))

    def assign(self, value: UOp) -> UOp:
        if value.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {value.dtype!r} differs from the target's {self.dtype!r}")
        return _check_shape(UOp(Ops.ASSIGN, self.dtype, (self, value)))

    # *** builders: kernel level ***
    def index(self, *idxs: UOp, valid: UOp | None = None) -> UOp:
        return UOp(Ops.INDEX, self.dtype, (self, *idxs) + (() if valid is None else (valid,)))

    def load(self, *srcs: UOp, dtype: DType | None = None) -> UOp:
        if dtype is None:
            dtype = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
        return UOp(Ops.LOAD, dtype, (self, *srcs))

    def store(self, value: UOp, *srcs: UOp) -> UOp:
        return UOp(Ops.STORE, dtypes.void, (self, value, *srcs))

    def end(self, *ranges: UOp) -> UOp:
        return UOp(Ops.END, dtypes.void, (self, *ranges))


def _infer_device(u: UOp) -> str | tuple[str, ...] | None:
    # a COPY lives on its target; anything else where its first source with a device lives
    if u.op is Ops.DEVICE:
        return u.arg
    if u.op is Ops.COPY:
        return u.src[1].arg
    if u.op is Ops.MSTACK:
        return tuple(s._device for s in u.src)
    if u.op is Ops.MSELECT:
        return u.src[0]._device[u.arg[0]]
    return next((d for s in u.src if (d := s._device) is not None), None)


# *** shape inference ***
def _check_shape(u: UOp) -> UOp:
    # tensor-level sources (their shape is known): infer now, so a bad shape fails where it was written
    if any(s._shape is not _NOT_COMPUTED and s._shape is not None for s in u.src):
        u.shape  # noqa: B018
    return u


def _infer_shape(u: UOp) -> Shape | None:
    op = u.op
    if op is Ops.BUFFER:
        return (u.arg,)
    if op is Ops.BUFFER_VIEW:
        return (u.arg[0],)
    if op is Ops.CONST:
        return () if u.src else None
    if op is Ops.IOTA:
        return (u.arg,)
    if op in GroupOp.Movement:
        if (s := u.src[0].shape) is None:
            raise ValueError(f"{op.name}: source {u.src[0].op} has no shape")
        return _MOVEMENT_SHAPE[op](s, u.arg)
    if op is Ops.REDUCE_AXIS:
        if (s := u.src[0].shape) is None:
            raise ValueError(f"REDUCE_AXIS: source {u.src[0].op} has no shape")
        return shp.reduce_shape(s, u.arg[1])
    if op in GroupOp.ALU or op in (Ops.CAST, Ops.ASSIGN):
        shapes = [s.shape for s in u.src if s.shape is not None]
        if all(s == shapes[0] for s in shapes):  # (the usual case; UOp sizes compare by identity)
            return shapes[0] if shapes else None
        if any(len(s) != len(shapes[0]) or not all(shp.sint_eq(a, b) for a, b in zip(s, shapes[0])) for s in shapes):
            raise ValueError(f"{op.name}: source shapes {' and '.join(str(s) for s in shapes)} differ "
                             "(broadcast them explicitly with reshape/expand)")
        return shapes[0] if shapes else None
    if op is Ops.BITCAST:
        if (s := u.src[0].shape) is None or u.dtype.itemsize == u.src[0].dtype.itemsize:
            return s
        if not s or not shp.is_int(s[-1]) or (s[-1] * u.src[0].dtype.itemsize) % u.dtype.itemsize:
            raise ValueError(f"BITCAST: cannot bitcast shape {s} of {u.src[0].dtype!r} to {u.dtype!r}: "
                             "the last dim's bytes must divide evenly")
        return (*s[:-1], s[-1] * u.src[0].dtype.itemsize // u.dtype.itemsize)
    if op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.BUFFERIZE):
        return u.src[0].shape
    if op is Ops.MSTACK:
        return _mstack_shape(u)
    if op is Ops.MSELECT:
        (i, axis), s, n = u.arg, u.src[0].shape, len(u.src[0].device)
        if s is None or not 0 <= i < n or axis is not None and not (0 <= axis < len(s) and s[axis] % n == 0):
            raise ValueError(f"MSELECT: cannot select part {i} along axis {axis} of shape {s} over {n} devices")
        return shp.shard_shape(s, axis, n)
    return None


def _mstack_shape(u: UOp) -> Shape:
    shapes, axis = [s.shape for s in u.src], u.arg
    if any(s is None for s in shapes) or any(s != shapes[0] for s in shapes):
        raise ValueError(f"MSTACK: the parts must have one shape, got {shapes}")
    devices = [s.device for s in u.src]
    if any(not isinstance(d, str) for d in devices) or len(set(devices)) != len(devices):
        raise ValueError(f"MSTACK: the parts must be on distinct single devices, got {devices}")
    s = shapes[0]
    if axis is None:
        return s
    if not 0 <= axis < len(s):
        raise ValueError(f"MSTACK: axis {axis} is out of range for parts of shape {s}")
    return (*s[:axis], s[axis] * len(shapes), *s[axis + 1:])


_MOVEMENT_SHAPE: dict[Ops, Callable[[Shape, Any], Shape]] = {
    Ops.RESHAPE: shp.reshape_shape, Ops.PERMUTE: shp.permute_shape, Ops.EXPAND: shp.expand_shape,
    Ops.PAD: shp.pad_shape, Ops.SHRINK: shp.shrink_shape, Ops.FLIP: shp.flip_shape}


# *** range analysis ***
@functools.cache  # (DTypes are interned: one entry per dtype, looked up for every node analyzed)
def _dtype_bounds(dt: DType) -> tuple[Any, Any]:
    if dt.count != 1 or isinstance(dt, PtrDType) or dt == dtypes.void:
        return (-math.inf, math.inf)
    if dtypes.is_float(dt):
        return (-math.inf, math.inf)
    return (dtypes.min(dt), dtypes.max(dt))


@functools.cache
def _analyzed(dt: DType) -> bool:
    """Whether range analysis bounds values of `dt`: int and bool scalars."""
    return (dtypes.is_int(dt) or dtypes.is_bool(dt)) and dt.count == 1


def _cdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _min_max(u: UOp) -> tuple[Any, Any]:
    bounds = _dtype_bounds(u.dtype)
    if not _analyzed(u.dtype):
        return (u.arg, u.arg) if u.op is Ops.CONST and u.dtype.count == 1 else bounds
    lo, hi = _raw_min_max(u)
    # an int expression that may leave its dtype wraps: then nothing is known
    return (lo, hi) if bounds[0] <= lo and hi <= bounds[1] else bounds


def _raw_min_max(u: UOp) -> tuple[Any, Any]:
    op, s = u.op, u.src
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.BIND:
        return s[0]._mm
    if op in (Ops.RANGE, Ops.SPECIAL):
        return (0, s[0]._mm[1] - 1) if s[0]._mm[1] >= 1 else (0, 0)
    if op is Ops.ADD:
        return (s[0]._mm[0] + s[1]._mm[0], s[0]._mm[1] + s[1]._mm[1])
    if op is Ops.MUL:
        corners = [a * b for a in s[0]._mm for b in s[1]._mm]
        return (min(corners), max(corners))
    if op is Ops.NEG:
        return (-s[0]._mm[1], -s[0]._mm[0])
    if op is Ops.MAX:
        return (max(s[0]._mm[0], s[1]._mm[0]), max(s[0]._mm[1], s[1]._mm[1]))
    if op is Ops.IDIV:
        (a, b), (c, d) = s[0]._mm, s[1]._mm
        if c > 0 or d < 0:  # the divisor's sign is known: trunc(n/m) is monotone in each argument
            corners = [_cdiv(n, m) for n in (a, b) for m in (c, d)]
            return (min(corners), max(corners))
    if op is Ops.MOD:
        (a, b), (c, d) = s[0]._mm, s[1]._mm
        if c > 0 or d < 0:
            m = max(abs(c), abs(d)) - 1
            if a >= 0:
                return (a, b) if b <= min(abs(c), abs(d)) - 1 else (0, min(m, b))
            if b <= 0:
                return (max(-m, a), 0)
            return (max(-m, a), min(m, b))
    if op is Ops.WHERE:
        if s[0]._mm == (True, True):
            return s[1]._mm
        if s[0]._mm == (False, False):
            return s[2]._mm
        return (min(s[1]._mm[0], s[2]._mm[0]), max(s[1]._mm[1], s[2]._mm[1]))
    if op is Ops.CMPLT:
        (a, b), (c, d) = s[0]._mm, s[1]._mm
        return (b < c, a < d)
    if op in (Ops.CMPNE, Ops.CMPEQ):
        (a, b), (c, d) = s[0]._mm, s[1]._mm
        ne = (b < c or d < a, not (a == b == c == d))
        return ne if op is Ops.CMPNE else (not ne[1], not ne[0])
    if u.dtype == dtypes.bool and op in (Ops.AND, Ops.OR, Ops.XOR):
        (a, b), (c, d) = s[0]._mm, s[1]._mm
        if op is Ops.AND:
            return (a and c, b and d)
        if op is Ops.OR:
            return (a or c, b or d)
        if a == b and c == d:
            return (a != c, a != c)
        return (False, True)
    if op is Ops.AND and s[1].op is Ops.CONST and s[1].arg >= 0 and s[0]._mm[0] >= 0:
        return (0, min(s[1].arg, s[0]._mm[1]))
    if op is Ops.SHL and s[1].op is Ops.CONST and s[1].arg >= 0:
        return (s[0]._mm[0] << s[1].arg, s[0]._mm[1] << s[1].arg)
    if op is Ops.SHR and s[1].op is Ops.CONST and s[1].arg >= 0:
        return (s[0]._mm[0] >> s[1].arg, s[0]._mm[1] >> s[1].arg)
    if op is Ops.CAST and (dtypes.is_int(s[0].dtype) or dtypes.is_bool(s[0].dtype)):
        lo, hi = s[0]._mm
        if u.dtype == dtypes.bool:
            return (lo > 0 or hi < 0, not lo == hi == 0)
        return (int(lo), int(hi))
    return _dtype_bounds(u.dtype)
