"""SDMA 4 builders against dwords written by hand from the packet layouts (spec amd_hcq.md 2.6), and decode."""

import pytest

from ember.amd_runtime import sdma


def test_copy_linear():
    # op 1, sub_op 0; count = bytes - 1; parameters 0; src lo/hi; dst lo/hi
    assert sdma.copy_linear(0x1_0000_2000, 0x1000, 0x100) == [0x1, 0xFF, 0, 0x1000, 0, 0x2000, 1]
    (p,) = sdma.decode(sdma.copy_linear(0x2000, 0x1000, 0x100))
    assert p == sdma.CopyLinear(0, 7, 0x100, 0x1000, 0x2000, 0, 0)
    assert p.op == "COPY_LINEAR"


def test_copy_linear_splits_at_4mib():
    mib4 = 4 << 20
    words = sdma.copy_linear(0x10_0000_0000, 0x20_0000_0000, 2 * mib4 + 1)
    assert len(words) == 3 * 7 and sdma.copy_packets(2 * mib4 + 1) == 3
    pkts = sdma.decode(words)
    assert [(p.nbytes, p.src - 0x20_0000_0000, p.dst - 0x10_0000_0000) for p in pkts] == \
        [(mib4, 0, 0), (mib4, mib4, mib4), (1, 2 * mib4, 2 * mib4)]
    assert words[1] == 0x3FFFFF and words[15] == 0  # the largest count field of SDMA 4, then 1 byte
    assert len(sdma.copy_linear(0, 0, mib4)) == 7
    with pytest.raises(ValueError, match="at least 1 byte"):
        sdma.copy_linear(0, 0, 0)


def test_fence_trap():
    assert sdma.fence(0x1_0000_1000, 7) == [0x5, 0x1000, 1, 7]
    assert sdma.trap(9) == [0x6, 9]
    assert sdma.decode(sdma.fence(0x1000, 7) + sdma.trap(9)) == [sdma.Fence(0, 4, 0, 0x1000, 7), sdma.Trap(4, 2, 9)]
    with pytest.raises(ValueError, match="4-byte aligned"):
        sdma.fence(0x1002, 1)
    with pytest.raises(ValueError, match="28 bits"):
        sdma.trap(1 << 28)


def test_poll_regmem():
    # op 8 | func 5 (>=) << 28 | mem_poll b31; addr; value; mask; interval 4 | retry 0xFFF << 16
    assert sdma.poll_regmem(0x1000, 7) == [0xD0000008, 0x1000, 0, 7, 0xFFFFFFFF, 0x0FFF0004]
    hdp = sdma.poll_regmem(0, 0, mask=0, function=sdma.FUNC_EQ, hdp_flush=True)
    assert hdp[0] == 0x8 | (1 << 26) | (3 << 28)
    (p,) = sdma.decode(sdma.poll_regmem(0x1000, 7))
    assert p == sdma.PollRegmem(0, 6, False, 5, True, 0x1000, 7, 0xFFFFFFFF, 4, 0xFFF)


def test_atomic_timestamp_write():
    # op 10 | ADD64 (47) << 25; addr; src; cmp; loop interval
    assert sdma.atomic(0x1000, 1) == [0x5E00000A, 0x1000, 0, 1, 0, 0, 0, 0]
    # op 13, sub_op 2 (GET_GLOBAL)
    assert sdma.timestamp(0x1008) == [0x20D, 0x1008, 0]
    # op 2; addr; count - 1; data
    assert sdma.write(0x1000, 1, 2) == [0x2, 0x1000, 0, 1, 1, 2]
    words = sdma.atomic(0x1000, 1) + sdma.timestamp(0x1008) + sdma.write(0x1000, 1, 2)
    assert sdma.decode(words) == [sdma.Atomic(0, 8, 47, False, 0x1000, 1, 0, 0), sdma.Timestamp(8, 3, 0x1008),
                                  sdma.Write(11, 6, 0x1000, (1, 2))]
    with pytest.raises(ValueError, match="8-byte aligned"):
        sdma.timestamp(0x1004)


def test_indirect_and_nop_padding():
    assert sdma.indirect(0x4000, 16) == [0x4, 0x4000, 0, 16, 0, 0]
    assert sdma.nop(3) == [0x20000, 0, 0]
    # a ring tail zero-filled: each zero dword is a NOP
    pkts = sdma.decode(sdma.trap(1) + [0, 0, 0])
    assert [(p.op, p.size) for p in pkts] == [("TRAP", 2), ("NOP", 1), ("NOP", 1), ("NOP", 1)]


def test_timeline_signal_sequence():
    """A KFD timeline signal on SDMA: FENCE(value) + FENCE(mailbox, event id) + TRAP(event id)."""
    words = sdma.poll_regmem(0x1000, 4) + sdma.copy_linear(0x8000, 0x9000, 64) + sdma.fence(0x1000, 5) + \
        sdma.fence(0x2000, 3) + sdma.trap(3)
    assert [p.op for p in sdma.decode(words)] == ["POLL_REGMEM", "COPY_LINEAR", "FENCE", "FENCE", "TRAP"]


def test_decode_errors():
    with pytest.raises(ValueError, match="unknown op 17"):
        sdma.decode([17, 0])  # GCR (gfx10+) is not ours
    with pytest.raises(ValueError, match="truncated"):
        sdma.decode(sdma.copy_linear(0, 0, 8)[:6])
    with pytest.raises(ValueError, match="not GET_GLOBAL"):
        sdma.decode([13 | (1 << 8), 0, 0])
