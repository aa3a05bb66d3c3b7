"""Data types: scalars, vectors, pointers, the promotion lattice and numpy interop."""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from enum import Enum
from typing import Any


class AddrSpace(Enum):
    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar or vector type. `count > 1` is a vector of `count` scalars of `name`.

    DTypes are interned (one object per type, vectors and pointers cached), so `==` and `hash` are identity: fast in
    the hash-consing key of every UOp."""

    priority: int  # order in the promotion lattice within a kind
    itemsize: int  # bytes of one element (of the whole vector for vectors)
    name: str
    fmt: str | None  # struct format character, None where struct has none
    count: int = 1

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"

    def __reduce__(self) -> tuple:
        return (_rebuild_dtype, (self.name, self.count))

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (
            other.priority, other.itemsize, other.name, other.count)

    def vec(self, count: int) -> DType:
        """The vector of `count` lanes of this scalar type."""
        if self.count != 1:
            raise TypeError(f"vec: {self!r} is already a vector; vectors of vectors are not allowed")
        if count < 1:
            raise ValueError(f"vec: count must be >= 1, got {count}")
        return self if count == 1 else _vec(self, count)

    def scalar(self) -> DType:
        """The element type of a vector (itself for a scalar)."""
        return self if self.count == 1 else _SCALARS[self.name]

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this type (-1: unknown size)."""
        return _ptr(self, size, addrspace)

    @property
    def bitsize(self) -> int:
        return self.itemsize * 8

    @property
    def min(self) -> int | float | bool:
        """The smallest finite value of this type (`dtypes.min(dt)`): `dtypes.int8.min == -128`."""
        return dtypes.min(self)

    @property
    def max(self) -> int | float | bool:
        """The largest finite value of this type (`dtypes.max(dt)`): `dtypes.uint8.max == 255`."""
        return dtypes.max(self)


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    base: DType = None  # type: ignore[assignment]
    addrspace: AddrSpace = AddrSpace.GLOBAL
    size: int = -1

    def __repr__(self) -> str:
        space = "" if self.addrspace is AddrSpace.GLOBAL else f", {self.addrspace}"
        return f"{self.base!r}.ptr({self.size}{space})"

    def __reduce__(self) -> tuple:
        return (_ptr, (self.base, self.size, self.addrspace))

    def vec(self, count: int) -> DType:
        raise TypeError(f"vec: pointer types cannot be vectorized ({self!r})")

    def scalar(self) -> DType:
        return self

    @property
    def itemsize_of_element(self) -> int:
        return self.base.itemsize


@functools.cache
def _vec(scalar: DType, count: int) -> DType:
    return DType(scalar.priority, scalar.itemsize * count, scalar.name, None, count)


@functools.cache
def _ptr(base: DType, size: int, addrspace: AddrSpace) -> PtrDType:
    return PtrDType(base.priority, base.itemsize, base.name, base.fmt, base.count, base, addrspace, size)


def _rebuild_dtype(name: str, count: int) -> DType:
    return _SCALARS[name].vec(count)


