import io
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from mlperf_logging.compliance_checker import mlp_compliance

from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.logging import (
    DECAY_SCHEDULE,
    NUM_PARAMETERS,
    MLLogger,
    Progress,
    WandbLogger,
    log_hyperparameters,
    log_submission,
)

HERE = Path(__file__).resolve()
RULESET = "6.1.0"  # mlperf-logging 4.1.68's default for training
LINE_KEYS = ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
EXACTLY_ONE = [
    "submission_org", "submission_platform", "submission_division", "submission_benchmark", "init_stop", "run_start",
    "run_stop", "global_batch_size", "max_sequence_length", "max_steps", "gradient_accumulation_steps", "opt_name",
    "opt_base_learning_rate", "opt_end_learning_rate", "opt_learning_rate_warmup_steps",
    "opt_learning_rate_decay_steps", "opt_learning_rate_decay_schedule", "opt_adamw_beta_1", "opt_adamw_beta_2",
    "opt_adamw_epsilon", "opt_adamw_weight_decay", "opt_gradient_clip_norm", "eval_samples", "train_samples",
    # required exactly once from ruleset 6.1.0 on (the spec's table called some of them optional: 6.0.0 did)
    "micro_batch_size", "lowest_numerical_precision_in_linear", "lowest_numerical_precision_in_attn",
    "lowest_numerical_precision_in_comm", "tensor_parallelism", "pipeline_parallelism", "context_parallelism",
    "expert_parallelism", "config_filename",
]
AT_LEAST_ONE = ["cache_clear", "init_start", "seed", "block_start", "block_stop", "eval_start", "eval_stop",
                "eval_accuracy"]

# The MLPerf-sized values the closed llama31_8b checker demands (max_sequence_length 8192, eval_samples 1024),
# with the RCP GBS-32 schedule.
MLPERF_CFG = TrainConfig(batch_size=16, grad_acc_steps=2, seq_len=8192, lr=8e-4, warmup_samples=4096,
                         eval_every=12288, eval_samples=1024, train_samples=24_576, seed=4321).validate()


def write_short_run(path: Path, cfg: TrainConfig, evals: tuple[float, ...] = (3.9, 3.29)) -> dict[str, int]:
    """The event sequence of a two-block run that reaches the target; returns key -> call line number."""
    lines = {}
    with MLLogger(path, root_dir=HERE.parent) as ml:
        lines["cache_clear"] = _next_line()
        ml.event("cache_clear", True)
        ml.start("init_start")
        lines["submission"] = _next_line()
        log_submission(ml, cfg)
        lines["hyperparameters"] = _next_line()
        log_hyperparameters(ml, cfg, n_params=8_030_261_248, include_train_samples=False)
        ml.end("init_stop")
        ml.start("run_start")
        samples = 0
        for accuracy in evals:
            ml.start("block_start", metadata={"samples_count": samples, "epoch_count": 1, "first_epoch_num": 0})
            samples += cfg.eval_every_steps * cfg.global_batch_size
            ml.end("block_stop", metadata={"samples_count": samples, "first_epoch_num": 0})
            ml.start("eval_start", metadata={"samples_count": samples})
            ml.event("eval_accuracy", np.float32(accuracy), metadata={"samples_count": samples})
            ml.end("eval_stop", metadata={"samples_count": samples})
        lines["run_stop"] = _next_line()
        ml.end("run_stop", metadata={"status": "success", "samples_count": samples})
        ml.event("train_samples", samples)
    return lines


def _next_line() -> int:
    return sys._getframe(1).f_lineno + 1


def parse(path: Path) -> list[dict]:
    records = []
    for text in path.read_text().splitlines():
        assert text.startswith(":::MLLOG "), text
        record = json.loads(text[len(":::MLLOG "):], object_pairs_hook=lambda pairs: pairs)
        assert [k for k, _ in record] == LINE_KEYS
        records.append(json.loads(text[len(":::MLLOG "):]))
    return records


def run_checker(path: Path) -> mlp_compliance.ComplianceChecker:
    checker = mlp_compliance.make_checker("training", RULESET, quiet=False, werror=False)
    checker.valid = checker.check_file(str(path), f"training_{RULESET}/common.yaml")
    return checker


