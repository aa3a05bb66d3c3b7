"""ember.amd_runtime: the AMD device through KFD and hardware command queues (HCQ), with a mock."""

__version__ = "0.0.2"
