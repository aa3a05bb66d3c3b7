"""The AMD runtime's host side on the mock driver and GPU (ember.amd_runtime.mock):

1. packets per second the runtime records and submits (signal/wait rounds on the PM4, AQL and SDMA queues), with
   and without the fake GPU's execution time (`FakeGpu.busy_s`, measured inside the doorbell and subtracted);
2. per-kernel host overhead of launching a chain of small kernels one submission per kernel (the reference) vs one
   batched replay of the recorded chain (graph.AMDGraph, the seed's hcq2), on an MI300X (AQL) and a one-XCC part
   (PM4). Host overhead = wall time minus the fake GPU's execution time, per kernel.

Run: python tools/bench/bench_amd_mock.py [--kernels N] [--reps N]   (needs clang-19 and ld.lld-19 for part 2)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time

import numpy as np

from ember.amd_runtime.mock import MI300X, MI300X_CPX, MockPlatform, TopologyProfile
from ember.amd_runtime.mock.gpu import attach_fake_gpus, open_mock_gpu

SRC = r"""
extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 64)))
bump(float* out, const float* x) { unsigned i = __builtin_amdgcn_workitem_id_x(); out[i] = x[i] + 1.0f; }
"""


def packets_per_second(profile: TopologyProfile, rounds: int) -> list[tuple[str, float, float, int]]:
    """(queue, packets/s host only, packets/s with execution, packets per round) for each queue kind."""
    rig = open_mock_gpu(profile)
    rows = []
    for kind, queue in (("compute", rig.compute(ring_size=1 << 20)), ("copy", rig.copy(ring_size=1 << 20))):
        gate, sig = rig.signals.new(value=1), rig.signals.new()
        busy, start = rig.gpu.busy_s, time.perf_counter()
        for i in range(1, rounds + 1):
            queue.wait(gate, 1).signal(sig, i).submit()  # type: ignore[attr-defined]
        wall, gpu = time.perf_counter() - start, rig.gpu.busy_s - busy
        sig.wait(rounds, waiter=rig.events, queue=queue.name)
        per_round = 3 if kind == "compute" else 4  # WAIT_REG_MEM + 2 RELEASE_MEM; POLL + 2 FENCE + TRAP
        name = f"{kind} ({type(queue).__name__})"
        rows.append((name, per_round * rounds / (wall - gpu), per_round * rounds / wall, per_round))
    return rows


def kernel_overhead(profile: TopologyProfile, kernels: int, reps: int) -> tuple[float, float, float, float]:
    """(per-kernel host overhead one by one, batched; per-kernel wall one by one, batched) in microseconds."""
    from ember.amd_runtime.device import AMDDevice
    from ember.amd_runtime.graph import AMDGraph, GraphKernel

    platform = MockPlatform([profile])
    gpu = next(iter(attach_fake_gpus(platform.kfd).values()))
    dev = AMDDevice("AMD", platform)
    prg = dev.runtime("bump", dev.compiler.compile_cached(SRC))
    bufs = [dev.allocator.alloc(256) for _ in range(kernels + 1)]
    dev.allocator.copyin(bufs[0], memoryview(np.zeros(64, np.float32)).cast("B"))
    chain = [(bufs[i + 1], bufs[i]) for i in range(kernels)]

    def one_by_one() -> None:
        for out, x in chain:
            prg.launch([out, x], (1, 1, 1), (64, 1, 1), (), wait=False)
        dev.synchronize()

    graph = AMDGraph(dev, [GraphKernel(prg, (out, x if i else 0), (1, 1, 1), (64, 1, 1))  # type: ignore[arg-type]
                           for i, (out, x) in enumerate(chain)], n_inputs=1)

    def batched() -> None:
        graph.exec([bufs[0]], wait=True)

    results = []
    for fn in (one_by_one, batched):
        fn()  # warm: decoded instructions, kernarg layouts
        walls, hosts = [], []
        for _ in range(reps):
            busy, start = gpu.busy_s, time.perf_counter()
            fn()
            wall = time.perf_counter() - start
            walls.append(wall)
            hosts.append(wall - (gpu.busy_s - busy))
        results.append((statistics.median(hosts) / kernels * 1e6, statistics.median(walls) / kernels * 1e6))
    out = np.empty(64, np.float32)
    dev.allocator.copyout(memoryview(out).cast("B"), bufs[-1])
    assert np.all(out == kernels), "the chain did not compute what it should"
    dev.close()
    return results[0][0], results[1][0], results[0][1], results[1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="signal rounds per queue for the packet rate")
    parser.add_argument("--kernels", type=int, default=100, help="kernels in the chain")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    print(f"{'GPU':<11} {'queue':<24} {'pkts/round':>10} {'host pkts/s':>12} {'with exec':>11}")
    for profile in (MI300X_CPX, MI300X):
        for name, host, total, per in packets_per_second(profile, args.rounds):
            print(f"{profile.name:<11} {name:<24} {per:>10} {host:>12,.0f} {total:>11,.0f}")
    if not (shutil.which("clang-19") and shutil.which("ld.lld-19")):
        print("\nclang-19/ld.lld-19 missing: kernel overhead not measured")
        return
    print(f"\nper-kernel cost of a chain of {args.kernels} one-workgroup kernels (microseconds, median of "
          f"{args.reps}); reference: one submission per kernel")
    print(f"{'GPU':<11} {'host: 1 by 1':>13} {'host: batch':>12} {'ratio':>6} {'wall: 1 by 1':>13} "
          f"{'wall: batch':>12}")
    for profile in (MI300X_CPX, MI300X):
        host1, hostb, wall1, wallb = kernel_overhead(profile, args.kernels, args.reps)
        print(f"{profile.name:<11} {host1:>13.1f} {hostb:>12.1f} {host1 / hostb:>5.1f}x {wall1:>13.1f} {wallb:>12.1f}")


if __name__ == "__main__":
    main()
