"""Tests of the Megatron indexed dataset, GPT sample construction and the streaming preprocessor."""

from __future__ import annotations

import gzip
import itertools
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama import data as data_module
from ember.mlperf_llama.data import (
    DTYPE_CODES,
    DatasetFormatError,
    GPTDataset,
    IndexedDataset,
    IndexedDatasetWriter,
    batches,
    best_token_dtype,
    dtype_code,
)
from ember.mlperf_llama.preprocess import PreprocessResult, iter_documents, preprocess


def write_dataset(prefix: Path, docs: list[list[int]] | list[np.ndarray], dtype: str = "uint16") -> IndexedDataset:
    with IndexedDatasetWriter(prefix, dtype) as writer:
        for doc in docs:
            writer.add_document(doc)
    return IndexedDataset(prefix)


def docs_from_sizes(sizes: list[int]) -> list[np.ndarray]:
    """Document d holds tokens 100*d ... 100*d + L_d - 1 (the spec's test-vector convention)."""
    return [np.arange(size) + 100 * d for d, size in enumerate(sizes)]


# ---------------------------------------------------------------------------------------------------------------
# Reference implementations, written from the Megatron core_r0.11 description (spec section 2.3), deliberately in
# the slow literal form: mgrid document index, helpers.cpp's sample walk, per-stream slicing.


def reference_indices(sizes: list[int], q: int, n: int, seed: int, e: int) -> tuple[np.ndarray, np.ndarray, bool]:
    total = sum(sizes)
    epochs = 1
    while epochs * total < n * q + e:
        epochs += 1
    separate = False
    sans = 0
    if epochs > 1:
        sans = ((epochs - 1) * total - e) // q
        per = (total - e) // q
        separate = (n - sans) < int(0.80 * per)
    rng = np.random.RandomState(seed)

    def doc_index(num_epochs: int) -> np.ndarray:
        index = np.mgrid[0:num_epochs, 0 : len(sizes)][1].reshape(-1).astype(np.int32)
        rng.shuffle(index)
        return index

    document_index = np.concatenate((doc_index(epochs - 1), doc_index(1))) if separate else doc_index(epochs)
    m = (epochs * total - e) // q
    first = sans if separate else m
    shuffle_first = np.arange(first, dtype=np.uint32)
    rng.shuffle(shuffle_first)
    shuffle_last = np.arange(first, m, dtype=np.uint32)
    rng.shuffle(shuffle_last)
    return document_index, np.concatenate((shuffle_first, shuffle_last)), separate


def reference_sample_walk(sizes: list[int], document_index: np.ndarray, q: int, e: int, m: int) -> np.ndarray:
    """helpers.cpp build_sample_idx (drop_last), one document at a time."""
    rows = [(0, 0)]
    position, offset = 0, 0
    while len(rows) <= m:
        remaining = q + e
        while remaining != 0:
            length = sizes[document_index[position]] - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - e
                remaining = 0
            else:
                assert position < len(document_index) - 1, "walk ran past the document index"
                position += 1
                offset = 0
        rows.append((position, offset))
    return np.array(rows, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------
# dtype table


def test_dtype_codes_and_best_token_dtype() -> None:
    assert {code: dt.name for code, dt in DTYPE_CODES.items()} == {
        1: "uint8",
        2: "int8",
        3: "int16",
        4: "int32",
        5: "int64",
        6: "float64",
        7: "float32",
        8: "uint16",
    }
    assert dtype_code(np.int32) == 4 and dtype_code("uint16") == 8 and dtype_code(np.float32) == 7
    assert best_token_dtype(32000) == np.uint16
    assert best_token_dtype(65499) == np.uint16
    assert best_token_dtype(65500) == np.int32
    assert best_token_dtype(128256) == np.int32
    with pytest.raises(TypeError, match="has no Megatron code"):
        dtype_code(np.uint32)
    with pytest.raises(ValueError, match="vocab_size must be >= 1"):
        best_token_dtype(0)


# ---------------------------------------------------------------------------------------------------------------
# writer / reader


@pytest.mark.parametrize("dtype, high", [("uint16", 65535), ("int32", 128256)])
def test_round_trip_random_documents(tmp_path: Path, dtype: str, high: int) -> None:
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, high, size=int(rng.integers(0, 40))) for _ in range(60)] + [np.array([high - 1])]
    ds = write_dataset(tmp_path / "rt", docs, dtype)
    assert len(ds) == len(docs)
    assert ds.dtype == np.dtype(dtype)
    assert ds.num_tokens == sum(len(d) for d in docs)
    np.testing.assert_array_equal(ds.sequence_lengths, [len(d) for d in docs])
    np.testing.assert_array_equal(ds.document_indices, np.arange(len(docs) + 1))
    itemsize = np.dtype(dtype).itemsize
    starts = np.concatenate(([0], np.cumsum([len(d) for d in docs])[:-1]))
    np.testing.assert_array_equal(ds.sequence_pointers, starts * itemsize)
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(ds[i], doc)
    np.testing.assert_array_equal(ds[-1], [high - 1])
    longest = int(np.argmax([len(d) for d in docs]))
    np.testing.assert_array_equal(ds.get(longest, offset=3, length=5), docs[longest][3:8])
    np.testing.assert_array_equal(ds.get(longest, offset=4), docs[longest][4:])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(docs)]
    with pytest.raises(ValueError, match="beyond sequence"):
        ds.get(0, offset=len(docs[0]), length=1)


