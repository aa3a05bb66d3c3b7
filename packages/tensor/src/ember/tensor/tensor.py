"""`Tensor`: a lazy n-d array over a UOp graph. Nothing runs until `realize()` (or `.numpy()`, `.item()`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ember.runtime import Device
from ember.tensor import engine, realize
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

_NUMPY_NAMES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                          "float32", "float64"})


def _canonical_device(device: str | None) -> str:
    name = Device.canonicalize(device if device is not None else Device.DEFAULT)
    Device[name]  # noqa: B018 - an unknown device fails here, with the list of registered ones
    return name


def _buffer_from_numpy(arr: np.ndarray, device: str) -> UOp:
    dtype = from_numpy_dtype(arr.dtype)
    buf = UOp(Ops.BUFFER, dtype, (UOp.unique(), UOp(Ops.DEVICE, arg=device)), arr.size)
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


def _as_index(k: Any, device: str) -> Any:
    # one item of an index: ints (numpy ints too), slices, None, ..., or an index Tensor (from lists/arrays)
    if isinstance(k, bool) or isinstance(k, np.bool_):
        raise IndexError(f"a bool scalar is not a supported index (got {k!r}); use a bool Tensor mask")
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, (list, np.ndarray)):
        return Tensor(np.asarray(k), device)
    if isinstance(k, Tensor) and k.device != device:
        raise ValueError(f"index tensor is on {k.device}, the tensor on {device}")
    return k


def _int64_acc(dt: DType) -> DType:
    # torch's accumulator for prod/cumsum/cumprod: bool and ints below 64 bits go to int64, floats keep theirs
    return dt if dtypes.is_float(dt) or dt == dtypes.uint64 else dtypes.int64


def _random_shape(shape: tuple[Any, ...], op: str) -> tuple[int, ...]:
    shape_t = _shape_args(shape)
    if any(s < 0 for s in shape_t):
        raise ValueError(f"{op}: shape must be non-negative ints, got {shape_t}")
    return shape_t


def _unindex_dim(x: Tensor, dim: int, k: int | slice, size: int) -> Tensor:
    """x, the result of indexing dim `dim` (of size `size`) by k (as a size-1 dim for an int), padded with zeros back
    to where those elements came from: the inverse of the view, for setitem."""
    if isinstance(k, int):
        k %= size
        start, step, length = k, 1, 1
    else:
        start, stop, step = k.indices(size)
        length = len(range(start, stop, step))
    if length == 0:
        return Tensor(x.uop.pad(tuple((0, size) if i == dim else (0, 0) for i in range(x.ndim))))
    flip = step < 0
    if flip:
        start, step = size - 1 - start, -step
    if step > 1:  # spread the elements step apart: (L, 1) -> (L, step) -> L*step -> cut the tail
        x = x.reshape(x.shape[:dim] + (length, 1) + x.shape[dim + 1:])
        x = Tensor(x.uop.pad(tuple((0, step - 1) if i == dim + 1 else (0, 0) for i in range(x.ndim))))
        x = x.reshape(x.shape[:dim] + (length * step,) + x.shape[dim + 2:])
        x = x.shrink([(0, (length - 1) * step + 1) if i == dim else (0, s) for i, s in enumerate(x.shape)])
    span = x.shape[dim]
    x = Tensor(x.uop.pad(tuple((start, size - start - span) if i == dim else (0, 0) for i in range(x.ndim))))
    return x.flip(dim) if flip else x


_THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _threefry2x32(x0: Tensor, x1: Tensor, key: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011) on uint32 tensors: a counter-based RNG, pure integer ops.
    The key schedule is a 3-word buffer, not constants: every call of one shape is the same kernel (a model's
    weights of one shape are initialized by one compiled program)."""
    words = np.array([key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA], np.uint32)
    ktab = Tensor(words, x0.device)
    ks = [ktab[i].reshape(*(1,) * x0.ndim).expand(*x0.shape) for i in range(3)]
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for r in range(20):
        rot = _THREEFRY_ROTATIONS[r % 8]
        x0 = x0 + x1
        x1 = ((x1 << rot) | (x1 >> (32 - rot))) ^ x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0, x1 = x0 + ks[s % 3], x1 + (ks[(s + 1) % 3] + s)  # (uint32: wraps like the reference's mod 2^32)
    return x0, x1


