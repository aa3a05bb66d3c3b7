"""Per-call cost of a small function, eager vs jit replay (same process, medians).

Run: python tools/bench/bench_jit.py [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ember.tensor import Tensor, jit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    w1, w2 = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((64, 64), (64, 10)))

    def mlp(x: Tensor) -> Tensor:
        return ((x @ w1).relu() @ w2).softmax(-1).realize()

    jitted = jit(mlp)
    xs = [Tensor(rng.standard_normal((32, 64)).astype(np.float32)).realize() for _ in range(args.reps + 3)]
    for x in xs[:3]:
        jitted(x)  # run, capture

    def per_call(fn) -> float:
        ts = []
        for x in xs[3:]:
            t0 = time.perf_counter()
            fn(x)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    eager, replay = per_call(mlp), per_call(jitted)
    print(f"{'mode':8s} {'per call':>12s}")
    print(f"{'eager':8s} {eager * 1e6:10.1f} us  (build graph, schedule, codegen cache lookup, run)")
    print(f"{'jit':8s} {replay * 1e6:10.1f} us  ({jitted.kernel_count} kernel launches replayed)")
    print(f"jit is {eager / replay:.1f}x faster per call")


if __name__ == "__main__":
    main()
