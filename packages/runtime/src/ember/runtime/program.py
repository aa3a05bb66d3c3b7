"""`Program`: a loaded kernel, called on Buffers with launch dimensions and variable values."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.runtime.buffer import Buffer
from ember.runtime.device import base_name

if TYPE_CHECKING:
    from ember.runtime.device import CompiledDevice


class Program:
    """The function `name` of a compiled library `lib` on `device`. Subclasses load it and implement `launch`.

        prg = dev.runtime("add", dev.compiler.compile_cached(src))
        seconds = prg(out, a, b, vals=(n,), wait=True)

    Buffers come in slot order (data0, data1, ...), then the int variables in `vals`."""

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        self.device, self.name, self.lib = device, name, lib

    def __call__(self, *bufs: Buffer, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        """Run the kernel; returns its time in seconds when `wait`, else None (it may still be running)."""
        raws = []
        for i, b in enumerate(bufs):
            if not isinstance(b, Buffer):
                raise TypeError(f"{self.name}: buffer argument {i} must be a Buffer, got {type(b).__name__}")
            if base_name(b.device) != base_name(self.device.name):
                raise ValueError(f"{self.name}: buffer argument {i} is on {b.device}, "
                                 f"the program on {self.device.name}")
            raws.append(b.ensure_allocated().raw)
        try:
            ints = tuple(operator.index(v) for v in vals)
        except TypeError:
            raise TypeError(f"{self.name}: vals must be ints, got {tuple(vals)!r}") from None
        return self.launch(raws, tuple(global_size), None if local_size is None else tuple(local_size), ints, wait)

    def launch(self, bufs: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...], wait: bool) -> float | None:
        """Run on raw buffers (the allocator's handles)."""
        raise NotImplementedError(f"{type(self).__name__}: launch is not implemented")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.device.name}>"
