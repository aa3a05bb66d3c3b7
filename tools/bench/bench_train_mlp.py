"""One training step (forward, backward, AdamW) of a 3-layer MLP 784-512-512-10, batch 256: Ember with jit (and
eager) vs PyTorch eager, same process, same thread count, medians.

Run: python tools/bench/bench_train_mlp.py [--steps N] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def ember_steps(steps: int, use_jit: bool) -> list[float]:
    from ember.tensor import Tensor, jit, nn
    from ember.tensor.nn import optim

    Tensor.manual_seed(0)
    layers = [nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)]
    params = [t for layer in layers for t in (layer.weight, layer.bias)]
    opt = optim.AdamW(params, lr=1e-3)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        h = layers[1](layers[0](x).relu()).relu()
        loss = nn.sparse_categorical_crossentropy(layers[2](h), y)
        loss.backward()
        opt.step()
        return loss.realize()

    fn = jit(step) if use_jit else step
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps + 3):
        x = Tensor(rng.standard_normal((256, 784), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 256).astype(np.int32))
        t = time.perf_counter()
        fn(x, y).item()
        times.append(time.perf_counter() - t)
    return times[3:]


def torch_steps(steps: int) -> list[float]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps + 3):
        x, y = torch.randn(256, 784), torch.randint(0, 10, (256,))
        t = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t)
    return times[3:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = {"ember jit": ember_steps(args.steps, True), "ember eager": ember_steps(max(3, args.steps // 4), False),
            "torch eager": torch_steps(args.steps)}
    ref = statistics.median(rows["torch eager"])
    print(f"3-layer MLP 784-512-512-10, batch 256, AdamW; {args.threads} threads, torch {torch.__version__}")
    print("| run | steps/s (median) | step ms | vs torch eager |")
    print("|---|---|---|---|")
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"| {name} | {1 / med:.1f} | {med * 1e3:.1f} | {ref / med:.3f} |")


if __name__ == "__main__":
    main()
