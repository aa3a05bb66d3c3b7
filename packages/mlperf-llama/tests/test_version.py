import importlib.metadata

import ember.mlperf_llama


def test_version_matches_installed_metadata() -> None:
    installed = importlib.metadata.version("ember-mlperf-llama")
    assert ember.mlperf_llama.__version__ == installed, (
        f"ember.mlperf_llama.__version__ is {ember.mlperf_llama.__version__!r} but the installed ember-mlperf-llama "
        f"metadata says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )
