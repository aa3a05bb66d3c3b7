"""PM4 builders against dwords written by hand from the gfx9 packet layouts (spec amd_hcq.md 2.5), and decode."""

import pytest

from ember.amd_runtime import pm4


def test_header():
    # PACKET3(op, n) = 3<<30 | n<<16 | op<<8, n = body dwords - 1
    assert pm4.header(0x76, 3) == 0xC0027600
    assert pm4.header(0x49, 7) == 0xC0064900
    assert pm4.header(0x76, 3, shader_type_compute=True) == 0xC0027602
    assert pm4.packet3(0x46, 0x407) == [0xC0004600, 0x407]
    with pytest.raises(ValueError, match="1 to 16384 dwords"):
        pm4.header(0x10, 0)


def test_nop():
    assert pm4.nop() == [0xFFFF1000]  # count 0x3FFF: a lone header
    assert pm4.nop(3) == [0xC0011000, 0, 0]
    assert [(p.op, p.offset, p.size) for p in pm4.decode(pm4.nop() + pm4.nop(3))] == [("NOP", 0, 1), ("NOP", 1, 3)]


def test_acquire_mem():
    # CP_COHER_CNTL: SH_ICACHE b29 | SH_KCACHE b27 | TC b23 | TCL1 b22 | TC_WB b18
    assert pm4.acquire_mem() == [0xC0055800, 0x28C40000, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0xA]
    assert pm4.acquire_mem(gli=False, gl2=False) == [0xC0055800, 0x08400000, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0xA]
    (p,) = pm4.decode(pm4.acquire_mem(gli=False, glk=False, gl1=False, base=0x1000, size=0x2000))
    assert p == pm4.AcquireMem(0, 7, 0x00840000, 0x2000, 0x1000, 0xA)


def test_release_mem_timeline_signal():
    addr, value = 0x7F00_1234_5670, 0x1_0000_0002
    # EVENT_TYPE 0x14 | EVENT_INDEX 5 << 8; DATA_SEL 1 << 29; addr lo/hi; data lo/hi; ctxid
    assert pm4.release_mem(addr, value) == [0xC0064900, 0x514, 0x20000000, 0x12345670, 0x7F00, 2, 1, 0]
    # the KFD event mailbox write: INT_SEL 2 << 24, ctxid = event id, with the L2 write-back flags b15 | b19
    assert pm4.release_mem(0x2000, 9, int_sel=2, ctxid=9, cache_flush=True) == \
        [0xC0064900, 0x88514, 0x22000000, 0x2000, 0, 9, 0, 9]
    # a timestamp: DATA_SEL 3 (GPU clock counter), 8-byte aligned
    assert pm4.release_mem(0x3008, data_sel=pm4.DATA_SEL_GPU_CLOCK)[:3] == [0xC0064900, 0x514, 0x60000000]
    (p,) = pm4.decode(pm4.release_mem(0x2000, 9, int_sel=2, ctxid=9, cache_flush=True))
    assert p == pm4.ReleaseMem(0, 8, 0x14, 5, 0x88000, 1, 2, 0, 0x2000, 9, 9)
    assert p.op == "RELEASE_MEM"


def test_release_mem_errors():
    with pytest.raises(ValueError, match="8-byte aligned"):
        pm4.release_mem(0x3004, data_sel=pm4.DATA_SEL_64BIT)
    with pytest.raises(ValueError, match="data_sel 7"):
        pm4.release_mem(0x3000, data_sel=7)


def test_wait_reg_mem():
    # memory (MEM_SPACE b4), >= (5)
    assert pm4.wait_reg_mem(mem=0x1_0000_1000, reference=7) == \
        [0xC0053C00, 0x15, 0x1000, 1, 7, 0xFFFFFFFF, 4]
    # the HDP flush of a memory barrier: write reg_req then wait on reg_done == ref (OPERATION 1 << 6, FUNCTION 3)
    words = pm4.wait_reg_mem(reg_req=0xE26, reg_done=0xE27, reference=0xFFFFFFFF, mask=0xFFFFFFFF,
                             function=pm4.FUNC_EQ)
    assert words == [0xC0053C00, 0x43, 0xE26, 0xE27, 0xFFFFFFFF, 0xFFFFFFFF, 4]
    (p,) = pm4.decode(words)
    assert (p.function, p.mem_space, p.operation, p.reg_req, p.reg_done) == (3, 0, 1, 0xE26, 0xE27)
    with pytest.raises(ValueError, match="either mem= or reg_req"):
        pm4.wait_reg_mem(mem=0x1000, reg_req=1, reg_done=2)
    with pytest.raises(ValueError, match="4-byte aligned"):
        pm4.wait_reg_mem(mem=0x1002)


