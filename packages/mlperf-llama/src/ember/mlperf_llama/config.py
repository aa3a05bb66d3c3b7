"""Training configuration of the MLPerf ``llama31_8b`` trainer: one frozen :class:`TrainConfig`.

Values come from, in increasing precedence: the dataclass defaults (a small CPU run on the embedded
dataset), a JSON or TOML file, the environment variables of the MLPerf/tinygrad run scripts (``BS``,
``SEQLEN``, ``LR``, ... see :data:`ENV_VARS`) and command-line flags::

    >>> cfg = TrainConfig.from_sources(env={"BS": "16", "GRADIENT_ACC_STEPS": "2"})
    >>> cfg.global_batch_size
    32
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import secrets
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.tensor import files

PRESET_NAMES: tuple[str, ...] = ("tiny", "small", "8B")
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
WANDB_MODES: tuple[str, ...] = ("online", "offline", "disabled")

# Assumed fp32 peak of the 2-core CI CPU: 2 cores x 16 fp32 lanes (AVX-512) x 2 flops per FMA x 2 FMA ports
# x ~1.56 GHz = 2.0e11 flop/s. An assumption, not a measurement: pass peak_flops for any other machine.
DEFAULT_CPU_PEAK_FLOPS = 2.0e11

_SEED_MAX = 2**32 - 1  # numpy RandomState, which builds the Megatron data order, takes seeds in [0, 2**32)


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of one training run; build it with :meth:`from_sources` and check it with :meth:`validate`.

    ``batch_size`` is the micro-batch in sequences (tinygrad's ``BS``), split over the ``dp`` data-parallel devices;
    one optimizer step accumulates ``grad_acc_steps`` micro-batches, so the MLPerf ``global_batch_size`` is their
    product.
    """

    preset: str = "tiny"  # model size, one of PRESET_NAMES
    layers: int | None = None  # override the preset's n_layers (LLAMA_LAYERS); None = the preset's
    data_dir: str = ""  # dataset directory (BASEDIR); "" = the embedded default dataset
    train_prefix: str = ""  # .bin/.idx prefix of the train split inside data_dir; "" = the default name
    valid_prefix: str = ""  # .bin/.idx prefix of the validation split inside data_dir; "" = the default name
    tokenizer: str = ""  # tokenizer model file; "" = the embedded one
    cache_dir: str = "~/.cache/ember-llama"  # dataset index cache (user-expanded at use)
    batch_size: int = 4  # micro-batch in sequences (BS)
    grad_acc_steps: int = 1  # micro-batches accumulated per optimizer step (GRADIENT_ACC_STEPS)
    seq_len: int = 128  # tokens per sequence fed to the model (SEQLEN); samples hold seq_len + 1 tokens
    lr: float = 3e-3  # peak learning rate after warmup (LR)
    end_lr: float | None = None  # final learning rate of the cosine decay (END_LR); None = 0.1 * lr
    warmup_samples: int = 40  # linear warmup length in training samples (WARMUP_SAMPLES)
    max_steps: int = 1_200_000  # cosine decay horizon in optimizer steps, logged to MLPerf as max_steps
    train_samples: int = 800  # stop after this many training samples even if the target is not reached
    eval_every: int = 200  # evaluate every this many training samples (EVAL_FREQ); MLPerf uses 12288
    eval_samples: int = 32  # validation sequences per evaluation (EVAL_SAMPLES); MLPerf uses 1024
    eval_batch_size: int = 4  # sequences per evaluation batch (EVAL_BS)
    eval_target: float = 3.3  # stop when the validation log-perplexity reaches this (EVAL_TARGET)
    seed: int = 1234  # weight-init seed, logged as the MLPerf seed (SEED)
    data_seed: int | None = None  # train-data order seed (DATA_SEED); None = seed
    weight_decay: float = 0.1  # AdamW decoupled weight decay (MLPerf closed: 0.1)
    beta1: float = 0.9  # AdamW beta_1 (MLPerf closed: 0.9)
    beta2: float = 0.95  # AdamW beta_2 (MLPerf closed: 0.95)
    eps: float = 1e-5  # AdamW epsilon (MLPerf closed: 1e-5)
    clip_norm: float = 1.0  # global L2 gradient-norm clip (MLPerf closed: 1.0)
    dtype: str = "float32"  # parameter/activation dtype, one of DTYPES
    master_weights: bool = False  # keep float32 master copies of low-precision parameters (MASTER_WEIGHTS)
    fake_data: bool = False  # train and evaluate on random tokens instead of the dataset (FAKEDATA)
    benchmark: int = 0  # run this many steps, report the median step time and exit (BENCHMARK); 0 = off
    checkpoint_dir: str = ""  # where checkpoints go; "" = no checkpoints
    checkpoint_every: int = 0  # save a checkpoint every this many optimizer steps; 0 = never
    resume: bool = False  # continue from the latest checkpoint in checkpoint_dir
    log_mlperf: str = ""  # :::MLLOG output: "" = off, "-" = stdout, anything else = a file path
    wandb: bool = False  # log metrics to Weights & Biases (WANDB)
    wandb_project: str = "ember-llama"  # W&B project name
    wandb_mode: str = "offline"  # W&B mode, one of WANDB_MODES; "offline" never touches the network
    progress: bool = True  # show a progress bar over training samples on stderr
    peak_flops: float | None = None  # device peak flop/s for MFU; None = DEFAULT_CPU_PEAK_FLOPS on CPU
    device: str = "CPU"  # ember device to train on
    dp: int = 1  # data-parallel degree over all processes (DP): each of W MPI ranks drives dp // W devices
    mp: int = 1  # tensor-parallel degree (MP): the layers split Megatron's way over mp devices of this process
    zero: bool = False  # split the AdamW state over the data-parallel devices of a process (ZeRO-1; ZERO_OPTIM)
    submission_org: str = "ember"  # MLPerf submission_org
    submission_platform: str = "cpu"  # MLPerf submission_platform (SUBMISSION_PLATFORM)
    beam: int = 0  # BEAM width for the kernels of the step and the eval, searched in the untimed init phase; 0 = off
    init_only: bool = False  # run the init phase (indices, compiles/BEAM, caches) and stop before run_start
    config_file: str = ""  # the config file this run was built from (logged as MLPerf config_filename); "" = none

    # ---- derived values ----------------------------------------------------------------------------

    @property
    def global_batch_size(self) -> int:
        """Sequences per optimizer step: ``batch_size * grad_acc_steps``."""
        return self.batch_size * self.grad_acc_steps

    @property
    def end_learning_rate(self) -> float:
        """The cosine decay's final LR: ``end_lr``, or ``0.1 * lr`` (the MLPerf rule) when unset."""
        return float(self.end_lr) if self.end_lr is not None else 0.1 * self.lr

    @property
    def warmup_steps(self) -> int:
        """Linear-warmup optimizer steps: ``warmup_samples // global_batch_size`` (RCP: 4096 // 32 = 128)."""
        return self.warmup_samples // self.global_batch_size

    @property
    def decay_steps(self) -> int:
        """Cosine-decay optimizer steps: ``max_steps - warmup_steps`` (the MLPerf checker demands exactly this)."""
        return self.max_steps - self.warmup_steps

    @property
    def eval_every_steps(self) -> int:
        """Optimizer steps between evaluations: ``ceil(eval_every / global_batch_size)``."""
        return -(-self.eval_every // self.global_batch_size)

    @property
    def total_steps(self) -> int:
        """Optimizer steps this run makes at most: ``ceil(train_samples / global_batch_size)``."""
        return -(-self.train_samples // self.global_batch_size)

    @property
    def effective_data_seed(self) -> int:
        """The data-order seed: ``data_seed``, or ``seed`` when unset."""
        return self.data_seed if self.data_seed is not None else self.seed

    @property
    def resolved_cache_dir(self) -> Path:
        """``cache_dir`` with ``~`` expanded."""
        return Path(self.cache_dir).expanduser()

    @property
    def effective_peak_flops(self) -> float | None:
        """Peak flop/s used for MFU: ``peak_flops``, else the assumed CPU peak on CPU, else None (MFU unknown)."""
        if self.peak_flops is not None:
            return float(self.peak_flops)
        return DEFAULT_CPU_PEAK_FLOPS if self.device.upper().startswith("CPU") else None

    # ---- checking ----------------------------------------------------------------------------------

    def validate(self) -> TrainConfig:
        """Check every field; raise ValueError (bad value) or TypeError (bad type) naming it. Returns ``self``.

        >>> TrainConfig(batch_size=0).validate()
        Traceback (most recent call last):
        ValueError: TrainConfig.batch_size: must be a positive integer, got 0
        """
        _choice("preset", self.preset, PRESET_NAMES)
        _integer("layers", self.layers, minimum=1, optional=True)
        for name in ("data_dir", "train_prefix", "valid_prefix", "tokenizer", "checkpoint_dir", "log_mlperf",
                     "config_file"):
            _string(name, getattr(self, name), nonempty=False)
        for name in ("cache_dir", "wandb_project", "device", "submission_org", "submission_platform"):
            _string(name, getattr(self, name), nonempty=True)
        for name in ("batch_size", "grad_acc_steps", "seq_len", "train_samples", "eval_every", "eval_samples",
                     "eval_batch_size", "max_steps", "dp", "mp"):
            _integer(name, getattr(self, name), minimum=1)
        for name in ("warmup_samples", "benchmark", "checkpoint_every", "beam"):
            _integer(name, getattr(self, name), minimum=0)
        _integer("seed", self.seed, minimum=0, maximum=_SEED_MAX)
        _integer("data_seed", self.data_seed, minimum=0, maximum=_SEED_MAX, optional=True)
        for name in ("lr", "eval_target", "eps", "clip_norm"):
            _number(name, getattr(self, name), low=0.0, low_open=True)
        _number("peak_flops", self.peak_flops, low=0.0, low_open=True, optional=True)
        _number("weight_decay", self.weight_decay, low=0.0)
        for name in ("beta1", "beta2"):
            _number(name, getattr(self, name), low=0.0, high=1.0, high_open=True)
        _number("end_lr", self.end_lr, low=0.0, high=float(self.lr), optional=True, high_name="lr")
        _choice("dtype", self.dtype, DTYPES)
        _choice("wandb_mode", self.wandb_mode, WANDB_MODES)
        for name in ("master_weights", "fake_data", "resume", "wandb", "progress", "zero", "init_only"):
            _boolean(name, getattr(self, name))
        if self.max_steps <= self.warmup_steps:
            raise ValueError(f"TrainConfig.max_steps: must be greater than warmup_steps (= warmup_samples // "
                             f"global_batch_size = {self.warmup_steps}), got {self.max_steps}")
        if self.dp > 1 and self.mp > 1:
            raise ValueError(f"TrainConfig: dp={self.dp} with mp={self.mp} needs a 2-D device mesh, which is not "
                             "supported; use one of them")
        if self.batch_size % self.dp:
            raise ValueError(f"TrainConfig.batch_size: each micro-batch is split over the dp={self.dp} data-parallel "
                             f"devices, so it must be a multiple of dp, got {self.batch_size}")
        if (self.checkpoint_every > 0 or self.resume) and not self.checkpoint_dir:
            raise ValueError("TrainConfig.checkpoint_dir: must be set when checkpoint_every > 0 or resume is true, "
                             f"got {self.checkpoint_dir!r}")
        return self

    # ---- building ----------------------------------------------------------------------------------

    @classmethod
    def from_sources(cls, file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
                     overrides: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] | None = None,
                     fresh_seed: bool = False) -> TrainConfig:
        """Build a validated config: defaults < ``base`` < ``file`` (.json/.toml) < ``env`` (:data:`ENV_VARS`) <
        ``overrides``.

        ``env`` is not read from ``os.environ`` unless passed; empty variables are ignored. A None value
        in ``overrides`` means "not given" (unset CLI flags). ``base`` is a saved config (a checkpoint's), checked
        like a file. ``fresh_seed``: when no source gives ``seed``, draw a random one (MLPerf: every run its own
        seed); ``data_seed`` then follows it unless given. ``config_file`` is set to ``file``.
        """
        values: dict[str, Any] = {}
        if base is not None:
            values.update({k: _coerce(_field_spec(k, "base config"), v, "base config", ValueError)
                           for k, v in base.items()})
        if file is not None:
            values.update(_read_config_file(Path(file)))
            values["config_file"] = os.fspath(file)
        if env is not None:
            values.update(_read_env(env))
        if overrides is not None:
            if not isinstance(overrides, Mapping):
                raise TypeError("TrainConfig.from_sources: overrides must be a mapping, "
                                f"got {type(overrides).__name__}")
            for key, value in overrides.items():
                if value is None:
                    continue
                spec = _field_spec(key, "overrides")
                values[key] = _coerce(spec, value, "overrides", TypeError)
        if fresh_seed and "seed" not in values:
            values["seed"] = random_seed()
        return cls(**values).validate()

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-serializable dict (what :meth:`save` writes and :meth:`from_sources` reads)."""
        return dataclasses.asdict(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as JSON to ``path`` atomically (temp file in the same directory, then rename)."""
        files.atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")


def random_seed() -> int:
    """A seed from the OS's entropy in [0, 32767] (the reference's range), for a run given none."""
    return secrets.randbelow(32768)


# ---- environment variables and help ----------------------------------------------------------------

# The MLPerf/tinygrad run-script names (spec section 4.2) and the field each one sets.
ENV_VARS: dict[str, str] = {
    "BS": "batch_size",
    "GRADIENT_ACC_STEPS": "grad_acc_steps",
    "SEQLEN": "seq_len",
    "LR": "lr",
    "END_LR": "end_lr",
    "WARMUP_SAMPLES": "warmup_samples",
    "MAX_STEPS": "max_steps",
    "EVAL_FREQ": "eval_every",
    "EVAL_SAMPLES": "eval_samples",
    "EVAL_BS": "eval_batch_size",
    "EVAL_TARGET": "eval_target",
    "SEED": "seed",
    "DATA_SEED": "data_seed",
    "BASEDIR": "data_dir",
    "LLAMA_LAYERS": "layers",
    "FAKEDATA": "fake_data",
    "BENCHMARK": "benchmark",
    "MASTER_WEIGHTS": "master_weights",
    "WANDB": "wandb",
    "SUBMISSION_PLATFORM": "submission_platform",
    "DP": "dp",
    "MP": "mp",
    "ZERO_OPTIM": "zero",
}
_ENV_ZERO_IS_UNSET = frozenset({"LLAMA_LAYERS"})  # tinygrad: LLAMA_LAYERS=0 means "the preset's layer count"
_ENV_OF_FIELD = {field_name: env_name for env_name, field_name in ENV_VARS.items()}
_FILE_ONLY_FIELDS = frozenset({"config_file"})  # set by --config; its flag works but is not listed in --help

FIELD_HELP: dict[str, str] = {
    "preset": f"model size, one of {', '.join(PRESET_NAMES)}",
    "layers": "override the preset's number of transformer layers",
    "data_dir": "dataset directory with the .bin/.idx files ('' = the embedded default dataset)",
    "train_prefix": "prefix of the train .bin/.idx pair inside data_dir ('' = the default name)",
    "valid_prefix": "prefix of the validation .bin/.idx pair inside data_dir ('' = the default name)",
    "tokenizer": "tokenizer model file ('' = the embedded tokenizer)",
    "cache_dir": "directory for cached dataset indices (~ is expanded)",
    "batch_size": "micro-batch size in sequences; global batch = batch_size * grad_acc_steps",
    "grad_acc_steps": "micro-batches accumulated per optimizer step",
    "seq_len": "sequence length in tokens",
    "lr": "peak learning rate after warmup",
    "end_lr": "final learning rate of the cosine decay (unset = 0.1 * lr)",
    "warmup_samples": "linear warmup length in training samples (steps = warmup_samples // global batch)",
    "max_steps": "cosine decay horizon in optimizer steps (MLPerf: 1200000)",
    "train_samples": "stop after this many training samples even if the eval target is not reached",
    "eval_every": "evaluate every this many training samples (MLPerf: 12288)",
    "eval_samples": "validation sequences per evaluation (MLPerf: 1024)",
    "eval_batch_size": "sequences per evaluation batch",
    "eval_target": "stop once validation log-perplexity is at or below this (MLPerf: 3.3)",
    "seed": "weight-initialization seed, logged as the MLPerf seed",
    "data_seed": "training-data order seed (unset = seed)",
    "weight_decay": "AdamW decoupled weight decay",
    "beta1": "AdamW beta_1",
    "beta2": "AdamW beta_2",
    "eps": "AdamW epsilon",
    "clip_norm": "global L2 gradient-norm clipping threshold",
    "dtype": f"parameter dtype, one of {', '.join(DTYPES)}",
    "master_weights": "keep float32 master copies of low-precision parameters",
    "fake_data": "train and evaluate on random tokens instead of the dataset",
    "benchmark": "run this many steps, report the median step time and exit (0 = off)",
    "checkpoint_dir": "directory for checkpoints ('' = none)",
    "checkpoint_every": "save a checkpoint every this many optimizer steps (0 = never)",
    "resume": "resume from the latest checkpoint in checkpoint_dir",
    "log_mlperf": "MLPerf :::MLLOG output: '-' = stdout, a path = that file ('' = off)",
    "wandb": "log metrics to Weights & Biases",
    "wandb_project": "Weights & Biases project name",
    "wandb_mode": f"Weights & Biases mode, one of {', '.join(WANDB_MODES)}",
    "progress": "show a progress bar on stderr",
    "peak_flops": f"device peak flop/s for MFU (unset = {DEFAULT_CPU_PEAK_FLOPS:.1e} on CPU, an assumed value)",
    "device": "ember device to train on",
    "dp": "data-parallel degree, over all MPI ranks (a multiple of their number); each micro-batch is split over it",
    "mp": "tensor-parallel degree: the model split over this many devices of one process (vocab padded to 256*mp)",
    "zero": "split the AdamW state over a process's data-parallel devices (ZeRO-1)",
    "submission_org": "MLPerf submission_org",
    "submission_platform": "MLPerf submission_platform",
    "beam": "BEAM width for every kernel of the step and the eval, searched in the untimed init phase (0 = off)",
    "init_only": "run only the init phase (dataset indices, kernel compiles or BEAM, caches), then stop",
    "config_file": "the config file's path, logged as config_filename (set by --config)",
}


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and one ``--field-name`` flag per :class:`TrainConfig` field to ``parser``.

    Booleans get ``--flag/--no-flag``. Every flag defaults to None so that an unset flag does not override
    the file or the environment (see :func:`config_from_args`).
    """
    if not isinstance(parser, argparse.ArgumentParser):
        raise TypeError(f"add_cli_arguments: parser must be an argparse.ArgumentParser, got {type(parser).__name__}")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="JSON or TOML file of TrainConfig fields (flags and environment variables override it)")
    for spec in _SPECS.values():
        flag = "--" + spec.name.replace("_", "-")
        env_note = f"; env {_ENV_OF_FIELD[spec.name]}" if spec.name in _ENV_OF_FIELD else ""
        help_text = f"{FIELD_HELP[spec.name]} (default: {_FIELD_DEFAULTS[spec.name]!r}{env_note})".replace("%", "%%")
        if spec.name in _FILE_ONLY_FIELDS:
            help_text = argparse.SUPPRESS
        if spec.base is bool:
            parser.add_argument(flag, dest=spec.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=spec.name, type=spec.base, default=None,
                                metavar=spec.name.upper(), help=help_text)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = os.environ, *,
                     base: Mapping[str, Any] | None = None, fresh_seed: bool = False) -> TrainConfig:
    """Build the config from parsed :func:`add_cli_arguments` flags: defaults < ``base`` < ``--config`` < ``env`` <
    flags (``fresh_seed``: see :meth:`TrainConfig.from_sources`)."""
    if not isinstance(args, argparse.Namespace):
        raise TypeError(f"config_from_args: args must be an argparse.Namespace, got {type(args).__name__}")
    overrides = {name: getattr(args, name) for name in _SPECS if getattr(args, name, None) is not None}
    return TrainConfig.from_sources(file=getattr(args, "config", None), env=env, overrides=overrides, base=base,
                                    fresh_seed=fresh_seed)


# ---- helpers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    base: type  # int, float, str or bool
    optional: bool  # the annotation is `base | None`


def _build_field_specs() -> dict[str, _FieldSpec]:
    hints = typing.get_type_hints(TrainConfig)
    specs = {}
    for field in dataclasses.fields(TrainConfig):
        annotation = hints[field.name]
        args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
        base = next(a for a in args if a is not type(None)) if args else annotation
        specs[field.name] = _FieldSpec(field.name, base, optional=bool(args))
    return specs


_SPECS: dict[str, _FieldSpec] = _build_field_specs()
_FIELD_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def _field_spec(key: object, source: str) -> _FieldSpec:
    specs = _SPECS
    if key not in specs:
        raise ValueError(f"{source}: unknown key {key!r}; valid keys: {', '.join(specs)}")
    return specs[key]  # type: ignore[index]


_KIND = {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}


def _coerce(spec: _FieldSpec, value: Any, source: str, error: type[Exception]) -> Any:
    """Check a file/override value against the field's type; ints are accepted for float fields."""
    if value is None and spec.optional:
        return None
    if spec.base is bool:
        ok = isinstance(value, bool)
    elif spec.base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif spec.base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        ok = isinstance(value, str)
    if not ok:
        accepted = _KIND[spec.base] + (" or null" if spec.optional else "")
        raise error(f"{source}: key {spec.name!r} must be {accepted}, got {type(value).__name__} {value!r}")
    return value


def _read_config_file(path: Path) -> dict[str, Any]:
    source = f"config file {str(path)!r}"
    if not path.is_file():
        raise FileNotFoundError(f"TrainConfig.from_sources: {source} does not exist or is not a file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            raise ValueError(f"{source}: unsupported extension {path.suffix!r}; expected .json or .toml")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{source}: cannot parse: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{source}: top level must be an object/table of TrainConfig fields, "
                         f"got {type(data).__name__}")
    return {key: _coerce(_field_spec(key, source), value, source, ValueError) for key, value in data.items()}


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _read_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    specs = _SPECS
    for env_name, field_name in ENV_VARS.items():
        text = env.get(env_name)
        if text is None or text.strip() == "":
            continue
        spec, text = specs[field_name], text.strip()
        if spec.optional and text.lower() in ("none", "null"):
            values[field_name] = None
            continue
        try:
            if spec.base is bool:
                if text.lower() not in _TRUE | _FALSE:
                    raise ValueError
                value: Any = text.lower() in _TRUE
            elif spec.base is int:
                value = int(text, 10)
            elif spec.base is float:
                value = float(text)
            else:
                value = text
        except ValueError:
            accepted = "0/1 (or true/false)" if spec.base is bool else _KIND[spec.base]
            raise ValueError(f"environment variable {env_name} (TrainConfig.{field_name}): expected {accepted}, "
                             f"got {text!r}") from None
        if env_name in _ENV_ZERO_IS_UNSET and value == 0:
            value = None
        values[field_name] = value
    return values


# ---- validation primitives (messages: "TrainConfig.<field>: must be <accepted>, got <value>") -------


def _fail_type(name: str, accepted: str, value: object) -> TypeError:
    return TypeError(f"TrainConfig.{name}: must be {accepted}, got {type(value).__name__} {value!r}")


def _integer(name: str, value: object, minimum: int, maximum: int | None = None, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail_type(name, "an integer" + (" or None" if optional else ""), value)
    if maximum is not None:
        if not minimum <= value <= maximum:
            raise ValueError(f"TrainConfig.{name}: must be an integer in [{minimum}, {maximum}], got {value}")
    elif value < minimum:
        what = "a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0 else \
            f"an integer >= {minimum}"
        raise ValueError(f"TrainConfig.{name}: must be {what}, got {value}")


def _number(name: str, value: object, low: float, low_open: bool = False, high: float | None = None,
            high_open: bool = False, optional: bool = False, high_name: str | None = None) -> None:
    if value is None and optional:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _fail_type(name, "a number" + (" or None" if optional else ""), value)
    below = value <= low if low_open else value < low
    above = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or below or above:
        if high is None:
            accepted = "a positive finite number" if low == 0.0 and low_open else \
                f"a finite number {'>' if low_open else '>='} {low}"
        else:
            upper = f"{high_name}={high}" if high_name else f"{high}"
            accepted = f"a number in {'(' if low_open else '['}{low}, {upper}{')' if high_open else ']'}"
        raise ValueError(f"TrainConfig.{name}: must be {accepted}, got {value}")


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"TrainConfig.{name}: must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _string(name: str, value: object, nonempty: bool) -> None:
    if not isinstance(value, str):
        raise _fail_type(name, "a string", value)
    if nonempty and not value:
        raise ValueError(f"TrainConfig.{name}: must be a non-empty string, got ''")


def _boolean(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _fail_type(name, "a boolean", value)
