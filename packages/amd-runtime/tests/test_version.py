import importlib.metadata

import ember.amd_runtime


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-amd-runtime")
    assert ember.amd_runtime.__version__ == installed, (
        f"ember.amd_runtime.__version__ is {ember.amd_runtime.__version__!r} but the installed ember-amd-runtime "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
