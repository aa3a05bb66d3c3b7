"""Megatron ``.bin``/``.idx`` indexed datasets and Megatron-exact GPT sample construction.

The on-disk format is Megatron-core's ``MMIDIDX`` version 1 (the one NeMo's ``preprocess_data_for_megatron.py``
writes and the MLPerf ``llama31_8b`` reference reads); ``GPTDataset`` rebuilds core_r0.11's document, sample and
shuffle indices bit for bit, so the same seed gives the reference's data order.

Example::

    with IndexedDatasetWriter("/data/c4_train", best_token_dtype(128_256)) as writer:
        writer.add_document([128000, 791, 4062])
    train = GPTDataset(IndexedDataset("/data/c4_train"), seq_length=8192, num_samples=1024, seed=1234)
    for batch in batches(train, batch_size=32, start_sample=consumed_samples):
        ...  # batch: (32, 8193) int64, inputs batch[:, :-1], labels batch[:, 1:]
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import struct
import warnings
import weakref
from array import array
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ember.tensor import files

__all__ = [
    "DTYPE_CODES",
    "DatasetFormatError",
    "GPTDataset",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "batches",
    "best_token_dtype",
    "dtype_code",
]

_MAGIC = b"MMIDIDX\x00\x00"
_VERSION = 1
# magic, version (u64), dtype code (u8), sequence count (u64), document count (u64): 34 bytes, no padding.
_HEADER = struct.Struct("<9sQBQQ")
_HEADER_SIZE = _HEADER.size
_INT32_MAX = int(np.iinfo(np.int32).max)
# Rows per step when scanning index arrays, so a 45 M-sequence corpus never needs full-size temporaries.
_CHUNK = 1 << 22
_TOKEN_CHUNK = 1 << 24  # tokens per step of a scan of the .bin

# Megatron-core's DType enum (indexed_dataset.py): code -> little-endian numpy dtype.
DTYPE_CODES: dict[int, np.dtype[Any]] = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}


class DatasetFormatError(ValueError):
    """A ``.bin``/``.idx`` pair is malformed; the message names the file and the problem."""


def best_token_dtype(vocab_size: int) -> np.dtype[Any]:
    """The token dtype Megatron/NeMo pick for a vocabulary: uint16 if ``vocab_size < 65500`` else int32.

    >>> best_token_dtype(32000), best_token_dtype(128256)
    (dtype('uint16'), dtype('int32'))
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise TypeError(f"best_token_dtype: vocab_size must be an int, got {type(vocab_size).__name__}")
    if vocab_size < 1:
        raise ValueError(f"best_token_dtype: vocab_size must be >= 1, got {vocab_size}")
    return np.dtype("<u2") if vocab_size < 65500 else np.dtype("<i4")


def dtype_code(dtype: DTypeLike) -> int:
    """The Megatron ``.idx`` dtype code of ``dtype`` (4 for int32, 8 for uint16, ...); TypeError if it has none."""
    try:
        wanted = np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"dtype_code: {dtype!r} is not a numpy dtype") from err
    for code, candidate in DTYPE_CODES.items():
        if wanted.kind == candidate.kind and wanted.itemsize == candidate.itemsize:
            return code
    accepted = ", ".join(f"{code}={dt.name}" for code, dt in DTYPE_CODES.items())
    raise TypeError(f"dtype_code: dtype {wanted} has no Megatron code (accepted: {accepted})")


def _paths(prefix: str | Path) -> tuple[Path, Path]:
    if not isinstance(prefix, str | os.PathLike):
        raise TypeError(f"prefix must be a str or Path, got {type(prefix).__name__}")
    base = os.fspath(prefix)
    return Path(base + ".idx"), Path(base + ".bin")


