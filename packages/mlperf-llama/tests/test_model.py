"""The Llama model against a straightforward PyTorch implementation with the same weights (float32)."""

import math

import numpy as np
import pytest
import torch

from ember.mlperf_llama.model import (
    PRESETS,
    Llama,
    LlamaConfig,
    flops_per_token,
    parameter_count,
    parameter_shapes,
    preset,
    rope_frequencies,
)
from ember.tensor import Tensor

CFG = LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=128, max_seq_len=16)


def meta_scaled_freqs(head_dim: int, theta: float) -> np.ndarray:
    """Meta's apply_scaling, transcribed loop by loop (llama-models models/llama3/model.py)."""
    freqs = [1.0 / (theta ** (i / head_dim)) for i in range(0, head_dim, 2)]
    factor, low, high, old = 8, 1, 4, 8192
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


@pytest.fixture(scope="module")
def model_and_tokens():
    model = Llama(CFG, seed=3)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, CFG.vocab_size, (2, 13)).astype(np.int32)
    # non-trivial norm weights, so a wrong norm shows
    for p in (model.norm.weight, model.layers[0].ffn_norm.weight):
        p.assign(Tensor(rng.uniform(0.5, 1.5, CFG.dim).astype(np.float32))).realize()
    return model, tokens


def test_logits_match_pytorch(model_and_tokens, torch_llama):
    model, tokens = model_and_tokens
    weights = {k: torch.tensor(v.numpy()) for k, v in model.named_parameters().items()}
    ref = torch_llama(CFG, weights, torch.tensor(tokens[:, :-1], dtype=torch.long))
    got = model(Tensor(tokens[:, :-1])).numpy()
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_loss_and_gradients_match_pytorch(model_and_tokens, torch_llama):
    model, tokens = model_and_tokens
    weights = {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in model.named_parameters().items()}
    t = torch.tensor(tokens, dtype=torch.long)
    logits = torch_llama(CFG, weights, t[:, :-1])
    ref_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CFG.vocab_size), t[:, 1:].reshape(-1))
    ref_loss.backward()
    params = model.named_parameters()
    loss = model.loss(Tensor(tokens))
    grads = loss.gradient(*params.values())
    assert abs(loss.item() - ref_loss.item()) < 1e-5
    for (name, _), g in zip(params.items(), grads):
        np.testing.assert_allclose(g.numpy(), weights[name].grad.numpy(), rtol=1e-3, atol=2e-6, err_msg=name)


def test_parameter_count_without_allocating():
    assert parameter_count(preset("8B")) == 8_030_261_248
    assert PRESETS["8B"].ffn_dim == 14336 and PRESETS["8B"].head_dim == 128
    shapes = parameter_shapes(preset("8B"))
    assert shapes["layers.31.attention.wk.weight"] == (1024, 4096) and len(shapes) == 2 + 32 * 9 + 1
    assert parameter_count(CFG) == sum(p.numel() for p in Llama(CFG).parameters())
    # 6 per matmul weight (32 layers of 218,103,808, the head 525,336,576; the spec's 218,112,000 per layer counts
    # the two norm vectors too) + causal attention 6 * seq * dim * layers
    per_layer = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 4096 * 14336
    assert per_layer == 218_103_808
    assert flops_per_token(preset("8B"), 8192) == 6 * (32 * per_layer + 525_336_576) + 6 * 8192 * 4096 * 32


def test_rope_scaling_matches_meta():
    np.testing.assert_allclose(rope_frequencies(128, 500_000.0, PRESETS["8B"].rope_scaling),
                               meta_scaled_freqs(128, 500_000.0), rtol=1e-12)
    plain = rope_frequencies(128, 500_000.0, None)
    assert plain[0] == 1.0 and np.all(rope_frequencies(128, 500_000.0, PRESETS["8B"].rope_scaling) <= plain)


def test_init_is_deterministic_and_megatron_scaled():
    a, b = Llama(CFG, seed=7), Llama(CFG, seed=7)
    np.testing.assert_array_equal(a.output.weight.numpy(), b.output.weight.numpy())
    # Megatron's init: N(0, 0.02), the output projections N(0, 0.02 / sqrt(2 * n_layers)), norms 1
    assert abs(a.layers[0].attention.wq.weight.numpy().std() - 0.02) < 1e-3
    assert abs(a.layers[1].feed_forward.w2.weight.numpy().std() - 0.02 / math.sqrt(4)) < 5e-4
    assert abs(a.layers[1].attention.wo.weight.numpy().std() - 0.02 / math.sqrt(4)) < 5e-4
    assert np.all(a.norm.weight.numpy() == 1)


def test_bad_config_and_input():
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaConfig(dim=64, n_layers=1, n_heads=4, n_kv_heads=3, ffn_dim=8, vocab_size=8, max_seq_len=8)
    with pytest.raises(ValueError, match="unknown preset"):
        preset("70B")
    model = Llama(CFG)
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        model(Tensor(np.zeros((1, 17), np.int32)))
    with pytest.raises(ValueError, match="integer tensor"):
        model(Tensor(np.zeros((1, 4), np.float32)))


def test_layers_share_their_kernels():
    """The scheduler stores each layer's residual stream once (a projection's epilogue), so a deeper model schedules
    more launches of the same kernels, not new ones; and no kernel re-sums the stream from earlier layers."""
    from ember.schedule import schedule
    from ember.uops import Ops, UOp

    def step_kernels(n_layers):
        cfg = LlamaConfig(dim=64, n_layers=n_layers, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=128,
                          max_seq_len=16)
        model = Llama(cfg, seed=0)
        params = list(model.named_parameters().values())
        Tensor.realize(*params)
        loss = model.loss(Tensor(np.random.default_rng(0).integers(0, 128, (2, 13)).astype(np.int32)))
        items = schedule(UOp.sink(loss.uop, *(g.uop for g in loss.gradient(*params)))).items
        return [it for it in items if it.ast.op is Ops.SINK]

    three, five = step_kernels(3), step_kernels(5)
    assert len(five) > len(three)
    assert len({it.ast for it in five}) == len({it.ast for it in three})
    assert max(len(it.bufs) for it in five) == max(len(it.bufs) for it in three)
