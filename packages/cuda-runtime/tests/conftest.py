import shutil
import subprocess
from pathlib import Path

import pytest

from ember.runtime import Device

FAKE_SOURCE = Path(__file__).with_name("fake_libcuda.c")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test compiles into its own cache folder, never ~/.cache/ember."""
    path = tmp_path / "ember-cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    monkeypatch.delenv("CACHE", raising=False)
    return path


def _build(tmp_path_factory, *defines: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fake libcuda")
    out = tmp_path_factory.mktemp("fake-cuda") / "libcuda.so.1"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", *defines, "-o", str(out), str(FAKE_SOURCE)],
                   check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def fake_libcuda_build(tmp_path_factory):
    """The fake driver (fake_libcuda.c) built once with gcc."""
    return _build(tmp_path_factory)


@pytest.fixture(scope="session")
def fake_libcuda_no_graphs_build(tmp_path_factory):
    """The fake driver without the CUDA graph entry points (an older or cut-down libcuda)."""
    return _build(tmp_path_factory, "-DFAKE_CUDA_NO_GRAPHS")


class FakeDriver:
    """A fresh copy of the fake driver for one test (its own file, so its own state when loaded), its call log."""

    def __init__(self, path: Path, log: Path):
        self.path, self.log_path = path, log

    def log(self) -> list[str]:
        return self.log_path.read_text().splitlines() if self.log_path.exists() else []

    def calls(self, name: str) -> list[str]:
        return [line for line in self.log() if line.split(" ", 1)[0] == name]


def _fake(build, tmp_path, monkeypatch):
    path = tmp_path / "fake" / "libcuda.so.1"
    path.parent.mkdir()
    shutil.copy(build, path)
    fake = FakeDriver(path, tmp_path / "fake-cuda.log")
    monkeypatch.setenv("CUDA_DRIVER_PATH", str(path))
    monkeypatch.setenv("FAKE_CUDA_LOG", str(fake.log_path))
    for var in ("FAKE_CUDA_DEVICES", "FAKE_CUDA_CC", "FAKE_CUDA_HANG", "FAKE_CUDA_INIT_ERROR", "CUDA_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Device, "_instances", {})
    monkeypatch.delenv("CUDA_GRAPH", raising=False)
    yield fake
    violations = [line for line in fake.log() if line.startswith("VIOLATION")]
    assert violations == [], "the fake driver saw broken contracts:\n" + "\n".join(violations)


@pytest.fixture
def fake_cuda(fake_libcuda_build, tmp_path, monkeypatch):
    """CUDA_DRIVER_PATH set to a fresh fake driver; the test fails if the driver saw a broken contract. Devices built
    through Device[...] in the test are forgotten after it."""
    yield from _fake(fake_libcuda_build, tmp_path, monkeypatch)


@pytest.fixture
def fake_cuda_no_graphs(fake_libcuda_no_graphs_build, tmp_path, monkeypatch):
    """As fake_cuda, with a driver that has no CUDA graph entry points."""
    yield from _fake(fake_libcuda_no_graphs_build, tmp_path, monkeypatch)