def _check_int(owner: str, name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _remove_quietly(*paths: str | Path) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class IndexedDatasetWriter:
    """Streams documents into a Megatron ``<prefix>.bin`` / ``<prefix>.idx`` pair (one sequence per document).

    Tokens go to a temporary ``.bin`` in the target directory as they arrive; :meth:`finalize` (or leaving the
    ``with`` block cleanly) writes the ``.idx`` and moves both into place (``ember.uops.files``). An exception in
    the ``with`` block (or :meth:`abort`) deletes the temporaries and leaves no output.

    >>> with IndexedDatasetWriter(tmp / "docs", "uint16") as w:  # doctest: +SKIP
    ...     w.add_document([5, 6, 7])
    """

    def __init__(self, prefix: str | Path, dtype: DTypeLike) -> None:
        self._idx_path, self._bin_path = _paths(prefix)
        self._prefix = Path(prefix)
        code = dtype_code(dtype)
        self._code = code
        self._dtype = DTYPE_CODES[code]
        directory = self._bin_path.parent
        if not directory.is_dir():
            raise FileNotFoundError(f"IndexedDatasetWriter: output directory {directory} does not exist")
        fd, self._tmp_bin = files.make_temp(self._bin_path)
        self._bin_file = os.fdopen(fd, "wb")
        self._lengths = array("i")  # int32, as stored in the .idx
        self._num_tokens = 0
        self._closed = False
        # Removes the temporary .bin if the writer is dropped without finalize/abort.
        self._cleanup = weakref.finalize(self, _close_and_remove, self._bin_file, self._tmp_bin)

    @property
    def prefix(self) -> Path:
        """The output prefix (files ``<prefix>.bin`` and ``<prefix>.idx``)."""
        return self._prefix

    @property
    def dtype(self) -> np.dtype[Any]:
        """Token dtype of the ``.bin``."""
        return self._dtype

    @property
    def num_documents(self) -> int:
        """Documents (= sequences) added so far."""
        return len(self._lengths)

    @property
    def num_tokens(self) -> int:
        """Tokens added so far."""
        return self._num_tokens

    def add_document(self, tokens: ArrayLike) -> None:
        """Append one document as one sequence; every value must be representable in the writer's dtype."""
        if self._closed:
            raise ValueError(f"IndexedDatasetWriter({self._prefix}): add_document after finalize/abort")
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"add_document: tokens must be 1-D, got shape {arr.shape}")
        if arr.size == 0:
            arr = np.empty(0, self._dtype)
        accepted_kinds = "iub" if self._dtype.kind in "iu" else "iubf"
        if arr.dtype.kind not in accepted_kinds:
            raise TypeError(f"add_document: tokens must be integers for dtype {self._dtype}, got dtype {arr.dtype}")
        if arr.size and self._dtype.kind in "iu":
            info = np.iinfo(self._dtype)
            low, high = int(arr.min()), int(arr.max())
            if low < info.min or high > info.max:
                raise ValueError(
                    f"add_document: token values [{low}, {high}] do not fit dtype {self._dtype} "
                    f"(range [{info.min}, {info.max}])"
                )
        if arr.size > _INT32_MAX:
            raise ValueError(f"add_document: document of {arr.size} tokens exceeds the int32 length field")
        self._bin_file.write(arr.astype(self._dtype, copy=False).tobytes())
        self._lengths.append(arr.size)
        self._num_tokens += arr.size

    def finalize(self) -> Path:
        """Write the ``.idx`` and atomically move ``.bin`` then ``.idx`` into place; returns the prefix."""
        if self._closed:
            raise ValueError(f"IndexedDatasetWriter({self._prefix}): finalize after finalize/abort")
        self._closed = True
        try:
            self._bin_file.flush()
            os.fsync(self._bin_file.fileno())
            self._bin_file.close()
            lengths = np.frombuffer(self._lengths, dtype=np.int32) if self._lengths else np.empty(0, np.int32)
            count = lengths.size
            byte_sizes = lengths.astype(np.int64) * self._dtype.itemsize
            pointers = np.cumsum(byte_sizes) - byte_sizes
            document_indices = np.arange(count + 1, dtype=np.int64)
            index = b"".join((_HEADER.pack(_MAGIC, _VERSION, self._code, count, document_indices.size),
                              lengths.astype("<i4").tobytes(), pointers.astype("<i8").tobytes(),
                              document_indices.astype("<i8").tobytes()))
            files.replace_atomic(self._tmp_bin, self._bin_path)  # the .bin first: a reader opens the .idx
            files.atomic_write(self._idx_path, index)
        except BaseException:
            _remove_quietly(self._tmp_bin)
            raise
        finally:
            self._cleanup.detach()
        return self._prefix

    def abort(self) -> None:
        """Discard everything written so far; no output files appear."""
        if self._closed:
            return
        self._closed = True
        self._cleanup()

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.finalize()


def _close_and_remove(file: Any, path: str | Path) -> None:
    file.close()
    _remove_quietly(path)


