"""ember-uops installs alone, from its folder, into a clean venv: no workspace, no other Ember package."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
UOPS = REPO_ROOT / "packages" / "uops"

CHECK = """
import importlib.util, pathlib
import ember.uops
import ember
assert importlib.util.find_spec("ember.schedule") is None, "ember.schedule should not be installed"
spec = importlib.util.find_spec("ember")
assert spec.origin is None, f"ember is a regular package ({spec.origin}), not a PEP 420 namespace"
assert not any((pathlib.Path(p) / "__init__.py").exists() for p in ember.__path__), list(ember.__path__)
print(ember.uops.__version__)
"""


def run(*cmd: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_uops_installs_alone_as_namespace_package(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"python -m venv failed (Debian: apt-get install python3-venv):\n{result.stderr}"
    python = venv / "bin" / "python"

    # normal build isolation: pip fetches hatchling (and numpy) from PyPI
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", UOPS, timeout=600)
    printed = run(python, "-c", CHECK, timeout=60).stdout.strip()

    init = (UOPS / "src" / "ember" / "uops" / "__init__.py").read_text()
    expected = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", init, re.MULTILINE).group(1)
    assert printed == expected
