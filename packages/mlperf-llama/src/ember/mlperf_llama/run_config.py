"""The config each `ember-llama` command runs with, from its flags, the environment and what is stored.

* `train`: defaults < ``--config`` < env vars < flags, with a fresh random seed unless one is given (MLPerf: each
  run draws its own; the data order follows it unless ``--data-seed``/``DATA_SEED`` is given). A resumed run takes
  the checkpoint's seeds instead, so that it continues the same run.
* `eval --checkpoint DIR`: the checkpoint's stored config takes the place of the defaults (its data, tokenizer,
  model and sequence length), then ``--config`` < env vars < flags as for train.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember.mlperf_llama.config import TrainConfig, config_from_args

# fields of a stored config that describe that run, not an evaluation of its checkpoint
_RUN_ONLY_FIELDS = ("resume", "checkpoint_dir", "checkpoint_every", "log_mlperf", "wandb", "benchmark", "init_only",
                    "config_file")


def train_config(args: argparse.Namespace, env: Mapping[str, str] | None = os.environ) -> TrainConfig:
    """The config of `ember-llama train`: a fresh seed unless given; on ``--resume`` the checkpoint's seeds."""
    cfg = config_from_args(args, env=env)
    if not cfg.resume or not cfg.checkpoint_dir or _seed_given(args, env, cfg):
        return config_from_args(args, env=env, fresh_seed=True)
    stored = _latest_state(Path(cfg.checkpoint_dir).expanduser(), "resume")["config"]
    seeds = {k: stored[k] for k in ("seed", "data_seed") if k in stored}
    return config_from_args(args, env=env, base=seeds)


def eval_config(args: argparse.Namespace, env: Mapping[str, str] | None = os.environ) -> TrainConfig:
    """The config of `ember-llama eval`: the checkpoint's own (``--checkpoint``), under the file, env and flags."""
    checkpoint = getattr(args, "checkpoint", None)
    if not checkpoint:
        return config_from_args(args, env=env)
    stored = _latest_state(Path(checkpoint).expanduser(), "eval")["config"]
    base = {k: v for k, v in stored.items() if k not in _RUN_ONLY_FIELDS}
    try:
        return config_from_args(args, env=env, base=base)
    except (TypeError, ValueError) as e:
        raise ValueError(f"eval: the config stored in {checkpoint} is not usable: {e}") from None


def _seed_given(args: argparse.Namespace, env: Mapping[str, str] | None, cfg: TrainConfig) -> bool:
    """Whether a flag, the environment or the config file sets the seed."""
    if getattr(args, "seed", None) is not None or (env is not None and (env.get("SEED") or "").strip()):
        return True
    return bool(cfg.config_file) and "seed" in _file_keys(Path(cfg.config_file))


def _file_keys(path: Path) -> list[str]:
    """The keys a .json/.toml config file sets (it was read once already: it parses)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    return list(data) if isinstance(data, dict) else []


def _latest_state(directory: Path, command: str) -> dict[str, Any]:
    """The validated state.json of the latest checkpoint in `directory`, errors naming `command`."""
    from ember.mlperf_llama.train import read_checkpoint_state

    pointer = directory / "latest"
    if not pointer.is_file():
        raise FileNotFoundError(f"{command}: no checkpoint in {directory} (no 'latest' file)")
    name = pointer.read_text(errors="replace").strip()
    if not re.fullmatch(r"step_\d{8}", name):
        raise ValueError(f"{command}: {pointer} holds {name[:80]!r}, expected the name of a step_XXXXXXXX folder")
    path = directory / name
    try:
        return read_checkpoint_state(path)
    except (ValueError, FileNotFoundError) as e:
        message = str(e)
        raise type(e)(f"{command}:" + message[len("resume:"):] if message.startswith("resume:") else message) \
            from None
