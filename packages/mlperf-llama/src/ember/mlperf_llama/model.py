"""Llama 3 (3.1): token embedding, RMSNorm, RoPE with the Llama 3.1 frequency scaling, grouped-query causal attention,
SwiGLU feed-forward, untied output head. Parameter names follow Meta's checkpoints (`tok_embeddings.weight`,
`layers.0.attention.wq.weight`, ...), so `nn.state.get_state_dict(model)` lines up with them.

    cfg = preset("tiny")
    model = Llama(cfg, seed=0)
    loss = model.loss(tokens)          # tokens: (batch, seq+1) int, mean next-token cross-entropy in nats
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ember.tensor import Tensor, dtypes
from ember.tensor.nn import embedding, linear, rmsnorm, scaled_dot_product_attention, sparse_categorical_crossentropy


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's RoPE frequency scaling (Meta `apply_scaling`): low frequencies slowed by `factor`, a smooth band
    between `low_freq_factor` and `high_freq_factor` wavelengths of `original_context`."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 500_000.0
    rope_scaling: RopeScaling | None = RopeScaling()
    init_std: float = 0.02  # Megatron/NeMo init_method_std; the output projections get std / sqrt(2 * n_layers)

    def __post_init__(self) -> None:
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"LlamaConfig.{name}: must be a positive integer, got {value!r}")
        if self.dim % self.n_heads:
            raise ValueError(f"LlamaConfig: dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"LlamaConfig: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim {self.head_dim} must be even for RoPE")
        if not self.norm_eps > 0 or not self.rope_theta > 0:
            raise ValueError("LlamaConfig: norm_eps and rope_theta must be > 0")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def replace(self, **changes: object) -> LlamaConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def ffn_hidden_dim(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """Meta's FFN width rule: 2/3 of 4*dim, times the multiplier, rounded up to `multiple_of` (8B: 14336)."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


PRESETS: dict[str, LlamaConfig] = {
    "8B": LlamaConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=ffn_hidden_dim(4096, 1024, 1.3),
                      vocab_size=128_256, max_seq_len=8192),
    # CPU presets: same architecture, sizes a 2-core machine trains in minutes
    "tiny": LlamaConfig(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=768, vocab_size=4096, max_seq_len=256),
    "small": LlamaConfig(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1536, vocab_size=4096,
                         max_seq_len=512),
}


def preset(name: str, **changes: object) -> LlamaConfig:
    """A named config (`8B`, `tiny`, `small`), with fields replaced by `changes` (e.g. n_layers=2)."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name].replace(**changes) if changes else PRESETS[name]


def parameter_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in model order, without allocating anything."""
    kv = cfg.n_kv_heads * cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (cfg.vocab_size, cfg.dim)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        shapes |= {p + "attention.wq.weight": (cfg.dim, cfg.dim), p + "attention.wk.weight": (kv, cfg.dim),
                   p + "attention.wv.weight": (kv, cfg.dim), p + "attention.wo.weight": (cfg.dim, cfg.dim),
                   p + "feed_forward.w1.weight": (cfg.ffn_dim, cfg.dim),
                   p + "feed_forward.w2.weight": (cfg.dim, cfg.ffn_dim),
                   p + "feed_forward.w3.weight": (cfg.ffn_dim, cfg.dim),
                   p + "attention_norm.weight": (cfg.dim,), p + "ffn_norm.weight": (cfg.dim,)}
    shapes |= {"norm.weight": (cfg.dim,), "output.weight": (cfg.vocab_size, cfg.dim)}
    return shapes


