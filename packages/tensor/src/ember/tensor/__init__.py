"""ember.tensor: the user API: a lazy Tensor over UOps, and the engine that realizes it."""

__version__ = "0.7.1"

from ember.tensor import nn  # noqa: E402
from ember.tensor.jit import jit  # noqa: E402
from ember.tensor.tensor import Tensor, no_grad  # noqa: E402
from ember.uops import dtypes, files  # noqa: E402

__all__ = ["Tensor", "dtypes", "files", "jit", "nn", "no_grad"]
