"""ember.tensor: the lazy Tensor user API, autograd, nn, optimizers, the engine and the jit."""

__version__ = "0.0.1"
