"""GPU discovery from the KFD topology in sysfs.

KFD lists one node per agent under /sys/devices/virtual/kfd/kfd/topology/nodes; GPU nodes have a non-zero `gpu_id`
(the id every ioctl names) and a `properties` file of `key value` lines. IP versions come from the render node's
ip_discovery tree. `ROCR_VISIBLE_DEVICES` (ROCm's variable at this layer) picks and orders the GPUs we expose.

    gpus = discover_gpus(platform)          # [GpuNode(...)], the visibility filter applied
    gpus[0].arch, gpus[0].cu_count          # 'gfx942', 38 (per XCC)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ember.amd_runtime.platform import Platform
from ember.uops.settings import Flag

TOPOLOGY_NODES = "/sys/devices/virtual/kfd/kfd/topology/nodes"
GC_HWID, SDMA0_HWID, NBIF_HWID = 11, 42, 108  # ip_discovery hardware ids (amdgpu's am.py table)
IP_HWIDS = {"gc": GC_HWID, "sdma": SDMA0_HWID, "nbio": NBIF_HWID}
SUPPORTED_ARCHS = ("gfx942", "gfx950")


def _visible_devices(raw: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in raw.split(","))
    for x in items:
        if not (x.isdigit() or (x.startswith("GPU-") and len(x) > 4)):
            raise ValueError(f"expected a comma-separated list of GPU indices (0,1) or unique ids (GPU-<hex>), "
                             f"got item {x!r}")
    if len(set(items)) != len(items):
        raise ValueError("expected each GPU at most once")
    return items


ROCR_VISIBLE_DEVICES: Flag[tuple[str, ...]] = Flag(
    "ROCR_VISIBLE_DEVICES", (), _visible_devices,
    "the AMD GPUs to expose and their order: indices among the KFD GPU nodes or GPU-<unique_id hex> (empty: all)")


@dataclass(frozen=True)
class DeviceId:
    """What a PCI device id is: its ISA and product name."""

    arch: str
    product: str


DEVICE_IDS: dict[int, DeviceId] = {
    0x74A1: DeviceId("gfx942", "AMD Instinct MI300X"),
    0x74B5: DeviceId("gfx942", "AMD Instinct MI300X (virtual function)"),
    0x75A0: DeviceId("gfx950", "AMD Instinct MI350X"),
    0x75A3: DeviceId("gfx950", "AMD Instinct MI355X"),
    0x75B0: DeviceId("gfx950", "AMD Instinct MI350X (virtual function, as cloud VMs report it)"),
}
"""PCI device id -> (arch, product). KFD itself goes by gfx_target_version; this names the product."""


@dataclass(frozen=True)
class GpuNode:
    """One KFD GPU node: its ids, raw properties and the counts derived from them."""

    node: int  # the sysfs node index
    gpu_id: int
    properties: dict[str, int] = field(hash=False)
    ip_versions: dict[str, tuple[int, int, int]] = field(default_factory=dict, hash=False)

    def prop(self, key: str) -> int:
        """A property, with a clear error when the node lacks it."""
        if key not in self.properties:
            raise RuntimeError(f"KFD node {self.node} (gpu_id 0x{self.gpu_id:x}) has no property {key!r}")
        return self.properties[key]

    @property
    def render_minor(self) -> int:
        return self.prop("drm_render_minor")

    @property
    def render_path(self) -> str:
        return f"/dev/dri/renderD{self.render_minor}"

    @property
    def sysfs_device(self) -> str:
        return f"/sys/class/drm/renderD{self.render_minor}/device"

    @property
    def target(self) -> tuple[int, int, int]:
        """(major, minor, stepping) from gfx_target_version: 90402 -> (9, 4, 2)."""
        v = self.prop("gfx_target_version")
        return v // 10000, (v // 100) % 100, v % 100

    @property
    def arch(self) -> str:
        """The ISA name: gfx942 (MI300X), gfx950 (MI350X)."""
        major, minor, stepping = self.target
        return f"gfx{major}{minor:x}{stepping:x}"

    @property
    def device_id(self) -> int:
        return self.properties.get("device_id", 0)

    @property
    def product(self) -> str:
        """The product name from the device-id table, or the raw id."""
        known = DEVICE_IDS.get(self.device_id)
        return known.product if known is not None else f"unknown AMD GPU 0x{self.device_id:04x}"

    @property
    def xccs(self) -> int:
        """Compute dies (XCCs) behind this node: 8 for an MI300X/MI350X in SPX mode, 1 in CPX."""
        return self.properties.get("num_xcc", 1)

    @property
    def total_cu_count(self) -> int:
        return self.prop("simd_count") // self.prop("simd_per_cu")

    @property
    def cu_count(self) -> int:
        """Compute units per XCC."""
        return self.total_cu_count // self.xccs

    @property
    def se_count(self) -> int:
        """Shader engines per XCC."""
        return self.prop("array_count") // self.prop("simd_arrays_per_engine") // self.xccs

    @property
    def waves_per_cu(self) -> int:
        return self.prop("max_waves_per_simd") * self.prop("simd_per_cu")

    @property
    def lds_size(self) -> int:
        """Local data share per workgroup, in bytes."""
        return self.prop("lds_size_in_kb") << 10

    @property
    def unique_id(self) -> int:
        return self.properties.get("unique_id", 0)

    def check_supported(self) -> None:
        """Raise RuntimeError unless this is an ISA the runtime drives (gfx942, gfx950)."""
        if self.arch not in SUPPORTED_ARCHS:
            raise RuntimeError(f"AMD GPU {self.product} (gpu_id 0x{self.gpu_id:x}) is {self.arch}; supported: "
                               f"{', '.join(SUPPORTED_ARCHS)}")


def parse_properties(text: str) -> dict[str, int]:
    """`key value` lines (a KFD properties file) -> {key: int}."""
    props = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"KFD properties: malformed line {line!r} (expected 'key value')")
        props[parts[0]] = int(parts[1])
    return props


def read_ip_versions(platform: Platform, sysfs_device: str) -> dict[str, tuple[int, int, int]]:
    """The GC, SDMA0 and NBIO IP versions from the render node's ip_discovery tree (empty where absent)."""
    base = f"{sysfs_device}/ip_discovery/die/0"
    if not platform.exists(base):
        return {}
    present = set(platform.listdir(base))
    versions = {}
    for name, hwid in IP_HWIDS.items():
        if str(hwid) in present:
            versions[name] = tuple(int(platform.read_text(f"{base}/{hwid}/0/{part}").strip())
                                   for part in ("major", "minor", "revision"))
    return versions  # type: ignore[return-value]


