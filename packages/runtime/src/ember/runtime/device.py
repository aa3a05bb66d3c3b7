"""The device registry (`Device[name]`, found through the `ember.devices` entry points) and the device interface.

A backend package registers its device class in its pyproject.toml:

    [project.entry-points."ember.devices"]
    AMD = "ember.amd_runtime.device:AMDDevice"

and `Device["AMD"]`, `Device["AMD:1"]` then build `AMDDevice("AMD")`, `AMDDevice("AMD:1")` (once each).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ember.runtime.allocator import Allocator
from ember.runtime.compiler import Compiler
from ember.uops import settings

if TYPE_CHECKING:
    from ember.codegen import Renderer
    from ember.runtime.program import Program

ENTRY_POINT_GROUP = "ember.devices"


class CompiledDevice:
    """A device: how to render, compile and load programs for it, and its memory.

    `runtime(name, lib)` loads the function `name` from a compiled `lib` (the bytes of `compiler.compile`) as a
    callable Program; `synchronize()` waits for everything queued on the device."""

    def __init__(self, name: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 program: Callable[[CompiledDevice, str, bytes], Program]):
        self.name, self.allocator, self.renderer, self.compiler = name, allocator, renderer, compiler
        self._program = program

    def runtime(self, name: str, lib: bytes) -> Program:
        """The function `name` of the compiled library `lib`, ready to call on Buffers of this device."""
        return self._program(self, name, lib)

    def synchronize(self) -> None:
        """Wait until every launched program and copy has finished (nothing to wait for on synchronous devices)."""

    def graph(self, launches: Sequence[tuple[Any, ...]], inputs: Sequence[Any]) -> Any | None:
        """A batched replay of recorded launches on this device, or None when it has none (the caller then launches
        them one by one). Each launch is (program, Buffers, global_size, local_size, vals), program None for a copy
        (Buffers: dest, src); the `inputs` Buffers (by identity) are replaced at each `exec_buffers(new_inputs)` of
        the returned graph. A jit replays its captured kernels through it (the AMD device's HCQ batches)."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def base_name(device: str) -> str:
    """The registered name of a device: `"CPU:1"` -> `"CPU"`."""
    return device.split(":", 1)[0]


class DeviceRegistry:
    """`Device[name]`: the device instance called `name` (built on first use, then cached per full name)."""

    def __init__(self) -> None:
        self._instances: dict[str, CompiledDevice] = {}

    @staticmethod
    def canonicalize(name: str) -> str:
        """The canonical spelling of a device name: upper-case registered part, no `:0` (`"cpu:0"` -> `"CPU"`)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"Device: a device name is a non-empty str like 'CPU' or 'CPU:1', got {name!r}")
        base, sep, instance = name.partition(":")
        if sep and not (instance.isascii() and instance.isdigit()):  # ("CPU:x" made a CPU device of that name)
            raise ValueError(f"Device: the instance in {name!r} must be a non-negative int, as in 'CPU:1'")
        return base.upper() if not sep or instance == "0" else f"{base.upper()}:{instance}"

    def _entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        # read on every lookup of a new name, so a backend installed (or put on sys.path) later is found
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name.upper(), ep)
        return found

    def registered(self) -> list[str]:
        """The names of the installed devices, sorted."""
        return sorted(self._entry_points())

    def __getitem__(self, name: str) -> CompiledDevice:
        full = self.canonicalize(name)
        if (dev := self._instances.get(full)) is not None:
            return dev
        eps = self._entry_points()
        if (ep := eps.get(base_name(full))) is None:
            raise ValueError(f"Device: unknown device {name!r}; registered devices: {sorted(eps)} "
                             f"(a backend registers itself in the {ENTRY_POINT_GROUP!r} entry-point group)")
        cls: Any = ep.load()
        new: CompiledDevice = cls(full)
        self._instances[full] = new
        return new

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(name) and base_name(self.canonicalize(name)) in self._entry_points()

    @property
    def DEFAULT(self) -> str:  # upper case: tinygrad's spelling
        """The default device: `$DEV` (canonicalized, must be registered), else "CPU"."""
        name = self.canonicalize(settings.DEV.value)
        # a device already built is known to be registered: no entry-point scan (it reads every installed package)
        if name not in self._instances and base_name(name) not in self._entry_points():
            raise ValueError(f"Device.DEFAULT: DEV={settings.DEV.value!r} is not a registered device; "
                             f"registered devices: {self.registered()}")
        return name


Device = DeviceRegistry()
