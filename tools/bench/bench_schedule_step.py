"""The schedule's share of the tiny Llama's first step, in fresh processes: the time `schedule()` takes in the step
(micro-step + optimizer step), the templates rangeify builds (`kernel_ast` calls) and the function calls it makes.

    python tools/bench/bench_schedule_step.py --runs 5                      # warm: a cache folder filled by one run
    python tools/bench/bench_schedule_step.py --runs 5 --cold               # cold: an empty cache folder each run
    python tools/bench/bench_schedule_step.py --runs 5 --before /tmp/wt     # and a checkout to compare, alternating

Each run puts its checkout's packages first on PYTHONPATH (this script's tree, and `--before`: another checkout, a
`git worktree`, run alternating with it), each tree with a cache folder of its own. The function calls come from one
profiled run per tree, not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import cProfile, json, sys, time
import numpy as np
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.train import Trainer
from ember.tensor import Tensor, engine
import ember.schedule as sched
spent = {"schedule_s": 0.0, "kernel_ast": 0, "calls": 0}
schedule, kernel_ast = engine.schedule, sched.kernel_ast
profile = cProfile.Profile() if sys.argv[1] == "calls" else None
def timed_schedule(*args, **kwargs):
    t = time.perf_counter()
    if profile is not None:
        profile.enable()
    try:
        return schedule(*args, **kwargs)
    finally:
        if profile is not None:
            profile.disable()
        spent["schedule_s"] += time.perf_counter() - t
def counted_kernel_ast(*args):
    spent["kernel_ast"] += 1
    return kernel_ast(*args)
cfg = TrainConfig(preset="tiny", batch_size=4, seq_len=256, fake_data=True, progress=False)
trainer = Trainer(cfg)
tokens = np.random.default_rng(0).integers(0, trainer.model_cfg.vocab_size, (4, 257)).astype(np.int32)
engine.schedule, sched.kernel_ast = timed_schedule, counted_kernel_ast  # (both looked up at each call)
t = time.perf_counter()
trainer.micro_step(Tensor(tokens))[0].item()
trainer.optimizer_step().item()
spent["step_s"] = time.perf_counter() - t
if profile is not None:
    import pstats
    spent["calls"] = pstats.Stats(profile).total_calls
print(json.dumps(spent))
"""


def _pythonpath(checkout: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted((checkout / "packages").glob("*/src")))


def run(cache: str, checkout: Path, mode: str) -> dict[str, float]:
    env = {**os.environ, "EMBER_CACHE_DIR": cache, "PYTHONPATH": _pythonpath(checkout)}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="an empty cache folder for each run")
    parser.add_argument("--before", type=Path, help="another checkout, run alternating with this one")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[2]
    trees = {"this": here} | ({"before": args.before.resolve()} if args.before else {})
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="ember-bench-schedule-") as tmp:
        caches = {name: str(Path(tmp) / name) for name in trees}
        calls = {}
        for name, tree in trees.items():  # (warm: the first run fills the cache folder) the function calls, profiled
            if not args.cold:
                run(caches[name], tree, "time")
            calls[name] = run(caches[name] if not args.cold else str(Path(tmp) / f"{name}-calls"), tree, "calls")
        for i in range(args.runs):
            for name, tree in trees.items():
                cache = str(Path(tmp) / f"{name}-cold-{i}") if args.cold else caches[name]
                rows[name].append(run(cache, tree, "time"))
    print(f"| tree ({'cold' if args.cold else 'warm'}, median of {args.runs}) | schedule s | step s | kernel_ast "
          "calls | function calls in schedule |")
    print("|---|---|---|---|---|")
    for name, rs in rows.items():
        print(f"| {name} | {statistics.median(r['schedule_s'] for r in rs):.3f} | "
              f"{statistics.median(r['step_s'] for r in rs):.3f} | {rs[0]['kernel_ast']} | {calls[name]['calls']} |")


if __name__ == "__main__":
    main()
