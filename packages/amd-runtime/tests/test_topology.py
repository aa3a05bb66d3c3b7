"""GPU discovery from the (mock) KFD sysfs topology: ids, targets, derived counts, the device-id table and the
ROCR_VISIBLE_DEVICES filter."""

import pytest

from ember.amd_runtime.mock import MI300X, MI300X_CPX, MI350X, MI350X_CPX, MockPlatform
from ember.amd_runtime.mock.driver import FIRST_RENDER_MINOR, GPU_IDS
from ember.amd_runtime.topology import (
    DEVICE_IDS,
    GpuNode,
    discover_gpus,
    filter_visible,
    parse_properties,
    read_nodes,
)


@pytest.fixture
def two_gpus():
    return MockPlatform([MI300X, MI350X])


def test_discovery_skips_the_cpu_node_and_reads_ids(two_gpus):
    nodes = discover_gpus(two_gpus, visible=())
    assert [(n.node, n.gpu_id, n.render_minor) for n in nodes] == \
        [(1, GPU_IDS[0], FIRST_RENDER_MINOR), (2, GPU_IDS[1], FIRST_RENDER_MINOR + 1)]
    assert nodes[0].render_path == "/dev/dri/renderD128"
    assert nodes[1].sysfs_device == "/sys/class/drm/renderD129/device"


def test_mi300x_node(two_gpus):
    n = discover_gpus(two_gpus, visible=())[0]
    assert (n.target, n.arch, n.product) == ((9, 4, 2), "gfx942", "AMD Instinct MI300X")
    assert (n.xccs, n.cu_count, n.total_cu_count, n.se_count) == (8, 38, 304, 4)
    assert (n.waves_per_cu, n.lds_size) == (32, 64 << 10)
    assert n.ip_versions == {"gc": (9, 4, 3), "sdma": (4, 4, 2), "nbio": (7, 9, 0)}
    n.check_supported()


def test_mi350x_node(two_gpus):
    n = discover_gpus(two_gpus, visible=())[1]
    assert (n.target, n.arch, n.device_id, n.product) == ((9, 5, 0), "gfx950", 0x75A0, "AMD Instinct MI350X")
    assert (n.xccs, n.cu_count, n.total_cu_count, n.se_count, n.lds_size) == (8, 32, 256, 4, 160 << 10)
    assert n.ip_versions == {"gc": (9, 5, 0), "sdma": (4, 4, 5), "nbio": (7, 9, 0)}


def test_cpx_partitions_have_one_xcc():
    nodes = discover_gpus(MockPlatform([MI300X_CPX, MI350X_CPX]), visible=())
    assert [(n.arch, n.xccs, n.cu_count, n.se_count) for n in nodes] == [("gfx942", 1, 38, 4), ("gfx950", 1, 32, 4)]


def test_device_id_table():
    assert {i: (d.arch, d.product) for i, d in DEVICE_IDS.items() if i in (0x74A1, 0x75A0, 0x75B0)} == {
        0x74A1: ("gfx942", "AMD Instinct MI300X"), 0x75A0: ("gfx950", "AMD Instinct MI350X"),
        0x75B0: ("gfx950", "AMD Instinct MI350X (virtual function, as cloud VMs report it)")}
    assert DEVICE_IDS[0x75A3].product == "AMD Instinct MI355X"
    assert GpuNode(1, 1, {"device_id": 0x1234}).product == "unknown AMD GPU 0x1234"


def test_unsupported_arch_is_refused():
    node = GpuNode(1, 0x77, {**MI300X.properties, "gfx_target_version": 110000})
    assert node.arch == "gfx1100"
    with pytest.raises(RuntimeError, match=r"gpu_id 0x77\) is gfx1100; supported: gfx942, gfx950"):
        node.check_supported()


def test_missing_property_names_the_key():
    with pytest.raises(RuntimeError, match=r"KFD node 3 \(gpu_id 0x5\) has no property 'simd_count'"):
        _ = GpuNode(3, 5, {}).cu_count


def test_parse_properties():
    assert parse_properties("simd_count 1216\n\nnum_xcc 8\n") == {"simd_count": 1216, "num_xcc": 8}
    with pytest.raises(ValueError, match="malformed line 'simd_count'"):
        parse_properties("simd_count\n")


def test_visible_filter_picks_and_orders(two_gpus):
    nodes = read_nodes(two_gpus)
    assert [n.arch for n in filter_visible(nodes, ("1",))] == ["gfx950"]
    assert [n.arch for n in filter_visible(nodes, ("1", "0"))] == ["gfx950", "gfx942"]
    uid = f"GPU-{nodes[1].unique_id:x}"
    assert [n.gpu_id for n in filter_visible(nodes, (uid,))] == [nodes[1].gpu_id]
    with pytest.raises(ValueError, match=r"GPU index 2 is out of range \(2 GPUs\)"):
        filter_visible(nodes, ("2",))
    with pytest.raises(ValueError, match="no GPU has unique id GPU-abc"):
        filter_visible(nodes, ("GPU-abc",))
    with pytest.raises(ValueError, match="names a GPU twice"):
        filter_visible(nodes, ("0", f"GPU-{nodes[0].unique_id:x}"))


def test_visible_devices_env(two_gpus, monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1")
    assert [n.arch for n in discover_gpus(two_gpus)] == ["gfx950"]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
    assert len(discover_gpus(two_gpus)) == 2
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0,zero")
    with pytest.raises(ValueError, match=r"ROCR_VISIBLE_DEVICES='0,zero': .* got item 'zero'"):
        discover_gpus(two_gpus)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1,1")
    with pytest.raises(ValueError, match="each GPU at most once"):
        discover_gpus(two_gpus)


def test_mock_sysfs_is_strict(two_gpus):
    with pytest.raises(FileNotFoundError, match="no file /sys/nope"):
        two_gpus.read_text("/sys/nope")
    with pytest.raises(FileNotFoundError, match="no directory /sys/nope"):
        two_gpus.listdir("/sys/nope")
    props = parse_properties(two_gpus.read_text("/sys/devices/virtual/kfd/kfd/topology/nodes/2/properties"))
    assert (props["simd_count"], props["array_count"], props["cu_per_simd_array"], props["device_id"]) == \
        (1024, 32, 9, 30112)
