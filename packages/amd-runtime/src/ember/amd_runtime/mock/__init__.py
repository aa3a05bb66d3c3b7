"""ember.amd_runtime.mock: the in-process fake KFD (`MockPlatform`, `FakeKfd`) and the GPU profiles it exposes, so
the AMD runtime's real code path runs without a GPU. The fake GPU (command processor, SDMA, ISA interpreter) plugs
into `FakeKfd`'s doorbell and progress hooks."""

from ember.amd_runtime.mock.driver import (
    FakeKfd,
    GpuPageFault,
    GpuVm,
    MockBo,
    MockDoorbell,
    MockEvent,
    MockGpu,
    MockPlatform,
    MockQueue,
    TraceEntry,
)
from ember.amd_runtime.mock.topologies import MI300X, MI300X_CPX, MI350X, MI350X_CPX, PROFILES, TopologyProfile

__all__ = ["FakeKfd", "GpuPageFault", "GpuVm", "MockBo", "MockDoorbell", "MockEvent", "MockGpu", "MockPlatform",
           "MockQueue", "TraceEntry", "MI300X", "MI300X_CPX", "MI350X", "MI350X_CPX", "PROFILES", "TopologyProfile"]
