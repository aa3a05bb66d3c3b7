import numpy as np
import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test compiles into its own cache folder, never ~/.cache/ember."""
    path = tmp_path / "ember-cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    monkeypatch.delenv("CACHE", raising=False)
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(0)
