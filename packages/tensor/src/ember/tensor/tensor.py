"""`Tensor`: a lazy n-d array over a UOp graph. Nothing runs until `realize()` (or `.numpy()`, `.item()`).

This module holds the class: construction from data, properties, realization, conversions and the autograd entry
points. The ops are mixins by job in ember/tensor/ops/ (creation, elementwise, activation, reduce, movement, indexing,
random); realization state lives in ember.tensor.realize."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ember.schedule import shard_axis as axis_of
from ember.tensor import engine, realize
from ember.tensor.ops import activation, creation, elementwise, indexing, movement, random, reduce
from ember.tensor.ops import nn as nn_ops
from ember.tensor.ops.args import ArgumentError, DTypeError, canonical_device, is_dtype_name, normalize_axis, to_dtype
from ember.uops import DType, Ops, UOp, dtypes, from_numpy_dtype, prod, shard_bounds, to_numpy_dtype
from ember.uops import gradient as uop_gradient

_NUMPY_NAMES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                          "float32", "float64"})


def _buffer_from_numpy(arr: np.ndarray, device: str | tuple[str, ...]) -> UOp:
    if isinstance(device, tuple):  # a copy on each device
        return UOp.mstack([_buffer_from_numpy(arr, d) for d in device], None)
    dtype = from_numpy_dtype(arr.dtype)
    buf = UOp(Ops.BUFFER, dtype, (UOp.unique(), UOp(Ops.DEVICE, arg=device)), arr.size)
    if arr.size:
        engine.buffer_for(buf).copyin(memoryview(np.ascontiguousarray(arr)).cast("B"))
        if arr.dtype.kind in "iu":  # ids known on the host: index checks need no device round trip
            realize.note_host_range(buf, int(arr.min()), int(arr.max()))
    return buf.reshape(arr.shape)


def _under_view(u: UOp) -> UOp:
    while u.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP):
        u = u.src[0]
    return u


class Tensor(creation.CreationMixin, random.RandomMixin, movement.MovementMixin, indexing.IndexingMixin,
             reduce.ReduceMixin, nn_ops.NNMixin, activation.ActivationMixin, elementwise.TensorElementwiseMixin):
    """A lazy tensor. `Tensor(np.ones((2, 3)))`, `Tensor([1, 2, 3], dtype=dtypes.int32)`, `Tensor(2.0)`."""

    __slots__ = ("uop", "requires_grad", "grad", "seq", "__weakref__")

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        # requires_grad: True (a leaf to differentiate), False (never), None (only if used where grads flow)
        dtype = to_dtype(dtype)  # (a name: "int32", 'half')
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        self.seq = realize.next_seq()  # when it was made (or last assigned): program order for shared memory
        # (an op's result, the hot path, is a UOp with its own device: the default device is not looked up)
        dev = canonical_device(device) if device is not None or not isinstance(data, UOp) else None
        if isinstance(data, UOp):
            # under no_grad a computed tensor is cut off from the graph that made it
            self.uop = data.detach() if no_grad.active and not realize.is_realized(data) and data.op not in \
                (Ops.DETACH, Ops.CONST) else data
        elif isinstance(data, Tensor):
            self.uop = data.to(dev).uop if device is not None else data.uop
        elif isinstance(data, (bool, int, float)):
            dt = dtype or dtypes.from_py(data)
            self.uop = UOp.const(dt, data, dev)
        elif isinstance(data, (list, tuple)) and data and all(isinstance(x, Tensor) for x in data):
            # a list of tensors (0-d ones: torch.tensor([loss1, loss2])): stacked, a copy as torch's
            stacked = Tensor.stack(list(data)).to(dev)
            self.uop = (stacked.cast(dtype) if dtype is not None else stacked).contiguous().detach().uop
        elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
            try:
                arr = np.asarray(data)
            except ValueError as e:  # (numpy's "inhomogeneous shape")
                raise ValueError(f"Tensor: the nested lists are ragged (rows of different lengths): {e}") from None
            if arr.dtype == object:
                raise TypeError("Tensor: ragged or non-numeric nested lists, or ints beyond 64 bits, are not supported")
            if dtype is None and not isinstance(data, (np.ndarray, np.generic)):
                dtype = dtypes.from_py(arr.reshape(-1).tolist()) if arr.size else dtypes.float32
            if dtype is not None and dtypes.is_int(dtype) and arr.dtype.kind in "iu" and arr.size:
                _check_int_range(arr, dtype)
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
    def device(self) -> Any:
        """The device name, or for a tensor on several devices (`shard`) the tuple of their names."""
        return self.uop.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(prod(self.shape))

    def dim(self) -> int:
        """The number of dims (torch's name for `ndim`)."""
        return self.ndim

    ndimension = dim

    def nelement(self) -> int:
        return self.numel()

    def size(self, dim: int | None = None) -> Any:
        """The shape, or with `dim` the size of that dim (torch.Tensor.size)."""
        return self.shape if dim is None else self.shape[normalize_axis(dim, self.ndim, "size")[0]]

    def element_size(self) -> int:
        """Bytes per element."""
        return int(self.dtype.itemsize)

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float (torch.Tensor.is_floating_point)."""
        return dtypes.is_float(self.dtype)

    def is_signed(self) -> bool:
        """Whether the dtype holds negative values (torch.Tensor.is_signed: floats and signed ints; not bool)."""
        return dtypes.is_float(self.dtype) or (dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype)
                                               and self.dtype != dtypes.bool)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set `requires_grad` in place; returns self."""
        self.requires_grad = requires_grad
        return self

    def equal(self, other: Tensor) -> bool:
        """True if `other` has this shape and the same values (torch.equal; reads both: a sync)."""
        if not isinstance(other, Tensor):
            raise TypeError(f"equal: other must be a Tensor, got {type(other).__name__}")
        return self.shape == other.shape and bool((self == other).all().item())

    def allclose(self, other: Tensor, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """Whether every element is close to `other`'s (torch.allclose; reads both: a sync)."""
        return bool(self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).all().item())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        """The tensors along dim 0, as torch; a 0-d tensor is not iterable (Python's fallback through __getitem__ gave
        an empty list)."""
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

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

    def to(self, device: Any = None, dtype: DType | str | None = None) -> Tensor:
        """This tensor on `device`; a tuple of devices puts a whole copy on each (`shard(devices)`), and a tensor on
        several devices `.to` one is gathered there. As torch's: `to(dtype)` casts (a DType or a dtype name, never a
        device's), `to(device, dtype)` and `to(dtype=...)` both, `to(other)` takes other's device and dtype."""
        if isinstance(device, Tensor):
            device, dtype = device.device, device.dtype
        elif isinstance(device, DType) or isinstance(device, str) and is_dtype_name(device):
            device, dtype = None, device
        out = self if dtype is None else self.cast(to_dtype(dtype))
        return out if device is None else out._to_device(device)

    def _to_device(self, device: str | tuple[str, ...]) -> Tensor:
        dev = canonical_device(device)
        if dev == self.device:
            return self
        if isinstance(dev, tuple) and not isinstance(self.device, tuple):
            return self.shard(dev)
        if isinstance(self.device, tuple):
            return Tensor(self.uop.copy_to_device(dev))
        return Tensor(UOp(Ops.COPY, self.dtype, (self.contiguous().uop, UOp(Ops.DEVICE, arg=dev))))

    # *** many devices ***
    def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor over several devices: split along `axis` in equal parts, part i on devices[i], or with
        `axis=None` a whole copy on each (replicated). Ops on sharded tensors run on every device; `.numpy()` gathers.

            x = Tensor.ones(8, 4).shard(("CPU:0", "CPU:1"), axis=0)  # rows 0-3 on CPU:0, 4-7 on CPU:1
        """
        devs = canonical_device(tuple(devices) if isinstance(devices, (list, tuple)) else devices)
        if not isinstance(devs, tuple):
            raise TypeError(f"shard: devices must be a tuple or list of device names, got {devices!r}")
        n = len(devs)
        if axis is not None:
            if self.ndim == 0:
                raise ValueError(f"shard: a 0-d tensor has no axis {axis} to split; use axis=None (a copy on each "
                                 "device)")
            axis = normalize_axis(axis, self.ndim, "shard")[0]
            if self.shape[axis] % n:
                raise ValueError(f"shard: axis {axis} of shape {self.shape} has {self.shape[axis]} items, which do not "
                                 f"split evenly over {n} devices; pad it to a multiple of {n} first (uneven shards "
                                 "are not supported)")
        if isinstance(self.device, tuple):
            if self.device != devs:  # onto other devices: through the first of them
                return self.to(devs[0]).shard(devs, axis)
            if axis_of(self.uop) == axis:
                return self
            return Tensor(UOp.mstack([self.uop.mselect(i, axis) for i in range(n)], axis))
        parts = []
        for i, d in enumerate(devs):
            part = self.uop if axis is None else self.uop.shrink(shard_bounds(self.shape, axis, i, n))
            # (a buffer stays where it is only as shard_'s own: another tensor's would be one replica written alone)
            # (shard_ passes its own buffer detached: that one stays; as before realize counted a detached buffer)
            parts.append(part.copy_to_device(d) if d != self.device or (part.op is not Ops.DETACH and
                                                                         realize.is_realized(part)) else part)
        return Tensor(UOp.mstack(parts, axis))

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """`shard` in place, computed now: the tensor (a parameter, say) keeps its identity and `requires_grad`."""
        # (detached: the sharded buffers are the tensor now, not a value computed from its old one)
        self.uop = self.detach().shard(devices, axis).realize().uop
        return self

    def shard_like(self, other: Tensor) -> Tensor:
        """This tensor sharded as `other` is: over its devices, along its axis."""
        if not isinstance(other.device, tuple):
            return self.to(other.device)
        return self.shard(other.device, axis_of(other.uop))

    @property
    def shard_axis(self) -> int | None:
        """The axis a multi-device tensor is split along (None: a whole copy on each device)."""
        if not isinstance(self.device, tuple):
            raise ValueError(f"shard_axis: the tensor is on one device ({self.device})")
        return axis_of(self.uop)

    def contiguous(self) -> Tensor:
        return Tensor(self.uop.contiguous())

    # *** conversions ***
    def cast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        assert dt is not None
        return self if dt == self.dtype else Tensor(self.uop.cast(dt))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def float_(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.float()

    # *** autograd and in-place assignment ***
    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as lazy tensors. `gradient` is the upstream gradient (default: 1 for a
        one-element tensor)."""
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"gradient: only a float tensor can be differentiated, this one is {self.dtype!r}")
        if gradient is None:
            if self.numel() != 1:
                raise ArgumentError(f"gradient: the tensor has shape {self.shape}; backward without `gradient` needs a "
                                 "one-element tensor (pass gradient= of the same shape)")
            gradient = Tensor.full(self.shape, 1.0, self.dtype, self.device)
        if gradient.shape != self.shape:
            raise ArgumentError(f"gradient: `gradient` has shape {gradient.shape}, the tensor has {self.shape}")
        root = realize.unrealize(self.uop, {t.uop for t in targets})
        grads = uop_gradient(root, [t.uop for t in targets], gradient.cast(self.dtype).uop)
        out = []
        for i, t in enumerate(targets):
            if (g := grads.get(t.uop)) is None:
                raise ArgumentError(f"gradient: target {i} (shape {t.shape}) is not used to compute this tensor")
            out.append(Tensor(g))
        return out

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into `.grad` of every tensor with requires_grad=True that self depends on."""
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"backward: only a float tensor can be differentiated, this one is {self.dtype!r}")
        in_graph = set(realize.unrealize(self.uop, set()).toposort(gate=lambda u: u.op is not Ops.DETACH))
        leaves = [t for t in list(realize.live) if t.requires_grad and t.uop in in_graph]
        if not leaves:
            raise ArgumentError("backward: no tensor with requires_grad=True is used to compute this tensor")
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
        realize.note_backward_root(self)
        return self

    def detach(self) -> Tensor:
        """The same values, with no gradient flowing back through them."""
        # (a constant has no gradient to stop: it stays a constant, which numpy() reads without a buffer)
        return Tensor(self.uop if self.uop.op is Ops.CONST else self.uop.detach(), requires_grad=False)

    def assign(self, x: Any) -> Tensor:
        """Write x into this (realized) tensor's buffer: the Tensor keeps its identity, its value becomes x."""
        x = x if isinstance(x, Tensor) else Tensor(x, self.device, self.dtype)
        if x.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {x.dtype!r} differs from the target's {self.dtype!r}")
        if x.device != self.device:
            raise ValueError(f"assign: value is on {x.device}, the target on {self.device}")
        if self.uop.op is Ops.ASSIGN:
            self.realize()  # a pending assign to the same tensor lands first
        top = _under_view(self.uop)  # a view of a buffer, or of a multi-device value whose parts are views of buffers
        bases = [_under_view(p) for p in top.src] if top.op is Ops.MSTACK else [top]
        if any(base.op not in (Ops.BUFFER, Ops.BUFFER_VIEW) for base in bases):
            raise ValueError("assign: the target must be a realized tensor (or a view of one); realize() it first")
        self.uop, self.seq = self.uop.assign(x.expand(self.shape).uop), realize.next_seq()
        return self


    # *** PyTorch's in-place forms: the new value assigned into this tensor's buffer (realized first) ***
    def _inplace(self, value: Any) -> Tensor:
        value = value if isinstance(value, Tensor) else Tensor(value, self.device, self.dtype)
        if not realize.is_realized(self.uop) and self.uop.op is not Ops.ASSIGN:
            self.realize()
        return self.assign(value.cast(self.dtype).expand(self.shape))

    def zero_(self) -> Tensor:
        return self._inplace(Tensor.zeros(*self.shape, dtype=self.dtype, device=self.device))

    def fill_(self, value: Any) -> Tensor:
        return self._inplace(Tensor.full(self.shape, value, self.dtype, self.device))

    def copy_(self, src: Tensor) -> Tensor:
        """src's values (broadcast, cast to this dtype, moved to this device) written into this tensor."""
        return self._inplace(src.to(self.device) if isinstance(src, Tensor) else src)

    def add_(self, x: Any, alpha: Any = None) -> Tensor:
        return self._inplace(self.add(x if alpha is None else x * alpha))

    def sub_(self, x: Any, alpha: Any = None) -> Tensor:
        return self._inplace(self.sub(x, alpha=alpha))

    def mul_(self, x: Any) -> Tensor:
        return self._inplace(self * x)

    def div_(self, x: Any) -> Tensor:
        return self._inplace(self / x)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        return self._inplace(self.clip(min, max))

    clip_ = clamp_

    def masked_fill_(self, mask: Tensor, value: Any) -> Tensor:
        return self._inplace(self.masked_fill(mask, value))

    def uniform_(self, a: float = 0.0, b: float = 1.0) -> Tensor:
        return self._inplace(Tensor.uniform(*self.shape, low=a, high=b, dtype=self.dtype, device=self.device))

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
        return self._inplace(Tensor.normal(*self.shape, mean=mean, std=std, dtype=self.dtype, device=self.device))

    def cpu(self) -> Tensor:
        """This tensor on the CPU device."""
        return self.to("CPU")

    def new_tensor(self, data: Any, dtype: DType | str | None = None) -> Tensor:
        """A tensor of `data` on this tensor's device, in this dtype unless `dtype` is given (torch's new_tensor)."""
        return Tensor(data, self.device, dtype if dtype is not None else self.dtype)


# the op modules build Tensors, and cannot import this module (Tensor is built on their mixins): they get the class here
for _ops_module in (activation, creation, elementwise, indexing, movement, nn_ops, random, reduce):
    _ops_module.Tensor = Tensor  # type: ignore[attr-defined]


class no_grad:
    """A context where new tensors do not carry gradients: `with no_grad(): w.assign(w - lr * w.grad)`."""

    active = 0

    def __enter__(self) -> no_grad:
        no_grad.active += 1
        return self

    def __exit__(self, *exc: object) -> None:
        no_grad.active -= 1


def _check_int_range(arr: np.ndarray, dtype: DType) -> None:
    # ints that do not fit the dtype are refused, as torch does (numpy's astype would wrap them silently); an unsigned
    # dtype takes negatives wrapped, as torch's (torch.tensor([-1], dtype=torch.uint8) is 255)
    low = dtypes.min(dtype) if not dtypes.is_unsigned(dtype) else -(1 << 63)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < low or hi > dtypes.max(dtype):
        raise ArgumentError(f"Tensor: value {lo if lo < low else hi} cannot be converted to {dtype!r} without "
                            f"overflow (it holds {dtypes.min(dtype)} to {dtypes.max(dtype)})")