def test_set_registers():
    # COMPUTE_PGM_LO/HI = 0x2E0C/0x2E0D: offset 0x20C from the SH base 0x2C00
    assert pm4.set_sh_reg(0x2E0C, 0x12, 0x34) == [0xC0027600, 0x20C, 0x12, 0x34]
    # GRBM_GFX_INDEX 0xC200: offset 0x200 from the UCONFIG base 0xC000
    assert pm4.set_uconfig_reg(0xC200, 0xE0000000) == [0xC0017900, 0x200, 0xE0000000]
    p, q = pm4.decode(pm4.set_sh_reg(0x2E40, 1, 2, 3) + pm4.set_uconfig_reg(0xC200, 5))
    assert p == pm4.SetShReg(0, 5, 0x2E40, (1, 2, 3)) and q == pm4.SetUconfigReg(5, 3, 0xC200, (5,))
    with pytest.raises(ValueError, match="outside 0x2c00..0x2fff"):
        pm4.set_sh_reg(0x2FFF, 1, 2)
    with pytest.raises(ValueError, match="outside 0xc000..0xc3ff"):
        pm4.set_uconfig_reg(0xBFFF, 1)
    with pytest.raises(ValueError, match="at least one value"):
        pm4.set_sh_reg(0x2E0C)


def test_dispatch_ib_event_write_data():
    assert pm4.dispatch_direct(8, 4, 2) == [0xC0031500, 8, 4, 2, 5]
    # IB: base lo/hi, size | VALID b23 (CHAIN b20)
    assert pm4.indirect_buffer(0x1_0000_2000, 16) == [0xC0023F00, 0x2000, 1, 0x800010]
    assert pm4.indirect_buffer(0x2000, 16, chain=True)[3] == 0x900010
    # CS_PARTIAL_FLUSH = 7, index 4
    assert pm4.event_write() == [0xC0004600, 0x407]
    # WRITE_DATA: DST_SEL 5 (memory) << 8 | WR_CONFIRM b20
    assert pm4.write_data(0x3000, 0xAA, 0xBB) == [0xC0043700, 0x100500, 0x3000, 0, 0xAA, 0xBB]
    words = pm4.dispatch_direct(8, 4, 2) + pm4.indirect_buffer(0x2000, 16) + pm4.event_write() + \
        pm4.write_data(0x3000, 0xAA)
    assert pm4.decode(words) == [pm4.DispatchDirect(0, 5, 8, 4, 2, 5),
                                 pm4.IndirectBuffer(5, 4, 0x2000, 16, True, False), pm4.EventWrite(9, 2, 7, 4, None),
                                 pm4.WriteData(11, 5, 5, False, True, 0, 0, 0x3000, (0xAA,))]
    with pytest.raises(ValueError, match="workgroups"):
        pm4.dispatch_direct(0)
    with pytest.raises(ValueError, match="1..1048575"):
        pm4.indirect_buffer(0x2000, 1 << 20)


def test_pred_exec():
    words = pm4.pred_exec(0x01, pm4.nop(2))
    assert words == [0xC0002300, 0x01000002, 0xC0001000, 0]
    assert [p.op for p in pm4.decode(words)] == ["PRED_EXEC", "NOP"]
    assert pm4.decode(words)[0] == pm4.PredExec(0, 2, 1, 2)


def test_decode_signal_wait_sequence():
    """The shape of a submission: wait(timeline) -> barrier -> dispatch -> signal(timeline)."""
    sig = 0x7F00_0000_0000
    words = [*pm4.wait_reg_mem(mem=sig, reference=4), *pm4.acquire_mem(), *pm4.set_sh_reg(0x2E0C, 0x100, 0),
             *pm4.dispatch_direct(1), *pm4.event_write(), *pm4.release_mem(sig, 5)]
    pkts = pm4.decode(words)
    assert [p.op for p in pkts] == ["WAIT_REG_MEM", "ACQUIRE_MEM", "SET_SH_REG", "DISPATCH_DIRECT", "EVENT_WRITE",
                                    "RELEASE_MEM"]
    assert sum(p.size for p in pkts) == len(words) and pkts[-1].offset == len(words) - 8


def test_decode_errors():
    with pytest.raises(ValueError, match="unknown opcode 0x40"):
        pm4.decode(pm4.packet3(0x40, 0, 0, 0, 0))  # COPY_DATA is not something we build
    with pytest.raises(ValueError, match="truncated"):
        pm4.decode(pm4.release_mem(0x1000, 1)[:5])
    with pytest.raises(ValueError, match="type-2 packet"):
        pm4.decode([0x80000000])
    with pytest.raises(ValueError, match="expected 6"):
        pm4.decode(pm4.packet3(pm4.WAIT_REG_MEM, 1, 2))
