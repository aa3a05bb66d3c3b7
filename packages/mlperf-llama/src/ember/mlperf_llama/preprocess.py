"""Streaming corpus -> Megatron ``.bin``/``.idx`` preprocessor (NeMo ``preprocess_data_for_megatron.py`` semantics).

Each input document is tokenized with ``tokenizer.encode(text)`` (no BOS/EOS added, no sentence splitting);
non-empty token lists become one sequence = one document of ``<prefix>_train_text_document`` (or of
``<prefix>_validation_text_document`` when a validation share is asked). Nothing holds the corpus in memory.

Example::

    result = preprocess(["c4-validation-91205-samples.en.json.gz"], "out/c4", tokenizer, progress=False)
    IndexedDataset(result.train_prefix)
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tqdm import tqdm

from ember.mlperf_llama.data import IndexedDatasetWriter, best_token_dtype

__all__ = ["PreprocessResult", "Tokenizer", "iter_documents", "preprocess"]

_JSON_SUFFIXES = (".jsonl", ".json")
# Seconds between tokens/s updates of the progress bar.
_RATE_INTERVAL = 0.5


class Tokenizer(Protocol):
    """What :func:`preprocess` needs from a tokenizer."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class PreprocessResult:
    """Summary of a :func:`preprocess` run; ``documents``/``tokens`` count the train split only."""

    train_prefix: Path
    validation_prefix: Path | None
    documents: int
    tokens: int
    validation_documents: int
    validation_tokens: int
    skipped_documents: int = 0  # documents whose token list was empty (not written, as in NeMo)


def _check_paths(paths: object, name: str) -> list[Path]:
    if isinstance(paths, str | bytes | os.PathLike) or not isinstance(paths, Sequence):
        raise TypeError(f"{name}: expected a sequence of paths, got {type(paths).__name__}")
    checked = []
    for path in paths:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"{name}: every path must be a str or Path, got {type(path).__name__}")
        checked.append(Path(path))
    for path in checked:
        if not path.exists():
            raise FileNotFoundError(f"{name}: input {path} not found")
    return checked


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.is_file())
    else:
        yield path


def _json_lines(path: Path, stream: Iterable[bytes], text_key: str) -> Iterator[str]:
    for lineno, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({err.reason})") from err
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: invalid JSON ({err.msg} at column {err.colno})") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        if text_key not in record:
            raise ValueError(f"{path}:{lineno}: missing key {text_key!r} (keys: {sorted(record)})")
        text = record[text_key]
        if not isinstance(text, str):
            raise ValueError(f"{path}:{lineno}: {text_key!r} must be a string, got {type(text).__name__}")
        yield text


def _file_documents(path: Path, text_key: str) -> Iterator[str]:
    name = path.name.lower()
    compressed = name.endswith(".gz")
    inner = name[:-3] if compressed else name
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as stream:
            if inner.endswith(_JSON_SUFFIXES):
                yield from _json_lines(path, stream, text_key)
                return
            data = stream.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(f"{path}: corrupt gzip stream ({err})") from err
    try:
        yield data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid UTF-8 text at byte {err.start} ({err.reason})") from err


def iter_documents(paths: Sequence[str | Path], text_key: str = "text") -> Iterator[str]:
    """Stream the documents of ``paths`` in order.

    ``.jsonl``/``.json`` (optionally ``.gz``, as C4 ships): one JSON object per line, the document is field
    ``text_key`` (blank lines are skipped; a bad line raises ValueError naming ``file:line``). Any other file
    is one document (whole file, UTF-8; ``.gz`` is decompressed). Directories are walked recursively, files in
    sorted order. Missing paths raise FileNotFoundError before anything is read.
    """
    checked = _check_paths(paths, "iter_documents")
    if not isinstance(text_key, str):
        raise TypeError(f"iter_documents: text_key must be a str, got {type(text_key).__name__}")
    return _documents(checked, text_key)


def _documents(paths: list[Path], text_key: str) -> Iterator[str]:
    for path in paths:
        for file in _files(path):
            yield from _file_documents(file, text_key)


