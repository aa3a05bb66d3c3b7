import argparse
import dataclasses
import json

import pytest

from ember.mlperf_llama.config import (
    DEFAULT_CPU_PEAK_FLOPS,
    ENV_VARS,
    FIELD_HELP,
    PRESET_NAMES,
    TrainConfig,
    add_cli_arguments,
    config_from_args,
)


def test_defaults_are_valid_and_derived_values():
    cfg = TrainConfig().validate()
    assert cfg.preset == "tiny" and cfg.preset in PRESET_NAMES
    assert cfg.global_batch_size == 4
    assert cfg.end_learning_rate == pytest.approx(3e-4, rel=1e-15)
    assert cfg.warmup_steps == 40 // 4 == 10
    assert cfg.decay_steps == 1_200_000 - 10
    assert cfg.eval_every_steps == 50
    assert cfg.total_steps == 200
    assert cfg.effective_data_seed == 1234
    assert cfg.effective_peak_flops == DEFAULT_CPU_PEAK_FLOPS == 2.0e11
    assert str(cfg.resolved_cache_dir).endswith(".cache/ember-llama") and "~" not in str(cfg.resolved_cache_dir)
    assert TrainConfig.from_sources() == cfg


def test_rcp_gbs32_setup():
    # RCP row GBS 32: 4096 warmup samples -> 128 steps; decay = 1.2M - 128; eval every 12288 samples
    cfg = TrainConfig(batch_size=16, grad_acc_steps=2, seq_len=8192, lr=8e-4, warmup_samples=4096, eval_every=12288,
                      eval_samples=1024, train_samples=196_608).validate()
    assert cfg.global_batch_size == 32
    assert cfg.warmup_steps == 128
    assert cfg.decay_steps == 1_199_872
    assert cfg.eval_every_steps == 384
    assert cfg.total_steps == 6144
    assert cfg.end_learning_rate == pytest.approx(8e-5, rel=1e-15)


def test_derived_rounding():
    cfg = TrainConfig(batch_size=7, grad_acc_steps=3, warmup_samples=100, eval_every=100, train_samples=100)
    assert cfg.global_batch_size == 21
    assert cfg.warmup_steps == 4  # floor(100 / 21)
    assert cfg.eval_every_steps == 5  # ceil(100 / 21)
    assert cfg.total_steps == 5
    assert TrainConfig(end_lr=1e-4).end_learning_rate == 1e-4
    assert TrainConfig(data_seed=5).effective_data_seed == 5
    assert TrainConfig(device="AMD").effective_peak_flops is None
    assert TrainConfig(device="AMD", peak_flops=1e15).effective_peak_flops == 1e15


def test_frozen():
    cfg = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 4  # type: ignore[misc]
    assert dataclasses.replace(cfg, batch_size=4).batch_size == 4


def test_json_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"batch_size": 4, "lr": 1, "end_lr": None, "fake_data": True, "preset": "small"}))
    cfg = TrainConfig.from_sources(file=path)
    assert (cfg.batch_size, cfg.lr, cfg.end_lr, cfg.fake_data, cfg.preset) == (4, 1.0, None, True, "small")
    assert isinstance(cfg.lr, float)


def test_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('preset = "8B"\nseq_len = 8192\nlr = 8e-4\nwarmup_samples = 4096\nprogress = false\n'
                    'data_dir = "/data/c4"\n')
    cfg = TrainConfig.from_sources(file=str(path))
    assert (cfg.preset, cfg.seq_len, cfg.lr, cfg.warmup_samples, cfg.progress, cfg.data_dir) == \
        ("8B", 8192, 8e-4, 4096, False, "/data/c4")


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TrainConfig.from_sources(file=tmp_path / "missing.json")
    bad_ext = tmp_path / "run.yaml"
    bad_ext.write_text("batch_size: 4\n")
    with pytest.raises(ValueError, match=r"unsupported extension '\.yaml'; expected \.json or \.toml"):
        TrainConfig.from_sources(file=bad_ext)
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"batch_sise": 4}')
    with pytest.raises(ValueError, match=r"unknown key 'batch_sise'; valid keys: preset, layers, .*batch_size"):
        TrainConfig.from_sources(file=unknown)
    wrong_type = tmp_path / "wrong.json"
    wrong_type.write_text('{"batch_size": "4"}')
    with pytest.raises(ValueError, match="key 'batch_size' must be an integer, got str '4'"):
        TrainConfig.from_sources(file=wrong_type)
    null = tmp_path / "null.json"
    null.write_text('{"lr": null}')
    with pytest.raises(ValueError, match="key 'lr' must be a number, got NoneType None"):
        TrainConfig.from_sources(file=null)
    broken = tmp_path / "broken.toml"
    broken.write_text("batch_size = = 4\n")
    with pytest.raises(ValueError, match="broken.toml.*cannot parse"):
        TrainConfig.from_sources(file=broken)
    top_list = tmp_path / "list.json"
    top_list.write_text("[1, 2]")
    with pytest.raises(ValueError, match="top level must be an object/table of TrainConfig fields, got list"):
        TrainConfig.from_sources(file=top_list)
    invalid_value = tmp_path / "invalid.json"
    invalid_value.write_text('{"batch_size": 0}')
    with pytest.raises(ValueError, match="TrainConfig.batch_size: must be a positive integer, got 0"):
        TrainConfig.from_sources(file=invalid_value)


