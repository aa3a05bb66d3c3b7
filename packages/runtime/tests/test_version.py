import importlib.metadata

import ember.runtime


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-runtime")
    assert ember.runtime.__version__ == installed, (
        f"ember.runtime.__version__ is {ember.runtime.__version__!r} but the installed ember-runtime "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
