import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest


def _host_flags() -> list[str]:
    # as ember.runtime's CPU compiler: gcc 12 vectorizes away the float16 round trips on AVX512-FP16 CPUs
    try:
        cpu_flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    except OSError:
        return []
    return ["-mno-avx512fp16"] if "avx512_fp16" in cpu_flags.split() else []


@pytest.fixture
def run_c(tmp_path):
    """Compile a ProgramSpec's C with the system compiler and run it on numpy arrays (slot order)."""

    def run(prg, *arrays, vals=()):
        # (named by the function: a second program of one name in a test must not reach the first one's loaded library)
        src = tmp_path / f"{prg.function}.c"
        lib = tmp_path / f"{prg.function}.so"
        src.write_text(prg.src)
        subprocess.run(["cc", "-O2", "-march=native", *_host_flags(), "-fPIC", "-shared", "-fopenmp", str(src), "-o",
                        str(lib), "-lm"], check=True, capture_output=True)
        fn = getattr(ctypes.CDLL(str(lib)), prg.function)
        fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in arrays), *(ctypes.c_longlong(v) for v in vals))
        return arrays

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(0)