@pytest.mark.parametrize("env_name, text, field, expected", [
    ("BS", "16", "batch_size", 16),
    ("GRADIENT_ACC_STEPS", "2", "grad_acc_steps", 2),
    ("SEQLEN", "512", "seq_len", 512),
    ("LR", "1e-3", "lr", 1e-3),
    ("END_LR", "1e-4", "end_lr", 1e-4),
    ("WARMUP_SAMPLES", "4096", "warmup_samples", 4096),
    ("MAX_STEPS", "1200000", "max_steps", 1_200_000),
    ("EVAL_FREQ", "12288", "eval_every", 12288),
    ("EVAL_SAMPLES", "1024", "eval_samples", 1024),
    ("EVAL_BS", "16", "eval_batch_size", 16),
    ("EVAL_TARGET", "3.3", "eval_target", 3.3),
    ("SEED", "5760", "seed", 5760),
    ("DATA_SEED", "42", "data_seed", 42),
    ("BASEDIR", "/raid/datasets/c4-8b/", "data_dir", "/raid/datasets/c4-8b/"),
    ("LLAMA_LAYERS", "2", "layers", 2),
    ("LLAMA_LAYERS", "0", "layers", None),  # tinygrad: 0 = the preset's layer count
    ("FAKEDATA", "1", "fake_data", True),
    ("FAKEDATA", "0", "fake_data", False),
    ("BENCHMARK", "10", "benchmark", 10),
    ("MASTER_WEIGHTS", "true", "master_weights", True),
    ("WANDB", "1", "wandb", True),
    ("SUBMISSION_PLATFORM", "tinybox", "submission_platform", "tinybox"),
    ("DP", "2", "dp", 2),
])
def test_env_vars(env_name, text, field, expected):
    assert ENV_VARS[env_name] == field
    cfg = TrainConfig.from_sources(env={env_name: text})
    assert getattr(cfg, field) == expected
    assert type(getattr(cfg, field)) is type(expected)


def test_env_names_cover_the_spec_list():
    assert {"BS", "GRADIENT_ACC_STEPS", "SEQLEN", "LR", "END_LR", "WARMUP_SAMPLES", "EVAL_FREQ", "EVAL_TARGET", "SEED",
            "DATA_SEED", "BASEDIR", "LLAMA_LAYERS", "FAKEDATA", "BENCHMARK"} <= set(ENV_VARS)


def test_env_ignores_empty_and_unrelated_variables():
    cfg = TrainConfig.from_sources(env={"BS": "", "HOME": "/root", "batch_size": "3", "END_LR": "none"})
    assert cfg == TrainConfig()


@pytest.mark.parametrize("env_name, text, message", [
    ("BS", "abc", "environment variable BS (TrainConfig.batch_size): expected an integer, got 'abc'"),
    ("BS", "1.5", "environment variable BS (TrainConfig.batch_size): expected an integer, got '1.5'"),
    ("LR", "fast", "environment variable LR (TrainConfig.lr): expected a number, got 'fast'"),
    ("FAKEDATA", "maybe", "environment variable FAKEDATA (TrainConfig.fake_data): expected 0/1 (or true/false), "
                          "got 'maybe'"),
    ("LLAMA_LAYERS", "two", "environment variable LLAMA_LAYERS (TrainConfig.layers): expected an integer, got 'two'"),
])
def test_env_errors(env_name, text, message):
    with pytest.raises(ValueError) as info:
        TrainConfig.from_sources(env={env_name: text})
    assert str(info.value) == message


