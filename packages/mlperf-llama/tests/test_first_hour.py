"""Issue 17: the first hour of a new user, each step as the README tells it: one's own data preprocessed (with a
validation split by default), trained, evaluated from the checkpoint alone, resumed; the help text and the code
agreeing on precedence; the vocabulary following the tokenizer; a fresh seed per run."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama import cli
from ember.mlperf_llama.config import TrainConfig, add_cli_arguments
from ember.mlperf_llama.run_config import train_config
from ember.mlperf_llama.tokenizer import TiktokenTokenizer, train_bpe
from ember.mlperf_llama.train import model_config

REPO = Path(__file__).resolve().parents[3]
WORDS = "a small model learns to predict the next word of a repetitive text about foxes and dogs".split()
SMALL = ["--layers", "1", "--batch-size", "2", "--seq-len", "16", "--eval-samples", "2", "--eval-batch-size", "2",
         "--no-progress"]


@pytest.fixture(scope="module")
def own_data(tmp_path_factory) -> tuple[Path, Path]:
    """A user's jsonl and a tokenizer for it; returns (folder, tokenizer path)."""
    root = tmp_path_factory.mktemp("own")
    rng = np.random.default_rng(1)
    docs = [" ".join(WORDS[(s + i) % len(WORDS)] for i in range(60)) for s in rng.integers(0, len(WORDS), 80)]
    (root / "mine.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    TiktokenTokenizer.from_ranks(train_bpe(docs, 290)).save(root / "tok.model")
    return root, root / "tok.model"


def test_own_data_preprocess_train_eval_resume(own_data, tmp_path, capsys, monkeypatch):
    for name in ("SEED", "BS", "SEQLEN", "DATA_SEED"):
        monkeypatch.delenv(name, raising=False)
    root, tok = own_data
    # preprocess: a validation split by default, and the train command to use printed
    assert cli.main(["preprocess", str(root / "mine.jsonl"), "--output", str(tmp_path / "mine"), "--tokenizer",
                     str(tok), "--no-progress"]) == 0
    out = capsys.readouterr()
    summary = json.loads(out.out)
    assert summary["validation_documents"] == 4 and summary["documents"] == 76  # every 20th document
    hint = re.search(r"train on it with: ember-llama train (.*)", out.err).group(1).split()
    assert hint == ["--data-dir", str(tmp_path), "--train-prefix", "mine_train_text_document", "--valid-prefix",
                    "mine_validation_text_document", "--tokenizer", str(tok)]
    ckpt = tmp_path / "ckpt"
    run = [*hint, *SMALL, "--cache-dir", str(tmp_path / "cache"), "--checkpoint-dir", str(ckpt),
           "--checkpoint-every", "1", "--eval-every", "4"]
    assert cli.main(["train", *run, "--train-samples", "4"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["steps"] == 2 and len(first["evals"]) == 1
    state = json.loads((ckpt / "step_00000002" / "state.json").read_text())
    assert 0 <= state["config"]["seed"] < 32768  # drawn for this run
    # eval from the checkpoint alone: its stored config names the data, the tokenizer and the model
    assert cli.main(["eval", "--checkpoint", str(ckpt), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert json.loads(capsys.readouterr().out)["log_perplexity"] == pytest.approx(first["evals"][0][1], rel=1e-6)
    # resume: the checkpoint's seed (no fresh one), and it says where it resumed
    assert cli.main(["train", *run, "--train-samples", "8", "--resume"]) == 0
    out = capsys.readouterr()
    assert "ember-llama: resumed from step 2 (4 samples)" in out.err and json.loads(out.out)["steps"] == 4
    # an eval error names eval, not resume
    (ckpt / "latest").write_text("step_00000009\n")
    assert cli.main(["eval", "--checkpoint", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember-llama eval: error: FileNotFoundError: eval: ") and "resume" not in err


def test_train_help_states_the_precedence_the_code_follows(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("lowest to highest precedence: the defaults, the --config file, the MLPerf env vars (BS, "
            "GRADIENT_ACC_STEPS, SEQLEN, LR, ...), then the flags") in text
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"batch_size": 2, "seq_len": 32}))
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--config", str(file)])
    assert train_config(args, env={}).batch_size == 2  # the file beats the defaults
    assert train_config(args, env={"BS": "3"}).batch_size == 3  # the env beats the file
    args = parser.parse_args(["train", "--config", str(file), "--batch-size", "5"])
    assert train_config(args, env={"BS": "3"}).batch_size == 5  # the flag beats the env


def test_fresh_seed_unless_given(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    seeds = {train_config(parser.parse_args([]), env={}).seed for _ in range(3)}
    assert len(seeds) > 1 and all(0 <= s < 32768 for s in seeds)  # three equal draws: p = 2**-30
    assert train_config(parser.parse_args([]), env={"SEED": "42"}).seed == 42
    assert train_config(parser.parse_args(["--seed", "7"]), env={"SEED": "42"}).seed == 7
    file = tmp_path / "s.toml"
    file.write_text("seed = 9\n")
    cfg = train_config(parser.parse_args(["--config", str(file)]), env={})
    assert cfg.seed == 9 and cfg.effective_data_seed == 9  # the data order follows the seed unless given
    cfg = train_config(parser.parse_args(["--config", str(file), "--data-seed", "3"]), env={})
    assert (cfg.seed, cfg.effective_data_seed) == (9, 3)
    assert TrainConfig().seed == 1234  # the library default stays fixed (tests, tools/dev/step_fingerprint.py)


def test_vocabulary_follows_the_tokenizer(own_data):
    _, tok = own_data
    assert model_config(TrainConfig(tokenizer=str(tok))).vocab_size == TiktokenTokenizer(tok).vocab_size == 290 + 256
    assert model_config(TrainConfig()).vocab_size == 4096  # no tokenizer named: the preset's (the embedded one)


def test_preprocess_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["preprocess", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "<prefix>_train_text_document.{bin,idx} and <prefix>_validation_text_document.{bin,idx}" in text
    assert "default: 0.05" in text


def test_readmes_say_how_to_run_it():
    root = (REPO / "README.md").read_text()
    package = (REPO / "packages" / "mlperf-llama" / "README.md").read_text()
    # the root README's first two commands are what they were: install and run the main job, then every test
    commands = re.findall(r"^(\S.*?)\s+#", root.split("```sh", 1)[1].split("```", 1)[0], re.MULTILINE)
    assert commands[:2] == ["pip install hatch && hatch run train", "hatch run test:all"]
    for text in (root, package):
        assert "hatch shell" in text and "hatch run ember-llama" in text and "pip install -e packages/" in text
        assert "download.pytorch.org/whl/cpu" in text
