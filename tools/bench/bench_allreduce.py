"""Allreduce (ADD, float32) over CPU:0..n-1, naive vs ring, against numpy summing the same shards in the same run.

    python tools/bench/bench_allreduce.py                        # 2, 4, 8 devices; 4 KiB .. 64 MiB per device
    python tools/bench/bench_allreduce.py --max-bytes 256M --devices 4 8
    python tools/bench/bench_allreduce.py --quick                # 4 KiB .. 1 MiB, fewer runs

Each configuration is scheduled once (the schedule time is printed: a jit replay skips it) and its schedule run
--runs times; the figures are medians. GB/s is n * bytes per device / time: the bytes of input folded per second, the
same measure for numpy's `stacked.sum(axis=0)` (one output, one thread: a lower bound of the memory traffic on this
machine, where the "devices" share one memory). x numpy = allreduce GB/s / numpy GB/s. A configuration whose buffers
would exceed --mem-gib is skipped.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time

import numpy as np

from ember.schedule import allreduce, schedule
from ember.tensor import Tensor, engine
from ember.uops import Ops, UOp


def parse_bytes(raw: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(raw[:-1]) * units[raw[-1].upper()] if raw[-1].upper() in units else int(raw)


def peak_bytes(strategy: str, n: int, nbytes: int) -> int:
    """The buffers a schedule holds at once, roughly: shards, outputs and what moves between them."""
    if strategy == "naive":  # every copy lives until its device's fold
        return (n * n + n) * nbytes
    return (2 * n + 3 * (n - 1)) * nbytes  # each chunk: n-1 folds and 2(n-1) copies of 1/n of the buffer


def median_s(fn, runs: int) -> float:
    fn()  # warm up: compile, allocate, page in
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench(n: int, nbytes: int, runs: int, mem: int, rng: np.random.Generator) -> list[str]:
    shards = rng.standard_normal((n, nbytes // 4), dtype=np.float32)
    want = shards.sum(axis=0)
    out = np.empty_like(want)
    t_np = median_s(lambda: shards.sum(axis=0, out=out), runs)
    parts = [Tensor(s, device=f"CPU:{i}").realize() for i, s in enumerate(shards)]
    cells = []
    for strategy in ("naive", "ring"):
        if peak_bytes(strategy, n, nbytes) > mem:
            cells += ["skipped (memory)", "", "", ""]
            continue
        t0 = time.perf_counter()
        results = allreduce(Ops.ADD, [p.uop for p in parts], strategy)
        sched = schedule(UOp.sink(*results))
        t_sched = time.perf_counter() - t0
        t = median_s(lambda sched=sched: engine.run_schedule(sched), runs)
        for r in results:  # every device's copy, after the timed runs
            np.testing.assert_allclose(engine.copyout(sched.becomes[r]), want, rtol=1e-5, atol=1e-5)
        copies = sum(it.ast.op is Ops.COPY for it in sched.items)
        cells += [f"{copies}+{len(sched.items) - copies}", f"{t_sched * 1e3:.0f}", f"{n * nbytes / t / 1e9:.2f}",
                  f"{t_np / t:.2f}"]
        del results, sched
        gc.collect()
    return [f"{n}", fmt_bytes(nbytes), f"{n * nbytes / t_np / 1e9:.2f}", *cells]


def fmt_bytes(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--min-bytes", type=parse_bytes, default=4 << 10, help="per device (4K, 1M, ...)")
    ap.add_argument("--max-bytes", type=parse_bytes, default=64 << 20, help="per device, up to 256M")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--mem-gib", type=float, default=8.0, help="skip configurations that would hold more")
    ap.add_argument("--quick", action="store_true", help="up to 1 MiB, 3 runs")
    args = ap.parse_args()
    if args.quick:
        args.max_bytes, args.runs = min(args.max_bytes, 1 << 20), 3
    print(f"# {platform.machine()}, os.cpu_count()={os.cpu_count()}; allreduce ADD float32 over CPU:0..n-1; "
          f"median of {args.runs} runs; GB/s = n * bytes / time")
    cols = ["n", "per device", "numpy GB/s", "naive copies+kernels", "naive sched ms", "naive GB/s", "naive x numpy",
            "ring copies+kernels", "ring sched ms", "ring GB/s", "ring x numpy"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("-" * (len(c) + 2) for c in cols) + "|")
    rng = np.random.default_rng(0)
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:  # smallest first: after big buffers are freed, glibc serves the copies' host
        for n in args.devices:  # bounce buffers differently, and smaller sizes would measure that history
            row = bench(n, nbytes, args.runs, int(args.mem_gib * (1 << 30)), rng)
            print("| " + " | ".join(f"{c:>{len(h)}s}" for c, h in zip(row, cols)) + " |", flush=True)
        nbytes *= 4


if __name__ == "__main__":
    main()
