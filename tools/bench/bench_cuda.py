"""Kernel benchmarks on an NVIDIA GPU: Ember's CUDA device against PyTorch on the same GPU in the same run (medians of
several timed runs each, GPU time from CUDA events on both sides). Bytes count each input read and each output
written once; matmul FLOPs are 2*M*N*K. PyTorch's fp32 matmul is full fp32 (TF32 off, its default).

Rows: matmul fp32 and bf16 at 4096^3 and 8192^3 (TFLOP/s), softmax over rows and a*b+c (GB/s), through ember.tensor
on DEV CUDA; and a*b+c as a hand-written CUDA C kernel through the runtime alone (NVRTC, launch, events), which needs
no renderer. A row Ember cannot run says why (e.g. no CUDARenderer yet) and the table goes on.

Run: python tools/bench/bench_cuda.py [--reps N] [--device CUDA] [--quick]
With no CUDA device (no driver, no GPU) it prints why and exits with status 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback
from collections.abc import Callable

import numpy as np

AXPBY_SRC = """extern "C" __global__ void __launch_bounds__(256) fma4(float4* out, const float4* a, const float4* b,
                                                             const float4* c, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 x = a[i], y = b[i], z = c[i];
    out[i] = make_float4(x.x * y.x + z.x, x.y * y.y + z.y, x.z * y.z + z.z, x.w * y.w + z.w);
  }
}"""


def find_device(name: str) -> tuple[object | None, str]:
    """The ember CUDA device, or None and why not."""
    try:
        from ember.runtime import Device

        return Device[name], ""
    except Exception as e:  # noqa: BLE001 - any failure means: nothing to benchmark here
        return None, f"{type(e).__name__}: {e}"


def ember_kernel_seconds(build: Callable[[], object], reps: int) -> float:
    """Median over `reps` of the summed GPU time of the kernels one tensor expression schedules to (its inputs
    realized first), each launched on its buffers and timed with CUDA events."""
    from ember.schedule import schedule
    from ember.tensor import engine
    from ember.uops import UOp

    sched = schedule(UOp.sink(build().uop))  # type: ignore[attr-defined]
    kernels = [(engine.get_kernel(it.ast, it.bufs[0].src[1].arg), [engine.buffer_for(b) for b in it.bufs])
               for it in sched.items]
    for k, bufs in kernels:  # warm up (first launches, clocks)
        k(bufs, wait=True)
    return statistics.median(sum(k(bufs, wait=True) or 0.0 for k, bufs in kernels) for _ in range(reps))


def torch_seconds(fn: Callable[[], object], reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def handwritten_fma_seconds(device_name: str, n: int, reps: int) -> float:
    """a*b+c over n floats as a hand-written float4 kernel through the runtime alone; checks its result."""
    from ember.runtime import Buffer, Device
    from ember.uops import dtypes

    dev = Device[device_name]
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(n, dtype=np.float32) for _ in range(3)]
    bufs = [Buffer(device_name, n, dtypes.float32) for _ in range(4)]
    for buf, x in zip(bufs[1:], host):
        buf.copyin(x)
    prg = dev.runtime("fma4", dev.compiler.compile_cached(AXPBY_SRC))
    n4 = n // 4
    launch = lambda: prg(*bufs, global_size=(-(-n4 // 256),), local_size=(256,), vals=(n4,), wait=True) or 0.0
    launch()
    np.testing.assert_allclose(bufs[0].numpy()[:1 << 20], (host[0] * host[1] + host[2])[:1 << 20], rtol=1e-5, atol=1e-5)
    return statistics.median(launch() for _ in range(reps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed runs per measurement (the median is reported)")
    ap.add_argument("--device", default="CUDA", help="the ember device (CUDA, CUDA:1, ...)")
    ap.add_argument("--quick", action="store_true", help="only the smaller sizes")
    args = ap.parse_args()

    dev, why = find_device(args.device)
    if dev is None:
        print(f"bench_cuda: no CUDA device to benchmark on ({why}); nothing measured.")
        return 0
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and not torch.cuda.is_available():
        torch = None
    ctx = dev.context  # type: ignore[attr-defined]
    print(f"device: {args.device} = {ctx.name}, {ctx.arch}, {ctx.multiprocessors} SMs, "
          f"{ctx.total_memory / 2**30:.0f} GiB; torch {torch.__version__ if torch else 'absent'}")

    from ember.tensor import Tensor, dtypes

    rows: list[tuple[str, str, float, float | str, float | None]] = []  # (name, unit, work, ember s or why, torch s)

    def measure(name: str, unit: str, work: float, ember: Callable[[], float], ref: Callable[[], float] | None) -> None:
        try:
            t_em: float | str = ember()
        except Exception as e:  # noqa: BLE001 - a row Ember cannot run yet is reported, the rest still measured
            t_em = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:70]}"
            if not isinstance(e, NotImplementedError):
                traceback.print_exc(file=sys.stderr)
        t_ref = ref() if ref is not None and torch is not None else None
        rows.append((name, unit, work, t_em, t_ref))
        shown = f"{work / t_em:.2f}" if isinstance(t_em, float) and t_em > 0 else t_em
        print(f"  {name}: ember {shown}, torch {f'{work / t_ref:.2f}' if t_ref else '-'} {unit}", flush=True)

    rng = np.random.default_rng(0)
    for size in (4096,) if args.quick else (4096, 8192):
        x, w = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
        for dtype_name in ("float32", "bfloat16"):
            dt = getattr(dtypes, dtype_name)

            def ember_mm(x=x, w=w, dt=dt) -> float:
                tx, tw = (Tensor(v, device=args.device).cast(dt).realize() for v in (x, w))
                return ember_kernel_seconds(lambda: tx @ tw, args.reps)

            def torch_mm(x=x, w=w, dtype_name=dtype_name) -> float:
                px, pw = (torch.from_numpy(v).cuda().to(getattr(torch, dtype_name)) for v in (x, w))
                return torch_seconds(lambda: px @ pw, args.reps)

            measure(f"matmul {size}^3 {dtype_name}", "TFLOP/s", 2 * size**3 / 1e12, ember_mm, torch_mm)

    rows_n, cols_n = (4096, 4096) if args.quick else (8192, 8192)
    s = rng.standard_normal((rows_n, cols_n), dtype=np.float32)

    def ember_softmax() -> float:
        ts = Tensor(s, device=args.device).realize()
        return ember_kernel_seconds(lambda: ts.softmax(-1), args.reps)

    def torch_softmax() -> float:
        ps = torch.from_numpy(s).cuda()
        return torch_seconds(lambda: ps.softmax(-1), args.reps)

    measure(f"softmax {rows_n}x{cols_n} fp32", "GB/s", 2 * 4 * rows_n * cols_n / 1e9, ember_softmax, torch_softmax)

    n = (16 if args.quick else 64) << 20
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))

    def ember_fma() -> float:
        ta, tb, tc = (Tensor(v, device=args.device).realize() for v in (a, b, c))
        return ember_kernel_seconds(lambda: ta * tb + tc, args.reps)

    def torch_fma() -> float:
        pa, pb, pc = (torch.from_numpy(v).cuda() for v in (a, b, c))
        return torch_seconds(lambda: torch.addcmul(pc, pa, pb), args.reps)

    measure(f"a*b+c {n >> 20}M fp32", "GB/s", 4 * 4 * n / 1e9, ember_fma, torch_fma)
    measure(f"a*b+c {n >> 20}M fp32 hand-written", "GB/s", 4 * 4 * n / 1e9,
            lambda: handwritten_fma_seconds(args.device, n, args.reps), torch_fma)

    print(f"\n| {'benchmark':34s} | {'unit':7s} | {'ember':>9s} | {'torch':>9s} | {'ember/torch':>11s} |")
    print(f"|{'-' * 36}|{'-' * 9}|{'-' * 11}|{'-' * 11}|{'-' * 13}|")
    for name, unit, work, t_em, t_pt in rows:
        em = f"{work / t_em:9.2f}" if isinstance(t_em, float) and t_em > 0 else f"{'n/a':>9s}"
        pt = f"{work / t_pt:9.2f}" if t_pt else f"{'-':>9s}"
        ratio = f"{t_pt / t_em:11.2f}" if t_pt and isinstance(t_em, float) and t_em > 0 else f"{'-':>11s}"
        print(f"| {name:34s} | {unit:7s} | {em} | {pt} | {ratio} |")
    for name, _, _, t_em, _ in rows:
        if isinstance(t_em, str):
            print(f"ember could not run {name!r}: {t_em}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
