"""Training step of the Llama presets: Ember (jitted micro-step + optimizer step) vs the same model in PyTorch eager
(and torch.compile with --compile), CPU, same thread count, same process.

    python tools/bench/bench_llama_step.py                      # tiny, batch 4 x 256, 2 threads
    python tools/bench/bench_llama_step.py --preset small --batch 2 --seq 256 --steps 5
    python tools/bench/bench_llama_step.py --load               # unloaded vs under load (busy.py), slowdowns
    python tools/bench/bench_llama_step.py --load --ember-env OMP_WAIT_POLICY=active   # a second ember row

Reports tokens/s (median over the steps after the warm-up), first-step time (schedule + codegen + compile + run),
and peak resident memory of the process after each framework's run (ru_maxrss: a high-water mark, so the second
framework's figure includes the first's).

`--load` runs each framework in its own process (PyTorch ships a libgomp.so.1 of its own, which a process that
imported torch also uses for Ember's kernels, with the OpenMP settings of whichever loaded it first), the processes
alternating ember, torch, ember, torch, ... (`--reps`); each process alternates phases of `--steps` steps on the
unloaded machine and under `busy_machine()` (a spinning process per core), `--rounds` times. It reports the median
step of each phase kind and the slowdown (loaded / unloaded), per framework.
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


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_ember(preset: str, batch: int, seq: int, steps: int, layers: int | None) -> dict[str, float]:
    import numpy as np

    from ember.mlperf_llama.config import TrainConfig
    from ember.mlperf_llama.train import Trainer
    from ember.tensor import Tensor

    cfg = TrainConfig(preset=preset, layers=layers, batch_size=batch, seq_len=seq, fake_data=True, progress=False)
    trainer = Trainer(cfg)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps + 2):  # calls 1 and 2 run eagerly (the second captures); replays from the third
        tokens = rng.integers(0, trainer.model_cfg.vocab_size, (batch, seq + 1)).astype(np.int32)
        t = time.perf_counter()
        trainer.micro_step(Tensor(tokens))[0].item()
        trainer.optimizer_step().item()
        times.append(time.perf_counter() - t)
    return {"first_s": times[0], "step_s": statistics.median(times[2:]), "peak_mb": peak_mb()}


def torch_model(preset: str, layers: int | None):  # type: ignore[no-untyped-def]
    import torch

    from ember.mlperf_llama.model import preset as get_preset
    from ember.mlperf_llama.model import rope_frequencies

    cfg = get_preset(preset, **({"n_layers": layers} if layers else {}))
    hd = cfg.head_dim

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kv = cfg.n_kv_heads * hd
            self.wq, self.wk = torch.nn.Linear(cfg.dim, cfg.dim, False), torch.nn.Linear(cfg.dim, kv, False)
            self.wv, self.wo = torch.nn.Linear(cfg.dim, kv, False), torch.nn.Linear(cfg.dim, cfg.dim, False)
            self.w1, self.w3 = (torch.nn.Linear(cfg.dim, cfg.ffn_dim, False) for _ in range(2))
            self.w2 = torch.nn.Linear(cfg.ffn_dim, cfg.dim, False)
            self.n1, self.n2 = torch.nn.RMSNorm(cfg.dim, cfg.norm_eps), torch.nn.RMSNorm(cfg.dim, cfg.norm_eps)

        def forward(self, x, rot):  # type: ignore[no-untyped-def]
            b, t, _ = x.shape
            h = self.n1(x)
            q = self.wq(h).view(b, t, cfg.n_heads, hd)
            k = self.wk(h).view(b, t, cfg.n_kv_heads, hd)
            v = self.wv(h).view(b, t, cfg.n_kv_heads, hd)
            q, k = (torch.view_as_real(torch.view_as_complex(z.reshape(b, t, -1, hd // 2, 2)) * rot).flatten(-2)
                    for z in (q, k))
            out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                   v.transpose(1, 2), is_causal=True, enable_gqa=True)
            x = x + self.wo(out.transpose(1, 2).reshape(b, t, cfg.dim))
            h = self.n2(x)
            return x + self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(cfg.vocab_size, cfg.dim)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.norm = torch.nn.RMSNorm(cfg.dim, cfg.norm_eps)
            self.out = torch.nn.Linear(cfg.dim, cfg.vocab_size, False)

        def forward(self, tokens):  # type: ignore[no-untyped-def]
            t = tokens.shape[1]
            angles = torch.outer(torch.arange(t, dtype=torch.float64),
                                 torch.tensor(rope_frequencies(hd, cfg.rope_theta, cfg.rope_scaling)))
            rot = torch.polar(torch.ones_like(angles), angles).to(torch.complex64).view(1, t, 1, hd // 2)
            x = self.emb(tokens)
            for blk in self.blocks:
                x = blk(x, rot)
            return self.out(self.norm(x))

    return cfg, Model()


def bench_torch(preset: str, batch: int, seq: int, steps: int, layers: int | None, compile_: bool) -> dict[str, float]:
    import torch

    cfg, model = torch_model(preset, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    fwd = torch.compile(model) if compile_ else model
    times = []
    for _ in range(steps + 2):
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
        t = time.perf_counter()
        logits = fwd(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        loss.item()
        times.append(time.perf_counter() - t)
    return {"first_s": times[0], "step_s": statistics.median(times[2:]), "peak_mb": peak_mb()}


def ember_stepper(preset: str, batch: int, seq: int, layers: int | None):  # type: ignore[no-untyped-def]
    """A function that runs one Ember training step (after two warm-up steps: eager, then the jit's capture)."""
    import numpy as np

    from ember.mlperf_llama.config import TrainConfig
    from ember.mlperf_llama.train import Trainer
    from ember.tensor import Tensor

    cfg = TrainConfig(preset=preset, layers=layers, batch_size=batch, seq_len=seq, fake_data=True, progress=False)
    trainer = Trainer(cfg)
    rng = np.random.default_rng(0)

    def step() -> None:
        tokens = rng.integers(0, trainer.model_cfg.vocab_size, (batch, seq + 1)).astype(np.int32)
        trainer.micro_step(Tensor(tokens))[0].item()
        trainer.optimizer_step().item()
    for _ in range(2):
        step()
    return step


def torch_stepper(preset: str, batch: int, seq: int, layers: int | None):  # type: ignore[no-untyped-def]
    """A function that runs one PyTorch eager training step (after two warm-up steps)."""
    import torch

    cfg, model = torch_model(preset, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)

    def step() -> None:
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        loss.item()
    for _ in range(2):
        step()
    return step


def load_child(args: argparse.Namespace) -> None:
    """One framework in this process: phases unloaded and loaded, alternating; prints their step times as JSON."""
    from busy import busy_machine

    if args.child == "torch":
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        step = torch_stepper(args.preset, args.batch, args.seq, args.layers)
    else:
        step = ember_stepper(args.preset, args.batch, args.seq, args.layers)
    times: dict[str, list[float]] = {"unloaded": [], "loaded": []}

    def phase(kind: str) -> None:
        for _ in range(args.steps):
            t = time.perf_counter()
            step()
            times[kind].append(time.perf_counter() - t)
    for _ in range(args.rounds):
        phase("unloaded")
        with busy_machine():
            phase("loaded")
    print(json.dumps(times))


def load_main(args: argparse.Namespace) -> None:
    """Each framework in its own process, alternating; the table of unloaded and loaded tokens/s and slowdowns."""
    from busy import cores

    variants = [("ember", "ember", {})] + [
        (f"ember {' '.join(e)}", "ember", dict(kv.split("=", 1) for kv in e)) for e in args.ember_env or []] + [
        ("torch eager", "torch", {})]
    child_args = ["--preset", args.preset, "--batch", str(args.batch), "--seq", str(args.seq), "--steps",
                  str(args.steps), "--rounds", str(args.rounds)]
    if args.threads:
        child_args += ["--threads", str(args.threads)]
    if args.layers:
        child_args += ["--layers", str(args.layers)]
    times: dict[str, dict[str, list[float]]] = {name: {"unloaded": [], "loaded": []} for name, _, _ in variants}
    load_before = os.getloadavg()
    for _ in range(args.reps):
        for name, child, env in variants:
            out = subprocess.run([sys.executable, __file__, "--child", child, *child_args],
                                 env={**os.environ, **env}, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{name}: exit code {out.returncode}\n{out.stderr}")
            for kind, ts in json.loads(out.stdout.strip().splitlines()[-1]).items():
                times[name][kind] += ts
    tokens = args.batch * args.seq
    print(f"# {cores()} cores, threads {args.threads or 'default'}; load average before {load_before[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}; {args.reps} processes x {args.rounds} rounds x {args.steps} steps per phase")
    print("| framework | unloaded tokens/s | loaded tokens/s | slowdown (loaded/unloaded step) | "
          "unloaded step ms (min-max) | loaded step ms (min-max) |")
    print("|---|---|---|---|---|---|")
    for name, _, _ in variants:
        un, lo = times[name]["unloaded"], times[name]["loaded"]
        mu, ml = statistics.median(un), statistics.median(lo)
        print(f"| {name} | {tokens / mu:.0f} | {tokens / ml:.0f} | {ml / mu:.2f}x | {mu * 1e3:.0f} "
              f"({min(un) * 1e3:.0f}-{max(un) * 1e3:.0f}) | {ml * 1e3:.0f} ({min(lo) * 1e3:.0f}-{max(lo) * 1e3:.0f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after 2 warm-up steps")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of both (default: every core; with --load each framework's own default)")
    parser.add_argument("--compile", action="store_true", help="also torch.compile")
    parser.add_argument("--load", action="store_true",
                        help="unloaded vs loaded (a spinning process per core), each framework in its own process")
    parser.add_argument("--reps", type=int, default=2, help="--load: processes per framework, alternating")
    parser.add_argument("--rounds", type=int, default=2, help="--load: unloaded + loaded phases per process")
    parser.add_argument("--ember-env", nargs="+", action="append", metavar="VAR=VALUE",
                        help="--load: also ember with these environment variables (repeatable: one row each)")
    parser.add_argument("--child", choices=["ember", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.load:
        if args.threads:
            os.environ["OMP_NUM_THREADS"] = str(args.threads)
        load_child(args) if args.child else load_main(args)
        return
    args.threads = args.threads or os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    tokens = args.batch * args.seq
    print(f"preset {args.preset} layers {args.layers or 'preset'} batch {args.batch} seq {args.seq}, "
          f"{args.threads} threads, torch {torch.__version__}", file=sys.stderr)
    rows = [("ember", bench_ember(args.preset, args.batch, args.seq, args.steps, args.layers)),
            ("torch eager", bench_torch(args.preset, args.batch, args.seq, args.steps, args.layers, False))]
    if args.compile:
        rows.append(("torch.compile", bench_torch(args.preset, args.batch, args.seq, args.steps, args.layers, True)))
    ember_step = rows[0][1]["step_s"]
    print("| framework | tokens/s | step ms | first step s | peak RSS MB | ember tokens/s / this |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {tokens / r['step_s']:.0f} | {r['step_s'] * 1e3:.0f} | {r['first_s']:.2f} | "
              f"{r['peak_mb']:.0f} | {r['step_s'] / ember_step:.3f} |")

if __name__ == "__main__":
    main()
