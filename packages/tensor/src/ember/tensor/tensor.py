"""`Tensor`: a lazy n-d array over a UOp graph. Nothing runs until `realize()` (or `.numpy()`, `.item()`)."""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ember.runtime import Device
from ember.tensor import engine
from ember.uops import (
    DType,
    Ops,
    UOp,
    broadcast_shape,
    dtypes,
    from_numpy_dtype,
    least_upper_dtype,
    prod,
    sum_acc_dtype,
    to_numpy_dtype,
)
from ember.uops import gradient as uop_gradient

_unique = itertools.count()
_all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()


def _canonical_device(device: str | None) -> str:
    name = Device.canonicalize(device if device is not None else Device.DEFAULT)
    Device[name]  # noqa: B018 - an unknown device fails here, with the list of registered ones
    return name


def _buffer_from_numpy(arr: np.ndarray, device: str) -> UOp:
    dtype = from_numpy_dtype(arr.dtype)
    buf = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=next(_unique)), UOp(Ops.DEVICE, arg=device)), arr.size)
    if arr.size:
        engine.buffer_for(buf).copyin(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return buf.reshape(arr.shape)


def _normalize_axis(axis: int | Sequence[int] | None, ndim: int, op: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or not -max(ndim, 1) <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of {ndim} dims")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis} repeats a dim")
    return tuple(out)


class Tensor:
    """A lazy tensor. `Tensor(np.ones((2, 3)))`, `Tensor([1, 2, 3], dtype=dtypes.int32)`, `Tensor(2.0)`."""

    __slots__ = ("uop", "requires_grad", "grad", "__weakref__")

    def __init__(self, data: Any, device: str | None = None, dtype: DType | None = None,
                 requires_grad: bool | None = None):
        # requires_grad: True (a leaf to differentiate), False (never), None (only if used where grads flow)
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        dev = _canonical_device(device)
        if isinstance(data, UOp):
            # under no_grad a computed tensor is cut off from the graph that made it
            self.uop = data.detach() if no_grad.active and not _is_realized(data) and data.op not in \
                (Ops.DETACH, Ops.CONST) else data
        elif isinstance(data, Tensor):
            self.uop = data.to(dev).uop if device is not None else data.uop
        elif isinstance(data, (bool, int, float)):
            dt = dtype or dtypes.from_py(data)
            self.uop = UOp.const(dt, data, dev)
        elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
            arr = np.asarray(data)
            if arr.dtype == object:
                raise TypeError("Tensor: ragged or non-numeric nested lists are not supported")
            if dtype is None and not isinstance(data, (np.ndarray, np.generic)):
                dtype = dtypes.from_py(arr.reshape(-1).tolist()) if arr.size else dtypes.float32
            if dtype is not None:
                arr = arr.astype(to_numpy_dtype(dtype))
            self.uop = _buffer_from_numpy(arr, dev)
        else:
            raise TypeError(f"Tensor: cannot make a tensor from {type(data).__name__}")
        _all_tensors.add(self)

    # *** properties ***
    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape  # type: ignore[return-value]

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        return self.uop.device  # type: ignore[return-value]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(prod(self.shape))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype!r} on {self.device}>"

    # *** realization ***
    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor (and `others`) into device buffers."""
        Tensor.realize_all(self, *others)
        return self

    @staticmethod
    def realize_all(*tensors: Tensor) -> None:
        todo = [t for t in tensors if not _is_realized(t.uop)]
        if not todo:
            return
        live = frozenset(t.uop for t in _all_tensors)
        becomes = engine.realize_uops(list(dict.fromkeys(t.uop for t in todo)), live)
        leaves = {t.uop for t in _all_tensors if t.requires_grad}
        for t in list(_all_tensors):
            if (new := becomes.get(t.uop)) is not None:
                if leaves and new is not t.uop and _reaches(t.uop, leaves):
                    _graph_of[new] = t.uop  # differentiable later: backward looks through the realized buffer
                t.uop = new

    def numpy(self) -> np.ndarray:
        """A host copy as a numpy array."""
        self.realize()
        if self.uop.op is Ops.CONST:  # a 0-d constant is never stored
            return np.full(self.shape, self.uop.arg, to_numpy_dtype(self.dtype))
        return engine.copyout(self.uop)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ValueError(f"item: only a tensor of one element can be converted, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def to(self, device: str) -> Tensor:
        dev = _canonical_device(device)
        if dev == self.device:
            return self
        return Tensor(UOp(Ops.COPY, self.dtype, (self.contiguous().uop, UOp(Ops.DEVICE, arg=dev))))

    def contiguous(self) -> Tensor:
        return Tensor(self.uop.contiguous())

    def cast(self, dtype: DType) -> Tensor:
        return self if dtype == self.dtype else Tensor(self.uop.cast(dtype))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    # *** creation ***
    @staticmethod
    def full(shape: int | Sequence[int], value: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(not isinstance(s, int) or s < 0 for s in shape):
            raise ValueError(f"full: shape must be non-negative ints, got {shape}")
        c = Tensor(value, device, dtype or dtypes.from_py(value))
        return c.reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(_shape_args(shape), 0.0 if dtype is None else 0, dtype or dtypes.float32, device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(_shape_args(shape), 1.0 if dtype is None else 1, dtype or dtypes.float32, device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        shape_t = _shape_args(shape)
        dt = dtype or dtypes.float32
        dev = _canonical_device(device)
        buf = UOp(Ops.BUFFER, dt, (UOp(Ops.UNIQUE, arg=next(_unique)), UOp(Ops.DEVICE, arg=dev)), int(prod(shape_t)))
        return Tensor(buf.reshape(shape_t))

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | None = None, device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be 0")
        dt = dtype or (dtypes.int32 if all(isinstance(v, int) for v in (start, stop, step)) else dtypes.float32)
        # the values are made on the host: an index ramp has no cheaper lazy form among our ops
        return Tensor(np.arange(start, stop, step).astype(to_numpy_dtype(dt)), device)

    # *** movement ***
    def reshape(self, *shape: Any) -> Tensor:
        new = list(_shape_args(shape))
        if new.count(-1) > 1:
            raise ValueError(f"reshape: only one dim can be -1, got {tuple(new)}")
        if -1 in new:
            known = int(prod([s for s in new if s != -1]))
            if known == 0 or self.numel() % known:
                raise ValueError(f"reshape: cannot view shape {self.shape} as {tuple(new)}: sizes do not divide")
            new[new.index(-1)] = self.numel() // known
        return Tensor(self.uop.reshape(tuple(new)))

    def permute(self, *order: Any) -> Tensor:
        order_t = _shape_args(order)
        return Tensor(self.uop.permute(tuple(a % self.ndim if a < 0 else a for a in order_t) if self.ndim else
                                       order_t))

    def transpose(self, a: int = 1, b: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(a, self.ndim, "transpose")[0], _normalize_axis(b, self.ndim, "transpose")[0]
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: Any) -> Tensor:
        new = _shape_args(shape)
        if len(new) < self.ndim:
            raise ValueError(f"expand: cannot expand {self.shape} to fewer dims {new}")
        x = self.reshape((1,) * (len(new) - self.ndim) + self.shape)
        return Tensor(x.uop.expand(tuple(s if n == -1 else n for s, n in zip(x.shape, new))))

    def pad(self, padding: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
        padding = tuple((int(b), int(a)) for b, a in padding)
        out = Tensor(self.uop.pad(padding))
        if value == 0:
            return out
        mask = Tensor(Tensor.full(self.shape, True, dtypes.bool, self.device).uop.pad(padding))
        return mask.where(out, value)

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
        return Tensor(self.uop.shrink(bounds))

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        axes = _normalize_axis(axis, self.ndim, "flip")
        return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def __getitem__(self, idx: Any) -> Tensor:
        # basic slicing with step 1 (the full indexing comes with the Tensor API issue)
        idx = idx if isinstance(idx, tuple) else (idx,)
        bounds, squeeze = [], []
        for i, s in enumerate(self.shape):
            k = idx[i] if i < len(idx) else slice(None)
            if isinstance(k, int):
                if not -s <= k < s:
                    raise IndexError(f"index {k} is out of range for dim {i} of size {s}")
                k %= s
                bounds.append((k, k + 1))
                squeeze.append(i)
            elif isinstance(k, slice) and k.step in (None, 1):
                start, stop, _ = k.indices(s)
                bounds.append((start, max(start, stop)))
            else:
                raise NotImplementedError(f"Tensor indexing with {k!r} is not implemented yet (ints and step-1 slices)")
        out = self.shrink(bounds)
        return out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in squeeze))

    # *** elementwise ***
    def _broadcasted(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x, y = self, other
        if not isinstance(y, Tensor):
            if not isinstance(y, (bool, int, float)):
                raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
            # a Python scalar is weak: it takes the tensor's dtype unless it is a float meeting an int tensor
            dt = self.dtype if not (isinstance(y, float) and not dtypes.is_float(self.dtype)) else dtypes.float32
            if isinstance(y, int) and not isinstance(y, bool) and self.dtype == dtypes.bool:
                dt = dtypes.int32
            y = Tensor(y, self.device, dt)
        if x.device != y.device:
            raise ValueError(f"tensors are on different devices: {x.device} and {y.device}")
        out_dt = least_upper_dtype(x.dtype, y.dtype)
        x, y = x.cast(out_dt), y.cast(out_dt)
        try:
            shape = broadcast_shape(x.shape, y.shape)
        except ValueError:
            raise ValueError(f"cannot broadcast shapes {x.shape} and {y.shape}") from None
        x, y = x.expand(shape), y.expand(shape)
        return (y, x) if reverse else (x, y)

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._broadcasted(other, reverse)
        if x.dtype == dtypes.bool and op in (Ops.ADD, Ops.MUL, Ops.MAX):
            op = Ops.AND if op is Ops.MUL else Ops.OR  # numpy's bool arithmetic: + is or, * is and
        return Tensor(x.uop.alu(op, y.uop))

    def __add__(self, x: Any) -> Tensor: return self._binary(Ops.ADD, x)
    def __radd__(self, x: Any) -> Tensor: return self._binary(Ops.ADD, x, True)
    def __mul__(self, x: Any) -> Tensor: return self._binary(Ops.MUL, x)
    def __rmul__(self, x: Any) -> Tensor: return self._binary(Ops.MUL, x, True)
    def __sub__(self, x: Any) -> Tensor: return self + (-self._broadcasted(x)[1])
    def __rsub__(self, x: Any) -> Tensor: return (-self) + x
    def __neg__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            raise TypeError("neg: negation of a bool tensor is not allowed (use logical_not)")
        return self * -1
    def __truediv__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        return a * b.reciprocal()
    def __rtruediv__(self, x: Any) -> Tensor:
        b, a = self._broadcasted(x)
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        return a * b.reciprocal()
    def __lt__(self, x: Any) -> Tensor: return self._binary(Ops.CMPLT, x)
    def __gt__(self, x: Any) -> Tensor: return self._binary(Ops.CMPLT, x, True)
    def __ge__(self, x: Any) -> Tensor: return (self < x).logical_not()
    def __le__(self, x: Any) -> Tensor: return (self > x).logical_not()
    def __eq__(self, x: Any) -> Tensor: return self._binary(Ops.CMPEQ, x)  # type: ignore[override]
    def __ne__(self, x: Any) -> Tensor: return self._binary(Ops.CMPNE, x)  # type: ignore[override]
    __hash__ = object.__hash__

    def logical_not(self) -> Tensor:
        return Tensor(self.cast(dtypes.bool).uop.logical_not())

    def maximum(self, x: Any) -> Tensor: return self._binary(Ops.MAX, x)
    def minimum(self, x: Any) -> Tensor: return -((-self).maximum(-self._broadcasted(x)[1]))

    def where(self, x: Any, y: Any) -> Tensor:
        cond = self.cast(dtypes.bool)
        if isinstance(x, Tensor):
            a, b = x._broadcasted(y)
        elif isinstance(y, Tensor):
            b, a = y._broadcasted(x)
        else:
            a, b = Tensor(x, self.device)._broadcasted(y)
        shape = broadcast_shape(cond.shape, a.shape)
        cond, a, b = cond.expand(shape), a.expand(shape), b.expand(shape)
        return Tensor(cond.uop.alu(Ops.WHERE, a.uop, b.uop))

    def _unary_float(self, op: Ops) -> Tensor:
        x = self if dtypes.is_float(self.dtype) else self.float()
        return Tensor(x.uop.alu(op))

    def reciprocal(self) -> Tensor: return self._unary_float(Ops.RECIPROCAL)
    def sqrt(self) -> Tensor: return self._unary_float(Ops.SQRT)
    def exp2(self) -> Tensor: return self._unary_float(Ops.EXP2)
    def log2(self) -> Tensor: return self._unary_float(Ops.LOG2)
    def exp(self) -> Tensor: return (self.float_() * (1 / math.log(2))).exp2()
    def log(self) -> Tensor: return self.log2() * math.log(2)
    def sin(self) -> Tensor: return self._unary_float(Ops.SIN)
    def relu(self) -> Tensor: return self.maximum(0)
    def sigmoid(self) -> Tensor: return (1 + (-self.float_()).exp()).reciprocal()
    def tanh(self) -> Tensor: return 2 * (2 * self.float_()).sigmoid() - 1
    def abs(self) -> Tensor: return self.maximum(-self)

    def float_(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.float()

    # *** reductions ***
    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = _normalize_axis(axis, self.ndim, "reduce")
        if not self.ndim:
            return self
        out = Tensor(self.uop.reduce_axis(op, axes)) if axes else self
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.ADD, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if dtypes.is_unsigned(self.dtype):
            top = dtypes.max(self.dtype)
            return (top - (top - self).max(axis, keepdim)).cast(self.dtype)
        return -((-self).max(axis, keepdim))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        axes = _normalize_axis(axis, self.ndim, "mean")
        count = int(prod([self.shape[a] for a in axes]))
        out = self.float_().sum(axis, keepdim)
        return out * (1 / count) if count else out * float("nan")

    # *** linear algebra ***
    def matmul(self, w: Tensor) -> Tensor:
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul: both operands need at least 1 dim, got {self.shape} and {w.shape}")
        x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ValueError(f"matmul: shapes {self.shape} and {w.shape} do not align: {x.shape[-1]} != {y.shape[-2]}")
        # (..., n, k) x (..., k, m): broadcast-multiply over (..., n, m, k) and reduce the last axis
        prod_ = x.reshape(*x.shape[:-1], 1, x.shape[-1]) * y.transpose(-1, -2).reshape(
            *y.shape[:-2], 1, y.shape[-1], y.shape[-2])
        out = prod_.sum(-1).cast(prod_.dtype)  # ints accumulate in 64 bits, the result keeps the operands' dtype
        if self.ndim == 1:
            out = out.reshape(*out.shape[:-2], out.shape[-1])
        if w.ndim == 1:
            out = out.reshape(*out.shape[:-1])
        return out

    def __matmul__(self, w: Tensor) -> Tensor:
        return self.matmul(w)


# a realized tensor on a gradient path -> the graph that computed it (lives as long as the realized view)
_graph_of: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _reaches(u: UOp, leaves: set[UOp]) -> bool:
    return any(x in leaves for x in u.toposort(gate=lambda x: x.op is not Ops.DETACH))


def _unrealize(u: UOp, keep: set[UOp]) -> UOp:
    """u with every realized tensor on a gradient path replaced by the graph that computed it (not those in keep)."""
    while mapping := {x: g for x in u.toposort() if x not in keep and (g := _graph_of.get(x)) is not None}:
        u = u.substitute(mapping)
    return u


def _is_realized(u: UOp) -> bool:
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op is Ops.BUFFER


def _shape_args(shape: Iterable[Any]) -> tuple[int, ...]:
    shape = tuple(shape)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


class no_grad:
    """A context where new tensors do not carry gradients: `with no_grad(): w.assign(w - lr * w.grad)`."""

    active = 0

    def __enter__(self) -> no_grad:
        no_grad.active += 1
        return self

    def __exit__(self, *exc: object) -> None:
        no_grad.active -= 1


def _grad_of(self: Tensor, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """d(self)/d(target) for each target, as lazy tensors. `gradient` is the upstream gradient (default: 1 for a
    one-element tensor)."""
    if not dtypes.is_float(self.dtype):
        raise TypeError(f"gradient: only a float tensor can be differentiated, this one is {self.dtype!r}")
    if gradient is None:
        if self.numel() != 1:
            raise ValueError(f"gradient: the tensor has shape {self.shape}; backward without `gradient` needs a "
                             "one-element tensor (pass gradient= of the same shape)")
        gradient = Tensor.full(self.shape, 1.0, self.dtype, self.device)
    if gradient.shape != self.shape:
        raise ValueError(f"gradient: `gradient` has shape {gradient.shape}, the tensor has {self.shape}")
    root = _unrealize(self.uop, {t.uop for t in targets})
    grads = uop_gradient(root, [t.uop for t in targets], gradient.cast(self.dtype).uop)
    out = []
    for i, t in enumerate(targets):
        if (g := grads.get(t.uop)) is None:
            raise ValueError(f"gradient: target {i} (shape {t.shape}) is not used to compute this tensor")
        out.append(Tensor(g))
    return out


def _backward(self: Tensor, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(leaf) into `.grad` of every tensor with requires_grad=True that self depends on."""
    if not dtypes.is_float(self.dtype):
        raise TypeError(f"backward: only a float tensor can be differentiated, this one is {self.dtype!r}")
    in_graph = set(_unrealize(self.uop, set()).toposort(gate=lambda u: u.op is not Ops.DETACH))
    leaves = [t for t in list(_all_tensors) if t.requires_grad and t.uop in in_graph]
    if not leaves:
        raise ValueError("backward: no tensor with requires_grad=True is used to compute this tensor")
    unique = list(dict.fromkeys(t.uop for t in leaves))
    grads = dict(zip(unique, _grad_of(self, *(Tensor(u) for u in unique), gradient=gradient)))
    for t in leaves:
        g = grads[t.uop]
        t.grad = g if t.grad is None else t.grad + g
    return self


def _detach(self: Tensor) -> Tensor:
    """The same values, with no gradient flowing back through them."""
    return Tensor(self.uop.detach(), requires_grad=False)


Tensor.gradient = _grad_of  # type: ignore[attr-defined]
Tensor.backward = _backward  # type: ignore[attr-defined]
Tensor.detach = _detach  # type: ignore[attr-defined]
