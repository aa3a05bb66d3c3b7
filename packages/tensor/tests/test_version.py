import importlib.metadata

import ember.tensor


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-tensor")
    assert ember.tensor.__version__ == installed, (
        f"ember.tensor.__version__ is {ember.tensor.__version__!r} but the installed ember-tensor "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
