"""Kernel benchmarks on the CPU device, each with its numpy and PyTorch (all cores) references measured in the same
run (medians). Bytes count each input read and each output written once.

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


def torch_time(fn, reps: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    with torch.no_grad():
        return median_time(fn, reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-first-run", action="store_true", help="skip the fresh-process compile timing")
    args = ap.parse_args()
    from ember.tensor import Tensor

    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []  # (name, unit, amount of work, ember s, numpy s, torch s)
    n = 16 * 1024 * 1024
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
    out = np.empty_like(a)
    pa, pb, pc = (torch.from_numpy(x) for x in (a, b, c)) if torch else (None, None, None)
    rows.append(("a*b+c 16M fp32", "GB/s", 4 * n * 4 / 1e9, ember_kernel_time(lambda: ta * tb + tc, args.reps),
                 median_time(lambda: np.add(np.multiply(a, b, out=out), c, out=out), args.reps),
                 torch_time(lambda: torch.addcmul(pc, pa, pb), args.reps) if torch else None))
    rows.append(("sum 16M fp32", "GB/s", 4 * n / 1e9, ember_kernel_time(lambda: ta.sum(), args.reps),
                 median_time(lambda: a.sum(), args.reps), torch_time(lambda: pa.sum(), args.reps) if torch else None))
    for m in (1024, 2048, 1000):  # (1000: no tile divides it, the edges are padded)
        x, w = rng.standard_normal((m, m), dtype=np.float32), rng.standard_normal((m, m), dtype=np.float32)
        tx, tw = Tensor(x), Tensor(w)
        px, pw = (torch.from_numpy(x), torch.from_numpy(w)) if torch else (None, None)
        rows.append((f"matmul {m}^3 fp32", "GFLOP/s", 2 * m**3 / 1e9,
                     ember_kernel_time(lambda tx=tx, tw=tw: tx @ tw, max(1, args.reps // 2)),
                     median_time(lambda x=x, w=w: x @ w, args.reps),
                     torch_time(lambda px=px, pw=pw: px @ pw, args.reps) if torch else None))
    x, w = (rng.standard_normal((8, 256, 256), dtype=np.float32) for _ in range(2))
    tx, tw = Tensor(x), Tensor(w)
    px, pw = (torch.from_numpy(x), torch.from_numpy(w)) if torch else (None, None)
    rows.append(("bmm 8x256^3 fp32", "GFLOP/s", 2 * 8 * 256**3 / 1e9, ember_kernel_time(lambda: tx @ tw, args.reps),
                 median_time(lambda: x @ w, args.reps), torch_time(lambda: px @ pw, args.reps) if torch else None))
    s = rng.standard_normal((4096, 4096), dtype=np.float32)
    ts = Tensor(s)
    ps = torch.from_numpy(s) if torch else None

    def np_softmax():
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    rows.append(("softmax 4096x4096 fp32", "GB/s", 2 * 4 * 4096 * 4096 / 1e9,
                 ember_kernel_time(lambda: ts.softmax(-1), args.reps), median_time(np_softmax, args.reps),
                 torch_time(lambda: ps.softmax(-1), args.reps) if torch else None))
    print(f"{'benchmark':24s} {'unit':8s} {'ember':>9s} {'numpy':>9s} {'torch':>9s} {'/numpy':>7s} {'/torch':>7s}")
    for name, unit, work, t_em, t_np, t_pt in rows:
        pt = f"{work / t_pt:9.2f}" if t_pt else f"{'-':>9s}"
        rpt = f"{t_pt / t_em:7.2f}" if t_pt else f"{'-':>7s}"
        print(f"{name:24s} {unit:8s} {work / t_em:9.2f} {work / t_np:9.2f} {pt} {t_np / t_em:7.2f} {rpt}")
    if not args.no_first_run:
        with tempfile.TemporaryDirectory() as cache:
            cold = statistics.median(first_run_seconds(cache) for _ in range(1))
            warm = statistics.median(first_run_seconds(cache) for _ in range(3))
        print(f"50-op graph, fresh process: first run {cold:.2f} s (empty compile cache), {warm:.2f} s (cache warm)")


if __name__ == "__main__":
    main()
