"""The embedded default corpus (the Python standard library's sources) and the unigram-entropy baseline.

C4 (spec §1.2) is hundreds of GB; CPU presets and tests need text that is already on every machine. The standard
library's ``.py`` files are a few MB of real, varied text, so :func:`stdlib_corpus` turns them into a jsonl corpus of
the same shape as C4 (``{"text": ...}`` per line, one document per line). :func:`unigram_entropy` is the loss a model
that only knows token frequencies reaches: a trained model must beat it.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ember.tensor import files

__all__ = ["stdlib_corpus", "stdlib_source_files", "unigram_entropy", "unigram_entropy_of"]

_SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})


def stdlib_source_files(stdlib_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The standard library's ``.py`` files, sorted by path relative to ``stdlib_dir`` (default: this Python's).

    Skips ``site-packages``/``dist-packages``, ``test``/``tests``, ``idlelib`` and ``__pycache__`` directories.
    """
    root = Path(sysconfig.get_paths()["stdlib"] if stdlib_dir is None else stdlib_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"stdlib_source_files: stdlib directory {str(root)!r} does not exist")
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                found.append((path.relative_to(root).as_posix(), path))
    found.sort()
    return [path for _, path in found]


def _corpus_path(out_dir: Path, max_bytes: int) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    return out_dir / f"stdlib-py{version}-{max_bytes}.jsonl"


def _is_complete(path: Path) -> bool:
    # The file only ever appears through os.replace of a fully written temp file; the final newline is a cheap check
    # against a file truncated by something else (a partial copy).
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def stdlib_corpus(out_dir: str | os.PathLike[str], max_bytes: int = 4_000_000) -> Path:
    """Write (once) a jsonl corpus of the standard library's sources to ``out_dir`` and return its path.

    One ``{"text": <file contents>}`` line per ``.py`` file of :func:`stdlib_source_files`, in sorted path order,
    skipping files that are empty or not valid UTF-8, until ``max_bytes`` bytes of UTF-8 text; the last document is
    cut (at a character boundary) so the total never exceeds ``max_bytes``. The file name holds the Python version
    and ``max_bytes``; an existing complete file is returned without being rewritten. The file is written atomically.

    The corpus is deterministic for a given Python version and stdlib install: a different Python version (or a
    distribution that patches the stdlib) gives a different corpus, hence different token counts and losses.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"stdlib_corpus: max_bytes must be an int, got {type(max_bytes).__name__}")
    if max_bytes <= 0:
        raise ValueError(f"stdlib_corpus: max_bytes must be > 0, got {max_bytes}")
    if not isinstance(out_dir, str | os.PathLike):
        raise TypeError(f"stdlib_corpus: out_dir must be a str or os.PathLike, got {type(out_dir).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = _corpus_path(out, max_bytes)
    if _is_complete(path):
        return path

    lines: list[str] = []
    remaining = max_bytes
    for source in stdlib_source_files():
        if remaining <= 0:
            break
        try:
            data = source.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text:
            continue
        if len(data) > remaining:
            text = data[:remaining].decode("utf-8", errors="ignore")  # drops a character cut in half
            data = text.encode("utf-8")
        remaining -= len(data)
        lines.append(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    if not lines:
        raise ValueError(f"stdlib_corpus: no readable .py files under {sysconfig.get_paths()['stdlib']!r}")

    with files.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    return path


def unigram_entropy(token_counts: np.ndarray | Sequence[int]) -> float:
    """Entropy in nats/token of the empirical distribution given by per-token counts: ``-sum p log p``.

    This is the cross-entropy a model that predicts only token frequencies achieves on the same data.

    >>> round(unigram_entropy([1, 1, 2]), 6)  # p = 1/4, 1/4, 1/2
    1.039721
    """
    counts = np.asarray(token_counts)
    if counts.ndim != 1:
        raise ValueError(f"unigram_entropy: token_counts must be 1-D, got shape {counts.shape}")
    if counts.size and not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype, np.floating)):
        raise TypeError(f"unigram_entropy: token_counts must be numeric counts, got dtype {counts.dtype}")
    counts = counts.astype(np.float64)
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("unigram_entropy: token_counts must be finite and >= 0")
    total = float(counts.sum())
    if total <= 0:
        raise ValueError("unigram_entropy: token_counts sum to 0; the distribution is undefined")
    p = counts[counts > 0] / total
    return float(-(p * np.log(p)).sum()) if p.size > 1 else 0.0


def unigram_entropy_of(dataset_tokens: np.ndarray, vocab_size: int) -> float:
    """:func:`unigram_entropy` of a token array (any shape) over a vocabulary of ``vocab_size`` ids."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"unigram_entropy_of: vocab_size must be an int, got {type(vocab_size).__name__}")
    if vocab_size <= 0:
        raise ValueError(f"unigram_entropy_of: vocab_size must be > 0, got {vocab_size}")
    tokens = np.asarray(dataset_tokens)
    if not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"unigram_entropy_of: dataset_tokens must be integer ids, got dtype {tokens.dtype}")
    if tokens.size == 0:
        raise ValueError("unigram_entropy_of: dataset_tokens is empty")
    flat = tokens.reshape(-1)
    low, high = int(flat.min()), int(flat.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"unigram_entropy_of: token ids must be in [0, {vocab_size}), got range [{low}, {high}]")
    return unigram_entropy(np.bincount(flat, minlength=vocab_size))

