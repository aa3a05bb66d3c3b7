"""Shared test helpers: a plain PyTorch Llama (the reference the model and the trainer are checked against)."""

import math

import pytest
import torch

from ember.mlperf_llama.model import LlamaConfig, rope_frequencies


def _torch_llama(cfg: LlamaConfig, w: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Logits of Meta's Llama 3 written out in PyTorch, for weights `w` (Meta's names) and int tokens (batch, seq)."""
    b, t = tokens.shape
    hd = cfg.head_dim
    freqs = torch.tensor(rope_frequencies(hd, cfg.rope_theta, cfg.rope_scaling))
    angles = torch.outer(torch.arange(t, dtype=torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)

    def rope(x):  # Meta's form: consecutive pairs as complex numbers
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * rot.reshape(1, t, 1, -1)).flatten(-2)

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * weight

    h = w["tok_embeddings.weight"][tokens]
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        x = norm(h, w[p + "attention_norm.weight"])
        q = (x @ w[p + "attention.wq.weight"].T).view(b, t, cfg.n_heads, hd)
        k = (x @ w[p + "attention.wk.weight"].T).view(b, t, cfg.n_kv_heads, hd)
        v = (x @ w[p + "attention.wv.weight"].T).view(b, t, cfg.n_kv_heads, hd)
        q, k = rope(q), rope(k)
        rep = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + mask
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, cfg.dim)
        h = h + out @ w[p + "attention.wo.weight"].T
        x = norm(h, w[p + "ffn_norm.weight"])
        ffn = torch.nn.functional.silu(x @ w[p + "feed_forward.w1.weight"].T) * (x @ w[p + "feed_forward.w3.weight"].T)
        h = h + ffn @ w[p + "feed_forward.w2.weight"].T
    return norm(h, w["norm.weight"]) @ w["output.weight"].T


@pytest.fixture
def torch_llama():
    return _torch_llama
