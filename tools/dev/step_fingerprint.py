"""Fingerprint of the tiny Llama's training step: every schedule it makes (kernel ASTs in order, which buffers they
share) and every program's source, as hashes. A refactor that must keep the step's kernels prints the same lines.

    python tools/dev/step_fingerprint.py            # one line per schedule, then the programs' hash
    python tools/dev/step_fingerprint.py --verbose  # and every kernel's name
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys


def graph_hash(root) -> str:  # type: ignore[no-untyped-def]
    """A structural hash of a UOp graph: ops, dtypes, args and edges in toposort order (no object ids)."""
    nodes = root.toposort()
    index = {u: i for i, u in enumerate(nodes)}
    h = hashlib.sha256()
    for u in nodes:
        h.update(repr((u.op.name, repr(u.dtype), repr(u.arg), tuple(index[s] for s in u.src))).encode())
    return h.hexdigest()[:16]


def _h(x: object) -> str:
    return hashlib.sha256(repr(x).encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--steps", type=int, default=3, help="steps to run (the jit captures on the second)")
    args = parser.parse_args()
    os.environ.setdefault("CODEGEN_WORKERS", "0")

    import numpy as np

    import ember.schedule
    from ember.codegen import to_program
    from ember.mlperf_llama.config import TrainConfig
    from ember.mlperf_llama.train import Trainer
    from ember.runtime import Device
    from ember.tensor import Tensor

    original = ember.schedule.schedule
    schedules = []

    def recording(*a, **k):  # type: ignore[no-untyped-def]
        sched = original(*a, **k)
        schedules.append(sched)
        return sched

    for mod in list(sys.modules.values()):  # wherever the scheduler was imported by name
        if getattr(mod, "schedule", None) is original:
            mod.schedule = recording  # type: ignore[attr-defined]

    cfg = TrainConfig(preset="tiny", batch_size=4, seq_len=128, fake_data=True, progress=False)
    trainer = Trainer(cfg)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(args.steps):
        tokens = rng.integers(0, trainer.model_cfg.vocab_size, (4, 129)).astype(np.int32)
        losses.append(trainer.micro_step(Tensor(tokens))[0].item())
        trainer.optimizer_step().item()
    renderer = Device["CPU"].renderer
    asts: dict[str, object] = {}
    for i, sched in enumerate(schedules):
        buf_ids: dict[object, int] = {}
        layout = [tuple(buf_ids.setdefault(b, len(buf_ids)) for b in it.bufs) for it in sched.items]
        hashes = [graph_hash(it.ast) for it in sched.items]
        for it, hsh in zip(sched.items, hashes):
            asts.setdefault(hsh, it.ast)
        print(f"schedule {i:3d}: {len(sched.items):4d} items  kernels {_h(sorted(hashes))}  order {_h(hashes)}  "
              f"buffers {_h(layout)}")
    srcs = {}
    for hsh, ast in sorted(asts.items()):
        if ast.op.name == "COPY":  # type: ignore[attr-defined]
            continue
        spec = to_program(ast, renderer)  # type: ignore[arg-type]
        srcs[hsh] = hashlib.sha256(spec.src.encode()).hexdigest()[:16]
        if args.verbose:
            print(f"  {hsh} {spec.name} {srcs[hsh]}")
    print(f"{len(srcs)} unique kernels, programs {_h(sorted(srcs.items()))}")
    print("losses", " ".join(f"{x:.6f}" for x in losses))


if __name__ == "__main__":
    main()
