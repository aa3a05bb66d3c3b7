"""The tiny Llama written the plain way, as a PyTorch or tinygrad user writes it, trained by one jitted step: Ember vs
the same code in PyTorch eager and torch.compile, CPU, same thread count, same weights.

    python tools/bench/bench_plain_llama.py                         # tiny preset, batch 4 x 256
    python tools/bench/bench_plain_llama.py --seq 1024 --batch 1 --no-compile
    python tools/bench/bench_plain_llama.py --load                  # also under load (busy.py): slowdowns
    python tools/bench/bench_plain_llama.py --reps 3 --trainer      # 3 alternating processes each; the trainer's step
    python tools/bench/bench_plain_llama.py --cold --reps 3         # every process with empty compile caches

"Plain" means what the trainer's model (ember.mlperf_llama.model) avoids by hand: rotate-half RoPE built with `cat`
of the halves, key/value heads repeated by `expand` + `reshape` before attention, `embedding`, mean cross-entropy,
and a step that calls `opt.zero_grad()`, `loss.backward()`, `opt.step()` on an AdamW over the list of parameters.
The compiler, not the program, has to make this fast.

Each framework runs in its own process (ru_maxrss is a high-water mark, so peaks are separate; and PyTorch's
libgomp would otherwise run Ember's kernels too). Every process builds the same weights (numpy, seeded), trains
`--check-steps` steps on the same fixed batch first and prints the losses, which must agree with PyTorch eager's to
1e-3; then it times `--steps` steps after two warm-up steps (Ember's jit runs the first call eagerly and captures
on the second) and reports the median. `--load` repeats the timed steps under `busy_machine()` (a spinning process
per core) and reports each framework's slowdown.

The first step (the model built, its weights loaded, the first training step) is the first process's: by default
against the caches a user has (Ember's `EMBER_CACHE_DIR`, Inductor's), so it depends on what earlier runs left there;
`--cold` gives every process empty ones (a fresh `EMBER_CACHE_DIR` and `TORCHINDUCTOR_CACHE_DIR`): the first run of
a program nobody compiled before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LR = 1e-3


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def config(preset: str, layers: int | None, seq: int) -> Any:
    from ember.mlperf_llama.model import preset as get_preset

    changes: dict[str, object] = {"max_seq_len": max(seq, get_preset(preset).max_seq_len)}
    if layers:
        changes["n_layers"] = layers
    return get_preset(preset, **changes)


def init_weights(cfg: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """The weights by PyTorch state-dict name (normal(0, 0.02), norms 1), the same for every framework."""
    rng = np.random.default_rng(seed)
    kv = cfg.n_kv_heads * cfg.head_dim

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)
    out = {"emb.weight": normal(cfg.vocab_size, cfg.dim)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        out |= {p + "wq.weight": normal(cfg.dim, cfg.dim), p + "wk.weight": normal(kv, cfg.dim),
                p + "wv.weight": normal(kv, cfg.dim), p + "wo.weight": normal(cfg.dim, cfg.dim),
                p + "w1.weight": normal(cfg.ffn_dim, cfg.dim), p + "w3.weight": normal(cfg.ffn_dim, cfg.dim),
                p + "w2.weight": normal(cfg.dim, cfg.ffn_dim),
                p + "n1.weight": np.ones(cfg.dim, np.float32), p + "n2.weight": np.ones(cfg.dim, np.float32)}
    return out | {"norm.weight": np.ones(cfg.dim, np.float32), "out.weight": normal(cfg.vocab_size, cfg.dim)}


def rope_cos_sin(cfg: Any, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotate-half form, (seq, head_dim): each frequency twice, the halves side by side."""
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def batches(cfg: Any, batch: int, seq: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab_size, (batch, seq + 1)).astype(np.int32) for _ in range(n)]


