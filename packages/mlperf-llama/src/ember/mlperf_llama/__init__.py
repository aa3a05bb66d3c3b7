"""ember.mlperf_llama: the MLPerf Llama 3 trainer, built only on ember.tensor's public API."""

__version__ = "0.3.3"
