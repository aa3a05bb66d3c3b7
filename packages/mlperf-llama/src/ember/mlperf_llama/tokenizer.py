r"""Tokenizers for the Llama 3 trainer: a pure-Python tiktoken-format BPE, a BPE trainer, a sentencepiece wrapper.

The Llama 3 tokenizer (spec §3.2) is a tiktoken ranks file: one ``<base64 token bytes> <rank>`` line per token,
where the rank is both the token id and the merge priority. :class:`TiktokenTokenizer` reads such a file and encodes
text exactly like ``tiktoken.Encoding`` with the same ranks, pattern and special tokens, plus Meta's chunking of long
inputs. :func:`train_bpe` learns a small table of the same format from text, so CPU presets can use a real BPE
vocabulary without downloading Meta's. :class:`SentencePieceTokenizer` wraps a sentencepiece model (the Mixtral
tokenizer of the 405B benchmark, spec §3.3). :func:`load_tokenizer` picks the right class from a file's content.

Caveat: ``\p{L}``/``\p{N}`` come from the ``regex`` module's Unicode tables, tiktoken's from its Rust regex crate's.
They agree on every character assigned in the Unicode versions both know; recently assigned characters that one of
the two does not know yet can split differently (regex 2026.11 vs tiktoken 0.14: 17,480 code points, all unassigned
in Python 3.11's Unicode 14 database). Real text almost never has them.

Example::

    >>> ranks = train_bpe(["hello hello world"], vocab_size=260)
    >>> tok = TiktokenTokenizer.from_ranks(ranks)
    >>> tok.decode(tok.encode("hello world"))
    'hello world'
"""

from __future__ import annotations

import base64
import binascii
import functools
import heapq
import os
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import regex  # type: ignore[import-untyped,unused-ignore]

from ember.tensor import files

__all__ = [
    "LLAMA3_PATTERN",
    "MAX_NO_WHITESPACE_CHARS",
    "SentencePieceTokenizer",
    "TIKTOKEN_MAX_ENCODE_CHARS",
    "TiktokenTokenizer",
    "llama3_special_tokens",
    "load_tokenizer",
    "train_bpe",
]

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""The Llama 3 pre-tokenizer regex (spec §3.2); it needs the ``regex`` module for ``\\p{L}``/``\\p{N}``."""

TIKTOKEN_MAX_ENCODE_CHARS = 400_000
"""Meta's wrapper encodes text in chunks of at most this many characters."""

MAX_NO_WHITESPACE_CHARS = 25_000
"""Meta's wrapper cuts runs of whitespace or of non-whitespace longer than this many characters."""

NUM_LLAMA3_SPECIAL_TOKENS = 256

_LLAMA31_NAMED_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)
_BOS_NAME = "<|begin_of_text|>"
_EOS_NAME = "<|end_of_text|>"

# Pieces longer than this (in bytes) are merged with a heap (O(n log n)) instead of the O(n^2) list scan.
_HEAP_MERGE_MIN_BYTES = 128
_PIECE_CACHE_MAX = 200_000
# Runs of whitespace / non-whitespace as str.isspace() sees them (the `re` module's \s), as Meta's wrapper uses.
_WHITESPACE_RUNS = re.compile(r"\s+|\S+")
_TIKTOKEN_LINE = re.compile(rb"[A-Za-z0-9+/]+={0,2}[ \t]+[0-9]+")


def llama3_special_tokens(num_base: int) -> dict[str, int]:
    """The 256 Llama 3.1 special tokens with ids ``num_base .. num_base + 255`` (spec §3.2, HF Llama-3.1 naming).

    >>> llama3_special_tokens(128000)["<|eot_id|>"]
    128009
    """
    if isinstance(num_base, bool) or not isinstance(num_base, int):
        raise TypeError(f"llama3_special_tokens: num_base must be an int, got {type(num_base).__name__}")
    if num_base < 0:
        raise ValueError(f"llama3_special_tokens: num_base must be >= 0, got {num_base}")
    names = list(_LLAMA31_NAMED_SPECIALS)
    # The named list uses reserved_0..2; the remaining 245 slots continue the reserved numbering at 3.
    names += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + NUM_LLAMA3_SPECIAL_TOKENS - len(names))]
    return {name: num_base + i for i, name in enumerate(names)}


