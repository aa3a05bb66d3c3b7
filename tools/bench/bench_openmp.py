"""OpenMP vs one thread vs a thread start per launch, on hand-written C kernels run through Device["CPU"].

    python tools/bench/bench_openmp.py
    python tools/bench/bench_openmp.py --load                    # the table again under busy_machine()
    GOMP_SPINCOUNT=300000 python tools/bench/bench_openmp.py --load   # libgomp's default spin, for comparison

Prints median milliseconds per launch (Program(..., wait=True)) and the speedups over one thread. The OpenMP settings
are the CPU device's (`openmp_environment`: a passive wait) unless the environment sets them; they are printed."""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import numpy as np

from ember.runtime import Buffer, Device
from ember.runtime.cpu import cpu_threads
from ember.uops import dtypes

BODIES = {
    # memory bound: 12 bytes moved per FLOP
    "add": "data0[i] = data1[i] + data2[i];",
    # compute bound: 64 dependent multiply-adds per element
    "poly64": "float x = data1[i], b = data2[i]; for (int k = 0; k < 64; k++) x = x * 0.999f + b; data0[i] = x;",
}

SERIAL = """
void k(float* restrict data0, const float* restrict data1, const float* restrict data2, long long n) {
  for (long long i = 0; i < n; i++) { BODY }
}
"""

OPENMP = """
void k(float* restrict data0, const float* restrict data1, const float* restrict data2, long long n) {
  #pragma omp parallel for
  for (long long i = 0; i < n; i++) { BODY }
}
"""

# what a thread split without a pool costs: T threads started and joined on every launch
PTHREAD = """
#include <pthread.h>
#include <unistd.h>
typedef struct { float* data0; const float* data1; const float* data2; long long lo, hi; } job_t;
static void* work(void* arg) {
  job_t* j = (job_t*)arg;
  float* restrict data0 = j->data0; const float* restrict data1 = j->data1; const float* restrict data2 = j->data2;
  for (long long i = j->lo; i < j->hi; i++) { BODY }
  return 0;
}
void k(float* restrict data0, const float* restrict data1, const float* restrict data2, long long n) {
  enum { T = NTHREADS };
  pthread_t tid[T]; job_t jobs[T];
  for (int t = 0; t < T; t++) {
    jobs[t] = (job_t){data0, data1, data2, n * t / T, n * (t + 1) / T};
    pthread_create(&tid[t], 0, work, &jobs[t]);
  }
  for (int t = 0; t < T; t++) pthread_join(tid[t], 0);
}
"""


def time_ms(prgs: dict, bufs: list, n: int, reps: int) -> dict[str, tuple[float, float]]:
    """(min, median) milliseconds of one launch of each program, launches interleaved so that load from other
    processes hits every variant alike; the min is the cost on an otherwise idle machine."""
    for prg in prgs.values():
        prg(*bufs, vals=(n,))  # warm up: page faults, libgomp pool start
    ts: dict[str, list[float]] = {v: [] for v in prgs}
    for _ in range(reps):
        for v, prg in prgs.items():
            ts[v].append(prg(*bufs, vals=(n,), wait=True) * 1e3)
    return {v: (min(t), statistics.median(t)) for v, t in ts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", action="store_true", help="also under load: a spinning process per core (busy.py)")
    args = parser.parse_args()
    dev, threads = Device["CPU"], cpu_threads()
    print(f"# {platform.machine()}, os.cpu_count()={os.cpu_count()}, OpenMP threads={threads}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
          f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '(unset)')}, cc {' '.join(dev.compiler.flags)}")
    table(dev, threads)
    if args.load:
        from busy import busy_machine

        with busy_machine() as n:
            print(f"\n# under load: {n} spinning processes")
            table(dev, threads)


def table(dev, threads: int) -> None:  # type: ignore[no-untyped-def]
    print("# ms per launch, min / median; x = speedup of the min over 1 thread")
    print(f"| {'kernel':8s} | {'n':>10s} | {'1 thread':>17s} | {'OpenMP':>17s} | {'pthread per launch':>18s} "
          f"| {'OpenMP x':>8s} | {'pthread x':>9s} |")
    print("|" + "|".join("-" * (w + 2) for w in (8, 10, 17, 17, 18, 8, 9)) + "|")
    rng = np.random.default_rng(0)
    for body_name, body in BODIES.items():
        for n in (1_000, 100_000, 10_000_000 if body_name == "add" else 1_000_000):
            a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
            bufs = [Buffer("CPU", n, dtypes.float32), Buffer("CPU", n, dtypes.float32).copyin(a),
                    Buffer("CPU", n, dtypes.float32).copyin(b)]
            reps = 300 if n <= 100_000 else 15
            prgs, outs = {}, {}
            for variant, tmpl in (("serial", SERIAL), ("openmp", OPENMP), ("pthread", PTHREAD)):
                src = tmpl.replace("BODY", body).replace("NTHREADS", str(threads))
                prgs[variant] = dev.runtime("k", dev.compiler.compile_cached(src))
                prgs[variant](*bufs, vals=(n,))
                outs[variant] = bufs[0].numpy()
            assert all(np.array_equal(outs["serial"], o) for o in outs.values()), "variants disagree"
            times = time_ms(prgs, bufs, n, reps)
            cell = {v: f"{lo:.4f} / {med:.4f}" for v, (lo, med) in times.items()}
            one = times["serial"][0]
            print(f"| {body_name:8s} | {n:>10d} | {cell['serial']:>17s} | {cell['openmp']:>17s} "
                  f"| {cell['pthread']:>18s} | {one / times['openmp'][0]:>8.2f} | {one / times['pthread'][0]:>9.2f} |")


if __name__ == "__main__":
    main()
