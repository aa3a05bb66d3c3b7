"""The embedded stdlib corpus and the unigram-entropy baseline."""

from __future__ import annotations

import json
import math
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama.corpus import stdlib_corpus, stdlib_source_files, unigram_entropy, unigram_entropy_of


def _docs(path: Path) -> list[str]:
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        assert list(record) == ["text"] and isinstance(record["text"], str) and record["text"]
        docs.append(record["text"])
    return docs


def test_source_files_are_sorted_and_filtered() -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_source_files()
    relative = [f.relative_to(root).as_posix() for f in files]
    assert relative == sorted(relative)
    assert "json/decoder.py" in relative and "textwrap.py" in relative
    skipped = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}
    assert not any(skipped & set(Path(r).parts[:-1]) for r in relative)
    assert all(r.endswith(".py") for r in relative)
    with pytest.raises(FileNotFoundError, match="stdlib directory"):
        stdlib_source_files("/nonexistent/stdlib")


def test_corpus_is_valid_jsonl_of_stdlib_sources(tmp_path: Path) -> None:
    path = stdlib_corpus(tmp_path, max_bytes=200_000)
    version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    assert path == tmp_path / f"stdlib-py{version}-200000.jsonl"
    docs = _docs(path)
    expected = []
    for source in stdlib_source_files():
        try:
            text = source.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text:
            expected.append(text)
        if len(expected) == len(docs):
            break
    # whole files in path order; only the last one may be cut short
    assert docs[:-1] == expected[:-1]
    assert expected[-1].startswith(docs[-1])
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


@pytest.mark.parametrize("max_bytes", [1, 5_000, 123_457])
def test_corpus_respects_max_bytes(tmp_path: Path, max_bytes: int) -> None:
    total = sum(len(d.encode("utf-8")) for d in _docs(stdlib_corpus(tmp_path, max_bytes=max_bytes)))
    assert max_bytes - 3 <= total <= max_bytes  # the last document is cut at a character boundary


def test_corpus_default_size(tmp_path: Path) -> None:
    docs = _docs(stdlib_corpus(tmp_path))
    total = sum(len(d.encode("utf-8")) for d in docs)
    assert 4_000_000 - 3 <= total <= 4_000_000
    assert len(docs) > 100


def test_corpus_is_deterministic_and_cached(tmp_path: Path) -> None:
    first = stdlib_corpus(tmp_path / "a", max_bytes=300_000)
    second = stdlib_corpus(tmp_path / "b", max_bytes=300_000)
    assert first.read_bytes() == second.read_bytes()
    mtime = first.stat().st_mtime_ns
    assert stdlib_corpus(tmp_path / "a", max_bytes=300_000) == first
    assert first.stat().st_mtime_ns == mtime
    # a different size is a different file
    other = stdlib_corpus(tmp_path / "a", max_bytes=100_000)
    assert other != first and first.stat().st_mtime_ns == mtime


def test_incomplete_corpus_is_rebuilt(tmp_path: Path) -> None:
    path = stdlib_corpus(tmp_path, max_bytes=50_000)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2].rstrip(b"\n"))
    assert stdlib_corpus(tmp_path, max_bytes=50_000).read_bytes() == good


def test_corpus_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes must be > 0, got 0"):
        stdlib_corpus(tmp_path, max_bytes=0)
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        stdlib_corpus(tmp_path, max_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="out_dir must be a str or os.PathLike"):
        stdlib_corpus(3)  # type: ignore[arg-type]


def test_unigram_entropy_by_hand() -> None:
    # p = (1/2, 1/4, 1/4, 0): H = 1/2 ln 2 + 2 * 1/4 ln 4 = 1.5 ln 2
    assert unigram_entropy([2, 1, 1, 0]) == pytest.approx(1.5 * math.log(2), rel=1e-12)
    assert unigram_entropy(np.array([5, 5, 5, 5], dtype=np.int64)) == pytest.approx(math.log(4), rel=1e-12)
    assert unigram_entropy([0, 7, 0]) == 0.0
    counts = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    p = counts / counts.sum()
    assert unigram_entropy(counts) == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)


def test_unigram_entropy_of_tokens() -> None:
    tokens = np.array([[0, 0, 1], [2, 0, 1]], dtype=np.int32)  # counts 3, 2, 1, 0
    expected = -(3 / 6 * math.log(3 / 6) + 2 / 6 * math.log(2 / 6) + 1 / 6 * math.log(1 / 6))
    assert unigram_entropy_of(tokens, vocab_size=4) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 2\), got range \[0, 2\]"):
        unigram_entropy_of(tokens, vocab_size=2)
    with pytest.raises(TypeError, match="must be integer ids"):
        unigram_entropy_of(np.array([0.0, 1.0]), vocab_size=4)
    with pytest.raises(ValueError, match="dataset_tokens is empty"):
        unigram_entropy_of(np.array([], dtype=np.int64), vocab_size=4)
    with pytest.raises(ValueError, match="vocab_size must be > 0"):
        unigram_entropy_of(tokens, vocab_size=0)


def test_unigram_entropy_bad_counts() -> None:
    with pytest.raises(ValueError, match="sum to 0"):
        unigram_entropy([0, 0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        unigram_entropy([3, -1])
    with pytest.raises(ValueError, match="must be 1-D, got shape"):
        unigram_entropy(np.ones((2, 2)))
    with pytest.raises(TypeError, match="numeric counts"):
        unigram_entropy(np.array(["a", "b"]))
