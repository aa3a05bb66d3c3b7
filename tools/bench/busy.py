"""A machine busy with other work, for benchmarks that measure how a framework behaves when it shares the cores.

    from busy import busy_machine
    with busy_machine():            # one spinning process per core until the block ends
        run_the_benchmark()

    python tools/bench/busy.py --seconds 30     # keep every core busy for 30 s (to run something beside it by hand)

Each worker is a separate process (not a thread: no GIL sharing with the benchmark) running a tight pure-Python loop at
normal priority, as another user's job would. Workers are killed when the block exits, whatever happened inside it,
and stop by themselves when the process that started them dies.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Iterator


def _spin(stop_at: float, parent: int) -> None:
    x = 0
    while time.monotonic() < stop_at and os.getppid() == parent:  # a killed parent leaves no spinner behind
        for _ in range(10_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def busy_machine(workers: int | None = None, max_seconds: float = 3600.0) -> Iterator[int]:
    """Run `workers` (default: one per core this process may use) spinning processes for the duration of the block
    (at most `max_seconds`, so a crashed benchmark never leaves them behind). Yields the number of workers."""
    n = cores() if workers is None else workers
    ctx = mp.get_context("spawn")
    stop_at = time.monotonic() + max_seconds
    procs = [ctx.Process(target=_spin, args=(stop_at, os.getpid()), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.2)  # let them get onto the cores
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    with busy_machine(args.workers, args.seconds + 1) as n:
        print(f"{n} busy workers for {args.seconds:.0f} s")
        time.sleep(args.seconds)
