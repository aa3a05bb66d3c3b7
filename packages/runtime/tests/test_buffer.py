import gc

import numpy as np
import pytest

from ember.runtime import Buffer, Device, LRUAllocator
from ember.uops import dtypes

DEVICES = ["CPU", "PYTHON"]


@pytest.mark.parametrize("device", DEVICES)
def test_allocated_lazily(device):
    buf = Buffer(device, 16, dtypes.float32)
    assert not buf.is_allocated and buf.nbytes == 64
    assert buf.allocate() is buf and buf.is_allocated
    with pytest.raises(RuntimeError, match="already allocated"):
        buf.allocate()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, values", [
    (dtypes.float32, np.array([1.5, -2.25, 3e38, np.inf], np.float32)),
    (dtypes.int32, np.array([0, -1, 2**31 - 1, -2**31], np.int32)),
    (dtypes.bool, np.array([True, False, True], np.bool_)),
    (dtypes.float16, np.array([0.5, -65504.0, 1e-3, np.nan], np.float16)),
    (dtypes.uint64, np.array([2**64 - 1, 0], np.uint64)),
])
def test_copyin_copyout_roundtrip(device, dtype, values):
    buf = Buffer(device, len(values), dtype).copyin(values)
    out = buf.numpy()
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, values)
    raw = bytearray(buf.nbytes)
    buf.copyout(memoryview(raw))
    assert bytes(raw) == values.tobytes()
    # bytes and memoryviews go in as they are
    Buffer(device, len(values), dtype).copyin(values.tobytes()).copyout(memoryview(raw))
    assert bytes(raw) == values.tobytes()


@pytest.mark.parametrize("device", DEVICES)
def test_views_share_memory(device):
    base = Buffer(device, 8, dtypes.float32).copyin(np.arange(8, dtype=np.float32))
    view = base.view(4, dtypes.float32, offset=16)
    np.testing.assert_array_equal(view.numpy(), [4, 5, 6, 7])
    view.copyin(np.full(4, -1, np.float32))
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 3, -1, -1, -1, -1])
    # another dtype over the same bytes, and a view of a view (offsets add up)
    bits = base.view(2, dtypes.int32, offset=4)
    np.testing.assert_array_equal(bits.numpy(), np.array([1, 2], np.float32).view(np.int32))
    inner = view.view(1, dtypes.float32, offset=8)
    assert inner.base is base and inner.offset == 24
    inner.copyin(np.array([42], np.float32))
    assert base.numpy()[6] == 42


@pytest.mark.parametrize("device", DEVICES)
def test_view_allocates_its_base(device):
    base = Buffer(device, 4, dtypes.int32)
    view = Buffer(device, 2, dtypes.int32, base=base, offset=8)
    view.copyin(np.array([7, 8], np.int32))
    assert base.is_allocated
    np.testing.assert_array_equal(base.numpy()[2:], [7, 8])


def test_cpu_memory_is_64_byte_aligned():
    bufs = [Buffer("CPU", n, dtypes.uint8).allocate() for n in (1, 3, 64, 1000, 4097)]
    assert all(b.raw.addr % 64 == 0 for b in bufs)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_buffer(device):
    buf = Buffer(device, 0, dtypes.float32).copyin(b"")
    assert buf.numpy().shape == (0,) and buf.nbytes == 0


@pytest.mark.parametrize("size", [-1, 2.5, True, "4"])
def test_bad_size(size):
    with pytest.raises(ValueError, match="size must be an int >= 0"):
        Buffer("CPU", size, dtypes.float32)


def test_bad_dtype_and_device():
    with pytest.raises(TypeError, match="dtype must be a value DType"):
        Buffer("CPU", 4, dtypes.float32.ptr(4))
    with pytest.raises(TypeError, match="dtype must be a value DType"):
        Buffer("CPU", 4, np.float32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown device 'NOPE'"):
        Buffer("NOPE", 4, dtypes.float32)


def test_bad_views():
    base = Buffer("CPU", 4, dtypes.float32)
    with pytest.raises(ValueError, match="a view of 8 bytes at offset 12 does not fit in its base of 16 bytes"):
        base.view(2, dtypes.float32, offset=12)
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        base.view(1, dtypes.float32, offset=-4)
    with pytest.raises(ValueError, match="cannot have its base on CPU"):
        Buffer("PYTHON", 1, dtypes.float32, base=base)
    with pytest.raises(ValueError, match="offset 4 given without a base"):
        Buffer("CPU", 1, dtypes.float32, offset=4)


def test_copy_errors():
    buf = Buffer("CPU", 4, dtypes.float32)
    with pytest.raises(ValueError, match="src has 12 bytes but .* holds 16 bytes"):
        buf.copyin(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="src has 17 bytes but .* holds 16 bytes"):
        buf.copyin(bytes(17))
    with pytest.raises(TypeError, match="numpy array of int64 cannot fill a buffer of dtypes.float32"):
        buf.copyin(np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="src must be a memoryview, bytes, bytearray or numpy array, got list"):
        buf.copyin([1.0, 2.0, 3.0, 4.0])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not allocated"):
        buf.copyout(memoryview(bytearray(16)))
    buf.copyin(bytes(16))
    with pytest.raises(ValueError, match="dest has 8 bytes but .* holds 16 bytes"):
        buf.copyout(memoryview(bytearray(8)))
    with pytest.raises(ValueError, match="read-only"):
        buf.copyout(memoryview(bytes(16)))


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.fp8e4m3])
def test_numpy_of_dtype_without_numpy_equivalent(dtype):
    buf = Buffer("CPU", 2, dtype).copyin(bytes(2 * dtype.itemsize))
    with pytest.raises(TypeError, match=f"numpy: {dtype!r} has no numpy dtype"):
        buf.numpy()
    raw = np.empty(buf.nbytes, np.uint8)
    buf.copyout(memoryview(raw))  # the raw bytes still come out


