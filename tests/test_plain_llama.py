"""The tiny Llama written plainly (tools/bench/bench_plain_llama.py: rotate-half RoPE with cat, kv heads repeated by
expand + reshape, embedding, mean cross-entropy, a jitted zero_grad/backward/step over a per-parameter AdamW): its
step makes the kernels of the trainer's hand-shaped model (ember.mlperf_llama.model), and trains as PyTorch does."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ember.mlperf_llama.model import Llama, preset
from ember.tensor import Tensor, jit, nn

_spec = importlib.util.spec_from_file_location(
    "bench_plain_llama", Path(__file__).parents[1] / "tools" / "bench" / "bench_plain_llama.py")
assert _spec is not None and _spec.loader is not None
plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain)

BATCH, SEQ = 2, 32


def small_config(layers: int) -> Any:
    return preset("tiny", n_layers=layers, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab_size=256)


def plain_step_kernels(layers: int) -> int:
    cfg = small_config(layers)
    _, step = plain.ember_plain(cfg, plain.init_weights(cfg))
    for tokens in plain.batches(cfg, BATCH, SEQ, 3, seed=1):  # eager, capture, replay
        step(tokens)
    return int(step.jit.kernel_count)


def trainer_model_step(cfg: Any) -> Any:
    """The same jitted step (zero_grad, backward, step, the loss returned) around the trainer's model."""
    model = Llama(cfg, seed=0)
    opt = nn.optim.AdamW(model.parameters(), lr=1e-3)

    @jit
    def step(tokens: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(tokens)
        loss.backward()
        opt.step()
        return loss.realize()
    return step


def trainer_model_step_kernels(layers: int) -> int:
    cfg = small_config(layers)
    step = trainer_model_step(cfg)
    for tokens in plain.batches(cfg, BATCH, SEQ, 3, seed=1):
        step(Tensor(tokens)).item()
    return step.kernel_count


def test_plain_step_kernel_counts_match_the_trainer_model():
    one, two = plain_step_kernels(1), plain_step_kernels(2)
    # 48 kernels per layer (forward and backward of attention and feed-forward) and 24 for embedding, head, loss and
    # the optimizer (zero, m, v, parameters: one kernel each for all parameters). Before the loss was realized with
    # its gradients it was 66 per layer + 30: reading the loss after opt.step() ran the whole forward again
    assert (one, two) == (72, 120)
    # cat-RoPE and expand+reshape kv heads cost no kernel over the trainer's hand-placed layouts (which store q and k
    # after RoPE transposed: one kernel more per layer)
    assert (trainer_model_step_kernels(1), trainer_model_step_kernels(2)) == (73, 122)


def test_plain_step_reads_every_reduce_operand_affinely():
    """No kernel of the step reads an operand through div/mod index math along its reduce axis (which codegen cannot
    tile as a matmul), in the plain model (heads merged after a transpose, cat-RoPE, repeated kv heads, labels
    flattened out of a shrink) as in the trainer's hand-shaped one: the scheduler splits such a reduce range in two."""
    def nonaffine(kernels: list[Any]) -> list[str]:
        return sorted(k.spec.name for k, item, _ in kernels if k is not None and _reads_nonaffine(item.ast))

    cfg = small_config(1)
    _, step = plain.ember_plain(cfg, plain.init_weights(cfg))
    trainer_step = trainer_model_step(cfg)
    for tokens in plain.batches(cfg, BATCH, SEQ, 2, seed=1):
        step(tokens)
        trainer_step(Tensor(tokens)).item()
    assert step.jit.kernel_count and trainer_step.kernel_count
    assert nonaffine(step.jit.captured) == [] and nonaffine(trainer_step.captured) == []


def _reads_nonaffine(ast: Any) -> bool:
    from ember.uops import Ops

    if not any(u.op is Ops.REDUCE for u in ast.toposort()):
        return False
    for u in ast.toposort():
        if u.op is Ops.INDEX:
            for x in u.src[1:]:
                for y in x.toposort():
                    if y.op in (Ops.IDIV, Ops.MOD) and any(r.op is Ops.RANGE and r.arg[1].name == "REDUCE"
                                                          for r in y.toposort()):
                        return True
    return False


def test_plain_llama_trains_as_pytorch():
    """Same weights, same batches: the gradients of the first step (rtol 1e-3, atol 1e-5 on values ~1e-2) and the
    losses of three AdamW steps (abs 1e-4 on ~5.5) agree with PyTorch eager running the same code."""
    pytest.importorskip("torch")
    cfg = small_config(2)
    weights = plain.init_weights(cfg)
    model, step = plain.ember_plain(cfg, weights)
    torch_model, torch_step = plain.torch_plain(cfg, weights, compile_=False)
    data = plain.batches(cfg, BATCH, SEQ, 3, seed=1)
    ours, theirs = [step(data[0])], [torch_step(data[0])]
    grads = {name: p.grad.numpy() for name, p in nn.get_state_dict(model).items() if p.grad is not None}
    assert len(grads) == len(weights)
    for name, p in torch_model.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
    for tokens in data[1:]:
        ours.append(step(tokens))
        theirs.append(torch_step(tokens))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    assert ours[2] < ours[0]  # it learns