class dtypes:
    """The namespace of all dtypes and dtype helpers (`dtypes.float32`, `dtypes.is_float(dt)`)."""

    void = DType(-1, 0, "void", None)
    bool = DType(0, 1, "bool", "?")
    int8 = DType(1, 1, "int8", "b")
    uint8 = DType(2, 1, "uint8", "B")
    int16 = DType(3, 2, "int16", "h")
    uint16 = DType(4, 2, "uint16", "H")
    int32 = DType(5, 4, "int32", "i")
    uint32 = DType(6, 4, "uint32", "I")
    int64 = DType(7, 8, "int64", "q")
    uint64 = DType(8, 8, "uint64", "Q")
    # index: the integer of shapes and index arithmetic; unbounded in the IR, lowered to int32/int64 by codegen
    index = DType(9, 8, "index", None)
    fp8e4m3 = DType(10, 1, "fp8e4m3", None)
    fp8e5m2 = DType(11, 1, "fp8e5m2", None)
    float16 = DType(12, 2, "float16", "e")
    bfloat16 = DType(13, 2, "bfloat16", None)
    float32 = DType(14, 4, "float32", "f")
    float64 = DType(15, 8, "float64", "d")

    # aliases
    half = float16
    float = float32
    double = float64
    int = int32
    long = int64
    uint = uint32
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16

    # groups (filled in below)
    sints: tuple[DType, ...] = ()
    uints: tuple[DType, ...] = ()
    ints: tuple[DType, ...] = ()
    floats: tuple[DType, ...] = ()
    fp8s: tuple[DType, ...] = ()
    all: tuple[DType, ...] = ()

    @staticmethod
    def is_float(dt: DType) -> bool:
        return dt.scalar() in dtypes.floats

    @staticmethod
    def is_int(dt: DType) -> bool:
        return dt.scalar() in dtypes.ints

    @staticmethod
    def is_unsigned(dt: DType) -> bool:
        return dt.scalar() in dtypes.uints

    @staticmethod
    def is_bool(dt: DType) -> bool:
        return dt.scalar() == dtypes.bool

    @staticmethod
    def from_name(name: str) -> DType:
        """The scalar dtype called `name` ("float32", "half", ...)."""
        if isinstance(dt := getattr(dtypes, name, None), DType):
            return dt
        raise ValueError(f"dtype: unknown name {name!r}; known: {sorted(d.name for d in dtypes.all)}")

    @staticmethod
    def min(dt: DType) -> int | float | bool:
        """The smallest finite value of `dt` (False for bool)."""
        dt = dt.scalar()
        if dt == dtypes.bool:
            return False
        if dt in dtypes.uints:
            return 0
        if dt in dtypes.sints:
            return -(2 ** (dt.bitsize - 1))
        if dt == dtypes.index:
            return -(2**63)
        return -_FLOAT_MAX[dt.name]

    @staticmethod
    def max(dt: DType) -> int | float | bool:
        """The largest finite value of `dt` (True for bool)."""
        dt = dt.scalar()
        if dt == dtypes.bool:
            return True
        if dt in dtypes.uints:
            return 2**dt.bitsize - 1
        if dt in dtypes.sints:
            return 2 ** (dt.bitsize - 1) - 1
        if dt == dtypes.index:
            return 2**63 - 1
        return _FLOAT_MAX[dt.name]

    @staticmethod
    def from_py(x: Any) -> DType:
        """The default dtype of a Python value: bool, int32 or float32 (as PyTorch picks for scalars)."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.int32
        if isinstance(x, float):
            return dtypes.float32
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(v) for v in x), default=dtypes.float32)
        raise TypeError(f"dtype: cannot infer a dtype from {type(x).__name__}")


dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.ints = dtypes.sints + dtypes.uints + (dtypes.index,)
dtypes.fp8s = (dtypes.fp8e4m3, dtypes.fp8e5m2)
dtypes.floats = dtypes.fp8s + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.all = (dtypes.bool,) + dtypes.ints + dtypes.floats
_SCALARS: dict[str, DType] = {d.name: d for d in dtypes.all + (dtypes.void,)}
_FLOAT_MAX = {"fp8e4m3": 448.0, "fp8e5m2": 57344.0, "float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}

# *** promotion ***
# Each dtype lists the types it promotes to directly; the result of promote(a, b) is the least upper bound.
# Like PyTorch/numpy: bool < ints < floats; signed+unsigned of a size go to the next larger signed; any int with any
# float gives that float; float16 + bfloat16 -> float32.
_PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.fp8e4m3, dtypes.fp8e5m2),
    dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.fp8e4m3, dtypes.fp8e5m2),
    dtypes.index: (), dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _upper_bounds(dt: DType) -> frozenset[DType]:
    return frozenset([dt]).union(*(_upper_bounds(p) for p in _PROMO_LATTICE[dt]))


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype that every one of `ds` promotes to (`least_upper_dtype(bool, int8) == int8`)."""
    if not ds:
        raise ValueError("least_upper_dtype: needs at least one dtype")
    scalars = [d.scalar() for d in ds]
    if dtypes.index in scalars:
        if any(d != dtypes.index and d not in dtypes.ints + (dtypes.bool,) for d in scalars):
            raise TypeError(f"least_upper_dtype: index only promotes with ints, got {ds}")
        return dtypes.index
    common = functools.reduce(frozenset.intersection, (_upper_bounds(d) for d in scalars))
    if not common:
        raise TypeError(f"least_upper_dtype: no common dtype for {ds}")
    ret = min(common, key=lambda d: (d.priority, d.itemsize))
    # only int64 + uint64 leaves the ints without a float input: numpy gives float64, not the lattice's fp8
    return dtypes.float64 if ret in dtypes.floats and all(d in dtypes.ints + (dtypes.bool,) for d in scalars) else ret


def sum_acc_dtype(dt: DType) -> DType:
    """The accumulator dtype of a sum, as PyTorch picks: bool and every int (unsigned too) -> int64, floats keep
    theirs (as prod and cumsum)."""
    if dtypes.is_int(dt) or dt == dtypes.bool:
        return dtypes.int64
    return dt


# *** numpy interop ***
_NP_NAMES = {"bool": "bool", "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
             "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64", "float16": "float16",
             "float32": "float32", "float64": "float64"}


def to_numpy_dtype(dt: DType) -> Any:
    """The numpy dtype of `dt`. bfloat16 and fp8 have none in numpy: TypeError."""
    import numpy as np

    if dt.count != 1 or isinstance(dt, PtrDType) or dt.name not in _NP_NAMES:
        raise TypeError(f"to_numpy_dtype: {dt!r} has no numpy equivalent")
    return np.dtype(_NP_NAMES[dt.name])


def from_numpy_dtype(npdt: Any) -> DType:
    """The Ember dtype of a numpy dtype (or anything np.dtype accepts)."""
    import numpy as np

    name = np.dtype(npdt).name
    if name not in _NP_NAMES:
        raise TypeError(f"from_numpy_dtype: numpy dtype {name!r} is not supported; supported: {sorted(_NP_NAMES)}")
    return _SCALARS[name]


# *** Python value semantics of a dtype (used by constant folding and the PYTHON device) ***
def truncate(dt: DType, x: Any) -> Any:
    """`x` as a value of dtype `dt`: ints wrap, floats round to the format, bool is x != 0."""
    dt = dt.scalar()
    if dt == dtypes.bool:
        return bool(x)
    if dt == dtypes.index:
        return int(x)
    if dt in dtypes.ints:
        bits = dt.bitsize
        v = int(x) & ((1 << bits) - 1)
        return v - (1 << bits) if dt in dtypes.sints and v >= 1 << (bits - 1) else v
    x = float(x)
    if dt == dtypes.float64 or math.isnan(x) or math.isinf(x):
        return x
    if dt == dtypes.float32:
        try:
            return struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == dtypes.float16:
        try:
            return struct.unpack("e", struct.pack("e", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == dtypes.bfloat16:
        return _round_bfloat16(x)
    raise NotImplementedError(f"truncate: value semantics of {dt!r} are not implemented")


def _round_bfloat16(x: float) -> float:
    # round the float32 bits to the top 16, nearest-even
    try:
        bits = struct.unpack("I", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", bits))[0]
