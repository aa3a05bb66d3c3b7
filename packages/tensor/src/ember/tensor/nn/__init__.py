"""ember.tensor.nn: layers and their functional forms, model state (state dicts, safetensors) and optimizers."""

from ember.tensor.nn import optim
from ember.tensor.nn.layers import (
    BatchNorm,
    Conv2d,
    Embedding,
    LayerNorm,
    Linear,
    RMSNorm,
    avg_pool2d,
    binary_crossentropy,
    binary_crossentropy_logits,
    conv2d,
    conv_transpose2d,
    cross_entropy,
    dropout,
    embedding,
    interpolate,
    layernorm,
    linear,
    max_pool2d,
    max_unpool2d,
    mse,
    nll_loss,
    rmsnorm,
    scaled_dot_product_attention,
    sparse_categorical_crossentropy,
)
from ember.tensor.nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)

__all__ = [
    "optim", "BatchNorm", "Conv2d", "Embedding", "LayerNorm", "Linear", "RMSNorm", "avg_pool2d", "binary_crossentropy",
    "binary_crossentropy_logits", "conv2d", "conv_transpose2d", "cross_entropy", "dropout", "embedding",
    "interpolate", "layernorm", "linear", "max_pool2d", "max_unpool2d", "mse", "nll_loss", "rmsnorm",
    "scaled_dot_product_attention", "sparse_categorical_crossentropy",
    "get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save",
]
