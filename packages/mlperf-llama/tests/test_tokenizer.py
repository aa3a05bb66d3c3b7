"""Tokenizers: our pure-Python tiktoken-format BPE against the tiktoken package, the BPE trainer, sentencepiece."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.mlperf_llama import tokenizer as tok_mod
from ember.mlperf_llama.tokenizer import (
    LLAMA3_PATTERN,
    SentencePieceTokenizer,
    TiktokenTokenizer,
    llama3_special_tokens,
    load_tokenizer,
    train_bpe,
)

SPEC_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"  # noqa: E501 (verbatim from spec §3.2)
)

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 12345 o'clock; we'll see, they've said, I'm sure you'd agree.",
    "Größenwahn und Übermut: Straße, café, naïve résumé, élève, Ærøskøbing, Łódź, İstanbul, ıi.",
    "Привет, мир! Как дела? Всё хорошо, спасибо. Москва 2024 год.",
    "中文分词测试：我们今天去北京天安门广场，然后吃了烤鸭。日本語のテキストも少し。한국어 문장입니다.",
    "مرحبا بالعالم، هذا نص عربي. שלום עולם, זה טקסט בעברית. नमस्ते दुनिया। ภาษาไทยก็มี",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇩🇪🇫🇷 ❤️ ✨🚀 and math ∑∫√∞≠≤ ½ ² ³ ① Ⅻ ٣٤٥ ๑๒๓",
    "def f(x):\n    return x ** 2  # square\n\n\tif x >= 10:\n\t\tprint(f'{x:>8}')\r\n",
    "   leading and trailing spaces   \n\n\n   \t \t  multiple\n\n\nnewlines\r\r\n  ",
    "Numbers: 1 12 123 1234 12345 123456 3.14159 1,000,000 0x1F 1e-10 -42 +7 ２０２４ 100%",
    "Contractions: IT'S DON'T WE'LL THEY'VE I'M YOU'D SHE'S 's 't 're 've 'm 'll 'd ’s ’ll ſ'S",
    "Punctuation!!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((())) [[[]]] {{{}}} <<<>>> ||| \\\\ /// ~~~ ```",
]

VARIED = [
    *MULTILINGUAL,
    "",
    " ",
    "\n",
    "a",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    " " * 50 + "x" + "\n" * 20 + "\t" * 7,
    "Zero\u200bwidth\u00a0nbsp\u2003em\u3000ideographic\u2028line\u2029para\x0bvt\x0cff\x85nel\x1cfs",
    "Mixed1234abc5678  9  ,  ;  é1é  '  's's  ''s",
    "<|begin_of_text|>Hello<|end_of_text|> <|eot_id|>",
]


def _training_texts() -> list[str]:
    """~250 KB of deterministic text: some stdlib sources plus the multilingual samples above."""
    import difflib
    import inspect
    import json.decoder
    import textwrap

    texts = [inspect.getsource(m) for m in (difflib, textwrap, json.decoder)]
    return texts + MULTILINGUAL * 20


@pytest.fixture(scope="module")
def trained_ranks() -> dict[bytes, int]:
    return train_bpe(_training_texts(), vocab_size=1200)


@pytest.fixture(scope="module")
def ranks_file(trained_ranks: dict[bytes, int], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "ranks.tiktoken"
    with open(path, "wb") as f:  # written here, independently of TiktokenTokenizer.save
        for token, rank in sorted(trained_ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    return path


@pytest.fixture(scope="module")
def ours(ranks_file: Path) -> TiktokenTokenizer:
    return TiktokenTokenizer(ranks_file)


@pytest.fixture(scope="module")
def reference(trained_ranks: dict[bytes, int]) -> tiktoken.Encoding:
    specials = llama3_special_tokens(len(trained_ranks))
    return tiktoken.Encoding("ember-test", pat_str=LLAMA3_PATTERN, mergeable_ranks=trained_ranks,
                             special_tokens=specials)


def _byte_ranks() -> dict[bytes, int]:
    return {bytes([b]): b for b in range(256)}


# ------------------------------------------------------------------------------------------- constants


def test_pattern_is_the_spec_string() -> None:
    assert LLAMA3_PATTERN == SPEC_PATTERN


def test_llama31_special_tokens_names_and_ids() -> None:
    specials = llama3_special_tokens(128000)
    assert len(specials) == 256
    assert sorted(specials.values()) == list(range(128000, 128256))
    expected_named = {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|reserved_special_token_0|>": 128002,
        "<|reserved_special_token_1|>": 128003,
        "<|finetune_right_pad_id|>": 128004,
        "<|reserved_special_token_2|>": 128005,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
        "<|reserved_special_token_3|>": 128011,
        "<|reserved_special_token_247|>": 128255,
    }
    assert {k: specials[k] for k in expected_named} == expected_named
    by_id = {v: k for k, v in specials.items()}
    assert [by_id[i] for i in range(128011, 128256)] == [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
    assert llama3_special_tokens(5)["<|eot_id|>"] == 14
    with pytest.raises(ValueError, match="num_base must be >= 0"):
        llama3_special_tokens(-1)
    with pytest.raises(TypeError, match="num_base must be an int"):
        llama3_special_tokens("128000")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- train_bpe


def test_train_bpe_structure(trained_ranks: dict[bytes, int]) -> None:
    assert len(trained_ranks) == 1200
    assert sorted(trained_ranks.values()) == list(range(1200))
    by_rank = {r: t for t, r in trained_ranks.items()}
    assert [by_rank[r] for r in range(256)] == [bytes([b]) for b in range(256)]
    for rank in range(256, 1200):
        token = by_rank[rank]
        # every merged token is two lower-ranked tokens glued together
        assert any(
            trained_ranks.get(token[:k], rank) < rank and trained_ranks.get(token[k:], rank) < rank
            for k in range(1, len(token))
        ), (rank, token)


def test_train_bpe_is_deterministic(trained_ranks: dict[bytes, int]) -> None:
    assert train_bpe(_training_texts(), vocab_size=1200) == trained_ranks
    # a prefix of the merges: training less gives the first ranks of training more
    smaller = train_bpe(_training_texts(), vocab_size=700)
    assert smaller == {t: r for t, r in trained_ranks.items() if r < 700}


def test_train_bpe_exact_small_cases() -> None:
    assert {t: r for t, r in train_bpe(["aaaa"], 300).items() if r >= 256} == {b"aa": 256, b"aaaa": 257}
    # pieces "ab", " cd": pairs (97,98), (32,99), (99,100) all occur once; the lowest pair of ranks wins the tie
    ranks = train_bpe(["ab cd"], 257)
    assert {t: r for t, r in ranks.items() if r >= 256} == {b" c": 256}
    # frequency beats rank order
    ranks = train_bpe(["zz zz zz ab"], 257)
    assert {t: r for t, r in ranks.items() if r >= 256} == {b"zz": 256}
    assert train_bpe([], 300) == _byte_ranks()


def test_train_bpe_compresses(ours: TiktokenTokenizer) -> None:
    for text in MULTILINGUAL:
        assert len(ours.encode(text)) < len(text.encode("utf-8"))
    sample = _training_texts()[0]
    assert len(ours.encode(sample)) < 0.5 * len(sample.encode("utf-8"))


def test_train_bpe_bad_arguments() -> None:
    with pytest.raises(ValueError, match="vocab_size must be >= 256"):
        train_bpe(["abc"], 255)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        train_bpe(["abc"], 300.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a single str"):
        train_bpe("abc", 300)
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        train_bpe(["abc", b"def"], 300)  # type: ignore[list-item]


# ------------------------------------------------------------------------------------------- encode vs tiktoken


@pytest.mark.parametrize("text", VARIED)
def test_encode_matches_tiktoken(ours: TiktokenTokenizer, reference: tiktoken.Encoding, text: str) -> None:
    assert ours.encode(text) == reference.encode(text, disallowed_special=())
    assert ours.decode(ours.encode(text)) == text


def test_encode_matches_tiktoken_on_sources(ours: TiktokenTokenizer, reference: tiktoken.Encoding) -> None:
    for text in _training_texts()[:3]:
        assert ours.encode(text) == reference.encode(text, disallowed_special=())


_FRAGMENTS = ["'s", "'LL", "’t", " ", "  ", "\n", "\r\n", "\t", "123", "4567", "é", "😀", "👍🏽", "<|eot_id|>", "ſ"]
# Characters assigned in this Python's Unicode database: classes of characters newer than the regex engines' tables
# (e.g. Unicode 17 letters) are a documented difference between the `regex` module and tiktoken's Rust regex.
_ASSIGNED_CHARS = st.characters(exclude_categories=("Cs", "Cn"))


@pytest.fixture(scope="module")
def property_pair() -> tuple[TiktokenTokenizer, tiktoken.Encoding]:
    ranks = train_bpe(MULTILINGUAL * 5, vocab_size=600)
    reference = tiktoken.Encoding("ember-prop", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                  special_tokens=llama3_special_tokens(600))
    return TiktokenTokenizer.from_ranks(ranks), reference


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(st.text(_ASSIGNED_CHARS, max_size=8), st.sampled_from(_FRAGMENTS)), max_size=20))
def test_encode_matches_tiktoken_property(
    property_pair: tuple[TiktokenTokenizer, tiktoken.Encoding], parts: list[str]
) -> None:
    text = "".join(parts)
    ours, reference = property_pair
    assert ours.encode(text) == reference.encode(text, disallowed_special=())
    assert ours.decode(ours.encode(text)) == text


def test_long_pieces_use_the_same_merges(ours: TiktokenTokenizer, reference: tiktoken.Encoding) -> None:
    # pieces above the heap threshold go through _merge_heap; it must agree with tiktoken and with _merge_small
    for text in ["a" * 3000, "ab" * 1500, "defreturnself" * 200, "=" * 2000, " =-" * 700, "é" * 1000, "中文" * 500]:
        assert len(text.encode("utf-8")) > tok_mod._HEAP_MERGE_MIN_BYTES
        assert ours.encode(text) == reference.encode(text, disallowed_special=())
    data = ("selfreturn" * 50).encode()
    assert tok_mod._merge_heap(data, ours.ranks) == tok_mod._merge_small(data, ours.ranks, 10**9)


def test_meta_chunking_of_long_runs(ours: TiktokenTokenizer, reference: tiktoken.Encoding) -> None:
    def ref(s: str) -> list[int]:
        return reference.encode(s, disallowed_special=())

    text = "a" * 60_000
    assert ours.encode(text) == ref("a" * 25_000) + ref("a" * 25_000) + ref("a" * 10_000)
    text = "xy " + "b" * 25_001 + " " * 25_002 + "c"
    cut1 = 3 + 25_000
    cut2 = 3 + 25_001 + 25_000
    assert ours.encode(text) == ref(text[:cut1]) + ref(text[cut1:cut2]) + ref(text[cut2:])
    text = "b" * 25_000 + " z"  # exactly the limit: not cut
    assert ours.encode(text) == ref(text)


def test_meta_chunking_at_400k_chars(ours: TiktokenTokenizer, reference: tiktoken.Encoding) -> None:
    text = "hello world, it's 2024. " * 17_000  # 408,000 chars
    assert len(text) > 400_000
    expected = reference.encode(text[:400_000], disallowed_special=()) + reference.encode(
        text[400_000:], disallowed_special=()
    )
    assert ours.encode(text) == expected
    assert ours.decode(ours.encode(text)) == text


def test_lone_surrogates_like_tiktoken(ours: TiktokenTokenizer, reference: tiktoken.Encoding) -> None:
    text = "bad \ud800 surrogate \udc00 and a pair \ud83d\ude00"
    assert ours.encode(text) == reference.encode(text, disallowed_special=())


# ------------------------------------------------------------------------------------------- special tokens


@pytest.fixture(scope="module")
def llama_sized() -> tuple[TiktokenTokenizer, tiktoken.Encoding]:
    """A fake 128,000-rank table: the 256 bytes, 744 real merges, and filler tokens (0xff 0xfe ...) no text produces."""
    ranks = train_bpe(MULTILINGUAL * 3, vocab_size=1000)
    ranks.update({b"\xff\xfe" + i.to_bytes(3, "big"): i for i in range(len(ranks), 128_000)})
    ours = TiktokenTokenizer.from_ranks(ranks)
    reference = tiktoken.Encoding("fake-llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                  special_tokens=llama3_special_tokens(128_000))
    return ours, reference


def test_llama_sized_table_ids(llama_sized: tuple[TiktokenTokenizer, tiktoken.Encoding]) -> None:
    ours, _ = llama_sized
    assert (ours.vocab_size, ours.num_base_tokens, ours.bos_id, ours.eos_id) == (128_256, 128_000, 128_000, 128_001)
    assert ours.special_tokens == llama3_special_tokens(128_000)
    assert ours.encode("", bos=True, eos=True) == [128_000, 128_001]
    assert ours.decode([128_006, 128_009]) == "<|start_header_id|><|eot_id|>"


def test_special_tokens_allowed_or_plain_text(llama_sized: tuple[TiktokenTokenizer, tiktoken.Encoding]) -> None:
    ours, reference = llama_sized
    text = "<|begin_of_text|>Hi <|start_header_id|>user<|end_header_id|>\n\nyo<|eot_id|><|eot_id|> end"
    assert ours.encode(text) == reference.encode(text, disallowed_special=())
    assert 128_009 not in ours.encode(text)
    assert ours.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")
    assert ours.encode(text, allowed_special="all")[:1] == [128_000]
    subset = {"<|eot_id|>"}
    got = ours.encode(text, allowed_special=subset)
    assert got == reference.encode(text, allowed_special=subset, disallowed_special=())
    assert got.count(128_009) == 2 and 128_000 not in got
    assert ours.decode(got) == text
    assert ours.encode(text, bos=True, eos=True, allowed_special="all") == [128_000, *reference.encode(
        text, allowed_special="all"), 128_001]


def test_allowed_special_bad_values(ours: TiktokenTokenizer) -> None:
    with pytest.raises(ValueError, match="unknown special tokens"):
        ours.encode("x", allowed_special={"<|nope|>"})
    with pytest.raises(ValueError, match="allowed_special must be 'all'"):
        ours.encode("x", allowed_special="none")
    with pytest.raises(TypeError, match="text must be a str"):
        ours.encode(b"x")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- decode


def test_decode(ours: TiktokenTokenizer, trained_ranks: dict[bytes, int]) -> None:
    ids = ours.encode("é😀")
    assert ours.decode_bytes(ids) == "é😀".encode()
    assert ours.decode([trained_ranks[b"\xc3"]]) == "\ufffd"  # half a character
    assert ours.decode(ours.encode("ok") + [trained_ranks[b"\xf0"]]) == "ok\ufffd"
    with pytest.raises(ValueError, match="token id 999999 is not in the vocabulary"):
        ours.decode([1, 999_999])


# ------------------------------------------------------------------------------------------- files


def test_ranks_file_load_and_save_round_trip(
    ours: TiktokenTokenizer, ranks_file: Path, trained_ranks: dict[bytes, int], tmp_path: Path
) -> None:
    assert ours.ranks == trained_ranks
    assert ours.vocab_size == 1200 + 256 and ours.bos_id == 1200 and ours.eos_id == 1201
    saved = ours.save(tmp_path / "copy.tiktoken")
    assert saved.read_bytes() == ranks_file.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["copy.tiktoken"]  # no temp file left behind
    assert TiktokenTokenizer(saved).ranks == trained_ranks


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _byte_lines() -> list[str]:
    return [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]


def test_bad_ranks_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.tiktoken"):
        TiktokenTokenizer(tmp_path / "missing.tiktoken")
    bad = _write(tmp_path / "b64.tiktoken", ["IQ== 0", "not*base64 1"])
    with pytest.raises(ValueError, match=r"b64.tiktoken:2: token .* is not valid base64"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "dup.tiktoken", [*_byte_lines(), "YWI= 5"])
    with pytest.raises(ValueError, match=r"dup.tiktoken:257: rank 5 already used on line 6"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "duptok.tiktoken", [*_byte_lines(), "IQ== 256"])
    with pytest.raises(ValueError, match=r"duptok.tiktoken:257: token b'!' already has rank 33"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "fields.tiktoken", ["IQ== 0 extra"])
    with pytest.raises(ValueError, match=r"fields.tiktoken:1: expected '<base64 token> <rank>', got 3 fields"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "rank.tiktoken", ["IQ== -3"])
    with pytest.raises(ValueError, match=r"rank.tiktoken:1: rank b'-3' is not a non-negative integer"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "empty.tiktoken", ["", "  "])
    with pytest.raises(ValueError, match="ranks file has no tokens"):
        TiktokenTokenizer(bad)
    bad = _write(tmp_path / "few.tiktoken", ["IQ== 0"])
    with pytest.raises(ValueError, match="must contain all 256 single bytes"):
        TiktokenTokenizer(bad)


def test_from_ranks_validation() -> None:
    with pytest.raises(ValueError, match="rank 3 is used by both"):
        TiktokenTokenizer.from_ranks(_byte_ranks() | {b"ab": 3})
    with pytest.raises(ValueError, match="collides with rank"):
        TiktokenTokenizer.from_ranks(_byte_ranks(), special_tokens={"<|x|>": 7})
    with pytest.raises(TypeError, match="keys must be non-empty bytes"):
        TiktokenTokenizer.from_ranks(_byte_ranks() | {"ab": 256})  # type: ignore[operator]
    tok = TiktokenTokenizer.from_ranks(_byte_ranks(), special_tokens={})
    assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (256, None, None)
    with pytest.raises(ValueError, match="bos=True but the special tokens have no <\\|begin_of_text\\|>"):
        tok.encode("x", bos=True)


# ------------------------------------------------------------------------------------------- sentencepiece


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sentencepiece = pytest.importorskip("sentencepiece")
    work = tmp_path_factory.mktemp("sp")
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(MULTILINGUAL[:3] * 30 + _training_texts()[1].splitlines()[:300]), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(work / "sp"), vocab_size=200, model_type="bpe",
        character_coverage=1.0, minloglevel=2, num_threads=1,
    )
    return work / "sp.model"


def test_sentencepiece_matches_processor(sp_model: Path) -> None:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(sp_model))
    ours = SentencePieceTokenizer(sp_model)
    assert ours.vocab_size == processor.get_piece_size() == 200
    assert (ours.bos_id, ours.eos_id) == (processor.bos_id(), processor.eos_id()) == (1, 2)
    for text in ["The quick brown fox.", "Größenwahn und Übermut", "Привет, мир!", "textwrap fill(width=70)"]:
        ids = ours.encode(text)
        assert ids == processor.encode(text)
        assert ours.decode(ids) == processor.decode(ids) == text
        assert ours.encode(text, bos=True, eos=True) == [1, *ids, 2]
    with pytest.raises(ValueError, match="token id 200 is not in the vocabulary"):
        ours.decode([5, 200])


def test_sentencepiece_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="nope.model"):
        SentencePieceTokenizer(tmp_path / "nope.model")
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"\x0a\x05hello world, not a model")
    with pytest.raises(ValueError, match="junk.model is not a sentencepiece model"):
        SentencePieceTokenizer(junk)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ImportError, match="pip install sentencepiece"):
        SentencePieceTokenizer(junk)


# ------------------------------------------------------------------------------------------- load_tokenizer


def test_load_tokenizer_detects_formats(
    ours: TiktokenTokenizer, ranks_file: Path, sp_model: Path, tmp_path: Path
) -> None:
    loaded = load_tokenizer(ranks_file)
    assert isinstance(loaded, TiktokenTokenizer)
    assert loaded.ranks == ours.ranks and loaded.special_tokens == ours.special_tokens
    assert isinstance(load_tokenizer(sp_model), SentencePieceTokenizer)

    tiktoken_dir = tmp_path / "llama"
    tiktoken_dir.mkdir()
    ours.save(tiktoken_dir / "tokenizer.model")
    assert isinstance(load_tokenizer(tiktoken_dir), TiktokenTokenizer)
    sp_dir = tmp_path / "mixtral"
    sp_dir.mkdir()
    (sp_dir / "tokenizer.model").write_bytes(sp_model.read_bytes())
    assert isinstance(load_tokenizer(sp_dir), SentencePieceTokenizer)
    assert load_tokenizer(sp_dir).encode("fox") == SentencePieceTokenizer(sp_model).encode("fox")

    other = tmp_path / "vocab.json"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="vocab.json is neither a tiktoken ranks file"):
        load_tokenizer(other)
    with pytest.raises(FileNotFoundError, match="tokenizer.model"):
        load_tokenizer(tmp_path)