def test_short_run_log_format_and_counts(tmp_path):
    path = tmp_path / "result_0.txt"
    lines = write_short_run(path, MLPERF_CFG)
    records = parse(path)
    counts = Counter(r["key"] for r in records)
    for key in EXACTLY_ONE:
        assert counts[key] == 1, key
    for key in AT_LEAST_ONE:
        assert counts[key] >= 1, key
    assert counts["eval_accuracy"] == 2 and counts["block_start"] == 2
    by_key = {r["key"]: r for r in records}
    assert [r["key"] for r in records[:3]] == ["cache_clear", "init_start", "submission_org"]
    assert {r["namespace"] for r in records} == {""}
    assert all(isinstance(r["time_ms"], int) for r in records)
    assert by_key["init_start"]["event_type"] == "INTERVAL_START" and by_key["init_start"]["value"] is None
    assert by_key["run_stop"]["event_type"] == "INTERVAL_END"
    assert by_key["run_stop"]["metadata"] == {"file": "test_logging.py", "lineno": lines["run_stop"],
                                              "status": "success", "samples_count": 24_576}
    assert by_key["cache_clear"] == {"namespace": "", "time_ms": by_key["cache_clear"]["time_ms"],
                                     "event_type": "POINT_IN_TIME", "key": "cache_clear", "value": True,
                                     "metadata": {"file": "test_logging.py", "lineno": lines["cache_clear"]}}
    # helpers report the line that called them, not their own
    assert by_key["submission_org"]["metadata"] == {"file": "test_logging.py", "lineno": lines["submission"]}
    assert by_key["opt_name"]["metadata"] == {"file": "test_logging.py", "lineno": lines["hyperparameters"]}
    assert by_key["eval_accuracy"]["value"] == pytest.approx(3.29, rel=1e-6)  # numpy scalar encoded as a number
    expected = {
        "submission_org": "ember", "submission_platform": "cpu", "submission_division": "closed",
        "submission_benchmark": "llama31_8b", "submission_status": "onprem", "seed": 4321, "global_batch_size": 32,
        "max_sequence_length": 8192, "max_steps": 1_200_000, "gradient_accumulation_steps": 2,
        "micro_batch_size": 16, "opt_name": "adamw", "opt_base_learning_rate": 8e-4,
        "opt_end_learning_rate": pytest.approx(8e-5, rel=1e-15), "opt_learning_rate_warmup_steps": 128,
        "opt_learning_rate_decay_steps": 1_199_872, "opt_learning_rate_decay_schedule": DECAY_SCHEDULE,
        "opt_adamw_beta_1": 0.9, "opt_adamw_beta_2": 0.95, "opt_adamw_epsilon": 1e-5, "opt_adamw_weight_decay": 0.1,
        "opt_gradient_clip_norm": 1.0, "eval_samples": 1024, "train_samples": 24_576,
        "lowest_numerical_precision_in_linear": "fp32", "lowest_numerical_precision_in_attn": "fp32",
        "lowest_numerical_precision_in_comm": "fp32", "tensor_parallelism": 1, "pipeline_parallelism": 1,
        "context_parallelism": 1, "expert_parallelism": 1, "config_filename": "none",
        NUM_PARAMETERS: 8_030_261_248,
    }
    assert {key: by_key[key]["value"] for key in expected} == expected
    assert by_key["seed"]["metadata"]["data_seed"] == 4321


def test_official_compliance_checker_passes(tmp_path):
    path = tmp_path / "result_0.txt"
    write_short_run(path, MLPERF_CFG)
    checker = run_checker(path)
    assert checker.valid, (checker.overwritable, checker.not_overwritable)
    assert checker.warnings == {}


def test_compliance_checker_rejects_cpu_values_and_missing_target(tmp_path):
    path = tmp_path / "cpu.txt"
    write_short_run(path, TrainConfig(), evals=(5.1, 4.2))  # seq_len 256, eval_samples 64, target not reached
    checker = run_checker(path)
    assert not checker.valid
    assert {"max_sequence_length", "eval_samples"} <= set(checker.overwritable)
    assert any("eval_accuracy" in message for message in checker.not_overwritable)


def test_default_hyperparameters_include_train_samples(tmp_path):
    path = tmp_path / "hp.txt"
    with MLLogger(str(path)) as ml:
        values = log_hyperparameters(ml, TrainConfig(dtype="bfloat16"), n_params=1000)
    records = parse(path)
    assert [r["key"] for r in records] == list(values)
    assert values["train_samples"] == TrainConfig().train_samples
    assert values["lowest_numerical_precision_in_linear"] == "bfloat16"
    assert records[0]["metadata"]["file"] == str(HERE)  # no root_dir: the full path


def test_stdout_disabled_and_append(tmp_path, capsys):
    ml = MLLogger("-", default_namespace="worker0")
    ml.event("cache_clear", True)
    ml.close()
    out = capsys.readouterr().out
    assert out.startswith(':::MLLOG {"namespace": "worker0", "time_ms": ') and out.count("\n") == 1
    for off in (None, ""):
        disabled = MLLogger(off)
        assert not disabled.enabled
        disabled.event("cache_clear", True)
        disabled.start("run_start")
        disabled.end("run_stop", metadata={"status": "aborted"})
    assert capsys.readouterr().out == ""
    path = tmp_path / "log.txt"
    for _ in range(2):
        with MLLogger(path) as ml:
            ml.event("cache_clear", True)
    assert len(parse(path)) == 2
    with MLLogger(path, append=False) as ml:
        ml.event("cache_clear", True)
    assert len(parse(path)) == 1
    ml.event("after_close", 1)  # closed: a no-op
    assert len(parse(path)) == 1


