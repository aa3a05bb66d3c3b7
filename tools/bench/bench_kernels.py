"""Kernel benchmarks on the CPU device, each with its numpy reference measured in the same run (medians).

Run: python tools/bench/bench_kernels.py [--reps N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def median_time(fn, reps: int) -> float:
    fn()  # warm up (compile, caches)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def ember_kernel_time(build, reps: int) -> float:
    """Median time of the single kernel a tensor expression schedules to, launched directly on its buffers."""
    from ember.schedule import schedule
    from ember.tensor import engine
    from ember.uops import UOp

    sched = schedule(UOp.sink(build().uop))
    kernels = [(engine.get_kernel(it.ast, it.bufs[0].src[1].arg), [engine.buffer_for(b) for b in it.bufs])
               for it in sched.items]
    return median_time(lambda: [k(bufs, wait=True) for k, bufs in kernels], reps)


FIRST_RUN = r"""
import time, sys
t0 = time.perf_counter()
from ember.tensor import Tensor
import numpy as np
x = Tensor(np.ones((256, 256), np.float32))
y = x
for i in range(25):
    y = (y * 1.001 + float(i)).relu()
    y = y - y.max(-1, keepdim=True) if i % 5 == 0 else y
y.sum().item()
print(time.perf_counter() - t0)
"""


def first_run_seconds(cache_dir: str) -> float:
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", FIRST_RUN], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from ember.tensor import Tensor

    rng = np.random.default_rng(0)
    rows = []
    n = 16 * 1024 * 1024
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
    out = np.empty_like(a)
    t_np = median_time(lambda: np.add(np.multiply(a, b, out=out), c, out=out), args.reps)
    t_em = ember_kernel_time(lambda: ta * tb + tc, args.reps)
    gb = 4 * n * 4 / 1e9
    rows.append(("a*b+c 16M fp32", "GB/s", gb / t_em, gb / t_np))
    t_np = median_time(lambda: a.sum(), args.reps)
    t_em = ember_kernel_time(lambda: ta.sum(), args.reps)
    gb = 4 * n / 1e9
    rows.append(("sum 16M fp32", "GB/s", gb / t_em, gb / t_np))
    m = 1024
    x, w = rng.standard_normal((m, m), dtype=np.float32), rng.standard_normal((m, m), dtype=np.float32)
    tx, tw = Tensor(x), Tensor(w)
    t_np = median_time(lambda: x @ w, args.reps)
    t_em = ember_kernel_time(lambda: tx @ tw, max(1, args.reps // 2))
    gf = 2 * m**3 / 1e9
    rows.append(("matmul 1024^3 fp32", "GFLOP/s", gf / t_em, gf / t_np))
    with tempfile.TemporaryDirectory() as cache:
        cold = statistics.median(first_run_seconds(cache) for _ in range(1))
        warm = statistics.median(first_run_seconds(cache) for _ in range(3))
    print(f"{'benchmark':24s} {'unit':8s} {'ember':>10s} {'numpy':>10s} {'ratio':>7s}")
    for name, unit, ours, ref in rows:
        print(f"{name:24s} {unit:8s} {ours:10.2f} {ref:10.2f} {ours / ref:7.2f}")
    print(f"50-op graph, fresh process: first run {cold:.2f} s (empty compile cache), {warm:.2f} s (cache warm)")


if __name__ == "__main__":
    main()