@functools.lru_cache(maxsize=16)
def _compile_pattern(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def _fix_surrogates(text: str) -> str:
    """Pair up surrogate halves and replace lone ones with U+FFFD, as tiktoken does before encoding."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _utf8(piece: str) -> bytes:
    try:
        return piece.encode("utf-8")
    except UnicodeEncodeError:
        return _fix_surrogates(piece).encode("utf-8")


def _split_long_runs(text: str, max_run: int) -> list[str]:
    """Cut ``text`` inside every whitespace/non-whitespace run longer than ``max_run`` chars, every ``max_run`` chars.

    Same cut points as Meta's ``_split_whitespaces_or_nonwhitespaces``: a slice ends where its current run would grow
    past ``max_run`` characters; runs themselves are never merged or reordered.
    """
    if len(text) <= max_run:
        return [text]
    cuts: list[int] = []
    for match in _WHITESPACE_RUNS.finditer(text):
        start, end = match.span()
        cuts.extend(range(start + max_run, end, max_run))
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _merge_small(piece: bytes, ranks: Mapping[bytes, int], no_rank: int) -> list[int]:
    """Byte-level BPE of a short piece: merge the lowest-rank adjacent pair (leftmost on ties) until none is left.

    ``no_rank`` is any int greater than every rank; it marks pairs that are not tokens.
    """
    parts = [piece[i : i + 1] for i in range(len(piece))]
    get = ranks.get
    pair_ranks = [get(a + b, no_rank) for a, b in zip(parts, parts[1:])]
    while pair_ranks:
        best = min(pair_ranks)
        if best == no_rank:
            break
        i = pair_ranks.index(best)
        parts[i] += parts[i + 1]
        del parts[i + 1]
        del pair_ranks[i]
        if i < len(pair_ranks):
            pair_ranks[i] = get(parts[i] + parts[i + 1], no_rank)
        if i > 0:
            pair_ranks[i - 1] = get(parts[i - 1] + parts[i], no_rank)
    return [ranks[p] for p in parts]


def _merge_heap(piece: bytes, ranks: Mapping[bytes, int]) -> list[int]:
    """Same merges as :func:`_merge_small` in O(n log n): a heap of (rank, left start, pair end), stale entries skipped.

    Parts are kept as a linked list of byte offsets. An entry is current iff its left part is still alive and spans
    exactly two parts ending at ``end``; ties on rank pop the smallest left offset first, i.e. the leftmost pair.
    """
    n = len(piece)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n
    get = ranks.get
    heap = [(r, i, i + 2) for i in range(n - 1) if (r := get(piece[i : i + 2])) is not None]
    heapq.heapify(heap)
    while heap:
        _, left, end = heapq.heappop(heap)
        if not alive[left]:
            continue
        mid = nxt[left]
        if mid >= n or nxt[mid] != end:
            continue
        alive[mid] = False
        nxt[left] = end
        if end < n:
            prv[end] = left
            after = nxt[end]
            if (r := get(piece[left:after])) is not None:
                heapq.heappush(heap, (r, left, after))
        before = prv[left]
        if before >= 0 and (r := get(piece[before:end])) is not None:
            heapq.heappush(heap, (r, before, end))
    out = []
    i = 0
    while i < n:
        out.append(ranks[piece[i : nxt[i]]])
        i = nxt[i]
    return out


def _read_ranks_file(path: Path) -> dict[bytes, int]:
    if not path.is_file():
        raise FileNotFoundError(f"TiktokenTokenizer: ranks file {str(path)!r} does not exist or is not a file")
    ranks: dict[bytes, int] = {}
    line_of_rank: dict[int, int] = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            fields = raw.split()
            if not fields:
                continue
            where = f"{path}:{lineno}"
            if len(fields) != 2:
                raise ValueError(f"{where}: expected '<base64 token> <rank>', got {len(fields)} fields")
            try:
                token = base64.b64decode(fields[0], validate=True)
            except (binascii.Error, ValueError) as e:
                raise ValueError(f"{where}: token {fields[0][:40]!r} is not valid base64 ({e})") from None
            if not fields[1].isdigit():
                raise ValueError(f"{where}: rank {fields[1][:40]!r} is not a non-negative integer")
            rank = int(fields[1])
            if not token:
                raise ValueError(f"{where}: token decodes to empty bytes")
            if rank in line_of_rank:
                raise ValueError(f"{where}: rank {rank} already used on line {line_of_rank[rank]}")
            if token in ranks:
                raise ValueError(f"{where}: token {token!r} already has rank {ranks[token]}")
            ranks[token] = rank
            line_of_rank[rank] = lineno
    if not ranks:
        raise ValueError(f"{path}: ranks file has no tokens")
    return ranks


class TiktokenTokenizer:
    """Byte-level BPE over a tiktoken ranks table; ids match ``tiktoken.Encoding`` with the same ranks and pattern.

    ``TiktokenTokenizer(path)`` loads a ranks file (Meta's ``tokenizer.model`` for Llama 3); ``special_tokens``
    defaults to the 256 Llama 3.1 specials appended after the base ranks (:func:`llama3_special_tokens`).

    >>> tok = TiktokenTokenizer.from_ranks({bytes([b]): b for b in range(256)} | {b"ab": 256})
    >>> tok.encode("abc", bos=True)
    [257, 256, 99]
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, int] | None = None,
        pattern: str = LLAMA3_PATTERN,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"TiktokenTokenizer: path must be a str or os.PathLike, got {type(path).__name__}")
        self._setup(_read_ranks_file(Path(path)), special_tokens, pattern)

    @classmethod
    def from_ranks(
        cls,
        ranks: Mapping[bytes, int],
        special_tokens: Mapping[str, int] | None = None,
        pattern: str = LLAMA3_PATTERN,
    ) -> TiktokenTokenizer:
        """Build a tokenizer from an in-memory ranks table (e.g. from :func:`train_bpe`)."""
        if not isinstance(ranks, Mapping):
            raise TypeError(f"TiktokenTokenizer.from_ranks: ranks must be a mapping bytes -> int, got {type(ranks)}")
        self = cls.__new__(cls)
        self._setup(dict(ranks), special_tokens, pattern)
        return self

    def _setup(self, ranks: dict[bytes, int], special_tokens: Mapping[str, int] | None, pattern: str) -> None:
        seen_ids: dict[int, bytes] = {}
        for token, rank in ranks.items():
            if not isinstance(token, bytes) or not token:
                raise TypeError(f"TiktokenTokenizer: ranks keys must be non-empty bytes, got {token!r}")
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                raise ValueError(f"TiktokenTokenizer: rank of {token!r} must be an int >= 0, got {rank!r}")
            if rank in seen_ids:
                raise ValueError(f"TiktokenTokenizer: rank {rank} is used by both {seen_ids[rank]!r} and {token!r}")
            seen_ids[rank] = token
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise ValueError(
                f"TiktokenTokenizer: ranks must contain all 256 single bytes (byte-level BPE), "
                f"{len(missing)} missing, first {bytes(missing[:8])!r}"
            )
        if special_tokens is None:
            special_tokens = llama3_special_tokens(max(seen_ids) + 1)
        specials: dict[str, int] = {}
        for name, sid in special_tokens.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"TiktokenTokenizer: special token names must be non-empty str, got {name!r}")
            if isinstance(sid, bool) or not isinstance(sid, int) or sid < 0:
                raise ValueError(f"TiktokenTokenizer: special token {name!r} id must be an int >= 0, got {sid!r}")
            if sid in seen_ids:
                raise ValueError(f"TiktokenTokenizer: special token {name!r} id {sid} collides with rank of "
                                 f"{seen_ids[sid]!r}")
            seen_ids[sid] = name.encode("utf-8")
            specials[name] = sid
        if not isinstance(pattern, str):
            raise TypeError(f"TiktokenTokenizer: pattern must be a str, got {type(pattern).__name__}")
        try:
            self._regex = _compile_pattern(pattern)
        except regex.error as e:
            raise ValueError(f"TiktokenTokenizer: pattern does not compile with the regex module: {e}") from None
        self._pattern = pattern
        self._ranks = ranks
        self._no_rank = max(ranks.values()) + 1
        self._specials = specials
        self._decoder = seen_ids
        self._special_regex_cache: dict[frozenset[str], regex.Pattern[str]] = {}
        self._cache: dict[str, tuple[int, ...]] = {}

    # ---------------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        """Number of ids: base ranks + special tokens (128,000 + 256 = 128,256 for Llama 3)."""
        return len(self._ranks) + len(self._specials)

    @property
    def num_base_tokens(self) -> int:
        """Number of BPE ranks (without special tokens)."""
        return len(self._ranks)

    @property
    def bos_id(self) -> int | None:
        """Id of ``<|begin_of_text|>``, or None if the special tokens do not define it."""
        return self._specials.get(_BOS_NAME)

    @property
    def eos_id(self) -> int | None:
        """Id of ``<|end_of_text|>``, or None if the special tokens do not define it."""
        return self._specials.get(_EOS_NAME)

    @property
    def special_tokens(self) -> dict[str, int]:
        """A copy of the special-token table, name -> id."""
        return dict(self._specials)

    @property
    def ranks(self) -> dict[bytes, int]:
        """A copy of the BPE ranks table, token bytes -> rank (= id)."""
        return dict(self._ranks)

    @property
    def pattern(self) -> str:
        """The pre-tokenizer regex."""
        return self._pattern

    # ---------------------------------------------------------------- encoding
    def encode(
        self,
        text: str,
        bos: bool = False,
        eos: bool = False,
        allowed_special: Literal["all"] | Collection[str] | None = None,
    ) -> list[int]:
        """Token ids of ``text``; special-token strings are plain text unless named in ``allowed_special``.

        The text is cut as Meta's Llama 3 wrapper does (≤400,000-char chunks, whitespace/non-whitespace runs of more
        than 25,000 chars split) and each slice is encoded like ``tiktoken.Encoding.encode(slice,
        allowed_special=..., disallowed_special=())``. ``bos``/``eos`` add ``<|begin_of_text|>``/``<|end_of_text|>``.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        allowed = self._allowed_set(allowed_special)
        prefix = [self._required_special(_BOS_NAME, "bos")] if bos else []
        suffix = [self._required_special(_EOS_NAME, "eos")] if eos else []
        try:
            body = self._encode_text(text, allowed)
        except UnicodeEncodeError:
            body = self._encode_text(_fix_surrogates(text), allowed)
        return prefix + body + suffix

    def _required_special(self, name: str, flag: str) -> int:
        sid = self._specials.get(name)
        if sid is None:
            raise ValueError(f"encode: {flag}=True but the special tokens have no {name}")
        return sid

    def _allowed_set(self, allowed_special: Literal["all"] | Collection[str] | None) -> frozenset[str]:
        if allowed_special is None:
            return frozenset()
        if isinstance(allowed_special, str):
            if allowed_special != "all":
                raise ValueError(f"encode: allowed_special must be 'all', a set of names or None, "
                                 f"got the string {allowed_special!r}")
            return frozenset(self._specials)
        allowed = frozenset(allowed_special)
        unknown = sorted(name for name in allowed if name not in self._specials)
        if unknown:
            raise ValueError(f"encode: allowed_special names unknown special tokens {unknown[:5]}")
        return allowed

    def _special_regex(self, allowed: frozenset[str]) -> regex.Pattern[str]:
        compiled = self._special_regex_cache.get(allowed)
        if compiled is None:
            # Longest name first so that a name which is a prefix of another cannot shadow it.
            names = sorted(allowed, key=lambda s: (-len(s), s))
            compiled = regex.compile("|".join(regex.escape(name) for name in names))
            self._special_regex_cache[allowed] = compiled
        return compiled

    def _encode_text(self, text: str, allowed: frozenset[str]) -> list[int]:
        out: list[int] = []
        for start in range(0, len(text), TIKTOKEN_MAX_ENCODE_CHARS):
            for piece in _split_long_runs(text[start : start + TIKTOKEN_MAX_ENCODE_CHARS], MAX_NO_WHITESPACE_CHARS):
                self._encode_slice(piece, allowed, out)
        return out

    def _encode_slice(self, text: str, allowed: frozenset[str], out: list[int]) -> None:
        if not allowed:
            self._encode_ordinary(text, out)
            return
        start = 0
        for match in self._special_regex(allowed).finditer(text):
            self._encode_ordinary(text[start : match.start()], out)
            out.append(self._specials[match.group()])
            start = match.end()
        self._encode_ordinary(text[start:], out)

    def _encode_ordinary(self, text: str, out: list[int]) -> None:
        if not text:
            return
        cache = self._cache
        ranks = self._ranks
        for piece in self._regex.findall(text):
            ids = cache.get(piece)
            if ids is None:
                data = piece.encode("utf-8")
                rank = ranks.get(data)
                if rank is not None:
                    ids = (rank,)
                elif len(data) < _HEAP_MERGE_MIN_BYTES:
                    ids = tuple(_merge_small(data, ranks, self._no_rank))
                else:
                    ids = tuple(_merge_heap(data, ranks))
                if len(cache) >= _PIECE_CACHE_MAX:
                    cache.clear()
                cache[piece] = ids
            out.extend(ids)

    # ---------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The concatenated bytes of ``ids`` (special tokens give their UTF-8 name)."""
        decoder = self._decoder
        try:
            return b"".join([decoder[i] for i in ids])
        except KeyError as e:
            raise ValueError(f"decode: token id {e.args[0]!r} is not in the vocabulary (size {self.vocab_size})") \
                from None
        except TypeError as e:
            raise TypeError(f"decode: ids must be an iterable of ints ({e})") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 (a split character) become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ---------------------------------------------------------------- saving
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the ranks as a tiktoken ranks file (atomically); special tokens are not part of that format."""
        out = Path(path)
        if not out.parent.is_dir():
            raise FileNotFoundError(f"save: directory {str(out.parent)!r} does not exist")
        lines = [
            base64.b64encode(token) + b" " + str(rank).encode("ascii")
            for token, rank in sorted(self._ranks.items(), key=lambda kv: kv[1])
        ]
        files.atomic_write(out, b"\n".join(lines) + b"\n")
        return out

    def __repr__(self) -> str:
        return f"TiktokenTokenizer(base={len(self._ranks)}, specials={len(self._specials)})"


def train_llama3_tokenizer(texts: Iterable[str], vocab_size: int) -> TiktokenTokenizer:
    """A Llama 3 style tokenizer of `vocab_size` ids in all: BPE ranks trained on `texts` by `train_bpe`, then the
    256 Llama 3.1 special tokens."""
    if vocab_size <= NUM_LLAMA3_SPECIAL_TOKENS + 256:
        raise ValueError(f"train_llama3_tokenizer: vocab_size must exceed {NUM_LLAMA3_SPECIAL_TOKENS + 256} (256 byte "
                         f"tokens + {NUM_LLAMA3_SPECIAL_TOKENS} special tokens), got {vocab_size}")
    return TiktokenTokenizer.from_ranks(train_bpe(texts, vocab_size - NUM_LLAMA3_SPECIAL_TOKENS))


def train_bpe(texts: Iterable[str], vocab_size: int, pattern: str = LLAMA3_PATTERN) -> dict[bytes, int]:
    """Learn a tiktoken-format ranks table of ``vocab_size`` tokens (special tokens not included) from ``texts``.

    Ranks 0..255 are the single bytes in byte order; every further rank is the most frequent adjacent token pair over
    the pre-tokenized pieces (ties: the lexicographically smallest pair of ranks), so a token's rank is always greater
    than its parts' and encoding with the table replays the merges. A pair whose bytes already form a token is
    folded into that token without a new rank. Stops early (smaller table) when no adjacent pair is left.

    >>> ranks = train_bpe(["aaaa"], vocab_size=258)
    >>> sorted((tok, r) for tok, r in ranks.items() if r >= 256)
    [(b'aa', 256), (b'aaaa', 257)]
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"train_bpe: vocab_size must be an int, got {type(vocab_size).__name__}")
    if vocab_size < 256:
        raise ValueError(f"train_bpe: vocab_size must be >= 256 (the single bytes), got {vocab_size}")
    if isinstance(texts, str | bytes):
        raise TypeError("train_bpe: texts must be an iterable of str documents, not a single str/bytes")
    compiled = _compile_pattern(pattern)
    piece_counts: Counter[str] = Counter()
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"train_bpe: texts[{n}] must be a str, got {type(text).__name__}")
        piece_counts.update(compiled.findall(text))

    vocab: list[bytes] = [bytes([b]) for b in range(256)]
    id_of: dict[bytes, int] = {tok: i for i, tok in enumerate(vocab)}
    words: list[list[int]] = []
    counts: list[int] = []
    for piece, count in piece_counts.items():
        data = _utf8(piece)
        if len(data) > 1:
            words.append(list(data))
            counts.append(count)

    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wid, word in enumerate(words):
        count = counts[wid]
        for pair in zip(word, word[1:]):
            pair_counts[pair] = pair_counts.get(pair, 0) + count
            where.setdefault(pair, set()).add(wid)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)

    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        if pair_counts.get((a, b)) != -neg:
            continue  # stale entry: the pair's count changed after it was pushed
        merged = vocab[a] + vocab[b]
        new_id = id_of.get(merged)
        if new_id is None:
            new_id = len(vocab)
            vocab.append(merged)
            id_of[merged] = new_id
        delta: dict[tuple[int, int], int] = {}
        for wid in where.pop((a, b)):
            word = words[wid]
            count = counts[wid]
            new_word: list[int] = []
            i = 0
            last = len(word) - 1
            while i <= last:
                if i < last and word[i] == a and word[i + 1] == b:
                    new_word.append(new_id)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            old_pairs = list(zip(word, word[1:]))
            new_pairs = list(zip(new_word, new_word[1:]))
            for pair in old_pairs:
                delta[pair] = delta.get(pair, 0) - count
            for pair in new_pairs:
                delta[pair] = delta.get(pair, 0) + count
            old_set = set(old_pairs)
            new_set = set(new_pairs)
            for pair in new_set - old_set:
                where.setdefault(pair, set()).add(wid)
            for pair in old_set - new_set:
                if pair != (a, b):
                    where[pair].discard(wid)
            words[wid] = new_word
        for pair, d in delta.items():
            if d == 0:
                continue
            c = pair_counts.get(pair, 0) + d
            if c > 0:
                pair_counts[pair] = c
                heapq.heappush(heap, (-c, pair[0], pair[1]))
            else:
                pair_counts.pop(pair, None)
                where.pop(pair, None)
        assert (a, b) not in pair_counts, f"train_bpe: merged pair {(a, b)} still counted"
    return {tok: rank for rank, tok in enumerate(vocab)}