def test_mllogger_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="directory .*missing.* of log file .* does not exist"):
        MLLogger(tmp_path / "missing" / "log.txt")
    with pytest.raises(TypeError, match="path must be a str, os.PathLike or None, got int"):
        MLLogger(3)  # type: ignore[arg-type]
    with MLLogger(tmp_path / "log.txt") as ml:
        with pytest.raises(ValueError, match="key must be a non-empty string, got ''"):
            ml.event("")
        with pytest.raises(TypeError, match=r"MLLogger.start\('block_start'\): metadata must be a mapping, got list"):
            ml.start("block_start", metadata=[1])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="metadata keys 'file'/'lineno' are reserved"):
            ml.event("x", 1, metadata={"lineno": 3})
        with pytest.raises(TypeError, match=r"MLLogger.event\('x'\): value/metadata is not JSON-serializable"):
            ml.event("x", object())
    assert (tmp_path / "log.txt").read_text() == ""
    with pytest.raises(TypeError, match="log_submission: ml must be an MLLogger, got NoneType"):
        log_submission(None, TrainConfig())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="log_hyperparameters: cfg must be a TrainConfig, got dict"):
        log_hyperparameters(MLLogger(None), {}, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log_hyperparameters: n_params must be a positive integer, got 0"):
        log_hyperparameters(MLLogger(None), TrainConfig(), 0)


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_SILENT", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    return tmp_path


def test_wandb_offline_writes_run_files(wandb_env):
    pytest.importorskip("wandb")
    out_dir = wandb_env / "wandb_out"
    with WandbLogger(True, "ember-llama-test", {"lr": 3e-3, "batch_size": 8}, mode="offline", dir=out_dir) as wb:
        assert wb.enabled
        assert os.environ["WANDB_MODE"] == "offline"
        wb.log({"train/loss": 7.25, "train/lr": 3e-4}, step=1)
        wb.log({"train/loss": 6.5, "eval/log_ppl": 6.9}, step=2)
        run_dir = wb.run_dir
        with pytest.raises(ValueError, match="step must be a non-negative integer, got -1"):
            wb.log({"x": 1.0}, step=-1)
    assert not wb.enabled and wb.run_dir is None
    assert run_dir is not None and run_dir.parent == out_dir / "wandb" and run_dir.name.startswith("offline-run-")
    run_files = list(run_dir.glob("run-*.wandb"))
    assert len(run_files) == 1
    deadline = time.monotonic() + 30  # wandb's service process may still be flushing the run file
    while not (b"train/loss" in (data := run_files[0].read_bytes()) and b"eval/log_ppl" in data):
        assert time.monotonic() < deadline, f"wandb run file holds no metrics: {data[:64]!r}"
        time.sleep(0.2)
    wb.finish()  # idempotent


def test_wandb_disabled_never_imports(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    wb = WandbLogger(False, "p", {})
    wb.log({"loss": 1.0}, step=0)
    wb.finish()
    assert not wb.enabled and wb.run_dir is None
    with pytest.raises(ImportError, match=r"pip install ember-mlperf-llama\[wandb\]"):
        WandbLogger(True, "p", {})


def test_wandb_argument_errors():
    with pytest.raises(ValueError, match="mode must be one of 'online', 'offline', 'disabled', got 'dryrun'"):
        WandbLogger(True, "p", {}, mode="dryrun")
    with pytest.raises(ValueError, match="project must be a non-empty string, got ''"):
        WandbLogger(True, "", {})
    with pytest.raises(TypeError, match="enabled must be a bool, got int"):
        WandbLogger(1, "p", {})  # type: ignore[arg-type]


def test_progress_bar():
    out = io.StringIO()
    with Progress(total=1024, file=out) as bar:
        bar.update(64, loss=7.1234, tokens_per_s=2500.0, mfu=0.031, lr=3e-4)
        bar.write("eval 6.5")
        bar.update(128, loss=6.9)
        assert bar.samples == 128
        with pytest.raises(ValueError, match="samples must be an integer >= the previous count 128, got 64"):
            bar.update(64)
    text = out.getvalue()
    assert "eval 6.5\n" in text
    assert "128/1024" in text and "loss=6.9000" in text
    assert "loss=7.1234" in text and "tok/s=2,500" in text and "mfu=3.1%" in text and "lr=3.000e-04" in text


def test_progress_disabled_and_from_config(capsys):
    out = io.StringIO()
    bar = Progress(total=100, enabled=False, initial=10, file=out)
    bar.update(50, loss=1.0)
    bar.write("hello")
    bar.close()
    assert out.getvalue() == "hello\n"
    with pytest.raises(ValueError, match="total must be an integer >= 1, got 0"):
        Progress(total=0)
    cfg_bar = Progress.from_config(TrainConfig(progress=False, train_samples=256), initial=32)
    assert cfg_bar.samples == 32
    cfg_bar.update(64)
    cfg_bar.close()
    assert capsys.readouterr().err == ""