def padded_vocab_size(vocab_size: int, mp: int) -> int:
    """The output head's rows under `mp`-way tensor parallelism: the vocabulary rounded up to a multiple of 256 * mp
    (tinygrad's MLPerf rule: every device gets an equal slice of whole 256-row blocks); the vocabulary itself when
    mp == 1. The extra rows' logits are masked out of the softmax."""
    if not isinstance(mp, int) or mp < 1:
        raise ValueError(f"padded_vocab_size: mp must be a positive integer, got {mp!r}")
    block = 256 * mp
    return vocab_size if mp == 1 else -(-vocab_size // block) * block


# parameters split by output rows (column parallel) and by input columns (row parallel) under tensor parallelism
COLUMN_PARALLEL = ("wq", "wk", "wv", "w1", "w3")
ROW_PARALLEL = ("wo", "w2")


def parameter_count(cfg: LlamaConfig) -> int:
    """Number of parameters (8B preset: 8,030,261,248)."""
    return sum(math.prod(s) for s in parameter_shapes(cfg).values())


def flops_per_token(cfg: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward): 6 per weight of every matmul (the embedding lookup is not one)
    plus causal attention, 6 * seq * dim per layer (QK^T and AV, halved for the causal mask)."""
    matmul = parameter_count(cfg) - cfg.vocab_size * cfg.dim - (2 * cfg.n_layers + 1) * cfg.dim
    return 6.0 * matmul + 6.0 * seq_len * cfg.dim * cfg.n_layers


def rope_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> np.ndarray:
    """The head_dim/2 rotation frequencies theta^(-2i/d), with Llama 3.1's scaling applied (float64)."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv_freq
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = scaling.original_context / scaling.low_freq_factor
    high_wavelen = scaling.original_context / scaling.high_freq_factor
    smooth = (scaling.original_context / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    band = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    return np.where(wavelen > low_wavelen, inv_freq / scaling.factor, np.where(wavelen < high_wavelen, inv_freq, band))


def rope_tables(cfg: LlamaConfig, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * frequency, (seq_len, head_dim/2) float32."""
    angles = np.outer(np.arange(seq_len, dtype=np.float64), rope_frequencies(cfg.head_dim, cfg.rope_theta,
                                                                             cfg.rope_scaling))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate consecutive pairs (x[2i], x[2i+1]) of the last axis of x (batch, seq, heads, head_dim) by the angles
    whose cos/sin are (seq, head_dim/2): Meta's complex-number form."""
    b, t, h, d = x.shape
    pairs = x.reshape(b, t, h, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos.reshape(1, t, 1, d // 2), sin.reshape(1, t, 1, d // 2)
    return Tensor.stack(x0 * c - x1 * s, x0 * s + x1 * c, dim=-1).reshape(b, t, h, d)


class _Weights:
    """A namespace of parameters (so get_state_dict walks `layers.0.attention.wq.weight`)."""


def _normal(shape: tuple[int, ...], std: float, dtype: object) -> Tensor:
    return (Tensor.randn(*shape) * std).cast(dtype).contiguous()  # type: ignore[arg-type]


class Llama:
    """The Llama 3 decoder. `Llama(cfg, seed)` initializes as Megatron does (normal(0, 0.02), output projections
    normal(0, 0.02/sqrt(2L)), norms 1), deterministically for a seed; `dtype` is the parameters' dtype."""

    def __init__(self, cfg: LlamaConfig, seed: int = 0, dtype: object = dtypes.float32):
        self.cfg, self.dtype = cfg, dtype
        Tensor.manual_seed(seed)
        out_std = cfg.init_std / math.sqrt(2 * cfg.n_layers)
        shapes = parameter_shapes(cfg)
        self.tok_embeddings = _Weights()
        self.tok_embeddings.weight = _normal(shapes["tok_embeddings.weight"], cfg.init_std, dtype)
        self.layers: list[_Weights] = []
        for i in range(cfg.n_layers):
            layer, attention, ffn = _Weights(), _Weights(), _Weights()
            for name, obj in (("wq", attention), ("wk", attention), ("wv", attention), ("wo", attention),
                              ("w1", ffn), ("w3", ffn), ("w2", ffn)):
                full = f"layers.{i}.{'attention' if obj is attention else 'feed_forward'}.{name}.weight"
                setattr(obj, name, _Weights())
                getattr(obj, name).weight = _normal(shapes[full], out_std if name in ("wo", "w2") else cfg.init_std,
                                                    dtype)
            layer.attention, layer.feed_forward = attention, ffn
            layer.attention_norm, layer.ffn_norm = _Weights(), _Weights()
            layer.attention_norm.weight = Tensor.ones(cfg.dim, dtype=dtype).contiguous()  # type: ignore[arg-type]
            layer.ffn_norm.weight = Tensor.ones(cfg.dim, dtype=dtype).contiguous()  # type: ignore[arg-type]
            self.layers.append(layer)
        self.norm = _Weights()
        self.norm.weight = Tensor.ones(cfg.dim, dtype=dtype).contiguous()  # type: ignore[arg-type]
        self.output = _Weights()
        self.output.weight = _normal(shapes["output.weight"], cfg.init_std, dtype)
        for p in self.parameters():
            p.requires_grad = True
        Tensor.realize_all(*self.parameters())
        self._rope: dict[int, tuple[Tensor, Tensor]] = {}
        self.devices: tuple[str, ...] | None = None  # set by shard()
        self.device: str | None = None  # set by to_(): the one device of an unsharded model (None: the default)
        self.mp = 1

    def to_(self, device: str) -> None:
        """Move the (unsharded) model to `device` in place, keeping every parameter's identity. The weights are
        drawn on the default device first, so a seed gives the same model on every device."""
        if self.devices is not None:
            raise ValueError(f"Llama.to_: the model is sharded over {self.devices}; call to_ before shard")
        for p in self.parameters():
            if p.device != device:
                p.uop = p.detach().to(device).contiguous().realize().uop
        self.device = self.tok_embeddings.weight.device  # (canonical, as the tensors name it)
        self._rope.clear()

    def shard(self, devices: tuple[str, ...], mode: str) -> None:
        """Spread the model over `devices` in place (call it before making the optimizer).

        "dp" (data parallel): every parameter is replicated; the batch is to be sharded along its rows.
        "mp" (tensor parallel, Megatron's split): wq/wk/wv/w1/w3 are split by output rows and wo/w2 by input columns,
        so each device computes whole heads and a slice of the feed-forward width, and one allreduce after wo and
        after w2 sums the partial results; the output head is split by vocabulary rows, padded to
        `padded_vocab_size` (pad logits masked); the embedding and the norms are replicated. The batch is
        replicated."""
        n, cfg = len(devices), self.cfg
        if mode not in ("dp", "mp"):
            raise ValueError(f"Llama.shard: mode must be 'dp' or 'mp', got {mode!r}")
        if self.devices is not None:
            raise ValueError(f"Llama.shard: the model is already on {self.devices}")
        if mode == "mp":
            for name, value in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("ffn_dim", cfg.ffn_dim)):
                if value % n:
                    raise ValueError(f"Llama.shard: tensor parallel over {n} devices needs {name} ({value}) to be a "
                                     f"multiple of {n}")
            pad = padded_vocab_size(cfg.vocab_size, n) - cfg.vocab_size
            if pad:  # (zero rows: their logits are masked, so they get no gradient and stay zero)
                out = self.output.weight
                out.uop = out.pad(((0, pad), (0, 0))).contiguous().realize().uop
        for name, p in self.named_parameters().items():
            kind = name.split(".")[-2]
            axis = None if mode == "dp" else 0 if kind in (*COLUMN_PARALLEL, "output") else 1 if kind in ROW_PARALLEL \
                else None
            p.shard_(devices, axis)
        self.devices, self.mp = devices, n if mode == "mp" else 1

    def parameters(self) -> list[Tensor]:
        """All parameters in the order of `parameter_shapes`."""
        out = [self.tok_embeddings.weight]
        for layer in self.layers:
            a, f = layer.attention, layer.feed_forward
            out += [a.wq.weight, a.wk.weight, a.wv.weight, a.wo.weight, f.w1.weight, f.w2.weight, f.w3.weight,
                    layer.attention_norm.weight, layer.ffn_norm.weight]
        return out + [self.norm.weight, self.output.weight]

    def named_parameters(self) -> dict[str, Tensor]:
        return dict(zip(parameter_shapes(self.cfg), self.parameters()))

    # *** checkpoints: whole, unpadded tensors, whatever the layout (`shard`) ***
    def unpad(self, name: str, value: np.ndarray) -> np.ndarray:
        """A host array of parameter `name` (or of its optimizer state) without the padded vocabulary rows."""
        return value[:self.cfg.vocab_size] if name == "output.weight" else value

    def pad(self, name: str, value: np.ndarray) -> np.ndarray:
        """The inverse of `unpad`: the padded rows (zeros) put back for this model's layout."""
        rows = self.output.weight.shape[0] - self.cfg.vocab_size
        return np.pad(value, ((0, rows), (0, 0))) if name == "output.weight" and rows else value

    def checkpoint_state(self) -> dict[str, Tensor]:
        """The parameters by name as one-device tensors of the model's own shapes (gathered, vocabulary unpadded):
        what a checkpoint stores, so that any layout loads it."""
        out = {}
        for name, p in self.named_parameters().items():
            whole = p.to(p.device[0]) if isinstance(p.device, tuple) else p
            out[name] = whole[:self.cfg.vocab_size] if name == "output.weight" else whole
        return out

    def load_checkpoint_state(self, state: dict[str, Tensor]) -> None:
        """Copy a `checkpoint_state` (of any layout) into the parameters in place."""
        own = self.named_parameters()
        if missing := sorted(set(own) - set(state)):
            raise ValueError(f"Llama.load_checkpoint_state: missing parameters {missing[:3]}")
        updates = []
        for name, p in own.items():
            value = state[name]
            if value.shape != parameter_shapes(self.cfg)[name]:
                raise ValueError(f"Llama.load_checkpoint_state: {name!r} has shape {value.shape}, the model "
                                 f"{parameter_shapes(self.cfg)[name]}")
            if (rows := p.shape[0] - value.shape[0]) > 0:
                value = value.pad(((0, rows), (0, 0)))
            updates.append(p.assign(value.cast(p.dtype).to(p.device).shard_like(p).contiguous()))
        Tensor.realize_all(*updates)

    def _rope_for(self, seq_len: int) -> tuple[Tensor, Tensor]:
        if seq_len not in self._rope:
            cos, sin = rope_tables(self.cfg, seq_len)
            where = self.devices or self.device
            self._rope[seq_len] = (Tensor(cos, where).realize(), Tensor(sin, where).realize())
        return self._rope[seq_len]

    def _norm(self, x: Tensor, weight: Tensor) -> Tensor:
        # RMSNorm in float32 whatever the parameter dtype, as Megatron/TE do
        return (rmsnorm(x.float(), -1, self.cfg.norm_eps) * weight.float()).cast(self.dtype)

    def _attention(self, x: Tensor, layer: _Weights, cos: Tensor, sin: Tensor) -> Tensor:
        cfg, (b, t, _) = self.cfg, x.shape
        a = layer.attention
        q = linear(x, a.wq.weight).reshape(b, t, cfg.n_heads, cfg.head_dim)
        k = linear(x, a.wk.weight).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
        v = linear(x, a.wv.weight).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
        # Layouts for the kernels (codegen tiles a matmul whose operands index affinely): q and k are stored after
        # RoPE (its pair indexing, div/mod by 2 along the head dim, fused into q @ k^T would leave the reduce axis
        # non-affine), q heads first, k as (b, heads, head_dim, t) so that k^T is contiguous along the keys; the
        # attention output is stored (b, t, heads, head_dim) so that merging the heads is a plain reshape
        q = apply_rope(q, cos, sin).transpose(1, 2).contiguous()
        k = apply_rope(k, cos, sin).permute(0, 2, 3, 1).contiguous().transpose(-1, -2)
        out = scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        return linear(out.transpose(1, 2).contiguous().reshape(b, t, cfg.dim), a.wo.weight)

    def _feed_forward(self, x: Tensor, layer: _Weights) -> Tensor:
        f = layer.feed_forward
        return linear(linear(x, f.w1.weight).silu() * linear(x, f.w3.weight), f.w2.weight)

    def __call__(self, tokens: Tensor) -> Tensor:
        """Logits (batch, seq, vocab) for int tokens (batch, seq)."""
        if tokens.ndim != 2 or not dtypes.is_int(tokens.dtype):
            raise ValueError(f"Llama: tokens must be a 2-D integer tensor (batch, seq), got {tokens.shape} "
                             f"{tokens.dtype!r}")
        if tokens.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"Llama: sequence length {tokens.shape[1]} exceeds max_seq_len {self.cfg.max_seq_len}")
        if tokens.device != (self.devices or self.device or tokens.device):
            raise ValueError(f"Llama: tokens are on {tokens.device}, the model on {self.devices or self.device}")
        cos, sin = self._rope_for(tokens.shape[1])
        h = embedding(tokens, self.tok_embeddings.weight)
        for layer in self.layers:
            h = h + self._attention(self._norm(h, layer.attention_norm.weight), layer, cos, sin)
            h = h + self._feed_forward(self._norm(h, layer.ffn_norm.weight), layer)
        logits = linear(self._norm(h, self.norm.weight), self.output.weight)
        if (vocab := self.output.weight.shape[0]) > self.cfg.vocab_size:  # padded head: the pad logits masked
            real = Tensor.arange(vocab, device=logits.device) < self.cfg.vocab_size
            logits = real.where(logits, -1e9)
        return logits

    def loss(self, tokens: Tensor) -> Tensor:
        """Mean next-token cross-entropy (nats) of a (batch, seq+1) token batch: inputs tokens[:, :-1], labels
        tokens[:, 1:]. Logits are taken in float32."""
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"Llama.loss: tokens must be (batch, seq+1) with seq >= 1, got {tokens.shape}")
        logits = self(tokens[:, :-1]).float()
        return sparse_categorical_crossentropy(logits, tokens[:, 1:])