def _validation_rule(validation_fraction: float, validation_documents: int | None) -> tuple[int | None, int | None]:
    """Returns (every, first): put every ``every``-th document, or the first ``first`` documents, in validation."""
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, int | float):
        raise TypeError(f"preprocess: validation_fraction must be a float, got {type(validation_fraction).__name__}")
    if not 0.0 <= validation_fraction <= 0.5:
        raise ValueError(f"preprocess: validation_fraction must be in [0, 0.5], got {validation_fraction}")
    if validation_documents is not None:
        if isinstance(validation_documents, bool) or not isinstance(validation_documents, int):
            raise TypeError(
                f"preprocess: validation_documents must be an int or None, got {type(validation_documents).__name__}"
            )
        if validation_documents < 1:
            raise ValueError(f"preprocess: validation_documents must be >= 1, got {validation_documents}")
        if validation_fraction > 0:
            raise ValueError("preprocess: give validation_fraction or validation_documents, not both")
        return None, validation_documents
    if validation_fraction > 0:
        return round(1.0 / validation_fraction), None
    return None, None


def split_prefixes(output_prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The (train, validation) dataset prefixes `preprocess` writes for `output_prefix` (NeMo's naming)."""
    base = os.fspath(output_prefix)
    return Path(base + "_train_text_document"), Path(base + "_validation_text_document")


def preprocess(
    inputs: Sequence[str | Path],
    output_prefix: str | Path,
    tokenizer: Tokenizer,
    *,
    validation_fraction: float = 0.0,
    validation_documents: int | None = None,
    text_key: str = "text",
    progress: bool = True,
) -> PreprocessResult:
    """Tokenize ``inputs`` into ``<output_prefix>_train_text_document.{bin,idx}`` (+ ``_validation_...``).

    Documents are numbered over the non-empty ones (empty token lists are skipped, as NeMo does). With
    ``validation_fraction = f > 0`` every k-th document (k = round(1/f): documents k, 2k, ...) goes to
    validation; with ``validation_documents = n`` the first n documents do. Tokens are stored as uint16 if
    ``tokenizer.vocab_size < 65500`` else int32. Output files appear atomically only when everything succeeded.
    A tqdm bar (documents, tokens/s) goes to stderr unless ``progress=False``.
    """
    encode = getattr(tokenizer, "encode", None)
    if not callable(encode):
        raise TypeError(f"preprocess: tokenizer must have an encode(str) method, got {type(tokenizer).__name__}")
    vocab_size = getattr(tokenizer, "vocab_size", None)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise TypeError(f"preprocess: tokenizer.vocab_size must be a positive int, got {vocab_size!r}")
    if not isinstance(output_prefix, str | os.PathLike):
        raise TypeError(f"preprocess: output_prefix must be a str or Path, got {type(output_prefix).__name__}")
    every, first = _validation_rule(validation_fraction, validation_documents)
    documents = iter_documents(inputs, text_key)
    dtype = best_token_dtype(vocab_size)
    train_prefix, validation_prefix = split_prefixes(output_prefix)
    validation_prefix = validation_prefix if every or first else None
    train_prefix.parent.mkdir(parents=True, exist_ok=True)

    skipped = 0
    bar = tqdm(documents, desc="preprocess", unit="doc", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    started = last_update = time.monotonic()
    with IndexedDatasetWriter(train_prefix, dtype) as train:
        validation = IndexedDatasetWriter(validation_prefix, dtype) if validation_prefix is not None else None
        try:
            written = 0
            for text in bar:
                tokens = encode(text)
                if len(tokens) == 0:
                    skipped += 1
                    continue
                written += 1
                to_validation = (every is not None and written % every == 0) or (first is not None and written <= first)
                target = validation if to_validation and validation is not None else train
                target.add_document(tokens)
                now = time.monotonic()
                if progress and now - last_update >= _RATE_INTERVAL:
                    total_tokens = train.num_tokens + (validation.num_tokens if validation else 0)
                    bar.set_postfix_str(f"{total_tokens / (now - started):,.0f} tok/s", refresh=False)
                    last_update = now
            train.finalize()
            if validation is not None:
                validation.finalize()
        except BaseException:
            if validation is not None:
                validation.abort()
            raise
        finally:
            bar.close()
    return PreprocessResult(
        train_prefix=train_prefix,
        validation_prefix=validation_prefix,
        documents=train.num_documents,
        tokens=train.num_tokens,
        validation_documents=validation.num_documents if validation is not None else 0,
        validation_tokens=validation.num_tokens if validation is not None else 0,
        skipped_documents=skipped,
    )
