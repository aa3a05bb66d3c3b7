"""AQL packets against the byte layouts of hsa.h / ROCr (spec amd_hcq.md 2.7), and decode."""

import struct

import pytest

from ember.amd_runtime import aql, pm4


def test_header():
    # BARRIER b8 | SCACQUIRE system (2) << 9 | SCRELEASE system (2) << 11 | KERNEL_DISPATCH (2)
    assert aql.make_header(aql.PACKET_TYPE_KERNEL_DISPATCH) == 0x1502
    assert aql.make_header(aql.PACKET_TYPE_BARRIER_AND, barrier=False, acquire=1, release=0) == 0x0203
    h = aql.Header.from_int(0x1502)
    assert (h.type, h.barrier, h.acquire_fence_scope, h.release_fence_scope) == (2, True, 2, 2)
    with pytest.raises(ValueError, match="fence scope 3"):
        aql.make_header(2, acquire=3)


def test_kernel_dispatch_bytes():
    kd, ka, sig = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000
    pkt = aql.kernel_dispatch(kd, ka, global_size=(4, 2), local_size=(64, 1, 1), group_segment_size=1024,
                              private_segment_size=272, completion_signal=sig)
    assert len(pkt) == 64
    # header@0 setup@2 wg xyz@4,6,8 reserved@10 grid xyz@12,16,20 private@24 group@28 kernel_object@32
    # kernarg@40 reserved@48 completion_signal@56
    expected = bytearray(64)
    struct.pack_into("<HH", expected, 0, 0x1502, 2)
    struct.pack_into("<HHH", expected, 4, 64, 1, 1)
    struct.pack_into("<III", expected, 12, 256, 2, 1)
    struct.pack_into("<II", expected, 24, 272, 1024)
    struct.pack_into("<QQ", expected, 32, kd, ka)
    struct.pack_into("<Q", expected, 56, sig)
    assert pkt == bytes(expected)
    p = aql.decode(pkt)
    assert isinstance(p, aql.KernelDispatch)
    assert (p.dims, p.workgroup_size, p.grid_size, p.workgroups) == (2, (64, 1, 1), (256, 2, 1), (4, 2, 1))
    assert (p.kernel_object, p.kernarg_address, p.completion_signal) == (kd, ka, sig)
    assert (p.group_segment_size, p.private_segment_size) == (1024, 272)


def test_publish_order():
    pkt = aql.kernel_dispatch(0x1000, 0x2000, (1,), (64,))
    body, first = aql.publish_order(pkt)
    assert first == 0x1502 | (1 << 16) and body == pkt[4:] and len(body) == 60


def test_kernel_dispatch_errors():
    with pytest.raises(ValueError, match="64-byte"):
        aql.kernel_dispatch(0x1010, 0x2000, (1,), (1,))
    with pytest.raises(ValueError, match="local_size"):
        aql.kernel_dispatch(0x1000, 0x2000, (1,), (2048,))
    with pytest.raises(ValueError, match="32 bits"):
        aql.kernel_dispatch(0x1000, 0x2000, (1 << 31,), (4,))


def test_barrier_and():
    pkt = aql.barrier_and([0x10, 0x20], completion_signal=0x30)
    expected = struct.pack("<HHI5QQQ", 0x1503, 0, 0, 0x10, 0x20, 0, 0, 0, 0, 0x30)
    assert pkt == expected
    assert aql.decode(pkt) == aql.BarrierAnd(aql.Header(3, True, 2, 2), (0x10, 0x20, 0, 0, 0), 0x30)
    with pytest.raises(ValueError, match="at most 5"):
        aql.barrier_and([1] * 6)


def test_pm4_ib_vendor_packet():
    pkt = aql.pm4_ib(0x1_0000_4000, 20, completion_signal=0x50)
    # header (VENDOR_SPECIFIC 0 | fences), ven_hdr AMD_AQL_FORMAT_PM4_IB = 1, INDIRECT_BUFFER (4 dwords),
    # dw_cnt_remain 0xA, 8 reserved dwords, completion signal
    expected = struct.pack("<HH4II8IQ", 0x1500, 1, 0xC0023F00, 0x4000, 1, 0x800014, 0xA, *([0] * 8), 0x50)
    assert pkt == expected
    p = aql.decode(pkt)
    assert isinstance(p, aql.Pm4Ib) and p.ib == pm4.IndirectBuffer(0, 4, 0x1_0000_4000, 20, True, False)
    assert (p.dw_cnt_remain, p.completion_signal) == (0xA, 0x50)


def test_invalid_and_unknown():
    assert aql.decode(aql.invalid()) == aql.Invalid(aql.Header(1, False, 0, 0))
    with pytest.raises(ValueError, match="packet type 5"):
        aql.decode(struct.pack("<H", 5) + bytes(62))
    with pytest.raises(ValueError, match="vendor packet format 2"):
        aql.decode(struct.pack("<HH", 0, 2) + bytes(60))
    with pytest.raises(ValueError, match="64 bytes"):
        aql.decode(bytes(32))


def test_amd_queue():
    q = aql.AMD_QUEUE
    assert (q.write_dispatch_id, q.read_dispatch_id, q.read_dispatch_id_field_base_byte_offset, q.compute_tmpring_size,
            q.scratch_resource_descriptor, q.scratch_backing_memory_location, q.scratch_wave64_lane_byte_size,
            q.queue_properties) == (56, 128, 136, 140, 144, 160, 176, 180)
    blob = aql.amd_queue(max_cu_id=303, max_wave_id=31)
    assert len(blob) == 256
    assert struct.unpack_from("<II", blob, 72) == (303, 31)
    assert struct.unpack_from("<I", blob, 136) == (128,)
    assert struct.unpack_from("<I", blob, 180) == (0b1010,)  # IS_PTR64 b1 | ENABLE_PROFILING b3
    assert struct.unpack_from("<QQ", blob, 56)[0] == 0 and struct.unpack_from("<Q", blob, 128) == (0,)
