"""End to end: a tiny corpus -> tokenizer -> indexed dataset -> training (loss falls), MLPerf log, checkpoints and a
bit-identical resume, the CLI."""

import json
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama import cli
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.corpus import unigram_entropy_of
from ember.mlperf_llama.data import IndexedDataset, IndexedDatasetWriter
from ember.mlperf_llama.preprocess import preprocess
from ember.mlperf_llama.tokenizer import TiktokenTokenizer, train_bpe
from ember.mlperf_llama.train import evaluate, model_config, train

WORDS = ("the quick brown fox jumps over the lazy dog while a small model learns to predict the next token of "
         "a very repetitive corpus").split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    lines = []
    for d in range(120):  # documents of word sequences that mostly follow the sentence order: learnable
        start = int(rng.integers(len(WORDS)))
        words = [WORDS[(start + i) % len(WORDS)] if rng.random() > 0.1 else WORDS[int(rng.integers(len(WORDS)))]
                 for i in range(int(rng.integers(40, 80)))]
        lines.append(json.dumps({"text": " ".join(words) + f" ({d})\n"}))
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n")
    ranks = train_bpe([json.loads(x)["text"] for x in lines], 300)
    TiktokenTokenizer.from_ranks(ranks).save(root / "tok.model")
    preprocess([root / "docs.jsonl"], root / "toy", TiktokenTokenizer(root / "tok.model"), validation_fraction=0.1,
               progress=False)
    return root


def config(corpus: Path, tmp: Path, **kw) -> TrainConfig:
    base = dict(layers=1, data_dir=str(corpus), train_prefix="toy_train_text_document",
                valid_prefix="toy_validation_text_document", cache_dir=str(tmp / "cache"), batch_size=2, seq_len=32,
                lr=1e-2, warmup_samples=4, train_samples=48, eval_every=24, eval_samples=4, eval_batch_size=2,
                eval_target=0.01, progress=False)  # the toy data is easy: no early stop unless asked
    return TrainConfig(**(base | kw))


def test_training_lowers_the_loss_and_logs_mlperf(corpus, tmp_path):
    log = tmp_path / "mllog.txt"
    result = train(config(corpus, tmp_path, log_mlperf=str(log)))
    assert result.steps == 24 and result.samples == 48 and len(result.losses) == 24
    tokens = IndexedDataset(corpus / "toy_train_text_document")
    entropy = unigram_entropy_of(np.concatenate([tokens[i] for i in range(len(tokens))]), 4096)
    assert np.mean(result.losses[:2]) > 7.5  # ~ln(4096) at init
    assert np.mean(result.losses[-4:]) < entropy  # it learned more than token frequencies
    assert [s for s, _ in result.evals] == [24, 48] and result.evals[1][1] < result.evals[0][1]
    lines = [json.loads(x.split(":::MLLOG ", 1)[1]) for x in log.read_text().splitlines() if ":::MLLOG " in x]
    keys = [x["key"] for x in lines]
    for key in ("cache_clear", "init_start", "init_stop", "run_start", "seed", "global_batch_size", "opt_name",
                "opt_adamw_beta_2", "opt_gradient_clip_norm", "opt_learning_rate_decay_steps", "block_start",
                "block_stop", "eval_start", "eval_accuracy", "eval_stop", "run_stop", "train_samples"):
        assert key in keys, key
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("block_start") < keys.index("run_stop")
    evals = [x for x in lines if x["key"] == "eval_accuracy"]
    assert [e["metadata"]["samples_count"] for e in evals] == [24, 48]
    assert evals[-1]["value"] == pytest.approx(result.evals[-1][1])
    run_stop = next(x for x in lines if x["key"] == "run_stop")
    assert run_stop["metadata"]["status"] == "aborted"  # 3.3 is out of reach in 24 steps
    assert next(x for x in lines if x["key"] == "train_samples")["value"] == 48


def test_resume_is_bit_identical(corpus, tmp_path):
    full = train(config(corpus, tmp_path, train_samples=16, eval_every=8))
    ckpt = tmp_path / "ckpt"
    first = train(config(corpus, tmp_path, train_samples=8, eval_every=8, checkpoint_dir=str(ckpt),
                         checkpoint_every=4))
    assert (ckpt / "latest").read_text().strip() == "step_00000004"
    assert sorted(p.name for p in (ckpt / "step_00000004").iterdir()) == ["model.safetensors",
                                                                        "optimizer.safetensors", "state.json"]
    rest = train(config(corpus, tmp_path, train_samples=16, eval_every=8, checkpoint_dir=str(ckpt), resume=True))
    assert first.losses == full.losses[:4]
    assert rest.losses == full.losses[4:]  # exactly: same weights, optimizer state, schedule and data position
    assert rest.evals == full.evals and rest.steps == 8
    # `ember-llama eval`: the checkpoint's model gives the validation loss the run logged at that step
    assert evaluate(config(corpus, tmp_path), str(ckpt)) == pytest.approx(first.evals[-1][1], rel=1e-6)
    with pytest.raises(ValueError, match="differs from the checkpoint"):
        train(config(corpus, tmp_path, train_samples=16, lr=5e-3, checkpoint_dir=str(ckpt), resume=True))


