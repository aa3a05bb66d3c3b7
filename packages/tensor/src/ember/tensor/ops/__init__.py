"""Tensor's methods by job, one mixin per module, all inherited by `Tensor` (ember/tensor/tensor.py): creation,
elementwise (the operators and math), activation, reduce, movement, indexing and random; `args` parses their
arguments."""