# *** Ember, written plainly ***
def ember_model(cfg: Any, weights: dict[str, np.ndarray]) -> Any:
    from ember.tensor import Tensor, nn

    class Block:
        def __init__(self) -> None:
            kv = cfg.n_kv_heads * cfg.head_dim
            self.wq, self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False), nn.Linear(cfg.dim, kv, bias=False)
            self.wv, self.wo = nn.Linear(cfg.dim, kv, bias=False), nn.Linear(cfg.dim, cfg.dim, bias=False)
            self.w1, self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False), nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
            self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
            self.n1, self.n2 = nn.RMSNorm(cfg.dim, cfg.norm_eps), nn.RMSNorm(cfg.dim, cfg.norm_eps)

        def __call__(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
            b, t, _ = x.shape
            hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
            h = self.n1(x)
            q = self.wq(h).reshape(b, t, cfg.n_heads, hd).transpose(1, 2)
            k = self.wk(h).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
            v = self.wv(h).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, rep), repeat_kv(v, rep)
            out = q.scaled_dot_product_attention(k, v, is_causal=True)
            x = x + self.wo(out.transpose(1, 2).reshape(b, t, cfg.dim))
            h = self.n2(x)
            return x + self.w2(self.w1(h).silu() * self.w3(h))

    def rotate_half(x: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        return (-x[..., half:]).cat(x[..., :half], dim=-1)

    def repeat_kv(x: Tensor, rep: int) -> Tensor:
        b, h, t, d = x.shape
        return x.reshape(b, h, 1, t, d).expand(b, h, rep, t, d).reshape(b, h * rep, t, d)

    class Model:
        def __init__(self) -> None:
            self.emb = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.layers = [Block() for _ in range(cfg.n_layers)]
            self.norm = nn.RMSNorm(cfg.dim, cfg.norm_eps)
            self.out = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
            self.rope: dict[int, tuple[Tensor, Tensor]] = {}

        def __call__(self, tokens: Tensor) -> Tensor:
            t = tokens.shape[1]
            if t not in self.rope:
                self.rope[t] = tuple(Tensor(a).realize() for a in rope_cos_sin(cfg, t))  # type: ignore[assignment]
            cos, sin = self.rope[t]
            x = self.emb(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.out(self.norm(x))

        def loss(self, tokens: Tensor) -> Tensor:
            logits = self(tokens[:, :-1])
            return nn.cross_entropy(logits.reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))

    model = Model()
    nn.load_state_dict(model, {k: Tensor(v) for k, v in weights.items()})
    return model


def ember_plain(cfg: Any, weights: dict[str, np.ndarray]) -> Any:
    """(model, step): step(tokens) -> loss, one jitted zero_grad/backward/step (`step.jit`: the JitFunction)."""
    from ember.tensor import Tensor, jit, nn

    model = ember_model(cfg, weights)
    opt = nn.optim.AdamW(nn.get_parameters(model), lr=LR)

    @jit
    def step(tokens: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(tokens)
        loss.backward()
        opt.step()
        return loss.realize()

    def run(tokens: np.ndarray) -> float:
        return float(step(Tensor(tokens)).item())
    run.jit = step  # type: ignore[attr-defined]  # (tests count its kernels)
    return model, run


# *** PyTorch, the same code ***
def torch_plain(cfg: Any, weights: dict[str, np.ndarray], compile_: bool) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kv = cfg.n_kv_heads * cfg.head_dim
            self.wq, self.wk = torch.nn.Linear(cfg.dim, cfg.dim, False), torch.nn.Linear(cfg.dim, kv, False)
            self.wv, self.wo = torch.nn.Linear(cfg.dim, kv, False), torch.nn.Linear(cfg.dim, cfg.dim, False)
            self.w1 = torch.nn.Linear(cfg.dim, cfg.ffn_dim, False)
            self.w3 = torch.nn.Linear(cfg.dim, cfg.ffn_dim, False)
            self.w2 = torch.nn.Linear(cfg.ffn_dim, cfg.dim, False)
            self.n1, self.n2 = torch.nn.RMSNorm(cfg.dim, cfg.norm_eps), torch.nn.RMSNorm(cfg.dim, cfg.norm_eps)

        def forward(self, x, cos, sin):  # type: ignore[no-untyped-def]
            b, t, _ = x.shape
            hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
            h = self.n1(x)
            q = self.wq(h).view(b, t, cfg.n_heads, hd).transpose(1, 2)
            k = self.wk(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
            v = self.wv(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, rep), repeat_kv(v, rep)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(out.transpose(1, 2).reshape(b, t, cfg.dim))
            h = self.n2(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    def rotate_half(x):  # type: ignore[no-untyped-def]
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def repeat_kv(x, rep):  # type: ignore[no-untyped-def]
        b, h, t, d = x.shape
        return x[:, :, None].expand(b, h, rep, t, d).reshape(b, h * rep, t, d)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(cfg.vocab_size, cfg.dim)
            self.layers = torch.nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.norm = torch.nn.RMSNorm(cfg.dim, cfg.norm_eps)
            self.out = torch.nn.Linear(cfg.dim, cfg.vocab_size, False)

        def forward(self, tokens):  # type: ignore[no-untyped-def]
            cos, sin = (torch.from_numpy(a) for a in rope_cos_sin(cfg, tokens.shape[1]))
            x = self.emb(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.out(self.norm(x))

    model = Model()
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    forward = torch.compile(model) if compile_ else model

    def step(tokens: np.ndarray) -> float:
        x = torch.from_numpy(tokens).long()
        opt.zero_grad()
        logits = forward(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return float(loss.item())
    return model, step


def trainer_step(cfg: Any, batch: int, seq: int) -> Any:
    """The trainer's own hand-shaped step (ember.mlperf_llama: q/k stored after RoPE in chosen layouts, flat
    optimizer groups, global-norm clipping) on the same sizes: its own init and loss, so only its time is compared."""
    from ember.mlperf_llama.config import TrainConfig
    from ember.mlperf_llama.train import Trainer
    from ember.tensor import Tensor

    trainer = Trainer(TrainConfig(preset="tiny", layers=cfg.n_layers, batch_size=batch, seq_len=seq,
                                  fake_data=True, progress=False))

    def step(tokens: np.ndarray) -> float:
        loss = trainer.micro_step(Tensor(tokens))[0].item()
        trainer.optimizer_step().item()
        return float(loss)
    return step


def child(args: argparse.Namespace) -> None:
    """One framework in this process: the check losses, then timed steps (unloaded, and loaded with --load)."""
    if args.child in ("eager", "compile"):
        import torch

        torch.set_num_threads(args.threads)
    cfg = config(args.preset, args.layers, args.seq)
    weights = init_weights(cfg)
    t = time.perf_counter()
    if args.child == "ember":
        _, step = ember_plain(cfg, weights)
    elif args.child == "trainer":
        step = trainer_step(cfg, args.batch, args.seq)
    else:
        _, step = torch_plain(cfg, weights, args.child == "compile")
    fixed = batches(cfg, args.batch, args.seq, 1, seed=1)[0]
    losses, times = [], []
    for _ in range(args.check_steps):  # the first steps double as the warm-up (Ember: eager, then the capture)
        losses.append(step(fixed))
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
    data = batches(cfg, args.batch, args.seq, args.steps, seed=2)
    phases: dict[str, list[float]] = {"unloaded": [], "loaded": []}

    def phase(kind: str) -> None:
        for tokens in data:
            t = time.perf_counter()
            step(tokens)
            phases[kind].append(time.perf_counter() - t)
    phase("unloaded")
    if args.load:
        sys.path.insert(0, HERE)
        from busy import busy_machine

        with busy_machine():
            phase("loaded")
    print(json.dumps({"losses": losses, "first_s": times[0], "second_s": times[1], "peak_mb": peak_mb(), **phases}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=7, help="timed steps (the median is reported)")
    parser.add_argument("--check-steps", type=int, default=3, help="steps on a fixed batch whose losses are compared")
    parser.add_argument("--threads", type=int, default=None, help="threads of every framework (default: every core)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--load", action="store_true", help="also time the steps under busy_machine()")
    parser.add_argument("--reps", type=int, default=1,
                        help="processes per framework, alternating (the medians are over all their steps)")
    parser.add_argument("--trainer", action="store_true",
                        help="also the trainer's own step (ember.mlperf_llama, tiny preset) on the same sizes")
    parser.add_argument("--cold", action="store_true",
                        help="every process with empty compile caches (Ember's and Inductor's): a cold first step")
    parser.add_argument("--child", choices=["ember", "trainer", "eager", "compile"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.threads = args.threads or os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.child:
        return child(args)
    if args.steps < 5 or args.check_steps < 2:
        parser.error("--steps must be >= 5 and --check-steps >= 2")
    names = {"ember": "ember", "trainer": "ember trainer", "eager": "torch eager", "compile": "torch.compile"}
    kinds = ["ember"] + (["trainer"] if args.trainer else []) + ["eager"] + ([] if args.no_compile else ["compile"])
    passed = [a for a in sys.argv[1:]]
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.reps):  # processes alternate, so a burst of other work on the machine hits every framework
        for kind in kinds:
            with tempfile.TemporaryDirectory(prefix="bench-plain-") as fresh:
                env = {**os.environ, "EMBER_CACHE_DIR": os.path.join(fresh, "ember"),
                       "TORCHINDUCTOR_CACHE_DIR": os.path.join(fresh, "inductor")} if args.cold else None
                out = subprocess.run([sys.executable, __file__, *passed, "--child", kind, "--threads",
                                      str(args.threads)], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                raise RuntimeError(f"{kind}: exit code {out.returncode}\n{out.stderr[-4000:]}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            got["firsts"] = [got["first_s"]]
            if kind not in results:
                results[kind] = got
                continue
            for key in ("unloaded", "loaded", "firsts"):  # times pool (peaks: the first process's)
                results[kind][key] += got[key]
    tokens = args.batch * args.seq
    print(f"# preset {args.preset} layers {args.layers or 'preset'}, batch {args.batch} x seq {args.seq}, "
          f"{args.threads} threads; median of {args.reps} processes x {args.steps} timed steps per framework, "
          f"processes alternating; load average {os.getloadavg()[0]:.2f} at the end")
    print("# first step: " + ("the median over the processes, each with empty compile caches (--cold)" if args.cold
                              else "the first process's, against the caches as it found them"))
    checked = [k for k in kinds if k != "trainer"]  # (the trainer's model has its own init)
    for kind in checked:
        print(f"# losses {names[kind]:13s} " + " ".join(f"{x:.6f}" for x in results[kind]["losses"]))
    ref = results["eager"]["losses"]
    for kind in checked:
        worst = max(abs(a - b) for a, b in zip(results[kind]["losses"], ref))
        assert worst < 1e-3, f"{names[kind]}: losses differ from PyTorch eager's by {worst:.2e} (> 1e-3)"
    ember_step = statistics.median(results["ember"]["unloaded"])
    load_cols = " loaded tokens/s | slowdown under load |" if args.load else ""
    print(f"| framework | tokens/s | step ms | ember speedup over this | first step s | second step s | peak RSS MB |"
          f"{load_cols}")
    print("|---|---|---|---|---|---|---|" + ("---|---|" if args.load else ""))
    for kind in kinds:
        r = results[kind]
        med = statistics.median(r["unloaded"])
        first = statistics.median(r["firsts"]) if args.cold else r["first_s"]
        row = (f"| {names[kind]} | {tokens / med:.0f} | {med * 1e3:.0f} | {med / ember_step:.2f}x | {first:.2f} "
               f"| {r['second_s']:.2f} | {r['peak_mb']:.0f} |")
        if args.load:
            loaded = statistics.median(r["loaded"])
            row += f" {tokens / loaded:.0f} | {loaded / med:.2f}x |"
        print(row)


if __name__ == "__main__":
    main()