class IndexedDataset:
    """Read-only, memory-mapped view of a Megatron ``<prefix>.idx`` / ``<prefix>.bin`` pair.

    The header and every index array are validated on open (DatasetFormatError naming the file and the
    problem). ``ds[i]`` is the token array of sequence ``i`` (a read-only view into the mapped ``.bin``).
    """

    def __init__(self, prefix: str | Path) -> None:
        self._idx_path, self._bin_path = _paths(prefix)
        self._prefix = Path(prefix)
        for path in (self._idx_path, self._bin_path):
            if not path.is_file():
                raise FileNotFoundError(f"IndexedDataset: {path} not found")
        idx_size = self._idx_path.stat().st_size
        idx = self._idx_path
        if idx_size < _HEADER_SIZE:
            raise DatasetFormatError(
                f"{idx}: truncated header: file is {idx_size} bytes, the header needs {_HEADER_SIZE}"
            )
        with open(idx, "rb") as f:
            magic, version, code, seq_count, doc_count = _HEADER.unpack(f.read(_HEADER_SIZE))
        if magic != _MAGIC:
            raise DatasetFormatError(f"{idx}: bad magic {magic!r}, expected {_MAGIC!r} (not a Megatron .idx file)")
        if version != _VERSION:
            raise DatasetFormatError(f"{idx}: unsupported version {version}, only version {_VERSION} is supported")
        if code not in DTYPE_CODES:
            raise DatasetFormatError(f"{idx}: unknown dtype code {code}, known codes are {sorted(DTYPE_CODES)}")
        expected_size = _HEADER_SIZE + 12 * seq_count + 8 * doc_count
        if idx_size != expected_size:
            raise DatasetFormatError(
                f"{idx}: file size {idx_size} bytes != 34 + 12*S + 8*D = {expected_size} "
                f"for S={seq_count} sequences, D={doc_count} document indices (truncated or trailing data)"
            )
        if doc_count < 1:
            raise DatasetFormatError(f"{idx}: inconsistent counts: document count is 0, needs at least 1")
        self._dtype = DTYPE_CODES[code]
        self._idx_map = np.memmap(idx, dtype=np.uint8, mode="r")
        offset = _HEADER_SIZE
        self._lengths = np.frombuffer(self._idx_map, dtype="<i4", count=seq_count, offset=offset)
        offset += 4 * seq_count
        self._pointers = np.frombuffer(self._idx_map, dtype="<i8", count=seq_count, offset=offset)
        offset += 8 * seq_count
        self._document_indices = np.frombuffer(self._idx_map, dtype="<i8", count=doc_count, offset=offset)
        bin_bytes = self._validate_index()
        bin_size = self._bin_path.stat().st_size
        if bin_size != bin_bytes:
            raise DatasetFormatError(
                f"{self._bin_path}: size {bin_size} bytes != {bin_bytes} bytes described by {idx} "
                f"({'truncated' if bin_size < bin_bytes else 'trailing data'})"
            )
        self._tokens: np.ndarray[Any, Any]
        if bin_size == 0:
            self._tokens = np.empty(0, self._dtype)
        else:
            self._tokens = np.memmap(self._bin_path, dtype=self._dtype, mode="r")
        self._num_tokens = bin_bytes // self._dtype.itemsize

    def _validate_index(self) -> int:
        """Checks lengths, document indices and pointers; returns the .bin size they describe."""
        idx, lengths, docs = self._idx_path, self._lengths, self._document_indices
        count = lengths.size
        if docs[-1] != count:
            raise DatasetFormatError(
                f"{idx}: inconsistent counts: {count} sequence lengths but document_indices[-1] = {docs[-1]}"
            )
        if docs[0] != 0:
            raise DatasetFormatError(f"{idx}: document_indices must start at 0, got {docs[0]}")
        if docs.size > 1 and bool(np.any(np.diff(docs) < 0)):
            at = int(np.flatnonzero(np.diff(docs) < 0)[0])
            raise DatasetFormatError(
                f"{idx}: non-monotonic document indices: document_indices[{at + 1}] = {docs[at + 1]} "
                f"< document_indices[{at}] = {docs[at]}"
            )
        itemsize = self._dtype.itemsize
        running = 0
        for start in range(0, count, _CHUNK):
            chunk_lengths = lengths[start : start + _CHUNK].astype(np.int64)
            if chunk_lengths.min() < 0:
                at = start + int(np.flatnonzero(chunk_lengths < 0)[0])
                raise DatasetFormatError(f"{idx}: negative lengths: sequence_lengths[{at}] = {lengths[at]}")
            byte_sizes = chunk_lengths * itemsize
            expected = running + np.cumsum(byte_sizes) - byte_sizes
            bad = np.flatnonzero(self._pointers[start : start + _CHUNK] != expected)
            if bad.size:
                at = start + int(bad[0])
                raise DatasetFormatError(
                    f"{idx}: pointers not consistent with lengths: sequence_pointers[{at}] = {self._pointers[at]}, "
                    f"the lengths before it give byte offset {expected[bad[0]]}"
                )
            running = int(expected[-1] + byte_sizes[-1])
        return running

    @property
    def prefix(self) -> Path:
        """The path prefix this dataset was opened from."""
        return self._prefix

    @property
    def dtype(self) -> np.dtype[Any]:
        """Token dtype of the ``.bin``."""
        return self._dtype

    @property
    def sequence_lengths(self) -> np.ndarray[Any, np.dtype[np.int32]]:
        """Tokens per sequence, int32, read-only (memory-mapped)."""
        return self._lengths

    @property
    def sequence_pointers(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Byte offset of each sequence in the ``.bin``, int64, read-only."""
        return self._pointers

    @property
    def document_indices(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """0 then the sequence index ending each document (last entry == ``len(self)``), int64, read-only."""
        return self._document_indices

    @property
    def num_tokens(self) -> int:
        """Total tokens over all sequences."""
        return self._num_tokens

    def __len__(self) -> int:
        return int(self._lengths.size)

    def _sequence(self, i: object) -> int:
        try:
            index = operator.index(i)  # type: ignore[arg-type]
        except TypeError as err:
            raise TypeError(f"IndexedDataset: index must be an int, got {type(i).__name__}") from err
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"IndexedDataset: sequence {index} out of range for {count} sequences")
        return index + count if index < 0 else index

    def __getitem__(self, i: int) -> np.ndarray[Any, Any]:
        """Tokens of sequence ``i``."""
        return self.get(i)

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray[Any, Any]:
        """Tokens ``[offset, offset + length)`` of sequence ``i`` (``length=None``: to the end)."""
        index = self._sequence(i)
        size = int(self._lengths[index])
        offset = _check_int("IndexedDataset.get", "offset", offset, 0)
        if offset > size:
            raise ValueError(f"IndexedDataset.get: offset {offset} beyond sequence {index} of length {size}")
        if length is None:
            length = size - offset
        length = _check_int("IndexedDataset.get", "length", length, 0)
        if offset + length > size:
            raise ValueError(
                f"IndexedDataset.get: offset {offset} + length {length} beyond sequence {index} of length {size}"
            )
        start = int(self._pointers[index]) // self._dtype.itemsize + offset
        return np.asarray(self._tokens[start : start + length])

    def token_range(self, cache_dir: str | Path | None = None) -> tuple[int, int]:
        """(smallest, largest) token of the whole ``.bin``, or (0, -1) when it holds none. A full scan, done once:
        with ``cache_dir`` the result is cached as a verified entry (ember.uops.files) keyed by the ``.bin``'s path,
        size and mtime and the ``.idx``'s sha256, so a changed dataset is scanned again."""
        if self._num_tokens == 0:
            return (0, -1)
        stat = self._bin_path.stat()
        idx_sha = hashlib.sha256(np.ascontiguousarray(self._idx_map).data).hexdigest()
        key = json.dumps({"class": "token_range", "format": 1, "bin": os.path.abspath(self._bin_path),
                          "bin_size": stat.st_size, "bin_mtime_ns": stat.st_mtime_ns, "idx_sha256": idx_sha},
                         sort_keys=True)
        path = Path(cache_dir) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}-tokens.json" if cache_dir else None
        if path is not None and (entry := files.read_entry(path, key)) is not None:
            try:
                stored = json.loads(entry.payload)
                return int(stored["min_token"]), int(stored["max_token"])
            except (KeyError, TypeError, ValueError):
                warnings.warn(f"IndexedDataset: the cached token range {path} is malformed; scanning again",
                              stacklevel=2)
        lo, hi = None, None
        for start in range(0, self._num_tokens, _TOKEN_CHUNK):
            chunk = self._tokens[start : start + _TOKEN_CHUNK]
            c_lo, c_hi = int(chunk.min()), int(chunk.max())
            lo, hi = c_lo if lo is None else min(lo, c_lo), c_hi if hi is None else max(hi, c_hi)
        assert lo is not None and hi is not None
        if path is not None and GPTDataset._usable_cache_dir(path.parent):
            files.write_entry(path, key, json.dumps({"min_token": lo, "max_token": hi}, sort_keys=True).encode())
        return lo, hi

    def check_vocabulary(self, vocab_size: int, cache_dir: str | Path | None = None) -> None:
        """ValueError (one line naming the ``.bin``, the position, the token and the vocabulary size) unless every
        token is in ``[0, vocab_size)``. Reads every token once per dataset version (``token_range``'s cache)."""
        lo, hi = self.token_range(cache_dir)
        if lo >= 0 and hi < vocab_size:
            return
        for start in range(0, self._num_tokens, _TOKEN_CHUNK):  # the first bad token (only on the way to an error)
            chunk = np.asarray(self._tokens[start : start + _TOKEN_CHUNK]).astype(np.int64)
            if (bad := np.flatnonzero((chunk < 0) | (chunk >= vocab_size))).size:
                position = start + int(bad[0])
                sequence = int(np.searchsorted(self._pointers // self._dtype.itemsize, position, side="right")) - 1
                offset = position - int(self._pointers[sequence]) // self._dtype.itemsize
                raise ValueError(f"{self._bin_path}: token {int(chunk[bad[0]])} at position {position} (sequence "
                                 f"{sequence}, offset {offset}) is outside the vocabulary of {vocab_size} ids "
                                 f"(0 to {vocab_size - 1}); use the tokenizer/preset the data was made with")
        raise AssertionError(f"token_range of {self._bin_path} said [{lo}, {hi}], the scan found no bad token")

    def __repr__(self) -> str:
        return f"IndexedDataset({str(self._prefix)!r}, sequences={len(self)}, tokens={self._num_tokens})"


def _num_epochs(tokens_per_epoch: int, num_samples: int, seq_length: int, extra: int) -> int:
    """Smallest E >= 1 with E * T >= N * Q + e (Megatron ``_get_num_epochs``)."""
    needed = num_samples * seq_length + extra
    return max(1, -(-needed // tokens_per_epoch))


def _document_index(num_sequences: int, num_epochs: int, rng: np.random.RandomState | None) -> np.ndarray:
    # E copies of 0..S-1, one shuffle over the whole array (np.tile equals Megatron's mgrid form, with less memory).
    index = np.tile(np.arange(num_sequences, dtype=np.int32), num_epochs)
    if rng is not None:
        rng.shuffle(index)
    return index


def _shuffle_index(num_samples: int, total: int, rng: np.random.RandomState | None) -> np.ndarray:
    dtype = np.uint32 if total < int(np.iinfo(np.uint32).max) - 1 else np.int64
    first = np.arange(num_samples, dtype=dtype)
    if rng is not None:
        rng.shuffle(first)
    if num_samples == total:
        return first
    last = np.arange(num_samples, total, dtype=dtype)
    if rng is not None:
        rng.shuffle(last)
    return np.concatenate((first, last))


def _sample_index(
    sizes: np.ndarray, document_index: np.ndarray, seq_length: int, extra: int, num_samples: int
) -> np.ndarray:
    """helpers.cpp ``build_sample_idx`` with drop_last, via the stream view: row j locates token j*Q.

    Row j (j >= 1) is the (position in document_index, offset) of the document holding the last token of
    sample j-1, i.e. the first document whose end in the concatenated stream is >= j*Q + e.
    """
    widest = max(document_index.size, int(sizes.max()) if sizes.size else 0)
    dtype = np.int32 if widest <= _INT32_MAX else np.int64
    out = np.zeros((num_samples + 1, 2), dtype=dtype)
    next_row = 1
    base = 0  # tokens in the stream before the current chunk
    for start in range(0, document_index.size, _CHUNK):
        if next_row > num_samples:
            break
        lengths = sizes[document_index[start : start + _CHUNK]].astype(np.int64)
        ends = base + np.cumsum(lengths)
        chunk_end = int(ends[-1])
        last_row = min(num_samples, (chunk_end - extra) // seq_length)
        if last_row >= next_row:
            boundary = np.arange(next_row, last_row + 1, dtype=np.int64) * seq_length
            position = np.searchsorted(ends, boundary + extra, side="left")
            out[next_row : last_row + 1, 0] = start + position
            out[next_row : last_row + 1, 1] = boundary - (ends[position] - lengths[position])
            next_row = last_row + 1
        base = chunk_end
    assert next_row == num_samples + 1, f"sample index: built {next_row - 1} of {num_samples} rows"
    return out


def _sha256(a: np.ndarray) -> str:
    h = hashlib.sha256(f"{a.dtype.str} {a.shape}".encode())
    h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def _atomic_save(path: Path, array_: np.ndarray) -> None:
    with files.atomic_open(path, "wb") as f:
        np.save(f, array_, allow_pickle=False)


class GPTDataset:
    """Fixed-length GPT samples over an :class:`IndexedDataset`, built exactly like Megatron-core r0.11.

    Sequences are concatenated (no separator) in ``document_index`` order: E epochs of all sequences, shuffled
    jointly by one ``np.random.RandomState(seed)`` (which then shuffles the sample order too), with Megatron's
    ``separate_final_epoch`` rule. Sample ``j`` is ``stream[j*Q : j*Q + Q + e]`` with ``e = add_extra_token``;
    item ``i`` is sample ``shuffle_index[i]``. ``shuffle=False`` keeps documents and samples in file order
    (the validation setting). ``len()`` is M = (E*T - e) // Q, every sample the E epochs give (>= num_samples).

    With ``cache_dir`` the three index arrays are saved there as ``.npy`` (atomically) and reused by later
    constructions with the same dataset contents and arguments.
    """

    def __init__(
        self,
        dataset: IndexedDataset,
        seq_length: int,
        num_samples: int,
        seed: int,
        shuffle: bool = True,
        add_extra_token: bool = True,
        cache_dir: str | Path | None = None,
    ) -> None:
        if not isinstance(dataset, IndexedDataset):
            raise TypeError(f"GPTDataset: dataset must be an IndexedDataset, got {type(dataset).__name__}")
        self._dataset = dataset
        self._seq_length = _check_int("GPTDataset", "seq_length", seq_length, 1)
        self._num_samples = _check_int("GPTDataset", "num_samples", num_samples, 1)
        self._seed = _check_int("GPTDataset", "seed", seed, 0)
        if self._seed > 2**32 - 1:
            raise ValueError(f"GPTDataset: seed must be < 2**32 (numpy RandomState), got {seed}")
        self._shuffle = bool(shuffle)
        self._extra = int(bool(add_extra_token))
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise TypeError(f"GPTDataset: cache_dir must be a str, Path or None, got {type(cache_dir).__name__}")
        self._sizes = np.asarray(dataset.sequence_lengths)
        self._tokens_per_epoch = dataset.num_tokens
        if len(dataset) == 0 or self._tokens_per_epoch == 0:
            raise ValueError(
                f"GPTDataset: dataset {dataset.prefix} is empty ({len(dataset)} sequences, "
                f"{self._tokens_per_epoch} tokens)"
            )
        tokens, q, n, e = self._tokens_per_epoch, self._seq_length, self._num_samples, self._extra
        self._num_epochs = _num_epochs(tokens, n, q, e)
        self._separate_final_epoch = False
        self._samples_sans_final_epoch = 0
        if self._num_epochs > 1:
            self._samples_sans_final_epoch = ((self._num_epochs - 1) * tokens - e) // q
            from_final = n - self._samples_sans_final_epoch
            per_epoch = (tokens - e) // q
            assert 0 <= from_final <= per_epoch + 1, "epoch count is not minimal"
            self._separate_final_epoch = from_final < int(0.80 * per_epoch)
        self._total_samples = (self._num_epochs * tokens - e) // q
        self._loaded_from_cache = False
        self._cache_paths: dict[str, Path] | None = None
        if cache_dir is not None and self._usable_cache_dir(Path(cache_dir)):
            self._cache_paths = self._cache_files(Path(cache_dir))
            loaded = self._load_cache(self._cache_paths)
            if loaded is not None:
                self._document_index, self._sample_index, self._shuffle_index = loaded
                self._loaded_from_cache = True
                return
        self._document_index, self._sample_index, self._shuffle_index = self._build()
        if self._cache_paths is not None:
            self._save_cache(self._cache_paths)

    def _build(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        count, epochs = len(self._dataset), self._num_epochs
        rng = np.random.RandomState(self._seed) if self._shuffle else None
        if self._separate_final_epoch:
            document_index = np.concatenate((_document_index(count, epochs - 1, rng), _document_index(count, 1, rng)))
        else:
            document_index = _document_index(count, epochs, rng)
        sample_index = _sample_index(self._sizes, document_index, self._seq_length, self._extra, self._total_samples)
        first = self._samples_sans_final_epoch if self._separate_final_epoch else self._total_samples
        shuffle_index = _shuffle_index(first, self._total_samples, rng)
        return document_index, sample_index, shuffle_index

    def _cache_files(self, cache_dir: Path) -> dict[str, Path]:
        description = {
            "class": "GPTDataset",
            "format": 1,
            "dataset": os.path.abspath(self._dataset.prefix),
            "sizes_sha256": hashlib.sha256(np.ascontiguousarray(self._sizes).data).hexdigest(),
            "seq_length": self._seq_length,
            "num_samples": self._num_samples,
            "seed": self._seed,
            "shuffle": self._shuffle,
            "add_extra_token": bool(self._extra),
        }
        self._description = json.dumps(description, sort_keys=True)
        key = hashlib.sha256(self._description.encode()).hexdigest()[:32]
        return {
            name: cache_dir / f"{key}-gpt-{name}.npy" for name in ("document_index", "sample_index", "shuffle_index")
        }

    @staticmethod
    def _usable_cache_dir(cache_dir: Path) -> bool:
        """Whether `cache_dir` can hold the index cache: made 0700 if missing; a folder another user owns or
        group/others can write is not used (a warning), as ember.uops.files refuses any cache folder."""
        try:
            files.make_private_folder(cache_dir)
        except OSError as e:
            warnings.warn(f"GPTDataset: not using the index cache {cache_dir} ({e}); building the index in memory",
                          stacklevel=3)
            return False
        return True

    def _description_path(self, paths: dict[str, Path]) -> Path:
        return paths["document_index"].with_name(
            paths["document_index"].name.replace("-document_index.npy", "-description.json"))

    def _load_cache(self, paths: dict[str, Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The cached index arrays when they are exactly what this dataset builds: the description (written last)
        names the same arguments and holds each array's sha256, which must match; the values must be in range.
        Anything else (missing, unreadable, edited, zeroed) is a miss, with a warning when files were there."""
        if not all(path.is_file() for path in paths.values()):
            return None
        description_path = self._description_path(paths)
        try:
            stored = json.loads(description_path.read_text())
            arrays = tuple(np.load(paths[name], mmap_mode="r", allow_pickle=False) for name in paths)
        except (OSError, ValueError) as e:  # unreadable (e.g. an interrupted older writer): rebuild and overwrite
            return self._reject(description_path, f"unreadable ({e})")
        if not isinstance(stored, dict) or not isinstance(stored.get("sha256"), dict):
            return self._reject(description_path, "no checksums")
        checksums = stored.pop("sha256")
        if json.dumps(stored, sort_keys=True) != self._description:
            return self._reject(description_path, "written for other arguments")
        document_index, sample_index, shuffle_index = arrays
        expected_shapes = (
            (self._num_epochs * len(self._dataset),),
            (self._total_samples + 1, 2),
            (self._total_samples,),
        )
        if tuple(a.shape for a in arrays) != expected_shapes:
            return self._reject(description_path, f"shapes {[a.shape for a in arrays]}, expected {expected_shapes}")
        for name, a in zip(paths, arrays):
            if checksums.get(name) != _sha256(a):
                return self._reject(paths[name], "its sha256 does not match the one stored with the index")
        if len(document_index) and not 0 <= int(document_index.min()) <= int(document_index.max()) < len(self._dataset):
            return self._reject(paths["document_index"], "sequence ids out of range")
        if not (0 <= int(sample_index[:, 0].min()) and int(sample_index[:, 0].max()) < len(document_index)) or \
                int(sample_index[:, 1].min()) < 0:
            return self._reject(paths["sample_index"], "positions out of range")
        if len(shuffle_index) and not (0 <= int(shuffle_index.min()) and
                                       int(shuffle_index.max()) < self._total_samples):
            return self._reject(paths["shuffle_index"], "sample ids out of range")
        return document_index, sample_index, shuffle_index

    def _reject(self, path: Path, why: str) -> None:
        warnings.warn(f"GPTDataset: the cached index {path} is rejected ({why}); building it again", stacklevel=3)
        return None

    def _save_cache(self, paths: dict[str, Path]) -> None:
        arrays = {
            "document_index": self._document_index,
            "sample_index": self._sample_index,
            "shuffle_index": self._shuffle_index,
        }
        description_path = self._description_path(paths)
        description_path.unlink(missing_ok=True)  # (while the arrays change, no description vouches for them)
        for name, path in paths.items():
            _atomic_save(path, arrays[name])
        stored = json.loads(self._description)
        stored["sha256"] = {name: _sha256(arrays[name]) for name in paths}
        files.atomic_write(description_path, json.dumps(stored, sort_keys=True) + "\n")

    @property
    def dataset(self) -> IndexedDataset:
        """The underlying indexed dataset."""
        return self._dataset

    @property
    def seq_length(self) -> int:
        """Q, tokens per training sequence."""
        return self._seq_length

    @property
    def sample_length(self) -> int:
        """Tokens per item: ``seq_length + 1`` with ``add_extra_token`` (inputs ``x[:-1]``, labels ``x[1:]``)."""
        return self._seq_length + self._extra

    @property
    def num_samples(self) -> int:
        """N, the number of samples requested (``len(self)`` may be larger)."""
        return self._num_samples

    @property
    def tokens_per_epoch(self) -> int:
        """T, tokens in one pass over the dataset."""
        return self._tokens_per_epoch

    @property
    def num_epochs(self) -> int:
        """E, passes over the dataset the indices cover."""
        return self._num_epochs

    @property
    def separate_final_epoch(self) -> bool:
        """Whether the last epoch is shuffled separately (Megatron's < 80 % rule)."""
        return self._separate_final_epoch

    @property
    def document_index(self) -> np.ndarray:
        """Sequence ids in stream order (int32, length E*S)."""
        return self._document_index

    @property
    def sample_index(self) -> np.ndarray:
        """(position in document_index, token offset) of each sample start, shape (M+1, 2)."""
        return self._sample_index

    @property
    def shuffle_index(self) -> np.ndarray:
        """Sample id of each item, length M."""
        return self._shuffle_index

    @property
    def loaded_from_cache(self) -> bool:
        """True when the index arrays were read from ``cache_dir`` instead of built."""
        return self._loaded_from_cache

    @property
    def cache_paths(self) -> dict[str, Path] | None:
        """The ``.npy`` files of the index arrays, or None without ``cache_dir``."""
        return None if self._cache_paths is None else dict(self._cache_paths)

    def __len__(self) -> int:
        return self._total_samples

    def sample(self, j: int) -> np.ndarray:
        """Sample ``j`` in stream order (before shuffling): ``sample_length`` tokens, int64."""
        j = operator.index(j)
        if not 0 <= j < self._total_samples:
            raise IndexError(f"GPTDataset.sample: sample {j} out of range for {self._total_samples} samples")
        begin_pos, begin_offset = (int(v) for v in self._sample_index[j])
        end_pos, end_offset = (int(v) for v in self._sample_index[j + 1])
        out = np.empty(self.sample_length, dtype=np.int64)
        get, docs = self._dataset.get, self._document_index
        if begin_pos == end_pos:
            out[:] = get(int(docs[begin_pos]), begin_offset, end_offset - begin_offset + self._extra)
            return out
        filled = 0
        for pos in range(begin_pos, end_pos + 1):
            offset = begin_offset if pos == begin_pos else 0
            length = end_offset + self._extra if pos == end_pos else None
            part = get(int(docs[pos]), offset, length)
            out[filled : filled + part.size] = part
            filled += part.size
        assert filled == out.size, f"sample {j}: gathered {filled} tokens, expected {out.size}"
        return out

    def __getitem__(self, i: int) -> np.ndarray:
        """Item ``i`` = sample ``shuffle_index[i]``: ``sample_length`` tokens, int64."""
        try:
            index = operator.index(i)
        except TypeError as err:
            raise TypeError(f"GPTDataset: index must be an int, got {type(i).__name__}") from err
        if index < 0:
            index += self._total_samples
        if not 0 <= index < self._total_samples:
            raise IndexError(f"GPTDataset: item {i} out of range for {self._total_samples} items")
        return self.sample(int(self._shuffle_index[index]))

    def __repr__(self) -> str:
        return (
            f"GPTDataset({self._dataset!r}, seq_length={self._seq_length}, items={self._total_samples}, "
            f"epochs={self._num_epochs}, shuffle={self._shuffle})"
        )


def batches(dataset: GPTDataset, batch_size: int, start_sample: int = 0) -> Iterator[np.ndarray]:
    """Endless batches of consecutive items: batch k holds items ``start_sample + k*B ... + B - 1`` (mod len).

    ``start_sample`` is the resume position ("consumed samples"): resuming at ``k*B`` yields exactly the batches
    an uninterrupted run yields from batch k on. Each batch is ``(batch_size, dataset.sample_length)`` int64.
    """
    if not isinstance(dataset, GPTDataset):
        raise TypeError(f"batches: dataset must be a GPTDataset, got {type(dataset).__name__}")
    batch_size = _check_int("batches", "batch_size", batch_size, 1)
    start_sample = _check_int("batches", "start_sample", start_sample, 0)
    return _batches(dataset, batch_size, start_sample)


def _batches(dataset: GPTDataset, batch_size: int, start_sample: int) -> Iterator[np.ndarray]:
    total = len(dataset)
    position = start_sample
    while True:
        batch = np.empty((batch_size, dataset.sample_length), dtype=np.int64)
        for row in range(batch_size):
            batch[row] = dataset[(position + row) % total]
        yield batch
        position += batch_size