def test_env_value_is_validated():
    with pytest.raises(ValueError, match="TrainConfig.batch_size: must be a positive integer, got 0"):
        TrainConfig.from_sources(env={"BS": "0"})


def test_precedence(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"batch_size": 4, "lr": 1e-3, "seed": 7, "seq_len": 64}))
    env = {"BS": "16", "SEED": "99"}
    assert TrainConfig.from_sources(file=path).batch_size == 4
    cfg = TrainConfig.from_sources(file=path, env=env, overrides={"batch_size": 2, "seed": None, "preset": "small"})
    assert cfg.batch_size == 2  # override beats env beats file
    assert cfg.seed == 99  # env beats file; a None override means "not given"
    assert cfg.lr == 1e-3 and cfg.seq_len == 64  # file beats defaults
    assert cfg.preset == "small"
    assert cfg.eval_every == 200  # default


def test_override_errors():
    with pytest.raises(ValueError, match=r"overrides: unknown key 'bs'; valid keys: preset, layers"):
        TrainConfig.from_sources(overrides={"bs": 4})
    with pytest.raises(TypeError, match="overrides: key 'lr' must be a number, got str '1e-3'"):
        TrainConfig.from_sources(overrides={"lr": "1e-3"})
    with pytest.raises(TypeError, match="overrides: key 'fake_data' must be a boolean, got int 1"):
        TrainConfig.from_sources(overrides={"fake_data": 1})
    with pytest.raises(TypeError, match="overrides must be a mapping, got list"):
        TrainConfig.from_sources(overrides=[("lr", 1.0)])  # type: ignore[arg-type]


