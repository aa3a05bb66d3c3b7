"""The tensor package's elementwise, reduce, movement and matmul tests (tests of softmax and log_softmax among
them), every case written for the small reference device, run on the AMD device of the mock driver and GPU instead
(`MOCKGPU=1`, `EMBER_TEST_SMALL_DEVICE=AMD`): each kernel rendered by HIPRenderer, compiled by clang-19 for gfx942,
submitted through the real KFD/HCQ path and executed instruction by instruction by the wave64 interpreter, compared
against PyTorch as those tests do. A subprocess: the small device is chosen when the test modules load."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FILES = ["test_ops_elementwise.py", "test_ops_reduce.py", "test_ops_movement.py", "test_tensor_ops.py"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("clang-19") is None or shutil.which("ld.lld-19") is None,
                    reason="clang-19 and lld-19 (apt) build the gfx942 code objects")
def test_tensor_suite_small_cases_on_the_mock_amd_gpu():
    env = {**os.environ, "MOCKGPU": "1", "EMBER_TEST_SMALL_DEVICE": "AMD"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "AMD",
                           *(str(REPO / "packages" / "tensor" / "tests" / f) for f in FILES)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "passed" in summary and int(summary.split(" passed")[0].split()[-1]) >= 300, summary
