"""ember.runtime: devices (compiler, runtime, allocator) and buffers behind Device[name]."""

__version__ = "0.0.1"
