"""Issue 17: a run that an MLPerf reviewer's tools accept (mlperf-logging's compliance, seed, system-description and
package checkers, ruleset 6.1.0), checked on tiny CPU runs.

Tiny runs cannot meet what only an 8B run on C4 can: they log max_sequence_length 16 (closed: 8192), eval_samples 2
(closed: 1024), never reach the 3.3 log-perplexity target, and the RCP checker has no reference for them (global
batch 2, no converged run). These are the only checks expected to fail; everything else (the key set, counts, order,
closed AdamW/schedule values, the 6.1.0 precision/parallelism/config keys, seeds, the folder layout, the system
description) must pass.
"""

import json
import logging
import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from mlperf_logging.compliance_checker import mlp_compliance
from mlperf_logging.package_checker import package_checker

from ember.mlperf_llama import cli
from ember.mlperf_llama.config import TrainConfig, config_from_args
from ember.mlperf_llama.launch import launch_submission, required_runs, submission_paths
from ember.mlperf_llama.logging import MLLogger, comm_precision, log_hyperparameters
from ember.mlperf_llama.phases import beam_search, warm_up
from ember.mlperf_llama.train import Trainer, train

RULESET = "6.1.0"
# the tiny run: closed-division optimizer and schedule values (lr/warmup are free for llama31_8b), a 1-layer model
TINY = dict(preset="tiny", layers=1, seq_len=16, batch_size=2, grad_acc_steps=1, train_samples=4, eval_every=2,
            eval_samples=2, eval_batch_size=2, fake_data=True, progress=False, warmup_samples=2)
# what a tiny run cannot meet (see the module docstring)
EXPECTED_FAILURES = {"max_sequence_length", "eval_samples"}


def check_log(path: Path) -> mlp_compliance.ComplianceChecker:
    checker = mlp_compliance.make_checker("training", RULESET, quiet=True, werror=False)
    checker.valid = checker.check_file(str(path), f"training_{RULESET}/common.yaml")
    return checker


def records(path: Path) -> list[dict]:
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()]


def test_trainer_log_passes_the_6_1_0_checker_but_for_scale_and_target(tmp_path):
    log = tmp_path / "result_0.txt"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    cfg = TrainConfig.from_sources(file=config, overrides={"log_mlperf": str(log), "seed": 77})
    result = train(cfg)
    assert result.status == "aborted" and result.steps == 2
    checker = check_log(log)
    assert not checker.valid
    assert set(checker.overwritable) == EXPECTED_FAILURES, checker.overwritable
    assert len(checker.not_overwritable) == 1 and "eval_accuracy" in checker.not_overwritable[0]  # target 3.3
    assert checker.warnings == {}
    by_key = {r["key"]: r for r in records(log)}
    counts = Counter(r["key"] for r in records(log))
    assert counts["seed"] == 1 and counts["init_stop"] == 1 and counts["run_start"] == 1
    assert {k: by_key[k]["value"] for k in ("lowest_numerical_precision_in_comm", "tensor_parallelism",
                                             "pipeline_parallelism", "context_parallelism", "expert_parallelism",
                                             "config_filename", "seed")} == {
        "lowest_numerical_precision_in_comm": "fp32", "tensor_parallelism": 1, "pipeline_parallelism": 1,
        "context_parallelism": 1, "expert_parallelism": 1, "config_filename": "tiny.json", "seed": 77}
    # every line names its call site relative to the package root, wherever the package is installed
    assert {r["metadata"]["file"] for r in records(log)} == {"ember/mlperf_llama/train.py"}


def test_closed_values_pass_the_checker_with_only_the_scale_stubbed(tmp_path):
    # the log of a tiny run, then the two values only an 8B run can log (8192 tokens, 1024 eval sequences) and a
    # reached target substituted: the rest of the log, as the trainer wrote it, passes ruleset 6.1.0 entirely
    log = tmp_path / "run.txt"
    train(TrainConfig(**TINY, log_mlperf=str(log), seed=5))
    stub = {"max_sequence_length": 8192, "eval_samples": 1024}
    lines = []
    for r in records(log):
        if r["key"] in stub:
            r["value"] = stub[r["key"]]
        if r["key"] == "eval_accuracy":
            r["value"] = 3.29
        lines.append(":::MLLOG " + json.dumps(r))
    stubbed = tmp_path / "stubbed.txt"
    stubbed.write_text("\n".join(lines) + "\n")
    checker = check_log(stubbed)
    assert checker.valid, (checker.overwritable, checker.not_overwritable)


def test_comm_precision_and_parallelism_follow_the_layout(tmp_path):
    assert comm_precision(TrainConfig(dtype="bfloat16")) == "bfloat16"  # one device: the gradients' dtype
    assert comm_precision(TrainConfig(dtype="bfloat16", dp=2, batch_size=4)) == "bfloat16"  # in-graph allreduce
    assert comm_precision(TrainConfig(dtype="bfloat16", dp=2, batch_size=4), ranks=2) == "fp32"  # MPI: float32
    assert comm_precision(TrainConfig(dtype="bfloat16", mp=2)) == "bfloat16"
    path = tmp_path / "hp.txt"
    with MLLogger(path) as ml:
        values = log_hyperparameters(ml, TrainConfig(mp=2, config_file="/x/config_sys.json"), n_params=10)
    assert values["tensor_parallelism"] == 2 and values["config_filename"] == "config_sys.json"
    with MLLogger(path) as ml, pytest.raises(ValueError, match="ranks must be a positive integer, got 0"):
        log_hyperparameters(ml, TrainConfig(), n_params=10, ranks=0)


