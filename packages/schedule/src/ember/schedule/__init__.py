"""ember.schedule: turns a tensor UOp graph into a dependency-ordered list of kernels."""

__version__ = "0.0.1"
