"""Training step of the Llama presets: Ember (jitted micro-step + optimizer step) vs the same model in PyTorch eager
(and torch.compile with --compile), CPU, same thread count, same process.

    python tools/bench/bench_llama_step.py                      # tiny, batch 4 x 256, 2 threads
    python tools/bench/bench_llama_step.py --preset small --batch 2 --seq 256 --steps 5

Reports tokens/s (median over the steps after the warm-up), first-step time (schedule + codegen + compile + run),
and peak resident memory of the process after each framework's run (ru_maxrss: a high-water mark, so the second
framework's figure includes the first's).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after 2 warm-up steps")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compile", action="store_true", help="also torch.compile")
    args = parser.parse_args()
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