def read_nodes(platform: Platform) -> list[GpuNode]:
    """Every GPU node KFD lists (gpu_id != 0), in node order, without the visibility filter."""
    nodes = []
    for entry in sorted(platform.listdir(TOPOLOGY_NODES), key=lambda x: int(x) if x.isdigit() else -1):
        if not entry.isdigit():
            continue
        try:
            gpu_id = int(platform.read_text(f"{TOPOLOGY_NODES}/{entry}/gpu_id").strip() or "0")
        except OSError:
            continue  # a node being hot-removed
        if gpu_id == 0:
            continue  # a CPU node
        props = parse_properties(platform.read_text(f"{TOPOLOGY_NODES}/{entry}/properties"))
        sysfs_device = f"/sys/class/drm/renderD{props.get('drm_render_minor', 0)}/device"
        nodes.append(GpuNode(int(entry), gpu_id, props, read_ip_versions(platform, sysfs_device)))
    return nodes


def filter_visible(nodes: list[GpuNode], visible: tuple[str, ...]) -> list[GpuNode]:
    """The nodes `visible` names, in its order (ROCR_VISIBLE_DEVICES semantics); () keeps all of them."""
    if not visible:
        return list(nodes)
    picked = []
    for item in visible:
        if item.isdigit():
            if int(item) >= len(nodes):
                raise ValueError(f"ROCR_VISIBLE_DEVICES: GPU index {item} is out of range ({len(nodes)} GPUs)")
            picked.append(nodes[int(item)])
        else:
            uid = int(item[4:], 16)
            match = [n for n in nodes if n.unique_id == uid]
            if not match:
                raise ValueError(f"ROCR_VISIBLE_DEVICES: no GPU has unique id {item}")
            picked.append(match[0])
    if len({n.gpu_id for n in picked}) != len(picked):
        raise ValueError(f"ROCR_VISIBLE_DEVICES: {','.join(visible)} names a GPU twice")
    return picked


def discover_gpus(platform: Platform, visible: tuple[str, ...] | None = None) -> list[GpuNode]:
    """The GPUs to expose: KFD's GPU nodes filtered by `visible` (default: ROCR_VISIBLE_DEVICES)."""
    return filter_visible(read_nodes(platform), ROCR_VISIBLE_DEVICES.value if visible is None else visible)


__all__ = ["TOPOLOGY_NODES", "GC_HWID", "SDMA0_HWID", "NBIF_HWID", "SUPPORTED_ARCHS", "ROCR_VISIBLE_DEVICES",
           "DeviceId", "DEVICE_IDS", "GpuNode", "parse_properties", "read_ip_versions", "read_nodes", "filter_visible",
           "discover_gpus"]