def test_file_bytes_exactly_per_spec(tmp_path: Path) -> None:
    docs = [[1, 2, 3], [], [65535, 0], [7]]
    write_dataset(tmp_path / "h", docs, "uint16")
    idx = (tmp_path / "h.idx").read_bytes()
    s, d = 4, 5
    assert len(idx) == 34 + 12 * s + 8 * d == 122
    assert idx[0:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<Q", idx, 9) == (1,)
    assert idx[17] == 8
    assert struct.unpack_from("<QQ", idx, 18) == (s, d)
    assert struct.unpack_from("<4i", idx, 34) == (3, 0, 2, 1)
    assert struct.unpack_from("<4q", idx, 34 + 4 * s) == (0, 6, 6, 10)
    assert struct.unpack_from("<5q", idx, 34 + 12 * s) == (0, 1, 2, 3, 4)
    assert (tmp_path / "h.bin").read_bytes() == struct.pack("<6H", 1, 2, 3, 65535, 0, 7)
    write_dataset(tmp_path / "w", [[128255, 5]], "int32")
    idx32 = (tmp_path / "w.idx").read_bytes()
    assert idx32[17] == 4 and len(idx32) == 34 + 12 + 16
    assert (tmp_path / "w.bin").read_bytes() == struct.pack("<2i", 128255, 5)


def test_writer_rejects_bad_tokens_and_is_atomic(tmp_path: Path) -> None:
    with IndexedDatasetWriter(tmp_path / "a", "uint16") as writer:
        with pytest.raises(ValueError, match=r"token values \[0, 70000\] do not fit dtype uint16"):
            writer.add_document([0, 70000])
        with pytest.raises(ValueError, match="do not fit"):
            writer.add_document([-1])
        with pytest.raises(TypeError, match="must be integers"):
            writer.add_document([1.5])
        with pytest.raises(ValueError, match="must be 1-D"):
            writer.add_document([[1, 2]])
        writer.add_document([1, 2])
        assert not (tmp_path / "a.bin").exists() and not (tmp_path / "a.idx").exists()
    assert len(IndexedDataset(tmp_path / "a")) == 1
    with pytest.raises(ValueError, match="after finalize"):
        writer.add_document([1])

    with pytest.raises(RuntimeError, match="boom"):
        with IndexedDatasetWriter(tmp_path / "b", "int32") as writer:
            writer.add_document([1, 2, 3])
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.idx"]

    writer = IndexedDatasetWriter(tmp_path / "c", "int32")
    writer.add_document([4])
    writer.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.idx"]

    with pytest.raises(FileNotFoundError, match="output directory"):
        IndexedDatasetWriter(tmp_path / "missing" / "x", "int32")
    with pytest.raises(TypeError, match="no Megatron code"):
        IndexedDatasetWriter(tmp_path / "d", "uint32")


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.idx not found"):
        IndexedDataset(tmp_path / "nope")
    write_dataset(tmp_path / "x", [[1]])
    (tmp_path / "x.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"x\.bin not found"):
        IndexedDataset(tmp_path / "x")


def _corrupt(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    prefix = tmp_path / "c"
    write_dataset(prefix, [[1, 2, 3], [4, 5], [6]], "uint16")
    idx = bytearray((prefix.with_suffix(".idx")).read_bytes())
    binary = bytearray((prefix.with_suffix(".bin")).read_bytes())
    idx, binary = edit(idx, binary)
    prefix.with_suffix(".idx").write_bytes(bytes(idx))
    prefix.with_suffix(".bin").write_bytes(bytes(binary))
    return prefix


def _put(fmt: str, offset: int, *values: int):  # type: ignore[no-untyped-def]
    def edit(idx: bytearray, binary: bytearray) -> tuple[bytearray, bytearray]:
        struct.pack_into(fmt, idx, offset, *values)
        return idx, binary

    return edit


# S = 3, D = 4: lengths at 34, pointers at 46, document indices at 70; .idx is 102 bytes, .bin 12 bytes.
CORRUPTIONS = {
    "bad magic": (_put("<9s", 0, b"NOTMAGIC!"), r"c\.idx: bad magic"),
    "bad version": (_put("<Q", 9, 2), r"c\.idx: unsupported version 2"),
    "bad dtype code": (_put("<B", 17, 9), r"c\.idx: unknown dtype code 9"),
    "truncated header": (lambda i, b: (i[:20], b), r"c\.idx: truncated header: file is 20 bytes"),
    "truncated idx": (lambda i, b: (i[:-8], b), r"c\.idx: file size 94 bytes != 34 \+ 12\*S \+ 8\*D = 102"),
    "trailing idx": (lambda i, b: (i + b"\x00", b), r"file size 103 bytes != .* = 102"),
    "count mismatch": (
        _put("<q", 70 + 24, 4),
        r"inconsistent counts: 3 sequence lengths but document_indices\[-1\] = 4",
    ),
    "nonzero first document index": (_put("<q", 70, 1), r"document_indices must start at 0"),
    "non-monotonic documents": (
        _put("<4q", 70, 0, 2, 1, 3),
        r"non-monotonic document indices: document_indices\[2\] = 1 < document_indices\[1\] = 2",
    ),
    "negative length": (_put("<i", 34 + 4, -2), r"negative lengths: sequence_lengths\[1\] = -2"),
    "pointer mismatch": (_put("<q", 46 + 8, 4), r"pointers not consistent with lengths: sequence_pointers\[1\] = 4"),
    "truncated bin": (lambda i, b: (i, b[:-2]), r"c\.bin: size 10 bytes != 12 bytes .*\(truncated\)"),
    "trailing bin": (lambda i, b: (i, b + b"\x00\x00"), r"c\.bin: size 14 bytes != 12 bytes .*\(trailing data\)"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_files_raise_dataset_format_error(tmp_path: Path, case: str) -> None:
    edit, message = CORRUPTIONS[case]
    prefix = _corrupt(tmp_path, edit)
    with pytest.raises(DatasetFormatError, match=message):
        IndexedDataset(prefix)
    assert issubclass(DatasetFormatError, ValueError)


# ---------------------------------------------------------------------------------------------------------------
# GPTDataset


def test_spec_worked_vector(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "v", docs_from_sizes([5, 3, 7]))
    gpt = GPTDataset(ds, seq_length=4, num_samples=6, seed=1234)
    assert (gpt.tokens_per_epoch, gpt.num_epochs, gpt.separate_final_epoch, len(gpt)) == (15, 2, False, 7)
    np.testing.assert_array_equal(gpt.document_index, [2, 1, 2, 0, 1, 0])
    assert gpt.document_index.dtype == np.int32
    np.testing.assert_array_equal(gpt.shuffle_index, [5, 0, 3, 4, 2, 6, 1])
    assert gpt.shuffle_index.dtype == np.uint32
    assert gpt[0].tolist() == [3, 4, 100, 101, 102]
    assert gpt[1].tolist() == [200, 201, 202, 203, 204]
    assert gpt[2].tolist() == [202, 203, 204, 205, 206]
    assert gpt[0].dtype == np.int64

    plain = GPTDataset(ds, seq_length=4, num_samples=3, seed=1234, shuffle=False)
    assert plain.num_epochs == 1 and len(plain) == 3
    assert plain.sample_index.tolist() == [[0, 0], [0, 4], [2, 0], [2, 4]]
    np.testing.assert_array_equal(plain.document_index, [0, 1, 2])
    np.testing.assert_array_equal(plain.shuffle_index, [0, 1, 2])
    assert [plain[i].tolist() for i in range(3)] == [
        [0, 1, 2, 3, 4],
        [4, 100, 101, 102, 200],
        [200, 201, 202, 203, 204],
    ]


@pytest.mark.parametrize("chunk", [None, 3])
def test_against_brute_force_stream_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int | None
) -> None:
    if chunk is not None:  # index arrays are scanned in chunks: exercise the chunk seams too
        monkeypatch.setattr(data_module, "_CHUNK", chunk)
    rng = np.random.default_rng(2024)
    separate_seen = set()
    for case in range(40):
        num_docs = int(rng.integers(1, 12))
        sizes = [int(v) for v in rng.integers(0, 15, size=num_docs)]
        if case % 4 == 0:
            sizes[int(rng.integers(0, num_docs))] = 0
        if sum(sizes) == 0:
            sizes[0] = 3
        q = int(rng.integers(1, 9))
        e = int(case % 5 != 0)
        total = sum(sizes)
        if case < 10:  # epochs = 2 with a small final epoch, forcing separate_final_epoch
            sans, per = (total - e) // q, (total - e) // q
            n = sans + 1 if per > 1 else int(rng.integers(1, 30))
        else:
            n = int(rng.integers(1, 30))
        seed = int(rng.integers(0, 2**31))
        prefix = tmp_path / f"case{case}"
        ds = write_dataset(prefix, docs_from_sizes(sizes), "int32")
        for shuffle in (True, False):
            gpt = GPTDataset(ds, seq_length=q, num_samples=n, seed=seed, shuffle=shuffle, add_extra_token=bool(e))
            ref_docs, ref_shuffle, ref_separate = reference_indices(sizes, q, n, seed, e)
            m = (gpt.num_epochs * total - e) // q
            assert len(gpt) == m >= n
            assert gpt.separate_final_epoch == ref_separate
            if shuffle:
                separate_seen.add(ref_separate)
                np.testing.assert_array_equal(gpt.document_index, ref_docs)
                np.testing.assert_array_equal(gpt.shuffle_index, ref_shuffle)
            else:
                np.testing.assert_array_equal(gpt.document_index, np.tile(np.arange(num_docs), gpt.num_epochs))
                np.testing.assert_array_equal(gpt.shuffle_index, np.arange(m))
            walk = reference_sample_walk(sizes, gpt.document_index, q, e, m)
            np.testing.assert_array_equal(gpt.sample_index, walk, err_msg=f"case {case} sizes {sizes} q {q} e {e}")
            stream = np.concatenate([np.arange(sizes[d]) + 100 * d for d in gpt.document_index])
            for j in range(m):
                np.testing.assert_array_equal(gpt.sample(j), stream[j * q : j * q + q + e])
            for i in range(m):
                np.testing.assert_array_equal(gpt[i], gpt.sample(int(gpt.shuffle_index[i])))
    assert separate_seen == {True, False}


def test_determinism_and_seed_dependence(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    ds = write_dataset(tmp_path / "d", [rng.integers(0, 1000, size=int(rng.integers(1, 50))) for _ in range(40)])
    a = GPTDataset(ds, seq_length=16, num_samples=200, seed=42)
    b = GPTDataset(ds, seq_length=16, num_samples=200, seed=42)
    c = GPTDataset(ds, seq_length=16, num_samples=200, seed=43)
    np.testing.assert_array_equal(a.document_index, b.document_index)
    np.testing.assert_array_equal(a.shuffle_index, b.shuffle_index)
    np.testing.assert_array_equal(np.stack([a[i] for i in range(20)]), np.stack([b[i] for i in range(20)]))
    assert not np.array_equal(a.document_index, c.document_index)
    assert not np.array_equal(a.shuffle_index, c.shuffle_index)


def test_cache_hit_reuses_npy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    ds = write_dataset(tmp_path / "k", [rng.integers(0, 500, size=int(rng.integers(0, 30))) for _ in range(25)])
    cache = tmp_path / "cache"
    first = GPTDataset(ds, seq_length=8, num_samples=90, seed=9, cache_dir=cache)
    assert not first.loaded_from_cache
    paths = first.cache_paths
    assert paths is not None and all(p.is_file() and p.parent == cache for p in paths.values())
    assert not any(p.name.endswith(".tmp") for p in cache.iterdir())

    def no_build(self: GPTDataset) -> None:
        raise AssertionError("index arrays rebuilt despite a cache hit")

    monkeypatch.setattr(GPTDataset, "_build", no_build)
    second = GPTDataset(IndexedDataset(tmp_path / "k"), seq_length=8, num_samples=90, seed=9, cache_dir=cache)
    assert second.loaded_from_cache and second.cache_paths == paths
    for name in ("document_index", "sample_index", "shuffle_index"):
        np.testing.assert_array_equal(getattr(second, name), getattr(first, name))
        assert getattr(second, name).dtype == getattr(first, name).dtype
        np.testing.assert_array_equal(np.load(paths[name]), getattr(first, name))
    np.testing.assert_array_equal(second[3], first[3])
    monkeypatch.undo()

    other_seed = GPTDataset(ds, seq_length=8, num_samples=90, seed=10, cache_dir=cache)
    assert not other_seed.loaded_from_cache and other_seed.cache_paths != paths
    unshuffled = GPTDataset(ds, seq_length=8, num_samples=90, seed=9, shuffle=False, cache_dir=cache)
    assert not unshuffled.loaded_from_cache
    # Same path, different contents: the sizes hash changes the key.
    write_dataset(tmp_path / "k", [[1, 2, 3]] * 30)
    changed = GPTDataset(IndexedDataset(tmp_path / "k"), seq_length=8, num_samples=90, seed=9, cache_dir=cache)
    assert not changed.loaded_from_cache and changed.cache_paths != paths


def test_vocabulary_check_reads_every_token_once(tmp_path: Path) -> None:
    # 200 sequences: a bad token where a check of 64 spread sequences (the old one) never looked
    docs = [np.arange(5) + d % 50 for d in range(200)]
    docs[1] = np.array([3, 4, 70, 5])
    ds = write_dataset(tmp_path / "d", docs, "int32")
    cache = tmp_path / "cache"
    assert ds.token_range(cache) == (0, 70)
    with pytest.raises(ValueError, match=r"d\.bin: token 70 at position 7 \(sequence 1, offset 2\) is outside the "
                                         r"vocabulary of 60 ids \(0 to 59\)"):
        ds.check_vocabulary(60, cache)
    ds.check_vocabulary(71, cache)
    (entry,) = cache.glob("*-tokens.json")
    # the second open reads the cached range: no scan of the .bin
    again = IndexedDataset(tmp_path / "d")
    again._tokens = None  # type: ignore[assignment]  # (a scan would fail)
    assert again.token_range(cache) == (0, 70)
    # an edited entry fails verification: a warning, a fresh scan, the right answer
    entry.write_bytes(entry.read_bytes().replace(b'"max_token": 70', b'"max_token": 10'))
    with pytest.warns(UserWarning, match="corrupt or unreadable"):
        assert IndexedDataset(tmp_path / "d").token_range(cache) == (0, 70)
    # a rewritten dataset (another size/mtime/index) is scanned again
    docs[1] = np.array([3, -2, 5])
    ds = write_dataset(tmp_path / "d", docs, "int32")
    with pytest.raises(ValueError, match=r"token -2 at position 6 \(sequence 1, offset 1\)"):
        ds.check_vocabulary(71, cache)
    assert write_dataset(tmp_path / "empty", []).token_range(cache) == (0, -1)


def test_gpt_dataset_errors(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "e", [[1, 2, 3]])
    with pytest.raises(ValueError, match="seq_length must be >= 1, got 0"):
        GPTDataset(ds, seq_length=0, num_samples=1, seed=0)
    with pytest.raises(ValueError, match="num_samples must be >= 1, got 0"):
        GPTDataset(ds, seq_length=2, num_samples=0, seed=0)
    with pytest.raises(TypeError, match="dataset must be an IndexedDataset"):
        GPTDataset([1, 2, 3], seq_length=2, num_samples=1, seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"is empty \(2 sequences, 0 tokens\)"):
        GPTDataset(write_dataset(tmp_path / "z", [[], []]), seq_length=2, num_samples=1, seed=0)
    with pytest.raises(ValueError, match=r"is empty \(0 sequences, 0 tokens\)"):
        GPTDataset(write_dataset(tmp_path / "n", []), seq_length=2, num_samples=1, seed=0)
    gpt = GPTDataset(ds, seq_length=2, num_samples=1, seed=0)
    with pytest.raises(IndexError, match="out of range"):
        gpt[len(gpt)]


def test_batches_resume_equals_uninterrupted_tail(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    ds = write_dataset(tmp_path / "b", [rng.integers(0, 999, size=int(rng.integers(1, 20))) for _ in range(30)])
    gpt = GPTDataset(ds, seq_length=6, num_samples=20, seed=1)
    size = 4
    full = list(itertools.islice(batches(gpt, size), 3 * len(gpt) // size))
    assert all(batch.shape == (size, 7) and batch.dtype == np.int64 for batch in full)
    np.testing.assert_array_equal(full[0], np.stack([gpt[i] for i in range(size)]))
    resumed = list(itertools.islice(batches(gpt, size, start_sample=5 * size), len(full) - 5))
    for a, b in zip(full[5:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    # Past len() the order wraps around: item k is item k mod len.
    k = len(gpt) + 3
    batch = next(batches(gpt, 2, start_sample=k))
    np.testing.assert_array_equal(batch, np.stack([gpt[3], gpt[4]]))
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        batches(gpt, 0)
    with pytest.raises(ValueError, match="start_sample must be >= 0, got -1"):
        batches(gpt, 2, start_sample=-1)


# ---------------------------------------------------------------------------------------------------------------
# preprocess


class WhitespaceTokenizer:
    """Each whitespace-separated word is its own integer id."""

    def __init__(self, vocab_size: int = 1000) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [int(word) for word in text.split()]


def _make_corpus(root: Path) -> list[str]:
    """Writes jsonl, jsonl.gz, txt and a nested directory; returns the documents in iteration order."""
    (root / "a.jsonl").write_text(
        "\n".join(json.dumps({"text": t, "url": "u"}) for t in ["1 2 3", "4 5", "", "6"]) + "\n"
    )
    with gzip.open(root / "b.json.gz", "wt") as f:
        for t in ["7 8", "9 10 11", "12"]:
            f.write(json.dumps({"text": t, "timestamp": "t"}) + "\n")
    (root / "c.txt").write_text("13 14\n15")
    nested = root / "dir" / "sub"
    nested.mkdir(parents=True)
    (root / "dir" / "z.txt").write_text("16")
    (nested / "y.jsonl").write_text(json.dumps({"text": "17 18"}) + "\n\n" + json.dumps({"text": "19"}) + "\n")
    # Directory files come in sorted path order: dir/sub/y.jsonl before dir/z.txt.
    return ["1 2 3", "4 5", "", "6", "7 8", "9 10 11", "12", "13 14\n15", "17 18", "19", "16"]


def test_iter_documents_formats_and_order(tmp_path: Path) -> None:
    expected = _make_corpus(tmp_path)
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.json.gz", tmp_path / "c.txt", tmp_path / "dir"]
    assert list(iter_documents(inputs)) == expected
    with pytest.raises(FileNotFoundError, match=r"input .*missing\.jsonl not found"):
        iter_documents([tmp_path / "missing.jsonl"])
    with pytest.raises(TypeError, match="expected a sequence of paths"):
        iter_documents(str(tmp_path / "a.jsonl"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"bad\.jsonl:2: invalid JSON"),
        ('{"body": "x"}', r"bad\.jsonl:2: missing key 'text'"),
        ('["x"]', r"bad\.jsonl:2: expected a JSON object"),
        ('{"text": 5}', r"bad\.jsonl:2: 'text' must be a string"),
    ],
)
def test_bad_jsonl_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text('{"text": "1"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        list(iter_documents([tmp_path / "bad.jsonl"]))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=message):
        preprocess([tmp_path / "bad.jsonl"], out / "c4", WhitespaceTokenizer(), progress=False)
    assert list(out.iterdir()) == []


def test_preprocess_splits_and_contents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _make_corpus(corpus)
    inputs = [corpus / "a.jsonl", corpus / "b.json.gz", corpus / "c.txt", corpus / "dir"]
    words = [[int(w) for w in d.split()] for d in iter_documents(inputs)]
    non_empty = [w for w in words if w]
    assert len(non_empty) == 10

    result = preprocess(inputs, tmp_path / "out" / "c4", WhitespaceTokenizer(), progress=False)
    assert isinstance(result, PreprocessResult)
    assert result == PreprocessResult(
        train_prefix=tmp_path / "out" / "c4_train_text_document",
        validation_prefix=None,
        documents=10,
        tokens=19,
        validation_documents=0,
        validation_tokens=0,
        skipped_documents=1,
    )
    train = IndexedDataset(result.train_prefix)
    assert train.dtype == np.uint16
    assert [train[i].tolist() for i in range(len(train))] == non_empty
    assert capsys.readouterr().err == ""

    split = preprocess(inputs, tmp_path / "s", WhitespaceTokenizer(vocab_size=128256), validation_fraction=0.25)
    assert "preprocess" in capsys.readouterr().err  # the tqdm bar went to stderr
    assert (split.documents, split.validation_documents) == (8, 2)
    assert split.validation_prefix == tmp_path / "s_validation_text_document"
    validation, train = IndexedDataset(split.validation_prefix), IndexedDataset(split.train_prefix)
    assert validation.dtype == np.int32 and train.dtype == np.int32
    assert [validation[i].tolist() for i in range(len(validation))] == [non_empty[3], non_empty[7]]
    assert [train[i].tolist() for i in range(len(train))] == [w for k, w in enumerate(non_empty) if k % 4 != 3]
    assert split.tokens + split.validation_tokens == 19

    first = preprocess(inputs, tmp_path / "f", WhitespaceTokenizer(), validation_documents=3, progress=False)
    assert (first.documents, first.validation_documents, first.validation_tokens) == (7, 3, 6)
    assert [IndexedDataset(first.validation_prefix)[i].tolist() for i in range(3)] == non_empty[:3]  # type: ignore[arg-type]


def test_preprocess_argument_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1 70000")
    with pytest.raises(ValueError, match=r"validation_fraction must be in \[0, 0.5\], got 0.9"):
        preprocess([tmp_path / "a.txt"], tmp_path / "o", WhitespaceTokenizer(), validation_fraction=0.9)
    with pytest.raises(ValueError, match="not both"):
        preprocess(
            [tmp_path / "a.txt"], tmp_path / "o", WhitespaceTokenizer(), validation_fraction=0.1, validation_documents=2
        )
    with pytest.raises(TypeError, match="encode"):
        preprocess([tmp_path / "a.txt"], tmp_path / "o", object())  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="not found"):
        preprocess([tmp_path / "nope.txt"], tmp_path / "o", WhitespaceTokenizer())
    with pytest.raises(ValueError, match="do not fit dtype uint16"):
        preprocess([tmp_path / "a.txt"], tmp_path / "o", WhitespaceTokenizer(), progress=False)
    # Nothing was written by the failing calls.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
