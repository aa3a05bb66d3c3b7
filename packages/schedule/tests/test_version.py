import importlib.metadata

import ember.schedule


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-schedule")
    assert ember.schedule.__version__ == installed, (
        f"ember.schedule.__version__ is {ember.schedule.__version__!r} but the installed ember-schedule "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
