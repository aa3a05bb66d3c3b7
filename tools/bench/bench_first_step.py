"""First training step of the tiny Llama in a fresh process: cold (empty cache folder) and warm (the same folder again).

    python tools/bench/bench_first_step.py            # 3 cold + 3 warm runs, medians
    python tools/bench/bench_first_step.py --runs 5 --profile   # also a cProfile of one cold step (top 25)
    python tools/bench/bench_first_step.py --runs 7 --trees /tmp/wt-old /tmp/wt-new   # A/B of git worktrees

With `--trees`, each round runs every tree (cold, then warm in the same cache folder) with PYTHONPATH at that tree's
packages, the trees' order alternating from round to round, and reports each tree's runs and medians.

Each run is a new Python process with `EMBER_CACHE_DIR` pointing at a fresh temporary folder (cold: nothing compiled)
or at the folder a cold run filled (warm: every program and compiled object on disk). It reports the model setup
(parameter init: its random and copy kernels) and the first step (micro-step + optimizer step, eagerly: schedule,
codegen, C compiles, run), with the C compiler's invocations and the engine's own split of the step, and the step's
CPU time: this process (`cpu_main_s`, all its threads), the C compilers (`cpu_cc_s`) and the codegen helper processes
(`cpu_helpers_s`) — steadier than the wall time on a shared machine: on 2 cores the step takes at least half their sum.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
import numpy as np
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.train import Trainer
from ember.runtime.cpu import CPUCompiler
from ember.tensor import Tensor
from ember.tensor import engine
t_import = time.perf_counter()
spent = {"codegen_s": 0.0, "codegen_cpu_s": 0.0, "cc_s": 0.0}
def timed(fn, key):
    def wrapper(*args, **kwargs):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - t
            if key == "codegen_s":
                spent["codegen_cpu_s"] += time.thread_time() - c
    return wrapper
engine.codegen = timed(engine.codegen, "codegen_s")  # the engine looks it up at each call
CPUCompiler.compile = timed(CPUCompiler.compile, "cc_s")  # summed over the compile threads
cfg = TrainConfig(preset="tiny", batch_size=4, seq_len=256, fake_data=True, progress=False)
trainer = Trainer(cfg)
t_setup = time.perf_counter()
cc_setup = CPUCompiler.invocations
def cpu_now():
    # this process, the C compilers it waited for, its codegen helper processes (alive: read from /proc)
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    helpers = 0.0
    for pool in engine.ENGINE.pools.values():
        for worker in pool.workers:
            try:
                fields = open(f"/proc/{worker.proc.pid}/stat").read().rpartition(")")[2].split()
            except OSError:
                continue
            helpers += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, helpers
cpu0 = cpu_now()
tokens = np.random.default_rng(0).integers(0, trainer.model_cfg.vocab_size, (4, 257)).astype(np.int32)
if sys.argv[1] == "profile":
    import cProfile, pstats
    prof = cProfile.Profile()
    prof.enable()
trainer.micro_step(Tensor(tokens))[0].item()
trainer.optimizer_step().item()
t_step = time.perf_counter()
cpu1 = cpu_now()
if sys.argv[1] == "profile":
    prof.disable()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
print(json.dumps({"import_s": t_import - t0, "setup_s": t_setup - t_import, "step_s": t_step - t_setup,
                  "cc_setup": cc_setup, "cc_step": CPUCompiler.invocations - cc_setup,
                  **spent, "cpu_main_s": cpu1[0] - cpu0[0], "cpu_cc_s": cpu1[1] - cpu0[1],
                  "cpu_helpers_s": cpu1[2] - cpu0[2]}))
"""


def run(cache: str, mode: str = "time", tree: str | None = None) -> dict[str, float]:
    env = {**os.environ, "EMBER_CACHE_DIR": cache}
    if tree is not None:  # (that tree's packages first: its code, not the installed one)
        env["PYTHONPATH"] = os.pathsep.join(sorted(glob.glob(os.path.join(tree, "packages", "*", "src"))))
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    if mode == "profile":
        print(out.stderr, file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one cold first step")
    parser.add_argument("--trees", nargs="+", help="checkouts (git worktrees) to compare, alternating")
    args = parser.parse_args()
    if args.trees:
        if bad := [t for t in args.trees if not glob.glob(os.path.join(t, "packages", "*", "src"))]:
            parser.error(f"--trees: no packages/*/src in {', '.join(bad)} (a checkout of this repository?)")
        compare(args.trees, args.runs)
        return
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="ember-first-step-") as cache:
            rows["cold"].append(run(cache))
            rows["warm"].append(run(cache))
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="ember-first-step-") as cache:
            run(cache, "profile")
    keys = list(rows["cold"][0])
    print("| run | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"| {name} (median of {len(rs)}) | " + " | ".join(f"{med[k]:.2f}" for k in keys) + " |")


def compare(trees: list[str], rounds: int) -> None:
    """Cold and warm first steps of each tree, the trees alternating; each tree's step times and CPU medians."""
    rows: dict[str, dict[str, list[dict[str, float]]]] = {t: {"cold": [], "warm": []} for t in trees}
    for i in range(rounds):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            with tempfile.TemporaryDirectory(prefix="ember-first-step-") as cache:
                rows[tree]["cold"].append(run(cache, tree=tree))
                rows[tree]["warm"].append(run(cache, tree=tree))
    print(f"# load average at the end: {os.getloadavg()[0]:.2f}")
    print("| tree | run | step s (each run) | step s median | cpu_main_s | cpu_cc_s | cpu_helpers_s |")
    print("|---|---|---|---|---|---|---|")
    for tree, by_mode in rows.items():
        for mode, rs in by_mode.items():
            keys = ("step_s", "cpu_main_s", "cpu_cc_s", "cpu_helpers_s")
            med = {k: statistics.median(r[k] for r in rs) for k in keys}
            print(f"| {tree} | {mode} | " + ", ".join(f"{r['step_s']:.2f}" for r in rs) + " | " +
                  " | ".join(f"{v:.3f}" for v in med.values()) + " |")


if __name__ == "__main__":
    main()
