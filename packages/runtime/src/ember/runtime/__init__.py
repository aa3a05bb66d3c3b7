"""ember.runtime: devices (compiler, runtime, allocator) and buffers behind Device[name].

    from ember.runtime import Buffer, Device
    dev = Device["CPU"]                       # or Device[Device.DEFAULT], from $DEV
    prg = dev.runtime("add", dev.compiler.compile_cached(c_source))
    prg(out, a, b, vals=(n,), wait=True)      # Buffers in slot order, then the int variables; -> seconds
"""

__version__ = "0.7.4"

from ember.runtime.allocator import Allocator, LRUAllocator  # noqa: E402
from ember.runtime.buffer import Buffer  # noqa: E402
from ember.runtime.compile_queue import CompileQueue  # noqa: E402
from ember.runtime.compiler import CompileError, Compiler  # noqa: E402
from ember.runtime.device import CompiledDevice, Device, DeviceRegistry  # noqa: E402
from ember.runtime.program import Program  # noqa: E402
from ember.runtime.timing import time_program  # noqa: E402

__all__ = ["Allocator", "LRUAllocator", "Buffer", "CompileError", "CompileQueue", "Compiler", "CompiledDevice",
           "Device", "DeviceRegistry", "Program", "time_program"]