def test_warm_up_compiles_without_changing_the_run():
    cfg = TrainConfig(**{**TINY, "grad_acc_steps": 2, "eval_samples": 3})
    batches = np.random.default_rng(0).integers(0, 4096, (4, 2, 17), dtype=np.int32)

    def steps(warm: bool) -> tuple[list[float], dict[str, np.ndarray]]:
        trainer = Trainer(cfg)
        if warm:
            warm_up(trainer)
            assert trainer.micro_step.kernel_count > 0 and trainer.optimizer_step.kernel_count > 0
            assert trainer.eval_step.kernel_count > 0 and trainer.opt.step_count == 0
        losses = []
        for i in range(2):
            trainer.opt.lr = 1e-3
            losses += [trainer.micro_step(trainer.place(batches[2 * i + j]))[0].item() for j in range(2)]
            losses.append(trainer.optimizer_step().item())
        return losses, {k: v.numpy() for k, v in trainer.model.checkpoint_state().items()}

    cold, cold_weights = steps(False)
    warm, warm_weights = steps(True)
    assert warm == cold  # bit for bit
    assert all(np.array_equal(cold_weights[k], warm_weights[k]) for k in cold_weights)


def test_beam_search_sets_and_restores_the_env(monkeypatch):
    monkeypatch.setenv("BEAM", "1")
    with beam_search(3):
        assert os.environ["BEAM"] == "3"
    assert os.environ["BEAM"] == "1"
    with pytest.raises(ValueError, match="width must be a non-negative integer, got -1"):
        with beam_search(-1):
            pass


def test_init_only_writes_no_log_and_stops_before_the_run(tmp_path, capsys):
    log = tmp_path / "init.txt"
    result = train(TrainConfig(**{**TINY, "progress": True}, log_mlperf=str(log), init_only=True))
    assert result.status == "init" and result.steps == 0 and not log.exists()
    assert "init phase: kernels compiled" in capsys.readouterr().err


def test_submission_folder_passes_the_package_checker_but_for_scale_and_target(tmp_path, caplog):
    root = tmp_path / "ember"
    result = launch_submission(TrainConfig(**TINY), root, "cpu_tiny", in_process=True,
                               system_overrides={"cooling": "air"})
    system_json, results, implementation = submission_paths(root, "cpu_tiny")
    assert len(result.result_files) == required_runs() == 10
    assert sorted(p.name for p in results.iterdir()) == sorted(f"result_{i}.txt" for i in range(10))
    assert len(set(result.seeds)) == 10 and result.statuses == ["aborted"] * 10
    assert [r["value"] for f in result.result_files for r in records(f) if r["key"] == "seed"] == result.seeds
    stored = json.loads(result.config_path.read_text())
    assert "seed" not in stored and "log_mlperf" not in stored and stored["layers"] == 1
    assert {r["value"] for f in result.result_files for r in records(f) if r["key"] == "config_filename"} == \
        {"config_cpu_tiny.json"}
    assert json.loads(system_json.read_text())["cooling"] == "air"
    caplog.set_level(logging.INFO)
    assert package_checker.check_systems(str(root), "training", RULESET)
    ok = package_checker.check_training_result_files(str(root), "training", RULESET, quiet=True, werror=False,
                                                     rcp_bypass=False, rcp_bert_train_samples=False,
                                                     seed_checker_bypass=False)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not ok
    # expected: every run fails the scale/target checks, so the folder is refused, and no RCP covers a tiny run
    assert any("10 files do not comply" in e for e in errors), errors
    assert any(e.startswith("RCP Test Failed") for e in errors), errors
    # not expected: the file count, the seeds, the layout
    assert not any("Incorrect number of files" in e or "Seed checker failed" in e for e in errors), errors
    for f in result.result_files:
        checker = check_log(f)
        assert set(checker.overwritable) == EXPECTED_FAILURES


def test_the_8b_launch_script_asks_for_the_closed_values(tmp_path):
    # the script with a stand-in `ember-llama` on PATH that prints its arguments: they parse into the closed config
    stub = tmp_path / "bin" / "ember-llama"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "scripts" / "run_llama31_8b.sh"
    env = {"PATH": f"{stub.parent}:{os.environ['PATH']}", "DATA": "/data/c4", "TOKENIZER": "/data/tok.model",
           "SYSTEM": "8xH200", "DP": "8", "DEVICE": "CUDA", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True)
    args = cli.build_parser().parse_args(done.stdout.splitlines())
    assert args.command == "submission" and args.system == "8xH200" and args.runs == 10
    cfg = config_from_args(args, env={})
    assert (cfg.preset, cfg.seq_len, cfg.eval_samples, cfg.eval_every, cfg.eval_target) == ("8B", 8192, 1024, 12288,
                                                                                             3.3)
    assert (cfg.global_batch_size, cfg.lr, cfg.warmup_steps, cfg.dp, cfg.dtype) == (32, 8e-4, 128, 8, "bfloat16")
    assert (cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.clip_norm) == (0.9, 0.95, 1e-5, 0.1, 1.0)


def test_the_submission_command(tmp_path, capsys):
    system_json = tmp_path / "extra.json"
    system_json.write_text(json.dumps({"cooling": "liquid"}))
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if not isinstance(v, bool)]
    assert cli.main(["submission", "--output", str(tmp_path / "sub"), "--system", "box", "--runs", "2",
                     "--system-json", str(system_json), "--in-process", "--fake-data", "--no-progress",
                     *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["statuses"] == ["aborted", "aborted"] and len(set(out["seeds"])) == 2
    assert [Path(p).name for p in out["results"]] == ["result_0.txt", "result_1.txt"]
    assert json.loads((tmp_path / "sub" / "systems" / "box.json").read_text())["cooling"] == "liquid"
