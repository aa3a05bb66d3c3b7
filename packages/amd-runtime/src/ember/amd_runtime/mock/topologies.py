"""GPU profiles the mock driver exposes as KFD topology nodes: realistic MI300X (gfx942) and MI350X (gfx950) property
tables, each in SPX mode (8 XCCs behind one node) and as a 1-XCC "CPX" partition.

A profile also carries what KFD computes for the node and never prints in sysfs (the CWSR, control-stack, debug and
EOP sizes `kfd_queue.c` checks queue creation against), written here as literals so the mock does not share the
runtime's formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class TopologyProfile:
    """One GPU node as the mock shows it."""

    name: str
    properties: dict[str, int] = field(hash=False)  # the sysfs `properties` file, minus the per-node ids
    ip_versions: dict[str, tuple[int, int, int]] = field(hash=False)  # gc / sdma / nbio
    vram_size: int  # bytes of VRAM this node can allocate
    large_bar: bool  # whether the CPU can map all of VRAM (VRAM | PUBLIC allocations)
    cwsr_size: int  # node_props.cwsr_size (ctx save area per XCC: workgroup data + control stack)
    ctl_stack_size: int  # node_props.ctl_stack_size
    debug_memory_size: int  # node_props.debug_memory_size (per XCC)
    eop_buffer_size: int = 0x1000  # node_props.eop_buffer_size on gfx9

    @property
    def xccs(self) -> int:
        return self.properties.get("num_xcc", 1)

    def with_(self, **changes: object) -> TopologyProfile:
        """A copy with some fields (or, through `properties=`, the whole table) changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


_MI300X_PROPS = {
    # the values the spec gives (§2.1, §6.2): gfx_target_version, num_xcc, simd_count 1216 / simd_per_cu 4 (304 CUs),
    # lds 64; the array/engine split (4 SEs per XCD) matches the MI350X capture's shape [? not from an MI300X capture]
    "cpu_cores_count": 0, "simd_count": 1216, "mem_banks_count": 1, "caches_count": 0, "io_links_count": 1,
    "p2p_links_count": 0, "cpu_core_id_base": 0, "simd_id_base": 2147487744, "max_waves_per_simd": 8,
    "lds_size_in_kb": 64, "gds_size_in_kb": 0, "num_gws": 64, "wave_front_size": 64, "array_count": 32,
    "simd_arrays_per_engine": 1, "cu_per_simd_array": 10, "simd_per_cu": 4, "max_slots_scratch_cu": 32,
    "gfx_target_version": 90402, "vendor_id": 0x1002, "device_id": 0x74A1, "domain": 0, "hive_id": 0,
    "num_sdma_engines": 2, "num_sdma_xgmi_engines": 14, "num_sdma_queues_per_engine": 8, "num_cp_queues": 24,
    "max_engine_clk_fcompute": 2100, "local_mem_size": 0, "fw_version": 0, "capability": 0, "debug_prop": 0,
    "sdma_fw_version": 0, "num_xcc": 8, "max_engine_clk_ccompute": 2000,
}

_MI350X_PROPS = {
    # ROCm/rocm-systems PR #10274 capture: simd_count 1024, array_count 32, simd_arrays_per_engine 1,
    # cu_per_simd_array 9, simd_per_cu 4, device_id 30112, num_sdma_engines 2, num_sdma_xgmi_engines 14,
    # num_cp_queues 24; lds 160 KB (gfx950)
    **_MI300X_PROPS, "simd_count": 1024, "cu_per_simd_array": 9, "lds_size_in_kb": 160,
    "gfx_target_version": 90500, "device_id": 0x75A0, "max_engine_clk_fcompute": 2400,
}

MI300X = TopologyProfile(
    name="MI300X", properties=_MI300X_PROPS, ip_versions={"gc": (9, 4, 3), "sdma": (4, 4, 2), "nbio": (7, 9, 0)},
    vram_size=192 << 30, large_bar=True, cwsr_size=0x1621000, ctl_stack_size=0x3000, debug_memory_size=0xBE00)
"""MI300X in SPX mode: gfx942, 8 XCCs of 38 CUs, 192 GiB."""

MI350X = TopologyProfile(
    name="MI350X", properties=_MI350X_PROPS, ip_versions={"gc": (9, 5, 0), "sdma": (4, 4, 5), "nbio": (7, 9, 0)},
    vram_size=288 << 30, large_bar=True, cwsr_size=0x15A3000, ctl_stack_size=0x3000, debug_memory_size=0xA000)
"""MI350X in SPX mode: gfx950, 8 XCCs of 32 CUs, 288 GiB."""

MI300X_CPX = MI300X.with_(name="MI300X-CPX", vram_size=24 << 30, properties={
    **_MI300X_PROPS, "simd_count": 152, "array_count": 4, "num_xcc": 1, "num_cp_queues": 24})
"""One XCC of an MI300X (CPX partition): 38 CUs, 24 GiB; the per-XCC CWSR sizes are the SPX ones."""

MI350X_CPX = MI350X.with_(name="MI350X-CPX", vram_size=36 << 30, properties={
    **_MI350X_PROPS, "simd_count": 128, "array_count": 4, "num_xcc": 1})
"""One XCC of an MI350X (CPX partition): 32 CUs, 36 GiB."""

PROFILES: dict[str, TopologyProfile] = {p.name: p for p in (MI300X, MI350X, MI300X_CPX, MI350X_CPX)}

__all__ = ["TopologyProfile", "MI300X", "MI350X", "MI300X_CPX", "MI350X_CPX", "PROFILES"]
