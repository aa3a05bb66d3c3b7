"""A timeline of the tiny Llama's first training step in this process: the engine's stages (schedule, prepare, the
build's finish), each C compiler batch (its sources, its characters, the thread) and, with --verbose, each program
built (here or by a codegen helper). Run it with a fresh cache folder for the cold step:

    EMBER_CACHE_DIR=$(mktemp -d) python tools/dev/first_step_timeline.py [--verbose]

The same config as tools/bench/bench_first_step.py (tiny, batch 4 x 256, micro step + optimizer step).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="also each program built")
    args = parser.parse_args()

    import numpy as np

    from ember.mlperf_llama.config import TrainConfig
    from ember.mlperf_llama.train import Trainer
    from ember.runtime.cpu import CPUCompiler
    from ember.tensor import Tensor, engine

    events: list[tuple[float, str, str]] = []

    def mark(what: str) -> None:
        events.append((time.perf_counter(), threading.current_thread().name, what))

    def timed(fn: Callable[..., Any], label: Callable[..., str]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            mark(label(*a, **k) + " start")
            try:
                return fn(*a, **k)
            finally:
                mark(label(*a, **k) + " end")
        return wrapper

    engine.schedule = timed(engine.schedule, lambda *a, **k: "schedule")  # type: ignore[attr-defined]
    engine.Engine.prepare_kernels = timed(engine.Engine.prepare_kernels, lambda *a, **k: "prepare")  # type: ignore
    engine.KernelBuild.finish = timed(engine.KernelBuild.finish, lambda *a, **k: "finish")  # type: ignore
    CPUCompiler.compile_cached_many = timed(  # type: ignore[method-assign]
        CPUCompiler.compile_cached_many,
        lambda self, programs, *a, **k: f"cc of {len(programs)} ({sum(len(s) for _, s in programs) // 1000}k chars)")
    built = engine.KernelBuild.built

    def recording(self: Any, key: Any, spec: Any) -> None:
        mark(f"built {spec.name}")
        built(self, key, spec)
    engine.KernelBuild.built = recording  # type: ignore[method-assign]

    trainer = Trainer(TrainConfig(preset="tiny", batch_size=4, seq_len=256, fake_data=True, progress=False))
    tokens = np.random.default_rng(0).integers(0, trainer.model_cfg.vocab_size, (4, 257)).astype(np.int32)
    events.clear()
    start = time.perf_counter()
    trainer.micro_step(Tensor(tokens))[0].item()
    mark("micro step done")
    trainer.optimizer_step().item()
    mark("optimizer step done")
    programs = 0
    for t, thread, what in events:
        programs += what.startswith("built")
        if args.verbose or not what.startswith("built"):
            print(f"{(t - start) * 1e3:8.1f} ms  {thread[:12]:12s}  {what}  [{programs} programs built]")


if __name__ == "__main__":
    main()
