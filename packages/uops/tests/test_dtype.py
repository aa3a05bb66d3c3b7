import numpy as np
import pytest

from ember.uops import AddrSpace, PtrDType, dtypes, from_numpy_dtype, least_upper_dtype, sum_acc_dtype, to_numpy_dtype
from ember.uops.dtype import truncate


@pytest.mark.parametrize("a, b, expected", [
    (dtypes.bool, dtypes.int8, dtypes.int8),
    (dtypes.bool, dtypes.int32, dtypes.int32),
    (dtypes.bool, dtypes.uint8, dtypes.uint8),
    (dtypes.int8, dtypes.uint8, dtypes.int16),
    (dtypes.int32, dtypes.uint32, dtypes.int64),
    (dtypes.int64, dtypes.uint64, dtypes.float64),
    (dtypes.int32, dtypes.int64, dtypes.int64),
    (dtypes.int32, dtypes.float16, dtypes.float16),
    (dtypes.int64, dtypes.float32, dtypes.float32),
    (dtypes.uint8, dtypes.bfloat16, dtypes.bfloat16),
    (dtypes.float16, dtypes.bfloat16, dtypes.float32),
    (dtypes.float16, dtypes.float32, dtypes.float32),
    (dtypes.float32, dtypes.float64, dtypes.float64),
    (dtypes.bool, dtypes.bool, dtypes.bool),
])
def test_promotion_lattice(a, b, expected):
    assert least_upper_dtype(a, b) == expected
    assert least_upper_dtype(b, a) == expected


@pytest.mark.parametrize("a, b", [(dtypes.int8, dtypes.uint8), (dtypes.int16, dtypes.uint32),
                                  (dtypes.bool, dtypes.int64),
                                  (dtypes.float16, dtypes.float64),
                                  (dtypes.uint8, dtypes.int8), (dtypes.uint16, dtypes.int32)])
def test_promotion_matches_numpy(a, b):
    # int + float follows PyTorch (int32 + float16 -> float16, numpy says float64): see test_promotion_lattice
    assert least_upper_dtype(a, b) == from_numpy_dtype(np.promote_types(to_numpy_dtype(a), to_numpy_dtype(b)))


def test_promotion_errors():
    with pytest.raises(ValueError, match="at least one"):
        least_upper_dtype()
    with pytest.raises(TypeError, match="index only promotes with ints"):
        least_upper_dtype(dtypes.index, dtypes.float32)
    assert least_upper_dtype(dtypes.index, dtypes.int32) == dtypes.index


def test_vector_and_pointer_dtypes():
    v = dtypes.float32.vec(4)
    assert v.count == 4 and v.itemsize == 16 and v.scalar() == dtypes.float32
    assert v is dtypes.float32.vec(4)
    assert dtypes.float32.vec(1) is dtypes.float32
    assert repr(v) == "dtypes.float32.vec(4)"
    with pytest.raises(TypeError, match="already a vector"):
        v.vec(2)
    with pytest.raises(ValueError, match="count must be >= 1"):
        dtypes.int32.vec(0)
    p = dtypes.float16.ptr(128, AddrSpace.LOCAL)
    assert isinstance(p, PtrDType) and p.base == dtypes.float16 and p.size == 128 and p.addrspace is AddrSpace.LOCAL
    assert p != dtypes.float16 and p == dtypes.float16.ptr(128, AddrSpace.LOCAL)
    with pytest.raises(TypeError, match="cannot be vectorized"):
        p.vec(2)
    assert dtypes.is_float(v) and not dtypes.is_int(v)


@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32,
                                dtypes.float64])
def test_numpy_roundtrip_itemsize_minmax(dt):
    npdt = to_numpy_dtype(dt)
    assert from_numpy_dtype(npdt) == dt
    assert npdt.itemsize == dt.itemsize
    if dt == dtypes.bool:
        assert (dtypes.min(dt), dtypes.max(dt)) == (False, True)
    elif dtypes.is_int(dt):
        assert (dtypes.min(dt), dtypes.max(dt)) == (np.iinfo(npdt).min, np.iinfo(npdt).max)
    else:
        assert (dtypes.min(dt), dtypes.max(dt)) == (float(np.finfo(npdt).min), float(np.finfo(npdt).max))


def test_numpy_conversion_errors():
    with pytest.raises(TypeError, match="bfloat16.*no numpy equivalent"):
        to_numpy_dtype(dtypes.bfloat16)
    with pytest.raises(TypeError, match="complex64.*not supported"):
        from_numpy_dtype(np.complex64)
    assert from_numpy_dtype("int16") == dtypes.int16
    assert dtypes.bfloat16.itemsize == 2 and dtypes.max(dtypes.bfloat16) == pytest.approx(3.3895313892515355e38)


def test_names_and_defaults():
    assert dtypes.from_name("half") is dtypes.float16 and dtypes.from_name("float32") is dtypes.float32
    with pytest.raises(ValueError, match="unknown name 'float7'"):
        dtypes.from_name("float7")
    assert dtypes.from_py(True) == dtypes.bool and dtypes.from_py(3) == dtypes.int32
    assert dtypes.from_py(3.0) == dtypes.float32 and dtypes.from_py([1, 2.5]) == dtypes.float32
    with pytest.raises(TypeError, match="cannot infer a dtype from str"):
        dtypes.from_py("x")
    assert sum_acc_dtype(dtypes.int8) == dtypes.int64 and sum_acc_dtype(dtypes.uint8) == dtypes.int64  # as torch
    assert sum_acc_dtype(dtypes.uint64) == dtypes.int64 and sum_acc_dtype(dtypes.bool) == dtypes.int64
    assert sum_acc_dtype(dtypes.float16) == dtypes.float16


def test_truncate_semantics():
    assert truncate(dtypes.int8, 130) == -126
    assert truncate(dtypes.uint8, -1) == 255
    assert truncate(dtypes.int32, 2**31) == -(2**31)
    assert truncate(dtypes.float32, 0.1) == float(np.float32(0.1))
    assert truncate(dtypes.float16, 1e6) == float("inf")
    assert truncate(dtypes.float16, 0.1) == float(np.float16(0.1))
    assert truncate(dtypes.bfloat16, 1.0 + 2**-8) == 1.0  # ties to even
    assert truncate(dtypes.bfloat16, 1.0 + 3 * 2**-9) == 1.0 + 2**-7
    assert truncate(dtypes.bool, 2) is True