class SentencePieceTokenizer:
    """A sentencepiece model (e.g. the Mixtral tokenizer, spec §3.3) behind the same interface as TiktokenTokenizer.

    Needs the optional ``sentencepiece`` package, imported when a tokenizer is created.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"SentencePieceTokenizer: path must be a str or os.PathLike, got {type(path).__name__}")
        try:
            import sentencepiece
        except ImportError as e:
            raise ImportError(
                "SentencePieceTokenizer needs the sentencepiece package: pip install sentencepiece"
            ) from e
        model_path = Path(path)
        if not model_path.is_file():
            raise FileNotFoundError(f"SentencePieceTokenizer: model file {str(model_path)!r} does not exist")
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.Load(str(model_path))
        except (RuntimeError, OSError) as e:
            raise ValueError(f"SentencePieceTokenizer: {model_path} is not a sentencepiece model ({e})") from None
        self._sp: Any = processor
        self.path = model_path

    @property
    def vocab_size(self) -> int:
        """Number of pieces in the model."""
        return int(self._sp.get_piece_size())

    @property
    def bos_id(self) -> int | None:
        """Id of the BOS piece, or None if the model has none."""
        sid = int(self._sp.bos_id())
        return sid if sid >= 0 else None

    @property
    def eos_id(self) -> int | None:
        """Id of the EOS piece, or None if the model has none."""
        sid = int(self._sp.eos_id())
        return sid if sid >= 0 else None

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        """Piece ids of ``text``, optionally with BOS first and EOS last."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        ids = [int(i) for i in self._sp.encode(text)]
        if bos:
            if self.bos_id is None:
                raise ValueError("encode: bos=True but the sentencepiece model has no BOS piece")
            ids.insert(0, self.bos_id)
        if eos:
            if self.eos_id is None:
                raise ValueError("encode: eos=True but the sentencepiece model has no EOS piece")
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``."""
        id_list = [int(i) for i in ids]
        size = self.vocab_size
        bad = [i for i in id_list if not 0 <= i < size]
        if bad:
            raise ValueError(f"decode: token id {bad[0]} is not in the vocabulary (size {size})")
        return str(self._sp.decode(id_list))

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"


def _looks_like_tiktoken(head: bytes) -> bool:
    for line in head.split(b"\n")[:-1] or [head]:
        if line.strip():
            return _TIKTOKEN_LINE.fullmatch(line.strip()) is not None
    return False


def _read_varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value = 0
    for shift in range(0, 64, 7):
        if pos >= len(data):
            return None
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    return None


def _looks_like_sentencepiece(head: bytes) -> bool:
    """A ModelProto starts with field 1 (repeated SentencePiece): tag 0x0A, a length, then the piece's tag 0x0A."""
    if len(head) < 4 or head[0] != 0x0A:
        return False
    parsed = _read_varint(head, 1)
    if parsed is None:
        return False
    length, pos = parsed
    return length > 0 and pos < len(head) and head[pos] == 0x0A


def load_tokenizer(path: str | os.PathLike[str]) -> TiktokenTokenizer | SentencePieceTokenizer:
    """Open a tokenizer file (or a directory holding ``tokenizer.model``), choosing the class from its content.

    Text lines ``<base64> <rank>`` give a :class:`TiktokenTokenizer` with the Llama 3.1 special tokens; a protobuf
    sentencepiece model gives a :class:`SentencePieceTokenizer`.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"load_tokenizer: path must be a str or os.PathLike, got {type(path).__name__}")
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.model"
    if not file.is_file():
        raise FileNotFoundError(f"load_tokenizer: tokenizer file {str(file)!r} does not exist")
    with open(file, "rb") as f:
        head = f.read(4096)
    if _looks_like_tiktoken(head):
        return TiktokenTokenizer(file)
    if _looks_like_sentencepiece(head):
        return SentencePieceTokenizer(file)
    raise ValueError(
        f"load_tokenizer: {file} is neither a tiktoken ranks file ('<base64> <rank>' lines) "
        f"nor a sentencepiece model (protobuf)"
    )
