import ctypes
import subprocess

import numpy as np
import pytest


@pytest.fixture
def run_c(tmp_path):
    """Compile a ProgramSpec's C with the system compiler and run it on numpy arrays (slot order)."""

    def run(prg, *arrays, vals=()):
        src = tmp_path / f"{prg.name}.c"
        lib = tmp_path / f"{prg.name}.so"
        src.write_text(prg.src)
        subprocess.run(["cc", "-O2", "-march=native", "-fPIC", "-shared", "-fopenmp", str(src), "-o", str(lib), "-lm"],
                       check=True, capture_output=True)
        fn = getattr(ctypes.CDLL(str(lib)), prg.name)
        fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in arrays), *(ctypes.c_longlong(v) for v in vals))
        return arrays

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(0)
