"""ember.tensor.nn: model state (state dicts, safetensors) and optimizers."""

from ember.tensor.nn import optim
from ember.tensor.nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)

__all__ = ["optim", "get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata",
           "safe_save"]