@pytest.mark.parametrize("device", DEVICES)
def test_memory_goes_back_to_the_allocator_on_gc(device):
    allocator = Device[device].allocator
    assert isinstance(allocator, LRUAllocator)
    allocator.free_cache()
    buf = Buffer(device, 1234, dtypes.uint8).allocate()
    raw = buf.raw
    del buf
    gc.collect()
    assert allocator.cache[(1234, None)] == [raw]
    again = Buffer(device, 1234, dtypes.uint8).allocate()
    assert again.raw is raw and allocator.cache[(1234, None)] == []


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_keeps_its_base_alive(device):
    allocator = Device[device].allocator
    allocator.free_cache()
    view = Buffer(device, 64, dtypes.uint8).view(8, dtypes.uint8, offset=8)
    view.copyin(bytes(range(8)))
    gc.collect()
    assert allocator.cached_bytes == 0
    assert bytes(view.numpy()) == bytes(range(8))
    del view
    gc.collect()
    assert allocator.cached_bytes == 64


class CountingAllocator(LRUAllocator):
    def __init__(self, fail_first=False):
        super().__init__()
        self.allocs, self.frees, self.fail_next = 0, [], fail_first

    def _alloc(self, nbytes, options):
        if self.fail_next:
            self.fail_next = False
            raise MemoryError("out of memory")
        self.allocs += 1
        return bytearray(nbytes)

    def _free(self, buf, nbytes, options):
        self.frees.append((nbytes, options))


def test_lru_reuses_a_freed_buffer_of_the_same_size():
    alloc = CountingAllocator()
    a = alloc.alloc(100)
    assert alloc.allocs == 1
    alloc.free(a, 100)
    assert alloc.frees == [] and alloc.cached_bytes == 100
    assert alloc.alloc(100) is a and alloc.allocs == 1  # from the cache: no device call
    b = alloc.alloc(100)
    assert b is not a and alloc.allocs == 2
    alloc.free(b, 100)
    assert alloc.alloc(64) is not b and alloc.allocs == 3  # another size
    assert alloc.alloc(100, options="host") is not b and alloc.allocs == 4  # other options are another key


def test_lru_free_cache_releases_everything():
    alloc = CountingAllocator()
    bufs = [(alloc.alloc(n), n) for n in (8, 8, 16)]
    for buf, n in bufs:
        alloc.free(buf, n)
    alloc.free_cache()
    assert sorted(alloc.frees) == [(8, None), (8, None), (16, None)]
    assert alloc.cache == {} and alloc.cached_bytes == 0


def test_lru_out_of_memory_releases_the_cache_and_retries():
    alloc = CountingAllocator()
    alloc.free(alloc.alloc(8), 8)
    alloc.fail_next = True
    assert len(alloc.alloc(32)) == 32
    assert alloc.frees == [(8, None)]


def test_alloc_rejects_bad_sizes():
    with pytest.raises(ValueError, match="nbytes must be an int >= 0, got -1"):
        CountingAllocator().alloc(-1)


@pytest.mark.parametrize("src_dev, dst_dev", [("CPU", "CPU:1"), ("CPU:1", "PYTHON"), ("PYTHON", "CPU"),
                                              ("PYTHON", "PYTHON")])
def test_copy_from_another_device(src_dev, dst_dev):
    # CPU memory is host-addressable (one move into it); PYTHON's is not (through a staging copy)
    values = np.arange(10, dtype=np.int32) * 7 - 3
    src = Buffer(src_dev, 10, dtypes.int32).copyin(values)
    dst = Buffer(dst_dev, 10, dtypes.int32)
    assert (Device[dst_dev].allocator.as_host(dst.allocate().raw) is not None) == dst_dev.startswith("CPU")
    assert dst.copy_from(src) is dst
    np.testing.assert_array_equal(dst.numpy(), values)
    view = Buffer(dst_dev, 4, dtypes.int32, base=dst, offset=8)  # a view is filled in place in its base
    view.copy_from(Buffer(src_dev, 4, dtypes.int32).copyin(np.full(4, -1, np.int32)))
    np.testing.assert_array_equal(dst.numpy(), np.concatenate([values[:2], [-1] * 4, values[6:]]))
    with pytest.raises(ValueError, match="copy_from: .* has 40 bytes, .* holds 16"):
        view.copy_from(src)
