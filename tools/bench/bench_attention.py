"""Causal attention forward + backward on the CPU: Ember (jitted: out, dq, dk, dv) vs PyTorch's
F.scaled_dot_product_attention (eager), same thread count, each framework in its own process (peak memory).

    python tools/bench/bench_attention.py                         # T = 1024, 2048, 4096; 8 heads of 32; batch 1
    python tools/bench/bench_attention.py --seqs 256 1024 --head-dim 64 --reps 5
    python tools/bench/bench_attention.py --stored                # also Ember with the scores stored (the old way)
    python tools/bench/bench_attention.py --forward --unfused     # inference (out only; torch under no_grad), and
                                                                  # Ember with the row statistics stored (3 kernels)

Reports the median step (ms) over --reps runs after the warm-up, the mean CPU time of a step (all threads; less
moved by other jobs on a shared machine than the wall time; PyTorch's threads may spin), and memory: the process's
peak resident set (ru_maxrss) minus its resident set before the first step (inputs allocated, libraries loaded): what
the step added.
The stored-scores row sets ember.schedule.attention.RECOMPUTE_MAX_TERMS = 0 in its process (scores realized, the
schedule of Ember before the fused attention); the unfused row ONLINE_SOFTMAX = False (the forward before it, a row max
and a row sum kernel before the output's); the two-passes row ONLINE_ONE_LOOP = False (the row max's loop, then the
sums' loop, in place of the default's one loop, the running max rescaling the sums).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_s() -> float:  # (this process's CPU time, all threads: less moved than the wall time by other jobs' load)
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ember(t: int, heads: int, head_dim: int, reps: int, variant: str, forward: bool) -> dict[str, float]:
    import numpy as np

    import ember.schedule.attention as attention

    if variant == "ember-stored":
        attention.RECOMPUTE_MAX_TERMS = 0
    if variant == "ember-unfused":
        attention.ONLINE_SOFTMAX = False
    if variant == "ember-two-passes":
        attention.ONLINE_ONE_LOOP = False
    from ember.tensor import Tensor, jit

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, heads, t, head_dim)).astype(np.float32) for _ in range(4)]

    @jit
    def step(q: Tensor, k: Tensor, v: Tensor, up: Tensor) -> list[Tensor]:
        out = q.scaled_dot_product_attention(k, v, is_causal=True)
        return [out, (out * up).sum()] if forward else [out, *(out * up).sum().gradient(q, k, v)]

    inputs = [Tensor(a, requires_grad=i < 3 and not forward) for i, a in enumerate(arrays)]
    Tensor.realize_all(*inputs)
    base = rss_mb()
    times, cpu = [], 0.0
    for i in range(reps + 2):  # calls 1 and 2 run eagerly (the second captures); replays after
        t0, c0 = time.perf_counter(), cpu_s()
        outs = step(*inputs)
        outs[1].numpy()
        if i >= 2:
            times.append(time.perf_counter() - t0)
            cpu += cpu_s() - c0
    return {"ms": statistics.median(times) * 1e3, "cpu_ms": cpu / reps * 1e3, "mem_mb": peak_mb() - base}


def run_torch(t: int, heads: int, head_dim: int, reps: int, threads: int, forward: bool) -> dict[str, float]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    q, k, v, up = (torch.tensor(rng.standard_normal((1, heads, t, head_dim)).astype(np.float32)) for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(not forward)
    base = rss_mb()
    times, cpu = [], 0.0
    for i in range(reps + 2):
        t0, c0 = time.perf_counter(), cpu_s()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if forward:
            (out * up).sum().item()
        else:
            dq, dk, dv = torch.autograd.grad((out * up).sum(), (q, k, v))
        if i >= 2:
            times.append(time.perf_counter() - t0)
            cpu += cpu_s() - c0
    return {"ms": statistics.median(times) * 1e3, "cpu_ms": cpu / reps * 1e3, "mem_mb": peak_mb() - base}


def child(args: argparse.Namespace) -> None:
    if args.framework == "torch":
        res = run_torch(args.child_seq, args.heads, args.head_dim, args.reps, args.threads, args.forward)
    else:
        res = run_ember(args.child_seq, args.heads, args.head_dim, args.reps, args.framework, args.forward)
    print(json.dumps(res))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--stored", action="store_true", help="also Ember with the scores stored (no fused attention)")
    p.add_argument("--unfused", action="store_true", help="also Ember with no online softmax (row statistics stored)")
    p.add_argument("--two-passes", action="store_true",
                   help="also Ember with the forward's max in a loop of its own, then the sums'")
    p.add_argument("--forward", action="store_true", help="the forward alone (inference: out and a sum of it)")
    p.add_argument("--framework", choices=["ember", "ember-stored", "ember-unfused", "ember-two-passes", "torch"],
                   help=argparse.SUPPRESS)
    p.add_argument("--child-seq", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.framework:
        return child(args)
    frameworks = ["ember", "torch"] + (["ember-stored"] if args.stored else []) + \
        (["ember-unfused"] if args.unfused else []) + (["ember-two-passes"] if args.two_passes else [])
    step = "forward" if args.forward else "fwd+bwd"
    print(f"causal attention {step}, batch 1, {args.heads} heads x {args.head_dim}, {args.threads} threads, "
          f"median of {args.reps}")
    print(f"{'T':>6s} " + " ".join(f"{f + ' ms':>16s} {f + ' cpu ms':>16s} {f + ' MB':>16s}" for f in frameworks) +
          f" {'ember/torch':>12s}")
    for t in args.seqs:
        row = {}
        for f in frameworks:
            cmd = [sys.executable, __file__, "--framework", f, "--child-seq", str(t), "--heads", str(args.heads),
                   "--head-dim", str(args.head_dim), "--reps", str(args.reps), "--threads", str(args.threads)] + \
                (["--forward"] if args.forward else [])
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-2000:], file=sys.stderr)
                row[f] = {"ms": float("nan"), "cpu_ms": float("nan"), "mem_mb": float("nan")}
            else:
                row[f] = json.loads(out.stdout.strip().splitlines()[-1])
        speed = row["torch"]["ms"] / row["ember"]["ms"]
        print(f"{t:6d} " + " ".join(f"{row[f]['ms']:16.1f} {row[f]['cpu_ms']:16.1f} {row[f]['mem_mb']:16.1f}"
                                    for f in frameworks) +
              f" {speed:11.2f}x")


if __name__ == "__main__":
    main()
