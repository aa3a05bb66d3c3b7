"""Data-parallel training throughput of the tiny Llama on this machine: one process vs 2 MPI ranks (mpirun), the same
global batch, the same total number of cores.

    python tools/bench/bench_dp.py                          # tiny, global batch 8 x 128, 10 steps, 3 repetitions
    python tools/bench/bench_dp.py --batch 8 --seq 256 --steps 10 --repeat 5 --btl self,tcp

Every run is `ember-llama train --fake-data --benchmark STEPS` in a fresh process (or `mpirun -np 2` of it with
`--dp 2`): tokens/s of the global batch from the median step time after the JIT's two warm-up steps (rank 0's clock,
which includes the gradient allreduce); the table gives the median over the repetitions. Scaling efficiency = tokens/s
/ (cores used x tokens/s of one process on one core): 1.0 is perfect scaling, for the MPI ranks and, as the reference,
for one process using every core through OpenMP threads. Needs Open MPI's mpirun and mpi4py (`[mpi]` extra).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass

BENCHMARK_LINE = re.compile(r"benchmark: \d+ steps, median step ([\d.]+) ms, (\d+) tokens/s, first step ([\d.]+) s")


@dataclass(frozen=True)
class Run:
    name: str
    processes: int  # MPI ranks (1: a plain process)
    threads: int  # OMP_NUM_THREADS of each process
    devices: int = 1  # data-parallel CPU devices in each process (CPU, CPU:1, ...: the rows split over them)


RUNS = [
    Run("dp=1, one process, 1 thread", 1, 1),
    Run("dp=1, one process, 2 threads (OpenMP)", 1, 2),
    Run("dp=2, 2 MPI ranks x 1 thread", 2, 1),
    # one process driving 2 CPU devices: their kernels run one after the other (a CPU device launches synchronously),
    # so this row measures the cost of the sharded graph (allreduce copies, smaller kernels), not a speedup
    Run("dp=2, one process x 2 CPU devices, 2 threads", 1, 2, devices=2),
]


def run_once(run: Run, args: argparse.Namespace) -> tuple[float, float, float]:
    """(tokens/s, median step ms, first step s) of one training run."""
    train = [sys.executable, "-m", "ember.mlperf_llama", "train", "--preset", args.preset, "--fake-data",
             "--benchmark", str(args.steps), "--batch-size", str(args.batch), "--seq-len", str(args.seq),
             "--dp", str(run.processes * run.devices), "--no-progress", "--cache-dir", args.cache_dir]
    command = train if run.processes == 1 else [
        "mpirun", "-np", str(run.processes), "--oversubscribe", "--bind-to", "none", "--mca", "btl", args.btl, *train]
    env = {**os.environ, "OMP_NUM_THREADS": str(run.threads), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0 or not (m := BENCHMARK_LINE.search(proc.stderr)):
        raise RuntimeError(f"bench_dp: {run.name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    step_ms, tokens_per_s, first_s = float(m[1]), float(m[2]), float(m[3])
    return tokens_per_s, step_ms, first_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=8, help="global micro-batch in sequences (split over the ranks)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="steps per run (the first two are the JIT's warm-up)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each configuration (the median is shown)")
    parser.add_argument("--btl", default="self,vader", help="Open MPI transports: self,vader (shared memory), self,tcp")
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/ember-llama"))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    args = parser.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("bench_dp: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")

    print(f"# data parallel: preset {args.preset}, global batch {args.batch} x {args.seq}, {args.steps} steps, "
          f"{args.repeat} repetitions (medians), btl {args.btl}; {os.cpu_count()} cores, {platform.machine()}",
          flush=True)
    results: dict[Run, list[tuple[float, float, float]]] = {run: [] for run in RUNS}
    for _ in range(args.repeat):  # the configurations take turns, so slow drift of a shared machine hits them alike
        for run in RUNS:
            results[run].append(run_once(run, args))
    base = statistics.median(r[0] for r in results[RUNS[0]])
    print("| run | processes x threads | tokens/s | step ms | first step s | scaling efficiency |")  # (per core)
    print("|---|---|---|---|---|---|")
    for run, rs in results.items():
        tps = statistics.median(r[0] for r in rs)
        cores = run.processes * run.threads
        step_ms, first_s = statistics.median(r[1] for r in rs), statistics.median(r[2] for r in rs)
        print(f"| {run.name} | {run.processes} x {run.threads} | {tps:,.0f} | {step_ms:.1f} | {first_s:.2f} | "
              f"{tps / (cores * base):.2f} |")


if __name__ == "__main__":
    main()
