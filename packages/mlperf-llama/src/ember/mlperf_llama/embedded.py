"""The embedded default dataset: text that ships with every Python (the standard library's sources), a small Llama 3
style tokenizer trained on it by our own BPE trainer, and the tokenized Megatron train/validation files. Built once
per cache directory and Python version, then reused.

    data = embedded_dataset(Path("~/.cache/ember-llama").expanduser(), vocab_size=4096)
    data.train_prefix, data.valid_prefix, data.tokenizer_path
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ember.mlperf_llama.corpus import stdlib_corpus
from ember.mlperf_llama.preprocess import iter_documents, preprocess, split_prefixes
from ember.mlperf_llama.tokenizer import TiktokenTokenizer, train_llama3_tokenizer

DEFAULT_CORPUS_BYTES = 3_000_000
VALIDATION_FRACTION = 0.05  # every 20th document is validation


@dataclass(frozen=True)
class EmbeddedData:
    tokenizer_path: Path
    train_prefix: Path
    valid_prefix: Path


def embedded_dataset(cache_dir: Path, vocab_size: int = 4096, corpus_bytes: int = DEFAULT_CORPUS_BYTES,
                     progress: bool = True) -> EmbeddedData:
    """Build (or find, cached) the embedded dataset for a model vocabulary of `vocab_size` (BPE ranks + 256 special
    tokens). The corpus depends on the Python version, so the cache is keyed by it."""
    root = Path(cache_dir) / (f"stdlib-py{sys.version_info.major}.{sys.version_info.minor}-v{vocab_size}-"
                              f"{corpus_bytes // 1000}k")
    root.mkdir(parents=True, exist_ok=True)
    corpus = stdlib_corpus(root / "corpus", max_bytes=corpus_bytes)
    tokenizer_path = root / "tokenizer.model"
    if not tokenizer_path.exists():
        if progress:
            print(f"ember-llama: training a {vocab_size}-token BPE tokenizer on {corpus}", file=sys.stderr)
        train_llama3_tokenizer(iter_documents([corpus]), vocab_size).save(tokenizer_path)
    prefix = root / "stdlib"
    train_prefix, valid_prefix = split_prefixes(prefix)
    if not (Path(f"{train_prefix}.idx").exists() and Path(f"{valid_prefix}.idx").exists()):
        tokenizer = TiktokenTokenizer(tokenizer_path)  # the Llama 3 special tokens follow the ranks
        preprocess([corpus], prefix, tokenizer, validation_fraction=VALIDATION_FRACTION, progress=progress)
    return EmbeddedData(tokenizer_path, train_prefix, valid_prefix)
