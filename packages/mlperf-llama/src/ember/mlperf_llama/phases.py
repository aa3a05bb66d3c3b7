"""The benchmark's untimed init phase: everything a run compiles or builds before ``run_start``.

MLPerf times a run from ``run_start``; what comes before it (up to 30 minutes in the closed division) is the init
phase, as the reference and tinygrad run it: build the dataset indices (``load_data``), then compile, or BEAM-search
(``cfg.beam``), every kernel of the step and the evaluation, and capture the jitted steps, so the timed run replays
them from its first step. :func:`warm_up` does the second part without changing the run: it trains on zeroed
gradients at learning rate 0 (the weights, m and v stay exactly as they were), then restores the optimizer's
bias-correction powers, its step count and the random-number state; the first timed step is bit for bit the step a
cold run takes.

    with beam_search(cfg.beam):
        warm_up(trainer)
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ember.tensor import Tensor, no_grad

if TYPE_CHECKING:
    from ember.mlperf_llama.train import Trainer

JIT_CALLS_TO_CAPTURE = 2  # ember.tensor.jit: the first call runs, the second records, the third replays


@contextlib.contextmanager
def beam_search(width: int) -> Iterator[None]:
    """Within the block, kernels are optimized by a BEAM search of ``width`` timed on the device (0: the heuristic).

    Ember reads ``BEAM`` from the environment when it picks a kernel's opts (and hands it to its codegen helper
    processes), so the variable is set for the block and restored after it. Winners are cached on disk by kernel,
    so a later run with the same width finds them without searching.
    """
    if not isinstance(width, int) or isinstance(width, bool) or width < 0:
        raise ValueError(f"beam_search: width must be a non-negative integer, got {width!r}")
    if width == 0:
        yield
        return
    before = os.environ.get("BEAM")
    os.environ["BEAM"] = str(width)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BEAM", None)
        else:
            os.environ["BEAM"] = before


def warm_up(trainer: Trainer) -> float:
    """Run every kernel of `trainer`'s step and evaluation on batches of zeros, capturing the jitted steps, and leave
    the model and optimizer state as they were; returns the seconds it took.

    The micro-step's gradients are zeroed before each optimizer step and the learning rate is 0, so AdamW's update
    and weight decay are exactly 0 and m, v stay 0: the weights (and master weights) are unchanged. On a resumed
    run call it before loading the checkpoint, which then overwrites everything. Every MPI rank must call it (the
    gradient allreduce is warmed too).
    """
    cfg, opt = trainer.cfg, trainer.opt
    t0 = time.perf_counter()
    rng_state = Tensor.rng_state()
    step_count, lr = opt.step_count, opt.lr
    betas = {name: t.numpy().copy() for name, t in opt.state_dict().items() if name.startswith("betas_pow.")}
    rows = trainer.world.shard_rows(np.zeros((cfg.batch_size, cfg.seq_len + 1), np.int32))
    opt.lr = 0.0
    for _ in range(JIT_CALLS_TO_CAPTURE):
        for _ in range(cfg.grad_acc_steps):
            trainer.micro_step(trainer.place(rows))
        trainer.allreduce_gradients()
        opt.zero_grad()
        trainer.optimizer_step()
    _warm_eval(trainer)
    opt.zero_grad()
    # restore the few values an update at learning rate 0 advances anyway
    state = opt.state_dict()
    Tensor.realize_all(*[state[name].assign(Tensor(value).to(state[name].device).cast(state[name].dtype).contiguous())
                         for name, value in betas.items()])
    opt.step_count, opt.lr = step_count, lr
    Tensor.set_rng_state(rng_state)
    return time.perf_counter() - t0


def _warm_eval(trainer: Trainer) -> None:
    """The evaluation's kernels: the jitted eval step at the full batch, and the eager loss at a short last batch."""
    cfg = trainer.cfg
    start, stop = trainer.world.row_range(cfg.eval_batch_size)
    full = stop - start
    if full > 0:
        for _ in range(JIT_CALLS_TO_CAPTURE):
            trainer.eval_step(trainer.place(np.zeros((full, cfg.seq_len + 1), np.int32)))
    last = cfg.eval_samples % cfg.eval_batch_size
    if last:
        short = trainer.world.shard_rows(np.zeros((last, cfg.seq_len + 1), np.int32))
        if len(short) and len(short) != full:
            with no_grad():
                trainer.model.loss(trainer.place(short)).realize()
