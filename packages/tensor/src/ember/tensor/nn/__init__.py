"""ember.tensor.nn: layers and their functional forms, model state (state dicts, safetensors) and optimizers."""

from typing import Any

from ember.tensor.nn import optim
from ember.tensor.nn.layers import (  # torch.nn.functional's names
    BatchNorm,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv2d,
    Embedding,
    LayerNorm,
    Linear,
    RMSNorm,
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    binary_crossentropy,
    binary_crossentropy_logits,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose2d,
    cosine_similarity,
    cross_entropy,
    dropout,
    embedding,
    glu,
    hardshrink,
    huber_loss,
    interpolate,
    kl_div,
    l1_loss,
    layernorm,
    linear,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_unpool2d,
    mse,
    mse_loss,
    nll_loss,
    pairwise_distance,
    pixel_shuffle,
    pixel_unshuffle,
    prelu,
    rmsnorm,
    scaled_dot_product_attention,
    smooth_l1_loss,
    softshrink,
    sparse_categorical_crossentropy,
    tanhshrink,
    threshold,
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
    "optim", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
    "Conv2d", "Embedding", "LayerNorm", "Linear", "RMSNorm", "avg_pool2d", "binary_crossentropy",
    "binary_crossentropy_logits", "conv2d", "conv_transpose2d", "cross_entropy", "dropout", "embedding",
    "interpolate", "layernorm", "linear", "max_pool2d", "max_unpool2d", "mse", "nll_loss", "rmsnorm",
    "scaled_dot_product_attention", "sparse_categorical_crossentropy",
    "avg_pool1d", "avg_pool3d", "binary_cross_entropy", "binary_cross_entropy_with_logits", "conv1d", "conv3d",
    "cosine_similarity", "glu", "hardshrink", "huber_loss", "kl_div", "l1_loss", "max_pool1d", "max_pool3d",
    "mse_loss", "pairwise_distance", "pixel_shuffle", "pixel_unshuffle", "prelu", "smooth_l1_loss", "softshrink",
    "tanhshrink", "threshold",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d",
    "get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save",
]


def __getattr__(name: str) -> Any:
    """Every other Tensor method as a function of its tensor, as torch.nn.functional has them: `nn.relu(x)`,
    `nn.softmax(x, dim=1)`, `nn.leaky_relu(x, negative_slope=0.2)`, `nn.pad(x, (1, 1))`."""
    from ember.tensor.tensor import Tensor
    method = getattr(Tensor, name, None) if not name.startswith("_") else None
    if not callable(method) or isinstance(method, type):
        raise AttributeError(f"module 'ember.tensor.nn' has no attribute {name!r}")

    def functional(x: Tensor, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: expected a Tensor as the first argument, got {type(x).__name__}")
        return getattr(x, name)(*args, **kwargs)
    functional.__name__ = functional.__qualname__ = name
    functional.__doc__ = method.__doc__
    return functional