INVALID_CASES = [
    ({"preset": "70B"}, ValueError, "TrainConfig.preset: must be one of 'tiny', 'small', '8B', got '70B'"),
    ({"layers": 0}, ValueError, "TrainConfig.layers: must be a positive integer, got 0"),
    ({"layers": 2.0}, TypeError, "TrainConfig.layers: must be an integer or None, got float 2.0"),
    ({"data_dir": 3}, TypeError, "TrainConfig.data_dir: must be a string, got int 3"),
    ({"train_prefix": None}, TypeError, "TrainConfig.train_prefix: must be a string, got NoneType None"),
    ({"valid_prefix": 1}, TypeError, "TrainConfig.valid_prefix: must be a string, got int 1"),
    ({"tokenizer": b"x"}, TypeError, "TrainConfig.tokenizer: must be a string, got bytes b'x'"),
    ({"cache_dir": ""}, ValueError, "TrainConfig.cache_dir: must be a non-empty string, got ''"),
    ({"batch_size": 0}, ValueError, "TrainConfig.batch_size: must be a positive integer, got 0"),
    ({"batch_size": True}, TypeError, "TrainConfig.batch_size: must be an integer, got bool True"),
    ({"grad_acc_steps": -1}, ValueError, "TrainConfig.grad_acc_steps: must be a positive integer, got -1"),
    ({"seq_len": 0}, ValueError, "TrainConfig.seq_len: must be a positive integer, got 0"),
    ({"lr": 0.0}, ValueError, "TrainConfig.lr: must be a positive finite number, got 0.0"),
    ({"lr": float("nan")}, ValueError, "TrainConfig.lr: must be a positive finite number, got nan"),
    ({"lr": "1e-3"}, TypeError, "TrainConfig.lr: must be a number, got str '1e-3'"),
    ({"end_lr": 1e-2}, ValueError, "TrainConfig.end_lr: must be a number in [0.0, lr=0.003], got 0.01"),
    ({"end_lr": -1e-4}, ValueError, "TrainConfig.end_lr: must be a number in [0.0, lr=0.003], got -0.0001"),
    ({"warmup_samples": -1}, ValueError, "TrainConfig.warmup_samples: must be a non-negative integer, got -1"),
    ({"max_steps": 0}, ValueError, "TrainConfig.max_steps: must be a positive integer, got 0"),
    ({"max_steps": 10}, ValueError, "TrainConfig.max_steps: must be greater than warmup_steps (= warmup_samples // "
                                    "global_batch_size = 10), got 10"),
    ({"train_samples": 0}, ValueError, "TrainConfig.train_samples: must be a positive integer, got 0"),
    ({"eval_every": 0}, ValueError, "TrainConfig.eval_every: must be a positive integer, got 0"),
    ({"eval_samples": 0}, ValueError, "TrainConfig.eval_samples: must be a positive integer, got 0"),
    ({"eval_batch_size": 0}, ValueError, "TrainConfig.eval_batch_size: must be a positive integer, got 0"),
    ({"eval_target": 0.0}, ValueError, "TrainConfig.eval_target: must be a positive finite number, got 0.0"),
    ({"eval_target": float("inf")}, ValueError, "TrainConfig.eval_target: must be a positive finite number, got inf"),
    ({"seed": -1}, ValueError, "TrainConfig.seed: must be an integer in [0, 4294967295], got -1"),
    ({"seed": 2**32}, ValueError, "TrainConfig.seed: must be an integer in [0, 4294967295], got 4294967296"),
    ({"data_seed": -5}, ValueError, "TrainConfig.data_seed: must be an integer in [0, 4294967295], got -5"),
    ({"weight_decay": -0.1}, ValueError, "TrainConfig.weight_decay: must be a finite number >= 0.0, got -0.1"),
    ({"beta1": 1.0}, ValueError, "TrainConfig.beta1: must be a number in [0.0, 1.0), got 1.0"),
    ({"beta2": -0.5}, ValueError, "TrainConfig.beta2: must be a number in [0.0, 1.0), got -0.5"),
    ({"eps": 0.0}, ValueError, "TrainConfig.eps: must be a positive finite number, got 0.0"),
    ({"clip_norm": -1.0}, ValueError, "TrainConfig.clip_norm: must be a positive finite number, got -1.0"),
    ({"dtype": "float16"}, ValueError, "TrainConfig.dtype: must be one of 'float32', 'bfloat16', got 'float16'"),
    ({"master_weights": 1}, TypeError, "TrainConfig.master_weights: must be a boolean, got int 1"),
    ({"fake_data": "yes"}, TypeError, "TrainConfig.fake_data: must be a boolean, got str 'yes'"),
    ({"benchmark": -1}, ValueError, "TrainConfig.benchmark: must be a non-negative integer, got -1"),
    ({"checkpoint_dir": None}, TypeError, "TrainConfig.checkpoint_dir: must be a string, got NoneType None"),
    ({"checkpoint_every": -1}, ValueError, "TrainConfig.checkpoint_every: must be a non-negative integer, got -1"),
    ({"checkpoint_every": 10}, ValueError, "TrainConfig.checkpoint_dir: must be set when checkpoint_every > 0 or "
                                           "resume is true, got ''"),
    ({"resume": True}, ValueError, "TrainConfig.checkpoint_dir: must be set when checkpoint_every > 0 or resume is "
                                   "true, got ''"),
    ({"resume": "no"}, TypeError, "TrainConfig.resume: must be a boolean, got str 'no'"),
    ({"log_mlperf": None}, TypeError, "TrainConfig.log_mlperf: must be a string, got NoneType None"),
    ({"wandb": 0}, TypeError, "TrainConfig.wandb: must be a boolean, got int 0"),
    ({"wandb_project": ""}, ValueError, "TrainConfig.wandb_project: must be a non-empty string, got ''"),
    ({"wandb_mode": "dryrun"}, ValueError, "TrainConfig.wandb_mode: must be one of 'online', 'offline', 'disabled', "
                                           "got 'dryrun'"),
    ({"progress": None}, TypeError, "TrainConfig.progress: must be a boolean, got NoneType None"),
    ({"peak_flops": 0.0}, ValueError, "TrainConfig.peak_flops: must be a positive finite number, got 0.0"),
    ({"device": ""}, ValueError, "TrainConfig.device: must be a non-empty string, got ''"),
    ({"dp": 0}, ValueError, "TrainConfig.dp: must be a positive integer, got 0"),
    ({"mp": 0}, ValueError, "TrainConfig.mp: must be a positive integer, got 0"),
    ({"mp": 2, "dp": 2}, ValueError,
     "TrainConfig: dp=2 with mp=2 needs a 2-D device mesh, which is not supported; use one of them"),
    ({"zero": "yes"}, TypeError, "TrainConfig.zero: must be a boolean, got str 'yes'"),
    ({"beam": -1}, ValueError, "TrainConfig.beam: must be a non-negative integer, got -1"),
    ({"init_only": 1}, TypeError, "TrainConfig.init_only: must be a boolean, got int 1"),
    ({"config_file": None}, TypeError, "TrainConfig.config_file: must be a string, got NoneType None"),
    ({"dp": 3, "batch_size": 4}, ValueError, "TrainConfig.batch_size: each micro-batch is split over the dp=3 "
                                             "data-parallel devices, so it must be a multiple of dp, got 4"),
    ({"submission_org": ""}, ValueError, "TrainConfig.submission_org: must be a non-empty string, got ''"),
    ({"submission_platform": ""}, ValueError, "TrainConfig.submission_platform: must be a non-empty string, got ''"),
]