def test_out_of_vocabulary_data_is_refused(corpus, tmp_path, capsys):
    # one token beyond the model's vocabulary (4096) in the middle of the training data: refused before training,
    # in one line naming the file, the position, the token and the vocabulary size
    src = IndexedDataset(corpus / "toy_train_text_document")
    docs = [np.asarray(src[i]) for i in range(len(src))]
    docs[len(docs) // 2 + 1] = np.concatenate([docs[len(docs) // 2 + 1][:3], [4100], docs[len(docs) // 2 + 1][3:]])
    with IndexedDatasetWriter(tmp_path / "bad_train", "int32") as writer:
        for doc in docs:
            writer.add_document(doc)
    for suffix in (".bin", ".idx"):
        (tmp_path / f"toy_validation_text_document{suffix}").write_bytes(
            (corpus / f"toy_validation_text_document{suffix}").read_bytes())
    cfg = config(corpus, tmp_path, data_dir=str(tmp_path), train_prefix="bad_train")
    position = sum(len(d) for d in docs[:len(docs) // 2 + 1]) + 3
    with pytest.raises(ValueError, match=rf"bad_train\.bin: token 4100 at position {position} \(sequence "
                                         rf"{len(docs) // 2 + 1}, offset 3\) is outside the vocabulary of 4096 ids"):
        train(cfg)
    assert list((tmp_path / "cache" / "index").glob("*-tokens.json"))  # the scan is cached with the indices
    assert cli.main(["train", "--layers", "1", "--data-dir", str(tmp_path), "--train-prefix", "bad_train",
                     "--valid-prefix", "toy_validation_text_document", "--cache-dir", str(tmp_path / "cache"),
                     "--batch-size", "2", "--seq-len", "16", "--eval-samples", "2", "--eval-batch-size", "2",
                     "--no-progress"]) != 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (after the run's summary line)
    assert "Traceback" not in err and "token 4100" in last and "vocabulary of 4096 ids" in last, err


def test_target_reached_stops_with_success(corpus, tmp_path):
    result = train(config(corpus, tmp_path, eval_target=50.0, train_samples=48, eval_every=4))
    assert result.status == "success" and result.steps == 2 and len(result.evals) == 1


def test_data_errors_are_clear(corpus, tmp_path):
    with pytest.raises(FileNotFoundError):
        train(config(corpus, tmp_path, train_prefix="missing"))
    with pytest.raises(ValueError, match="eval_samples"):
        train(config(corpus, tmp_path, eval_samples=100000, eval_batch_size=2))
    # a tokenizer given for the (pre-tokenized) data must exist, parse, and fit the vocabulary
    with pytest.raises(FileNotFoundError, match="tokenizer file .*nope.model.* does not exist"):
        train(config(corpus, tmp_path, tokenizer=str(tmp_path / "nope.model")))
    (tmp_path / "junk.model").write_bytes(b"\x00\xffnot a tokenizer")
    with pytest.raises(ValueError, match="neither a tiktoken ranks file"):
        train(config(corpus, tmp_path, tokenizer=str(tmp_path / "junk.model")))
    ranks = {bytes([i]): i for i in range(256)} | {b"x" * n: 254 + n for n in range(2, 5000)}
    big = TiktokenTokenizer.from_ranks(ranks)
    big.save(tmp_path / "big.model")
    # the model's vocabulary follows the tokenizer's (issue 17), so a bigger tokenizer is a bigger embedding
    assert model_config(config(corpus, tmp_path, tokenizer=str(tmp_path / "big.model"))).vocab_size == big.vocab_size


def test_cli(corpus, tmp_path, capsys):
    for command in ("train", "eval", "preprocess", "tokenizer-train"):
        with pytest.raises(SystemExit) as e:
            cli.main([command, "--help"])
        assert e.value.code == 0
        assert "usage: ember-llama" in capsys.readouterr().out
    assert cli.main(["tokenizer-train", str(corpus / "docs.jsonl"), "--vocab-size", "600", "--output",
                     str(tmp_path / "t.model")]) == 0
    assert json.loads(capsys.readouterr().out)["vocab_size"] == 600
    assert cli.main(["preprocess", str(corpus / "docs.jsonl"), "--output", str(tmp_path / "p"), "--tokenizer",
                     str(tmp_path / "t.model"), "--validation-fraction", "0.1", "--no-progress"]) == 0
    assert IndexedDataset(tmp_path / "p_train_text_document").num_tokens > 0
    assert cli.main(["train", "--batch-size", "0"]) == 2
    assert "batch_size" in capsys.readouterr().err


def test_gradient_accumulation_matches_a_bigger_batch(corpus, tmp_path):
    big = train(config(corpus, tmp_path, train_samples=6, eval_every=100))
    acc = train(config(corpus, tmp_path, train_samples=6, eval_every=100, batch_size=1, grad_acc_steps=2))
    assert acc.steps == big.steps == 3
    np.testing.assert_allclose(acc.losses, big.losses, rtol=2e-5)  # the same samples, summed in another order


def test_bfloat16_master_weights_benchmark_fake_data_and_wandb(tmp_path):
    cfg = TrainConfig(layers=1, batch_size=2, seq_len=32, fake_data=True, benchmark=3, dtype="bfloat16",
                      master_weights=True, wandb=True, wandb_mode="offline", cache_dir=str(tmp_path), progress=False)
    result = train(cfg)
    assert result.status == "benchmark" and result.steps == 3 and all(np.isfinite(result.losses))
    assert 7.5 < result.losses[0] < 9.0  # ~ln(4096): random tokens
    assert list(tmp_path.glob("wandb/offline-run-*")), "wandb wrote no offline run"
    assert 7.5 < evaluate(cfg) < 9.0  # fake validation batches too


def test_one_optimizer_step_matches_pytorch(torch_llama):
    """A whole trainer step (2 accumulated micro-batches, global-norm clipping that engages, AdamW with Megatron's
    weight-decay groups, the scheduled warmup lr) against torch.optim.AdamW + clip_grad_norm_ on the same weights."""
    import torch

    from ember.mlperf_llama.schedule import learning_rate
    from ember.mlperf_llama.train import Trainer
    from ember.tensor import Tensor

    cfg = TrainConfig(layers=1, batch_size=2, grad_acc_steps=2, seq_len=16, fake_data=True, lr=1e-2,
                      warmup_samples=8, clip_norm=0.5, progress=False)
    trainer = Trainer(cfg)
    before = {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in trainer.model.named_parameters().items()}
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, 4096, (2, 17)).astype(np.int32) for _ in range(2)]
    lr = learning_rate(0, cfg.lr, cfg.end_learning_rate, cfg.warmup_steps, cfg.max_steps)
    assert lr == pytest.approx(1e-2 / 3)  # warmup: base * (0 + 1) / (W + 1), W = 8 // 4 = 2
    trainer.opt.lr = lr
    for b in batches:
        trainer.micro_step(Tensor(b))
    grad_norm = trainer.optimizer_step().item()

    opt = torch.optim.AdamW([{"params": [p for p in before.values() if p.ndim >= 2], "weight_decay": 0.1},
                             {"params": [p for p in before.values() if p.ndim < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-5)
    for b in batches:
        t = torch.tensor(b, dtype=torch.long)
        logits = torch_llama(trainer.model_cfg, before, t[:, :-1])
        (torch.nn.functional.cross_entropy(logits.reshape(-1, 4096), t[:, 1:].reshape(-1)) / 2).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(list(before.values()), 0.5).item()
    opt.step()
    assert ref_norm > 0.5 and grad_norm == pytest.approx(ref_norm, rel=1e-4)  # the clip engaged
    for name, p in trainer.model.named_parameters().items():
        np.testing.assert_allclose(p.numpy(), before[name].detach().numpy(), rtol=1e-4, atol=lr * 2e-3, err_msg=name)


def test_embedded_dataset_builds_once(tmp_path):
    from ember.mlperf_llama.embedded import embedded_dataset

    data = embedded_dataset(tmp_path, vocab_size=1024, corpus_bytes=1_000_000, progress=False)
    tok = TiktokenTokenizer(data.tokenizer_path)
    assert tok.vocab_size == 1024 and tok.num_base_tokens == 768
    train_ds, valid_ds = IndexedDataset(data.train_prefix), IndexedDataset(data.valid_prefix)
    assert train_ds.num_tokens > 10 * valid_ds.num_tokens > 0
    stamp = Path(f"{data.train_prefix}.idx").stat().st_mtime_ns
    assert embedded_dataset(tmp_path, vocab_size=1024, corpus_bytes=1_000_000, progress=False) == data
    assert Path(f"{data.train_prefix}.idx").stat().st_mtime_ns == stamp  # cached: not rebuilt
    with pytest.raises(ValueError, match="vocab_size must exceed 512"):
        embedded_dataset(tmp_path, vocab_size=512, corpus_bytes=1_000_000)
