import importlib.metadata

import ember.codegen


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-codegen")
    assert ember.codegen.__version__ == installed, (
        f"ember.codegen.__version__ is {ember.codegen.__version__!r} but the installed ember-codegen "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