@pytest.mark.parametrize("changes, error, message", INVALID_CASES)
def test_invalid_fields(changes, error, message):
    with pytest.raises(error) as info:
        TrainConfig(**changes).validate()
    assert str(info.value) == message


def test_every_field_has_a_validation_case():
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    covered = {key for changes, _, _ in INVALID_CASES for key in changes}
    assert names == covered


def test_valid_edge_values():
    TrainConfig(warmup_samples=0, end_lr=0.0, beta1=0.0, weight_decay=0.0, seed=0, data_seed=2**32 - 1,
                checkpoint_dir="ckpt", checkpoint_every=5, resume=True, layers=2, dtype="bfloat16").validate()
    TrainConfig(end_lr=3e-3).validate()  # end_lr == lr is allowed


def test_save_and_round_trip(tmp_path):
    cfg = TrainConfig(batch_size=4, end_lr=1e-4, layers=2, fake_data=True, preset="small", peak_flops=1e12)
    path = tmp_path / "config.json"
    cfg.save(path)
    assert json.loads(path.read_text()) == cfg.to_dict()
    assert cfg.to_dict()["end_lr"] == 1e-4 and cfg.to_dict()["data_seed"] is None
    assert TrainConfig.from_sources(file=path) == dataclasses.replace(cfg, config_file=str(path))  # names its file
    cfg.save(path)  # overwriting leaves no temp files behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cfg.save(tmp_path / "missing" / "config.json")


def _parser():
    parser = argparse.ArgumentParser(prog="ember-llama")
    add_cli_arguments(parser)
    return parser


def test_cli_flags_cover_every_field():
    assert set(FIELD_HELP) == {f.name for f in dataclasses.fields(TrainConfig)}
    args = _parser().parse_args([])
    assert args.config is None
    assert all(getattr(args, f.name) is None for f in dataclasses.fields(TrainConfig))
    help_text = _parser().format_help()
    assert "--no-progress" in help_text and "--fake-data" in help_text and "--grad-acc-steps" in help_text
    assert "env BS" in help_text


def test_cli_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("batch_size = 2\nseed = 11\nprogress = true\n")
    args = _parser().parse_args(["--config", str(path), "--batch-size", "4", "--no-progress", "--fake-data",
                                 "--end-lr", "1e-4", "--log-mlperf", "-", "--preset", "8B", "--layers", "2",
                                 "--peak-flops", "1e12"])
    cfg = config_from_args(args, env={"SEQLEN": "128", "BS": "16", "SEED": "12"})
    assert (cfg.batch_size, cfg.progress, cfg.fake_data, cfg.end_lr, cfg.log_mlperf, cfg.preset, cfg.layers) == \
        (4, False, True, 1e-4, "-", "8B", 2)
    assert cfg.seq_len == 128  # env, no flag given
    assert cfg.seed == 12  # env beats the file
    assert cfg.peak_flops == 1e12
    assert config_from_args(_parser().parse_args(["--progress"]), env={}).progress is True


def test_cli_errors(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--batch-size", "four"])
    assert "argument --batch-size: invalid int value: 'four'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="TrainConfig.dtype: must be one of 'float32', 'bfloat16', got 'fp16'"):
        config_from_args(_parser().parse_args(["--dtype", "fp16"]), env={})
    with pytest.raises(TypeError, match="parser must be an argparse.ArgumentParser, got dict"):
        add_cli_arguments({})  # type: ignore[arg-type]