class Tensor:
    """A lazy tensor. `Tensor(np.ones((2, 3)))`, `Tensor([1, 2, 3], dtype=dtypes.int32)`, `Tensor(2.0)`."""

    __slots__ = ("uop", "requires_grad", "grad", "seq", "__weakref__")

    def __init__(self, data: Any, device: str | None = None, dtype: DType | None = None,
                 requires_grad: bool | None = None):
        # requires_grad: True (a leaf to differentiate), False (never), None (only if used where grads flow)
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        self.seq = realize.next_seq()  # when it was made (or last assigned): program order for shared memory
        dev = _canonical_device(device)
        if isinstance(data, UOp):
            # under no_grad a computed tensor is cut off from the graph that made it
            self.uop = data.detach() if no_grad.active and not realize.is_realized(data) and data.op not in \
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
            if dtype is not None and dtype.name not in _NUMPY_NAMES:  # e.g. bfloat16: made from float32 on device
                self.uop = _buffer_from_numpy(arr.astype(np.float32), dev).cast(dtype)
            else:
                self.uop = _buffer_from_numpy(arr if dtype is None else arr.astype(to_numpy_dtype(dtype)), dev)
        else:
            raise TypeError(f"Tensor: cannot make a tensor from {type(data).__name__}")
        realize.live.add(self)

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
        """Compute several tensors in one schedule (their shared work once)."""
        realize.realize_all(tensors)

    def numpy(self) -> np.ndarray:
        """A host copy as a numpy array."""
        if self.dtype.name not in _NUMPY_NAMES:
            raise TypeError(f"numpy: {self.dtype!r} has no numpy dtype; convert first, e.g. .float().numpy()")
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
        buf = UOp(Ops.BUFFER, dt, (UOp.unique(), UOp(Ops.DEVICE, arg=dev)), int(prod(shape_t)))
        return Tensor(buf.reshape(shape_t))

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | None = None, device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be 0")
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step))
        dt = dtype or (dtypes.int32 if ints else dtypes.float32)
        if not ints or not (dtypes.is_int(dt) or dtypes.is_float(dt)):
            # fractional starts and steps: numpy's values (computed in float64), made on the host
            return Tensor(np.arange(start, stop, step).astype(to_numpy_dtype(dt)), device)
        # a lazy ramp (no buffer): every kernel that reads it computes start + i * step from its index
        n = len(range(start, stop, step))
        ramp = Tensor(UOp.iota(n, dt if dtypes.is_int(dt) else dtypes.int32, _canonical_device(device)))
        ramp = ramp if step == 1 else ramp * step
        return (ramp if start == 0 else ramp + start).cast(dt)

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

    def pad(self, padding: Sequence[Any], value: float = 0.0, mode: str = "constant") -> Tensor:
        """Pad each dim by (before, after): `padding` is one pair (or None) per dim from the first, or torch's flat
        form (left, right, top, bottom, ...) from the last dim. Negative amounts cut. `mode`: "constant" (with
        `value`), "reflect" (mirror, edge not repeated) or "replicate" (repeat the edge)."""
        if mode not in ("constant", "reflect", "replicate"):
            raise ValueError(f"pad: mode must be 'constant', 'reflect' or 'replicate', got {mode!r}")
        padding = tuple(padding)
        if all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ValueError(f"pad: flat padding {padding} needs an even length of at most 2 * {self.ndim}")
            pairs = [(padding[2 * i], padding[2 * i + 1]) for i in range(len(padding) // 2)]
            padding = tuple([(0, 0)] * (self.ndim - len(pairs)) + pairs[::-1])
        if len(padding) != self.ndim:
            raise ValueError(f"pad: padding {padding} must have one (before, after) pair per dim ({self.ndim})")
        pairs_t = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        # negative amounts shrink first, the rest pads
        x = self.shrink([(max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs_t, self.shape)])
        pos = tuple((max(0, b), max(0, a)) for b, a in pairs_t)
        if mode != "constant":
            return x._pad_mode(pos, mode)
        out = Tensor(x.uop.pad(pos))
        if value == 0:
            return out
        mask = Tensor(Tensor.full(x.shape, True, dtypes.bool, x.device).uop.pad(pos))
        return mask.where(out, value)

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
        return Tensor(self.uop.shrink(bounds))

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        axes = _normalize_axis(axis, self.ndim, "flip")
        return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

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

    def __bool__(self) -> bool:
        raise TypeError("bool() of a Tensor is ambiguous (== is elementwise); use .item(), .any() or .all()")

    def logical_not(self) -> Tensor:
        return Tensor(self.cast(dtypes.bool).uop.logical_not())

    def maximum(self, x: Any) -> Tensor: return self._binary(Ops.MAX, x)
    def minimum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        if a.dtype == dtypes.bool or dtypes.is_unsigned(a.dtype):
            return (b < a).where(b, a)
        return -((-a).maximum(-b))

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
    def abs(self) -> Tensor:
        return self if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype) else self.maximum(-self)

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

    # *** elementwise: math ***
    def neg(self) -> Tensor:
        """-x."""
        return -self

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x)."""
        return self.sqrt().reciprocal()

    def cos(self) -> Tensor:
        """cos(x) = sin(pi/2 - x)."""
        return (math.pi / 2 - self.float_()).sin()

    def tan(self) -> Tensor:
        """sin(x) / cos(x)."""
        return self.sin() / self.cos()

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of x, in x's dtype (NaN gives 0, as torch)."""
        if self.dtype == dtypes.bool:
            return self
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def square(self) -> Tensor:
        """x * x."""
        return self * self

    def pow(self, exponent: Any) -> Tensor:
        """x ** exponent, elementwise; an int tensor to a non-negative int scalar stays int (exact), like torch.

        `Tensor([-2.0, 3.0]).pow(3)` -> [-8, 27]; a negative base to a non-integer exponent is NaN."""
        if isinstance(exponent, bool) or not isinstance(exponent, (int, float, Tensor)):
            raise TypeError(f"pow: exponent must be a Tensor, int or float, got {type(exponent).__name__}")
        if isinstance(exponent, int) and not dtypes.is_float(self.dtype):
            if exponent < 0:
                raise ValueError(f"pow: integers to negative integer powers are not allowed (exponent {exponent})")
            return self._int_pow(exponent)
        x, y = self._broadcasted(exponent)
        if not dtypes.is_float(x.dtype):  # int ** int tensor: through float64, exact below 2**53
            return Tensor(x.cast(dtypes.float64).uop.alu(Ops.POW, y.cast(dtypes.float64).uop)).cast(x.dtype)
        return Tensor(x.uop.alu(Ops.POW, y.uop))

    def _int_pow(self, n: int) -> Tensor:
        # square-and-multiply on the tensor's own dtype: wraps like torch's integer pow
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        out, base = Tensor.full(x.shape, 1, x.dtype, x.device), x
        while n:
            if n & 1:
                out = out * base
            base, n = base * base, n >> 1
        return out

    def __pow__(self, x: Any) -> Tensor: return self.pow(x)
    def __rpow__(self, x: Any) -> Tensor:
        base, _ = self._broadcasted(x, reverse=True)
        return base.pow(self)

    def _int_divmod(self, x: Any, reverse: bool) -> tuple[Tensor, Tensor]:
        # C's division truncates: step the quotient down (and the remainder over) where the signs differ
        a, b = self._broadcasted(x, reverse)
        q, r = Tensor(a.uop.alu(Ops.IDIV, b.uop)), Tensor(a.uop.alu(Ops.MOD, b.uop))
        fix = (r != 0).logical_and((r < 0) != (b < 0))
        return fix.where(q - 1, q), fix.where(r + b, r)

    def __floordiv__(self, x: Any) -> Tensor: return self._floordiv(x, False)
    def __rfloordiv__(self, x: Any) -> Tensor: return self._floordiv(x, True)
    def __mod__(self, x: Any) -> Tensor: return self._mod(x, False)
    def __rmod__(self, x: Any) -> Tensor: return self._mod(x, True)

    def _floordiv(self, x: Any, reverse: bool) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return (a / b).floor()
        if a.dtype == dtypes.bool:
            raise TypeError("floor_divide: bool tensors cannot be divided")
        return a._int_divmod(b, False)[0]

    def _mod(self, x: Any, reverse: bool) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a - (a / b).floor() * b
        if a.dtype == dtypes.bool:
            raise TypeError("remainder: bool tensors have no remainder")
        return a._int_divmod(b, False)[1]

    def floor_divide(self, x: Any) -> Tensor:
        """a // b rounded toward -inf, as Python and torch (`//`)."""
        return self._floordiv(x, False)

    def remainder(self, x: Any) -> Tensor:
        """a % b with the sign of b, as Python and torch (`%`)."""
        return self._mod(x, False)

    def trunc(self) -> Tensor:
        """x rounded toward zero (ints unchanged)."""
        return Tensor(self.uop.alu(Ops.TRUNC)) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Tensor:
        """The largest integer <= x (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return t - (self < t).cast(self.dtype)

    def ceil(self) -> Tensor:
        """The smallest integer >= x (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return t + (self > t).cast(self.dtype)

    def round(self) -> Tensor:
        """x rounded to the nearest integer, halves to even (as torch.round): `Tensor([0.5, 1.5, -2.5]).round()` ->
        [0, 2, -2]."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        frac = (self - t).abs()  # exact: t and self share the exponent range
        odd = (t - (t * 0.5).trunc() * 2) != 0
        up = (frac > 0.5).logical_or((frac == 0.5).logical_and(odd))
        return t + up.where(self.sign(), 0.0).cast(self.dtype)

    def isnan(self) -> Tensor:
        """True where x is NaN."""
        return self != self if dtypes.is_float(self.dtype) else Tensor.full(self.shape, False, dtypes.bool, self.device)

    def isinf(self) -> Tensor:
        """True where x is +inf or -inf."""
        if not dtypes.is_float(self.dtype):
            return Tensor.full(self.shape, False, dtypes.bool, self.device)
        return (self == math.inf).logical_or(self == -math.inf)

    def isfinite(self) -> Tensor:
        """True where x is neither NaN nor infinite."""
        return self.isnan().logical_or(self.isinf()).logical_not()

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self)."""
        return self + (end - self) * weight

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        """x limited to [min_, max_] (either may be None). `Tensor([-2, 5]).clip(0, 3)` -> [0, 3]."""
        if min_ is None and max_ is None:
            raise ValueError("clip: at least one of min_ and max_ must be given")
        out = self if min_ is None else self.maximum(min_)
        return out if max_ is None else out.minimum(max_)

    clamp = clip

    # *** elementwise: activations ***
    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x where x > 0, else neg_slope * x."""
        return (self > 0).where(self, self * neg_slope)

    def silu(self) -> Tensor:
        """x * sigmoid(x)."""
        return self * self.sigmoid()

    swish = silu

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU: x * Phi(x) exactly through erf (`approximate="none"`) or by the tanh formula (`"tanh"`)."""
        if approximate == "tanh":
            x = self.float_()
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return 0.5 * self * (1 + (self.float_() * (1 / math.sqrt(2))).erf())

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as torch)."""
        bx = self.float_() * beta
        soft = (bx.relu() + (1 + (-bx.abs()).exp()).log()) * (1 / beta)
        return (bx > threshold).where(self.float_(), soft)

    def erf(self) -> Tensor:
        """The error function, by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
        x = self.float_()
        t = 1 / (1 + 0.3275911 * x.abs())
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return x.sign() * (1 - poly * (-x * x).exp())

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val]."""
        return self.clip(min_val, max_val)

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (exp(x) - 1)."""
        return (self > 0).where(self.float_(), alpha * (self.exp() - 1))

    # *** elementwise: logic and bits ***
    def logical_and(self, x: Any) -> Tensor:
        """Elementwise `and` of the truth values."""
        a, b = self._broadcasted(x)
        return Tensor(a.cast(dtypes.bool).uop.alu(Ops.AND, b.cast(dtypes.bool).uop))

    def logical_or(self, x: Any) -> Tensor:
        """Elementwise `or` of the truth values."""
        a, b = self._broadcasted(x)
        return Tensor(a.cast(dtypes.bool).uop.alu(Ops.OR, b.cast(dtypes.bool).uop))

    def logical_xor(self, x: Any) -> Tensor:
        """Elementwise `xor` of the truth values."""
        a, b = self._broadcasted(x)
        return Tensor(a.cast(dtypes.bool).uop.alu(Ops.XOR, b.cast(dtypes.bool).uop))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        name = {Ops.AND: "bitwise_and", Ops.OR: "bitwise_or", Ops.XOR: "bitwise_xor"}[op]
        for v in (self, x):
            if (isinstance(v, Tensor) and dtypes.is_float(v.dtype)) or isinstance(v, float):
                got = v.dtype if isinstance(v, Tensor) else v
                raise TypeError(f"{name}: operands must be int or bool, got {got!r}")
        a, b = self._broadcasted(x, reverse)
        return Tensor(a.uop.alu(op, b.uop))

    def bitwise_and(self, x: Any) -> Tensor:
        """Elementwise `&` of int or bool tensors."""
        return self._bitwise(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Tensor:
        """Elementwise `|` of int or bool tensors."""
        return self._bitwise(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Tensor:
        """Elementwise `^` of int or bool tensors."""
        return self._bitwise(Ops.XOR, x)

    def bitwise_not(self) -> Tensor:
        """Elementwise `~`: logical not on bool, all bits flipped on ints."""
        if dtypes.is_float(self.dtype):
            raise TypeError(f"bitwise_not: the tensor must be int or bool, got {self.dtype!r}")
        return self.logical_not() if self.dtype == dtypes.bool else self ^ -1 if not dtypes.is_unsigned(
            self.dtype) else self ^ dtypes.max(self.dtype)

    def _shift(self, x: Any, op: Ops, reverse: bool = False) -> Tensor:
        name = "left_shift" if op is Ops.SHL else "right_shift"
        for v in (self, x):
            if (isinstance(v, Tensor) and not dtypes.is_int(v.dtype)) or isinstance(v, (float, bool)):
                raise TypeError(f"{name}: operands must be ints, got {v.dtype if isinstance(v, Tensor) else v!r}")
        a, b = self._broadcasted(x, reverse)
        return Tensor(a.uop.alu(op, b.uop))

    def __and__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x)
    def __rand__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, True)
    def __or__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x)
    def __ror__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, True)
    def __xor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x)
    def __rxor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, True)
    def __invert__(self) -> Tensor: return self.bitwise_not()
    def __lshift__(self, x: Any) -> Tensor: return self._shift(x, Ops.SHL)
    def __rlshift__(self, x: Any) -> Tensor: return self._shift(x, Ops.SHL, True)
    def __rshift__(self, x: Any) -> Tensor: return self._shift(x, Ops.SHR)
    def __rrshift__(self, x: Any) -> Tensor: return self._shift(x, Ops.SHR, True)
    def lshift(self, x: Any) -> Tensor:
        """x << bits, on ints."""
        return self._shift(x, Ops.SHL)
    def rshift(self, x: Any) -> Tensor:
        """x >> bits (arithmetic on signed ints)."""
        return self._shift(x, Ops.SHR)

    # *** reductions (full API) ***
    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The product over `axis` (all by default); bool and ints accumulate in int64, as torch."""
        return self.cast(_int64_acc(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1) -> Tensor:
        """The variance over `axis`, divided by N - correction (correction=1: the unbiased estimate)."""
        axes = _normalize_axis(axis, self.ndim, "var")
        n = int(prod([self.shape[a] for a in axes]))
        x = self.float_()
        sq = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim)
        return sq / Tensor(max(0, n - correction), self.device, dtypes.float32).cast(sq.dtype)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int | float = 1) -> Tensor:
        """The standard deviation over `axis`: sqrt(var(axis, keepdim, correction))."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where any element over `axis` is nonzero."""
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where every element over `axis` is nonzero."""
        return self.logical_not().any(axis, keepdim).logical_not()

    def _index_along(self, axis: int) -> Tensor:
        # an int ramp 0..n-1 shaped to broadcast along `axis`
        n = self.shape[axis]
        return Tensor.arange(n, device=self.device).reshape([n if i == axis else 1 for i in range(self.ndim)])

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int64) of the first largest element over `axis`, or of the flattened tensor for axis=None."""
        if axis is None:
            return self.flatten().argmax(0) if self.ndim else Tensor(0, self.device, dtypes.int64)
        if self.ndim == 0:
            _normalize_axis(axis, 0, "argmax")
            return Tensor(0, self.device, dtypes.int64)
        ax = _normalize_axis(axis, self.ndim, "argmax")[0]
        n = self.shape[ax]
        if n == 0:
            raise ValueError(f"argmax: cannot take the argmax over dim {ax} of size 0 (shape {self.shape})")
        is_max = self == self.max(ax, keepdim=True)
        if dtypes.is_float(self.dtype):  # NaN is the largest, as in torch
            is_max = is_max.logical_or(self.isnan())
        rev = (n - self._index_along(ax)).cast(dtypes.int32)
        return (n - is_max.where(rev, 0).max(ax, keepdim)).cast(dtypes.int64)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int64) of the first smallest element over `axis`, or of the flattened tensor for axis=None."""
        if self.dtype == dtypes.bool:
            return self.logical_not().argmax(axis, keepdim)
        return (-self if dtypes.is_float(self.dtype) else ~self).argmax(axis, keepdim)

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`, computed stably around the max."""
        axes = _normalize_axis(axis, self.ndim, "logsumexp")
        x = self.float_()
        m = x.max(axes, keepdim=True).detach()  # (a shift: the result does not depend on it, nor its gradient)
        m = m.isinf().where(0.0, m)
        out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def softmax(self, axis: int = -1) -> Tensor:
        """exp(x) / sum(exp(x)) over `axis` (stable: the max is subtracted first); 3 kernels at most."""
        ax = _normalize_axis(axis, self.ndim, "softmax")
        x = self.float_()
        # the max is a shift the result does not depend on: detached, the backward is p * (g - sum(p * g)) and no
        # gradient is routed through the max's argmax (exactly zero, at the price of two more reduce kernels)
        e = (x - x.max(ax, keepdim=True).detach()).exp()
        return e / e.sum(ax, keepdim=True)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """log(softmax(x)) over `axis`, computed stably: x - max - log(sum(exp(x - max)))."""
        ax = _normalize_axis(axis, self.ndim, "log_softmax")
        x = self.float_()
        shifted = x - x.max(ax, keepdim=True).detach()  # (a shift, as in softmax)
        return shifted - shifted.exp().sum(ax, keepdim=True).log()

    def cumsum(self, axis: int = 0) -> Tensor:
        """The running sum along `axis` (ints accumulate in int64, as torch): `Tensor([1, 2, 3]).cumsum()` ->
        [1, 3, 6]."""
        if self.ndim == 0:
            _normalize_axis(axis, 0, "cumsum")
            return self.cast(_int64_acc(self.dtype))
        ax = _normalize_axis(axis, self.ndim, "cumsum")[0]
        x = self.cast(_int64_acc(self.dtype)).transpose(ax, -1)
        n = x.shape[-1]
        # out[..., i] = sum_j x[..., j] * (j <= i): one reduction over a lower-triangular mask
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        out = keep.where(x.unsqueeze(-2), Tensor(0, self.device, x.dtype)).sum(-1).cast(x.dtype)
        return out.transpose(ax, -1)

    def cumprod(self, axis: int = 0) -> Tensor:
        """The running product along `axis`."""
        if self.ndim == 0:
            return self.cast(_int64_acc(self.dtype))
        ax = _normalize_axis(axis, self.ndim, "cumprod")[0]
        x = self.cast(_int64_acc(self.dtype)).transpose(ax, -1)
        n = x.shape[-1]
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        out = keep.where(x.unsqueeze(-2), Tensor(1, self.device, x.dtype)).prod(-1).cast(x.dtype)
        return out.transpose(ax, -1)

    def cummax(self, axis: int = 0) -> Tensor:
        """The running max along `axis` (values only)."""
        if self.ndim == 0:
            return self
        ax = _normalize_axis(axis, self.ndim, "cummax")[0]
        x = self.transpose(ax, -1)
        n = x.shape[-1]
        ramp = Tensor.arange(n, device=self.device)
        keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)
        low = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        return keep.where(x.unsqueeze(-2), Tensor(low, self.device, x.dtype)).max(-1).transpose(ax, -1)

    # *** movement and shape ***
    def view(self, *shape: Any) -> Tensor:
        """The same as reshape (every view here is lazy)."""
        return self.reshape(*shape)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Remove size-1 dims (all of them, or those in `dim`; a named dim that is not 1 is kept, as in torch)."""
        dims = _normalize_axis(dim, self.ndim, "squeeze") if dim is not None else tuple(range(self.ndim))
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dim at `dim` (-ndim-1 <= dim <= ndim)."""
        if not isinstance(dim, int) or not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(f"unsqueeze: dim {dim} is out of range for a tensor of {self.ndim} dims "
                             f"(expected [{-self.ndim - 1}, {self.ndim}])")
        dim = dim % (self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim (inclusive) into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (_normalize_axis(d, self.ndim, "flatten")[0] for d in (start_dim, end_dim))
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (int(prod(self.shape[start:end + 1])),) + self.shape[end + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dim `dim` into `sizes` (one may be -1)."""
        d = _normalize_axis(dim, self.ndim, "unflatten")[0]
        sizes = tuple(sizes)
        if sizes.count(-1) > 1:
            raise ValueError(f"unflatten: only one size can be -1, got {sizes}")
        known = int(prod([s for s in sizes if s != -1]))
        if -1 in sizes:
            if known == 0 or self.shape[d] % known:
                raise ValueError(f"unflatten: sizes {sizes} do not divide dim {d} of size {self.shape[d]}")
            sizes = tuple(self.shape[d] // known if s == -1 else s for s in sizes)
        elif known != self.shape[d]:
            raise ValueError(f"unflatten: sizes {sizes} multiply to {known}, dim {d} has size {self.shape[d]}")
        return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """Swap two dims (the same as transpose)."""
        return self.transpose(axis0, axis1)

    def repeat(self, *repeats: Any) -> Tensor:
        """Tile the tensor `repeats[i]` times along dim i (as torch.Tensor.repeat; extra leading repeats add dims)."""
        reps = _shape_args(repeats)
        if len(reps) < self.ndim:
            raise ValueError(f"repeat: needs at least {self.ndim} repeats for shape {self.shape}, got {reps}")
        if any(r < 0 for r in reps):
            raise ValueError(f"repeat: repeats must be non-negative, got {reps}")
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape([d for s in shape for d in (1, s)])
        x = x.expand([d for r, s in zip(reps, shape) for d in (r, s)])
        return x.reshape([r * s for r, s in zip(reps, shape)])

    def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along an existing dim: `a.cat(b, c, dim=1)` (all dims but `dim` must match)."""
        tensors = (self, *args)
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"cat: argument {i} is a {type(t).__name__}, not a Tensor")
        d = _normalize_axis(dim, self.ndim, "cat")[0] if self.ndim else _normalize_axis(dim, 0, "cat")[0]
        if self.ndim == 0:
            raise ValueError("cat: zero-dimensional tensors cannot be concatenated (use stack)")
        for i, t in enumerate(tensors):
            if t.ndim != self.ndim or any(a != b for j, (a, b) in enumerate(zip(t.shape, self.shape)) if j != d):
                raise ValueError(f"cat: tensor {i} has shape {t.shape}, which does not match {self.shape} "
                                 f"outside dim {d}")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        total, offset, out = sum(t.shape[d] for t in tensors), 0, None
        for t in tensors:
            pad = [(0, 0)] * self.ndim
            pad[d] = (offset, total - offset - t.shape[d])
            offset += t.shape[d]
            part = Tensor(t.cast(dt).uop.pad(tuple(pad)))
            out = part if out is None else Tensor(out.uop.alu(Ops.OR if dt == dtypes.bool else Ops.ADD, part.uop))
        assert out is not None
        return out

    def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Join same-shape tensors along a new dim: `a.stack(b, dim=0)` -> shape (2, *a.shape)."""
        for i, t in enumerate(args):
            if not isinstance(t, Tensor):
                raise TypeError(f"stack: argument {i + 1} is a {type(t).__name__}, not a Tensor")
            if t.shape != self.shape:
                raise ValueError(f"stack: tensor {i + 1} has shape {t.shape}, expected {self.shape} like tensor 0")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(f"stack: dim {dim} is out of range for {self.ndim + 1} dims")
        return self.unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in args), dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Cut along `dim` into pieces of `sizes` each (the last may be smaller), or of the listed sizes."""
        d = _normalize_axis(dim, self.ndim, "split")[0]
        n = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split: split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        sizes = list(sizes)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ValueError(f"split: sizes {sizes} do not add up to dim {d} of size {n}")
        bounds = [(0, s) for s in self.shape]
        out, start = [], 0
        for s in sizes:
            bounds[d] = (start, start + s)
            out.append(self.shrink(bounds))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Cut along `dim` into `chunks` pieces of ceil(n / chunks) each (fewer when n is small), as torch."""
        if not isinstance(chunks, int) or chunks <= 0:
            raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
        d = _normalize_axis(dim, self.ndim, "chunk")[0]
        n = self.shape[d]
        return self.split(max(1, -(-n // chunks)), d)

    def _tri_mask(self, diagonal: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"{'triu' if upper else 'tril'}: needs at least 2 dims, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = Tensor.arange(r, device=self.device).reshape(r, 1)
        cols = Tensor.arange(c, device=self.device).reshape(1, c)
        return (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two dims (j - i <= diagonal kept), the rest zero."""
        return self._tri_mask(diagonal, False).where(self, Tensor(0, self.device, self.dtype))

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two dims (j - i >= diagonal kept), the rest zero."""
        return self._tri_mask(diagonal, True).where(self, Tensor(0, self.device, self.dtype))

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Shift elements along `dims` by `shifts`, wrapping around (dims=None: over the flattened tensor)."""
        if dims is None:
            if not isinstance(shifts, int):
                raise ValueError(f"roll: without dims, shifts must be one int, got {shifts!r}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts_t = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts_t) != len(dims_t):
            raise ValueError(f"roll: shifts {shifts_t} and dims {dims_t} must have the same length")
        x = self
        for s, d in zip(shifts_t, dims_t):
            d = _normalize_axis(d, self.ndim, "roll")[0]
            n = self.shape[d]
            if n == 0 or s % n == 0:
                continue
            k = s % n
            a, b = x.split([n - k, k], d)
            x = b.cat(a, dim=d)
        return x

    def _pad_mode(self, padding: tuple[tuple[int, int], ...], mode: str) -> Tensor:
        x = self
        for d, (before, after) in enumerate(padding):
            n = x.shape[d]
            if not before and not after:
                continue
            if mode == "reflect" and (before >= n or after >= n):
                raise ValueError(f"pad: reflect padding {(before, after)} of dim {d} must be smaller than its size {n}")
            if mode == "replicate" and n == 0:
                raise ValueError(f"pad: replicate padding needs a non-empty dim {d}")
            idx: list[Any] = [slice(None)] * x.ndim
            parts = []
            if before:
                idx[d] = slice(before, 0, -1) if mode == "reflect" else slice(0, 1)
                part = x[tuple(idx)]
                parts.append(part if mode == "reflect" else part.expand(
                    [before if i == d else s for i, s in enumerate(part.shape)]))
            parts.append(x)
            if after:
                stop = n - 2 - after
                idx[d] = slice(n - 2, stop if stop >= 0 else None, -1) if mode == "reflect" else slice(n - 1, n)
                part = x[tuple(idx)]
                parts.append(part if mode == "reflect" else part.expand(
                    [after if i == d else s for i, s in enumerate(part.shape)]))
            x = parts[0].cat(*parts[1:], dim=d)
        return x

    # *** creation (full API) ***
    @staticmethod
    def linspace(start: int | float, end: int | float, steps: int, dtype: DType | None = None,
                 device: str | None = None) -> Tensor:
        """`steps` evenly spaced values from start to end inclusive (computed from both ends, as torch)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
        dt = dtype or dtypes.float32
        if steps <= 1:
            return Tensor.full((steps,), float(start), dtypes.float32, device).cast(dt)
        step = (end - start) / (steps - 1)
        i = Tensor.arange(steps, device=device).float()
        out = (i < steps // 2).where(start + step * i, end - step * (steps - 1 - i))
        return out.cast(dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """The n x m identity matrix (m defaults to n)."""
        m = n if m is None else m
        for name, v in (("n", n), ("m", m)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"eye: {name} must be a non-negative int, got {v!r}")
        same = Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)
        return same.cast(dtype or dtypes.float32)

    def full_like(self, value: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """A tensor of this one's shape filled with `value` (this dtype and device unless given)."""
        return Tensor.full(self.shape, value, dtype or self.dtype, device or self.device)

    def zeros_like(self, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Zeros of this tensor's shape (and dtype and device unless given)."""
        return self.full_like(0, dtype, device)

    def ones_like(self, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Ones of this tensor's shape (and dtype and device unless given)."""
        return self.full_like(1, dtype, device)

    # *** random: threefry2x32 on an index ramp, so a seed gives the same numbers on every device ***
    _seed: int = 0
    _rng_counter: int = 0

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Restart the random stream: the same seed gives the same numbers afterwards, on every device."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def rng_state() -> tuple[int, int]:
        """(seed, calls made since manual_seed): with `set_rng_state` a checkpoint resumes the random stream."""
        return Tensor._seed, Tensor._rng_counter

    @staticmethod
    def set_rng_state(state: tuple[int, int]) -> None:
        seed, counter = state
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (seed, counter)):
            raise ValueError(f"set_rng_state: expected (seed, counter) of ints >= 0, got {state!r}")
        Tensor._seed, Tensor._rng_counter = seed, counter

    @staticmethod
    def _random_bits(n: int, device: str | None) -> Tensor:
        # n uint32 words: threefry2x32(key=(seed, call counter), counter=(i, 0)) for i < ceil(n/2), both words kept
        key = (Tensor._seed & 0xFFFFFFFF, ((Tensor._seed >> 32) ^ Tensor._rng_counter) & 0xFFFFFFFF)
        Tensor._rng_counter += 1
        half = (n + 1) // 2
        ctr = Tensor.arange(half, device=device).cast(dtypes.uint32)
        x0, x1 = _threefry2x32(ctr, Tensor.full(ctr.shape, 0, dtypes.uint32, device), key)
        return x0.cat(x1)[:n]

    @staticmethod
    def rand(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Uniform random numbers in [0, 1) (24 random bits each), from the stream set by manual_seed."""
        shape_t = _random_shape(shape, "rand")
        dt = dtype or dtypes.float32
        if not dtypes.is_float(dt):
            raise TypeError(f"rand: dtype must be a float type, got {dt!r}")
        bits = Tensor._random_bits(int(prod(shape_t)), device)
        return ((bits >> 8).cast(dtypes.float32) * (1 / (1 << 24))).reshape(shape_t).cast(dt)

    @staticmethod
    def randn(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Standard normal random numbers (Box-Muller on two uniforms)."""
        shape_t = _random_shape(shape, "randn")
        u = Tensor.rand(2, *shape_t, device=device)
        u1, u2 = u[0], u[1]
        out = (-2 * (1 - u1).log()).sqrt() * (2 * math.pi * u2).cos()
        return out.cast(dtype or dtypes.float32)

    @staticmethod
    def randint(*shape: Any, low: int = 0, high: int = 10, dtype: DType | None = None,
                device: str | None = None) -> Tensor:
        """Uniform random ints in [low, high)."""
        if not isinstance(low, int) or not isinstance(high, int) or low >= high:
            raise ValueError(f"randint: need ints low < high, got low={low!r} high={high!r}")
        dt = dtype or dtypes.int32
        if not dtypes.is_int(dt):
            raise TypeError(f"randint: dtype must be an int type, got {dt!r}")
        u = Tensor.rand(*shape, dtype=dtypes.float64, device=device)
        return ((u * (high - low)).floor() + low).cast(dt).minimum(high - 1)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | None = None,
                device: str | None = None) -> Tensor:
        """Uniform random numbers in [low, high)."""
        return (Tensor.rand(*shape, device=device) * (high - low) + low).cast(dtype or dtypes.float32)

    @staticmethod
    def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | None = None,
               device: str | None = None) -> Tensor:
        """Normal random numbers of the given mean and std."""
        return (Tensor.randn(*shape, device=device) * std + mean).cast(dtype or dtypes.float32)

    @staticmethod
    def kaiming_uniform(*shape: Any, a: float = 0.01, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """He-uniform init: U(-b, b) with b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in), fan_in = prod(shape[1:])."""
        shape_t = _random_shape(shape, "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(1, int(prod(shape_t[1:]))))
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def glorot_uniform(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Xavier-uniform init: U(-b, b) with b = sqrt(6 / (fan_in + fan_out)) (fan_in = shape[0], as tinygrad)."""
        shape_t = _random_shape(shape, "glorot_uniform")
        fans = shape_t[0] + int(prod(shape_t[1:])) if shape_t else 1
        bound = math.sqrt(6 / max(1, fans))
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    # *** indexing (full API) ***
    def _basic_index(self, dim: int, k: Any, src_dim: int) -> tuple[Tensor, bool]:
        # one int or slice on dim `dim` (dim `src_dim` of the tensor indexed): (the result, whether the dim is gone)
        s = self.shape[dim]
        if isinstance(k, int):
            if not -s <= k < s:
                raise IndexError(f"index {k} is out of range for dim {src_dim} of size {s}")
            k %= s
            bounds = [(0, n) for n in self.shape]
            bounds[dim] = (k, k + 1)
            return self.shrink(bounds), True
        start, stop, step = k.indices(s)
        if step == 0:
            raise ValueError("slice step cannot be zero")
        length = len(range(start, stop, step))
        x = self
        if step < 0:  # flip, then walk forward from the mirrored start
            x, start, step = x.flip(dim), s - 1 - start, -step
        bounds = [(0, n) for n in x.shape]
        bounds[dim] = (start, start + (length - 1) * step + 1) if length else (0, 0)
        x = x.shrink(bounds)
        if step > 1 and length > 1:
            pad = [(0, 0)] * x.ndim
            pad[dim] = (0, length * step - x.shape[dim])
            x = Tensor(x.uop.pad(tuple(pad)))
            x = x.reshape(x.shape[:dim] + (length, step) + x.shape[dim + 1:])
            bounds = [(0, n) for n in x.shape]
            bounds[dim + 1] = (0, 1)
            x = x.shrink(bounds).reshape(x.shape[:dim] + (length,) + x.shape[dim + 2:])
        return x, False

    def __getitem__(self, idx: Any) -> Tensor:
        """numpy indexing: ints, slices (any step), None, ..., int tensors/lists (advanced, via one-hot masks) and
        bool masks (realized to find the selected positions)."""
        idx = list(idx) if isinstance(idx, tuple) else [idx]
        idx = [_as_index(k, self.device) for k in idx]
        # a bool mask stands for the int index of each of its dims
        expanded: list[Any] = []
        for k in idx:
            if isinstance(k, Tensor) and k.dtype == dtypes.bool:
                expanded.extend(Tensor(ix.astype(np.int32), self.device) for ix in np.nonzero(k.numpy()))
            else:
                expanded.append(k)
        idx = expanded
        if sum(k is Ellipsis for k in idx) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        n_used = sum(1 for k in idx if k is not None and k is not Ellipsis)
        if n_used > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {n_used})")
        at = next((i for i, k in enumerate(idx) if k is Ellipsis), len(idx))
        idx = idx[:at] + [slice(None)] * (self.ndim - n_used) + idx[at + 1:]
        # dim: the dim of x the next index applies to; src: that dim in self (for messages); pos: dims of the result
        x, dim, src, pos = self, 0, 0, 0
        new_axes: list[int] = []
        adv: list[tuple[int, Tensor]] = []  # (position in the result, index tensor)
        for k in idx:
            if k is None:
                new_axes.append(pos)
                pos += 1
                continue
            if isinstance(k, Tensor):
                _check_index_bounds(k, x.shape[dim], src)
                adv.append((pos, k))
            elif isinstance(k, (int, slice)):
                x, gone = x._basic_index(dim, k, src)
                if gone:
                    x = x.reshape(x.shape[:dim] + x.shape[dim + 1:])
                    src += 1
                    continue
            else:
                raise IndexError(f"unsupported index {k!r}: use ints, slices, None, ..., int or bool tensors")
            dim, src, pos = dim + 1, src + 1, pos + 1
        shape = list(x.shape)
        for p in new_axes:  # positions in the result, in increasing order
            shape.insert(p, 1)
        x = x.reshape(shape)
        return x._advanced_index([p for p, _ in adv], [k for _, k in adv]) if adv else x

    def __setitem__(self, idx: Any, value: Any) -> None:
        """Write `value` (broadcast) into `self[idx]`, in place, for basic indices (ints, slices with any step, None,
        ...) or one bool mask: `x[1:, ::2] = 0.0`, `x[x < 0] = 0`. A view of a realized tensor writes through to it;
        anything else is realized first. The write is realized at once."""
        if isinstance(value, Tensor) and value.device != self.device:
            raise ValueError(f"setitem: value is on {value.device}, the tensor on {self.device}")
        val = value.cast(self.dtype) if isinstance(value, Tensor) else Tensor(value, self.device, self.dtype)
        if isinstance(idx, Tensor) and idx.dtype == dtypes.bool:
            try:
                new = idx.where(val, self)
            except ValueError:
                raise ValueError(f"setitem: mask of shape {idx.shape} and value of shape {val.shape} do not "
                                 f"broadcast to {self.shape}") from None
            if new.shape != self.shape:
                raise ValueError(f"setitem: mask of shape {idx.shape} does not broadcast to {self.shape}")
        else:
            new = self._scatter_basic(idx if isinstance(idx, tuple) else (idx,), val)
        if self.uop.op is Ops.ASSIGN:
            self.realize()  # a pending assign to the same tensor lands first
        base = self.uop
        while base.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP):  # a view of a buffer writes through
            base = base.src[0]
        if base.op is not Ops.BUFFER:
            self.realize()
        self.uop = self.uop.assign(new.cast(self.dtype).uop)
        self.realize()

    def _scatter_basic(self, idx: tuple[Any, ...], val: Tensor) -> Tensor:
        # self with self[idx] replaced by val: each indexed dim's view is undone by pads (and a flip for step < 0)
        items = [_as_index(k, self.device) for k in idx]
        if any(isinstance(k, Tensor) for k in items):
            raise IndexError("setitem: int-tensor (advanced) indices are not supported; use ints, slices, None, ... "
                             "or one bool mask")
        view = self[tuple(items)]
        try:
            val = val.expand(broadcast_shape(val.shape, view.shape)) if val.shape != view.shape else val
        except ValueError:
            val = None  # type: ignore[assignment]
        if val is None or val.shape != view.shape:
            raise ValueError(f"setitem: cannot broadcast the value to the indexed shape {view.shape}")
        n_used = sum(1 for k in items if k is not None and k is not Ellipsis)
        at = next((i for i, k in enumerate(items) if k is Ellipsis), len(items))
        items = items[:at] + [slice(None)] * (self.ndim - n_used) + items[at + 1:]
        # value dims per dim of self: None dims dropped, int dims back as size 1
        shape, vi = [], 0
        for k in items:
            if k is None:
                vi += 1
            elif isinstance(k, int):
                shape.append(1)
            else:
                shape.append(val.shape[vi])
                vi += 1
        val = val.reshape(shape)
        mask = Tensor.full(val.shape, True, dtypes.bool, self.device)
        for d, k in enumerate(k for k in items if k is not None):
            val, mask = (_unindex_dim(t, d, k, self.shape[d]) for t in (val, mask))
        return mask.where(val, self)

    def _advanced_index(self, dims: list[int], index: list[Tensor]) -> Tensor:
        # numpy rules: the broadcast index shape replaces the indexed dims where they sit if they are adjacent,
        # else it goes first. out[rest, B] = sum over the indexed dims of x * onehot(index)
        for k in index:
            if not dtypes.is_int(k.dtype):
                raise IndexError(f"tensors used as indices must be int or bool, got {k.dtype!r}")
        try:
            bshape = broadcast_shape(*(k.shape for k in index))
        except ValueError:
            raise IndexError(f"shape mismatch: index arrays of shapes {[k.shape for k in index]} cannot be "
                             "broadcast together") from None
        rest = [i for i in range(self.ndim) if i not in dims]
        x = self.permute(rest + dims)
        nb, nk = len(bshape), len(dims)
        x = x.reshape(x.shape[:len(rest)] + (1,) * nb + x.shape[len(rest):])
        mask: Tensor | None = None
        for j, (d, k) in enumerate(zip(dims, index)):
            size = self.shape[d]
            k = k.cast(dtypes.int32)
            k = (k < 0).where(k + size, k).expand(bshape)
            ramp = Tensor.arange(size, device=self.device).reshape((1,) * nb + tuple(
                size if i == j else 1 for i in range(nk)))
            hit = k.reshape(bshape + (1,) * nk) == ramp
            mask = hit if mask is None else mask.logical_and(hit)
        assert mask is not None
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        out = mask.where(x, zero).sum(tuple(range(x.ndim - nk, x.ndim))).cast(self.dtype)
        adjacent = dims == list(range(dims[0], dims[0] + nk))
        if adjacent and dims[0] > 0:
            lead = len([r for r in rest if r < dims[0]])
            order = list(range(lead)) + list(range(len(rest), len(rest) + nb)) + list(range(lead, len(rest)))
            out = out.permute(order)
        elif not adjacent or dims[0] == 0:
            out = out.permute(list(range(len(rest), len(rest) + nb)) + list(range(len(rest))))
        return out

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim` (torch.gather); index may be smaller
        than self in the other dims."""
        d = _normalize_axis(dim, self.ndim, "gather")[0]
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError(f"gather: index must be an int Tensor, got {getattr(index, 'dtype', type(index))!r}")
        if index.ndim != self.ndim or any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
            raise ValueError(f"gather: index shape {index.shape} does not fit self shape {self.shape} outside dim {d}")
        size = self.shape[d]
        _check_index_bounds(index, size, d, low=0, what="gather: ")
        x = self.shrink([(0, s) if j == d else (0, i) for j, (i, s) in enumerate(zip(index.shape, self.shape))])
        # x with dim d moved last, then broadcast over the index positions along d
        x = x.permute([j for j in range(self.ndim) if j != d] + [d]).unsqueeze(d).expand(index.shape + (size,))
        hit = index.cast(dtypes.int32).unsqueeze(-1) == Tensor.arange(size, device=self.device)
        zero = Tensor(False if self.dtype == dtypes.bool else 0, self.device, self.dtype)
        return hit.where(x, zero).sum(-1).cast(self.dtype)

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """int64 one-hot vectors along a new last dim (num_classes=-1: max + 1, which realizes the tensor)."""
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot: the tensor must be int, got {self.dtype!r}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"one_hot: num_classes must be a non-negative int or -1, got {num_classes!r}")
        ramp = Tensor.arange(num_classes, device=self.device)
        return (self.cast(dtypes.int32).unsqueeze(-1) == ramp).cast(dtypes.int64)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """`value` where `mask` is True, else self (mask broadcasts)."""
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask))!r}")
        if isinstance(value, Tensor):
            value = value.cast(self.dtype)
        else:
            value = Tensor(value, self.device, self.dtype)
        out = mask.where(value, self)
        return out.cast(self.dtype)

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

    # *** autograd and in-place assignment ***
    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
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
        root = realize.unrealize(self.uop, {t.uop for t in targets})
        grads = uop_gradient(root, [t.uop for t in targets], gradient.cast(self.dtype).uop)
        out = []
        for i, t in enumerate(targets):
            if (g := grads.get(t.uop)) is None:
                raise ValueError(f"gradient: target {i} (shape {t.shape}) is not used to compute this tensor")
            out.append(Tensor(g))
        return out

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into `.grad` of every tensor with requires_grad=True that self depends on."""
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"backward: only a float tensor can be differentiated, this one is {self.dtype!r}")
        in_graph = set(realize.unrealize(self.uop, set()).toposort(gate=lambda u: u.op is not Ops.DETACH))
        leaves = [t for t in list(realize.live) if t.requires_grad and t.uop in in_graph]
        if not leaves:
            raise ValueError("backward: no tensor with requires_grad=True is used to compute this tensor")
        unique = list(dict.fromkeys(t.uop for t in leaves))
        grads = dict(zip(unique, self.gradient(*(Tensor(u) for u in unique), gradient=gradient)))
        for t in leaves:
            g = grads[t.uop]
            if t.grad is None:
                t.grad = g
            elif t.grad.shape != g.shape or t.grad.dtype != g.dtype:
                t.grad = t.grad + g
            elif (u := t.grad.uop).op is Ops.ASSIGN:  # a pending in-place accumulation: add g to its value
                t.grad.uop, t.grad.seq = u.src[0].assign((Tensor(u.src[1]) + g).uop), realize.next_seq()
            elif realize.is_realized(u):
                t.grad.assign(t.grad + g)  # in place, like PyTorch: a persistent grad buffer (optimizers) stays put
            else:
                t.grad = t.grad + g
        return self

    def detach(self) -> Tensor:
        """The same values, with no gradient flowing back through them."""
        return Tensor(self.uop.detach(), requires_grad=False)

    def assign(self, x: Any) -> Tensor:
        """Write x into this (realized) tensor's buffer: the Tensor keeps its identity, its value becomes x."""
        x = x if isinstance(x, Tensor) else Tensor(x, self.device, self.dtype)
        if x.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {x.dtype!r} differs from the target's {self.dtype!r}")
        if x.device != self.device:
            raise ValueError(f"assign: value is on {x.device}, the target on {self.device}")
        if self.uop.op is Ops.ASSIGN:
            self.realize()  # a pending assign to the same tensor lands first
        base = self.uop
        while base.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP):
            base = base.src[0]
        if base.op not in (Ops.BUFFER, Ops.BUFFER_VIEW):
            raise ValueError("assign: the target must be a realized tensor (or a view of one); realize() it first")
        self.uop, self.seq = self.uop.assign(x.expand(self.shape).uop), realize.next_seq()
        return self


def _check_index_bounds(index: Tensor, size: int, dim: int, low: int | None = None, what: str = "") -> None:
    """IndexError for an int index tensor with a value outside [low, size), low = -size by default (numpy's negative
    indices; gather takes none). It reads the index values: a sync."""
    if not dtypes.is_int(index.dtype) or index.numel() == 0:
        return
    values = index.numpy()
    lo, hi = int(values.min()), int(values.max())
    if lo < (-size if low is None else low) or hi >= size:
        bad = hi if hi >= size else lo
        raise IndexError(f"{what}index {bad} is out of range for dim {dim} of size {size}")


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
