"""The training loop: data, model, AdamW, the MLPerf schedule, evaluation to the target, logging, checkpoints.

One optimizer step = `grad_acc_steps` jitted micro-steps (forward, backward, accumulate into the optimizer's flat
gradient buffer in place) + one jitted optimizer step (global-norm clip, AdamW, zero the gradients). The learning rate
is written to the device before each step, so the captured kernels replay with the scheduled value.

Data parallel over MPI ranks (`World`): every rank reads the same global batches and trains on its contiguous share
of each micro-batch's rows; before the optimizer step the flat gradient buffers are summed over the ranks in place, so
every rank takes the same step. Rank 0 alone logs and writes checkpoints.

    result = train(TrainConfig.from_sources(overrides={"train_samples": 256}))
    result.losses, result.evals, result.status
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.data import GPTDataset, IndexedDataset, batches
from ember.mlperf_llama.distributed import World
from ember.mlperf_llama.logging import MLLogger, Progress, WandbLogger, log_hyperparameters, log_submission
from ember.mlperf_llama.model import Llama, LlamaConfig, flops_per_token, parameter_count, parameter_shapes, preset
from ember.mlperf_llama.phases import beam_search, warm_up
from ember.mlperf_llama.schedule import learning_rate
from ember.mlperf_llama.tokenizer import load_tokenizer
from ember.tensor import Tensor, dtypes, files, jit, no_grad
from ember.tensor.nn import optim, safe_load, safe_load_metadata, safe_save

CHECKPOINT_FORMAT = 2  # 2: whole, unpadded tensors by parameter name (optimizer state too), for any layout


@dataclass
class TrainResult:
    status: str  # "success" (reached the eval target), "aborted" (ran out of samples), "benchmark", "init" (init_only)
    steps: int  # optimizer steps done (including those before a resume)
    samples: int  # training samples consumed
    losses: list[float] = field(default_factory=list)  # training loss of each step this run made
    evals: list[tuple[int, float]] = field(default_factory=list)  # (samples, validation log-perplexity)
    step_times: list[float] = field(default_factory=list)  # seconds per optimizer step
    tokens_per_s: float = 0.0  # median over the steps after the first two (the JIT's warm-up)
    parameters: int = 0


# *** data ***
@dataclass
class Data:
    """Where batches come from: the train/validation GPT datasets, or random tokens (fake_data)."""

    vocab_size: int
    train: GPTDataset | None
    valid: GPTDataset | None

    def train_batches(self, cfg: TrainConfig, start_sample: int) -> Iterator[np.ndarray]:
        if self.train is None:  # fake data: each micro-batch drawn from its position, so a resume sees the same
            k = start_sample // cfg.batch_size
            while True:
                rng = np.random.default_rng((cfg.effective_data_seed, 0, k))
                yield rng.integers(0, self.vocab_size, (cfg.batch_size, cfg.seq_len + 1), dtype=np.int32)
                k += 1
        yield from (b.astype(np.int32) for b in batches(self.train, cfg.batch_size, start_sample))

    def eval_batches(self, cfg: TrainConfig) -> Iterator[np.ndarray]:
        """The first eval_samples validation sequences, unshuffled (the MLPerf rule), in eval batches."""
        for start in range(0, cfg.eval_samples, cfg.eval_batch_size):
            n = min(cfg.eval_batch_size, cfg.eval_samples - start)
            if self.valid is None:
                rng = np.random.default_rng((cfg.effective_data_seed, 1, start))
                yield rng.integers(0, self.vocab_size, (n, cfg.seq_len + 1), dtype=np.int32)
            else:
                yield np.stack([self.valid[start + i] for i in range(n)]).astype(np.int32)


def load_data(cfg: TrainConfig, vocab_size: int) -> Data:
    """The datasets `cfg` names (data_dir/prefixes, or the embedded default), with indices cached in cache_dir. A
    tokenizer named in `cfg` (the data is already tokenized) must open and fit the model's vocabulary."""
    if cfg.tokenizer:
        tokenizer = load_tokenizer(cfg.tokenizer)  # a missing or unreadable file raises, naming it
        if tokenizer.vocab_size > vocab_size:
            raise ValueError(f"train: the tokenizer {cfg.tokenizer} has {tokenizer.vocab_size} ids, the model's "
                             f"vocabulary only {vocab_size} (preset {cfg.preset!r}); use a matching tokenizer/preset")
    if cfg.fake_data:
        return Data(vocab_size, None, None)
    train_prefix, valid_prefix = dataset_prefixes(cfg)
    cache = cfg.resolved_cache_dir / "index"
    train_ds, valid_ds = IndexedDataset(train_prefix), IndexedDataset(valid_prefix)
    for ds in (train_ds, valid_ds):  # every token, once per dataset version (cached with the indices)
        try:
            ds.check_vocabulary(vocab_size, cache)
        except ValueError as e:
            raise ValueError(f"train: {e} (preset {cfg.preset!r})") from None
    # evaluation reads each validation sequence once: one unshuffled pass must hold eval_samples of them
    if (available := (valid_ds.num_tokens - 1) // cfg.seq_len) < cfg.eval_samples:
        raise ValueError(f"train: the validation data ({valid_prefix}) gives {available} sequences of "
                         f"{cfg.seq_len + 1} tokens, eval_samples is {cfg.eval_samples}")
    train = GPTDataset(train_ds, cfg.seq_len, max(cfg.train_samples, cfg.global_batch_size),
                       seed=cfg.effective_data_seed, shuffle=True, cache_dir=cache)
    valid = GPTDataset(valid_ds, cfg.seq_len, cfg.eval_samples, seed=cfg.effective_data_seed, shuffle=False,
                       cache_dir=cache)
    return Data(vocab_size, train, valid)


def dataset_prefixes(cfg: TrainConfig) -> tuple[Path, Path]:
    """(train, validation) .bin/.idx prefixes: under data_dir (C4 names by default), else the embedded dataset."""
    if cfg.data_dir:
        base = Path(cfg.data_dir).expanduser()
        train = cfg.train_prefix or "c4-train.en_6_text_document"
        valid = cfg.valid_prefix or "c4-validation-91205-samples.en_text_document"
        return base / train, base / valid
    from ember.mlperf_llama.embedded import embedded_dataset

    data = embedded_dataset(cfg.resolved_cache_dir, vocab_size=model_config(cfg).vocab_size, progress=cfg.progress)
    return data.train_prefix, data.valid_prefix


def model_config(cfg: TrainConfig) -> LlamaConfig:
    """The preset's model with `cfg`'s sequence length and layers; its vocabulary is the tokenizer's when `cfg`
    names one (a model that cannot embed every id, or has rows no id reaches, would be a silent mistake)."""
    changes: dict[str, Any] = {"max_seq_len": cfg.seq_len}
    if cfg.layers:
        changes["n_layers"] = cfg.layers
    if cfg.tokenizer:
        changes["vocab_size"] = tokenizer_vocab_size(cfg.tokenizer)
    return preset(cfg.preset, **changes)


def tokenizer_vocab_size(path: str) -> int:
    """The vocabulary size of the tokenizer file at `path` (loaded once per file version)."""
    where = Path(path).expanduser()
    try:
        stat = where.stat()
    except OSError:
        return int(load_tokenizer(path).vocab_size)  # raises the tokenizer's own error, naming the file
    return _vocab_size(str(where), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _vocab_size(path: str, mtime_ns: int, size: int) -> int:
    return int(load_tokenizer(path).vocab_size)


# *** the model and its steps ***
class Trainer:
    """Model, optimizer and the jitted steps for one config, on this rank of `world` (default: one process)."""

    def __init__(self, cfg: TrainConfig, world: World | None = None):
        self.cfg, self.world = cfg, world if world is not None else World()
        if cfg.dp % self.world.size:
            raise ValueError(f"TrainConfig.dp: must be a multiple of the number of MPI ranks ({self.world.size}), "
                             f"got {cfg.dp}")
        # this process's devices: dp // ranks data-parallel ones (the batch rows split over them), or mp
        # tensor-parallel ones; `devices` is None on one device
        local = max(cfg.dp // self.world.size, cfg.mp)
        self.devices = local_devices(cfg.device, local) if local > 1 else None
        self.model_cfg = model_config(cfg)
        dtype = dtypes.bfloat16 if cfg.dtype == "bfloat16" else dtypes.float32
        self.model = Llama(self.model_cfg, seed=cfg.seed, dtype=dtype)
        if self.devices is not None:
            self.model.shard(self.devices, "mp" if cfg.mp > 1 else "dp")
        else:  # --device without DEV=: the model must live where the batches are placed
            self.model.to_(cfg.device)
        params = self.model.named_parameters()
        # Megatron's groups: no weight decay on 1-D parameters (the norms); everything else decays, embedding too
        decay = [p for p in params.values() if p.ndim >= 2]
        no_decay = [p for p in params.values() if p.ndim < 2]
        self.opt = optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                {"params": no_decay, "weight_decay": 0.0}],
                               lr=cfg.lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps, clip_norm=cfg.clip_norm,
                               master_weights=cfg.master_weights, zero=cfg.zero)
        self.opt.zero_grad()  # every .grad is a view of the flat gradient buffer: backward accumulates in place
        # the ranks' gradients are summed: each scales its mean loss by its share of the global batch
        scale = 1.0 / (cfg.grad_acc_steps * self.world.size)
        params_list = self.model.parameters()

        def micro_step(tokens: Tensor) -> list[Tensor]:
            loss = self.model.loss(tokens)
            (loss * scale).backward()
            out = [loss, *[p.grad for p in params_list]]
            Tensor.realize_all(*out)  # type: ignore[arg-type]
            return out  # type: ignore[return-value]

        def optimizer_step() -> Tensor:
            self.opt.step()
            self.opt.zero_grad()
            return self.opt.grad_norm  # type: ignore[return-value]

        def eval_step(tokens: Tensor) -> Tensor:
            with no_grad():
                return self.model.loss(tokens).realize()

        self.micro_step, self.optimizer_step, self.eval_step = jit(micro_step), jit(optimizer_step), jit(eval_step)

        groups = self.opt.groups  # the flat gradients as float32 (numpy and MPI have no bfloat16), and back

        def write_gradients(*sums: Tensor) -> list[Tensor]:
            out = [g.flat_grad.assign(s.cast(g.flat_grad.dtype)) for g, s in zip(groups, sums)]
            Tensor.realize_all(*out)
            return out

        self.read_gradients = jit(lambda: [g.flat_grad.float().realize() for g in groups])
        self.write_gradients = jit(write_gradients)

    def allreduce_gradients(self) -> None:
        """Sum each group's flat gradient buffer over the ranks, in place (one allreduce per group, through the host):
        the micro-steps scaled every rank's loss by 1/ranks, so the sum is the gradient of the global batch's mean
        loss."""
        if self.world.size == 1:
            return
        sums = [self.world.allreduce_sum_(g.numpy()) for g in self.read_gradients()]
        self.write_gradients(*[Tensor(s, device=self.cfg.device).shard_like(g.flat_grad)
                               for s, g in zip(sums, self.opt.groups)])

    def place(self, rows: np.ndarray) -> Tensor:
        """A token batch on this process's devices: its rows split over data-parallel devices (replicated when they
        do not split evenly, as a short last eval batch may not), whole on each tensor-parallel one."""
        tokens = Tensor(rows, device=self.cfg.device)
        if self.devices is None:
            return tokens
        if self.cfg.mp == 1 and rows.shape[0] % len(self.devices) == 0:
            return tokens.shard(self.devices, 0)
        return tokens.to(self.devices)

    def evaluate(self, data: Data) -> float:
        """Mean next-token cross-entropy over the evaluation sequences (log perplexity); each rank evaluates its
        share of every batch's rows, and the per-sequence sums are added over the ranks."""
        total, count = 0.0, 0
        start, stop = self.world.row_range(self.cfg.eval_batch_size)
        for b in data.eval_batches(self.cfg):
            if not len(rows := self.world.shard_rows(b)):
                continue  # a short last batch can leave a rank nothing
            tokens = self.place(rows)
            if rows.shape[0] == stop - start:
                loss = self.eval_step(tokens).item()
            else:  # a short last batch: not the captured shape
                with no_grad():
                    loss = self.model.loss(tokens).item()
            total, count = total + loss * rows.shape[0], count + rows.shape[0]
        total, count = self.world.sum([total, count])
        return total / count


def local_devices(device: str, n: int) -> tuple[str, ...]:
    """n devices of `device`'s kind from it on: `local_devices("CPU", 2)` = ("CPU", "CPU:1")."""
    base, _, index = device.partition(":")
    first = int(index) if index else 0
    return tuple(f"{base}:{first + i}" if first + i else base for i in range(n))


# *** checkpoints ***
_STEP_DIR = re.compile(r"step_\d{8}")
_LEGACY_TEMP = re.compile(r"\.(step_\d{8}|latest)\..+")  # temps of the writer before ember.uops.files


def clean_checkpoint_dir(directory: Path) -> list[Path]:
    """Remove the temp files and folders a killed checkpoint write left in `directory` (called at the start of a run,
    before anything writes there); returns them."""
    removed = files.remove_stale_temps(directory)
    if directory.is_dir():
        for p in directory.iterdir():
            if _LEGACY_TEMP.fullmatch(p.name) and files.TEMP_MARK not in p.name:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def check_checkpoint_dir(directory: str | Path) -> Path:
    """`directory` as a checkpoint folder: a folder, or a path where one can be made; ValueError otherwise."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--checkpoint-dir {str(directory)!r} is a file, not a folder; give a folder (it is created "
                         "when missing)")
    blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise ValueError(f"--checkpoint-dir {str(directory)!r}: {blocked} is a file, so the folder cannot be made")
    return path


def save_checkpoint(directory: Path, trainer: Trainer, step: int, extra: dict[str, Any]) -> Path:
    """Write `directory/step_XXXXXXXX/` (model, optimizer, state.json) atomically: a temp folder (files fsynced)
    renamed into place, then the `latest` pointer replaced. A crash at any point leaves the previous checkpoint
    intact, and the next run removes the temps it left (clean_checkpoint_dir)."""
    check_checkpoint_dir(directory).mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{step:08d}"
    with files.atomic_folder(final) as tmp:
        trainer.opt.step_count = step  # jit replays do not run the Python side of step()
        # whole, unpadded tensors by parameter name: any device layout (dp, mp, zero) loads them
        safe_save(trainer.model.checkpoint_state(), tmp / "model.safetensors")
        opt_state = trainer.opt.param_state_dict(trainer.model.named_parameters())
        safe_save({k: Tensor(trainer.model.unpad(k.partition(".")[2], v)) for k, v in opt_state.items()},
                  tmp / "optimizer.safetensors")
        state = {"format": CHECKPOINT_FORMAT, "step": step, "samples": step * trainer.cfg.global_batch_size,
                 "rng": list(Tensor.rng_state()), "config": trainer.cfg.to_dict(),
                 **extra}
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
    files.atomic_write(directory / "latest", final.name + "\n")
    return final


# config fields a resumed run must share with the checkpoint (the others, e.g. train_samples or logging, may change)
RESUME_FIELDS = ("preset", "layers", "data_dir", "train_prefix", "valid_prefix", "tokenizer", "batch_size",
                 "grad_acc_steps", "seq_len", "lr", "end_lr", "warmup_samples", "max_steps", "seed", "data_seed",
                 "weight_decay", "beta1", "beta2", "eps", "clip_norm", "dtype", "master_weights", "fake_data")
_FLOAT_CODES = ("F16", "BF16", "F32", "F64")


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_checkpoint_state(path: Path) -> dict[str, Any]:
    """The validated state.json of checkpoint folder `path`; ValueError naming the file, the field and what was
    expected."""
    where = path / "state.json"
    try:
        state = json.loads(where.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"resume: {where} is missing; the checkpoint is incomplete") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"resume: {where} is not valid JSON ({e}); expected the state a checkpoint write makes") \
            from None
    if not isinstance(state, dict):
        raise ValueError(f"resume: {where} holds a {type(state).__name__}, expected a JSON object")
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"resume: {where} has checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    if not _is_count(state.get("step")):
        raise ValueError(f"resume: {where} has step {state.get('step')!r}, expected an integer >= 0")
    if not isinstance(state.get("config"), dict):
        raise ValueError(f"resume: {where} has no 'config' object (got {type(state.get('config')).__name__}); "
                         "expected the run's config")
    rng = state.get("rng")
    if not (isinstance(rng, list) and len(rng) == 2 and all(_is_count(v) for v in rng)):
        raise ValueError(f"resume: {where} has rng {rng!r}, expected [seed, counter], two integers >= 0")
    evals = state.get("evals", [])
    if not (isinstance(evals, list) and all(isinstance(e, list) and len(e) == 2 and _is_count(e[0]) and
                                            isinstance(e[1], int | float) for e in evals)):
        raise ValueError(f"resume: {where} has evals {str(evals)[:80]}, expected a list of [samples, loss]")
    return state


def _check_tensors(where: Path, expected: dict[str, tuple[int, ...]], scalars: tuple[str, ...] = ()) -> None:
    """Every tensor of the safetensors file `where` a float tensor of the expected shape, the names exactly the
    expected ones (and `scalars`, a few numbers each); ValueError naming the file and the tensor otherwise."""
    header, _ = safe_load_metadata(where)
    names = {k for k in header if k != "__metadata__"}
    if missing := sorted(set(expected) - names):
        raise ValueError(f"resume: {where} lacks the tensor {missing[0]!r} (and {len(missing) - 1} more); expected "
                         "a checkpoint of this model")
    if unexpected := sorted(names - set(expected) - set(scalars)):
        raise ValueError(f"resume: {where} holds the tensor {unexpected[0]!r}, which this model does not have")
    for name in sorted(names):
        info = header[name]
        if name in expected and info["dtype"] not in _FLOAT_CODES:
            raise ValueError(f"resume: {where}: tensor {name!r} has dtype {info['dtype']}, expected a float dtype "
                             f"({', '.join(_FLOAT_CODES)})")
        shape = tuple(info["shape"])
        want = expected.get(name)
        if want is None:  # the optimizer's own small state (step count, lr, powers of the betas)
            if info["dtype"] == "BOOL" or math.prod(shape) > 16:
                raise ValueError(f"resume: {where}: tensor {name!r} has shape {shape} of {info['dtype']}, expected "
                                 "a few numbers")
        elif shape != want:
            raise ValueError(f"resume: {where}: tensor {name!r} has shape {shape}, expected {want}")


def load_checkpoint(directory: Path, trainer: Trainer) -> dict[str, Any]:
    """Restore the latest checkpoint in `directory` into `trainer` in place; returns its state.json. Every file is
    checked before anything is loaded: a malformed one is a ValueError naming it, the tensor and what was expected."""
    pointer = directory / "latest"
    if not pointer.is_file():
        raise FileNotFoundError(f"resume: no checkpoint in {directory} (no 'latest' file)")
    name = pointer.read_text(errors="replace").strip()
    if not _STEP_DIR.fullmatch(name):
        raise ValueError(f"resume: {pointer} holds {name[:80]!r}, expected the name of a step_XXXXXXXX folder")
    path = directory / name
    if not path.is_dir():
        raise FileNotFoundError(f"resume: {pointer} names {path}, which is not a folder")
    state = read_checkpoint_state(path)
    saved, now = state["config"], trainer.cfg.to_dict()
    if changed := [k for k in RESUME_FIELDS if saved.get(k) != now.get(k)]:
        raise ValueError(f"resume: the config differs from the checkpoint's in {changed} "
                         f"(checkpoint: {[saved.get(k) for k in changed]}, now: {[now.get(k) for k in changed]})")
    shapes = parameter_shapes(trainer.model_cfg)
    named = trainer.model.named_parameters()
    _check_tensors(path / "model.safetensors", shapes)
    # the optimizer's state: "m.0", "v.0" ... per group (saved per parameter), "betas_pow.<device>", "step_count" and
    # "lr" (saved once, by kind)
    own = [k.partition(".") for k in trainer.opt.state_dict()]
    kinds = {kind for kind, _, index in own if index.isdigit()}
    _check_tensors(path / "optimizer.safetensors", {f"{kind}.{n}": s for kind in kinds for n, s in shapes.items()},
                   scalars=tuple({kind for kind, _, index in own if not index.isdigit()}))
    weights = safe_load(path / "model.safetensors", device=trainer.cfg.device)
    trainer.model.load_checkpoint_state(weights)
    opt_state = {k: trainer.model.pad(k.partition(".")[2], v.numpy())
                 for k, v in safe_load(path / "optimizer.safetensors", device=trainer.cfg.device).items()}
    trainer.opt.load_param_state_dict(named, opt_state)
    Tensor.set_rng_state((int(state["rng"][0]), int(state["rng"][1])))
    return state


# *** memory ***
def memory_needed(cfg: TrainConfig) -> int:
    """A lower estimate of the bytes one process needs to train `cfg`: the parameters with their gradients and AdamW
    state, and one micro-batch's activations kept for the backward pass (the attention scores grow with SEQLEN^2)."""
    m = model_config(cfg)
    weight = 2 if cfg.dtype == "bfloat16" else 4
    state = parameter_count(m) * (2 * weight + 8 + (4 if cfg.master_weights else 0))
    rows, seq, f32 = cfg.batch_size, cfg.seq_len, 4
    per_layer = rows * seq * (6 * m.dim + 3 * m.ffn_dim) * f32 + 2 * rows * m.n_heads * seq * seq * f32
    logits = 2 * rows * seq * m.vocab_size * f32
    return state + m.n_layers * per_layer + logits


def available_memory() -> int | None:
    """Bytes of host memory available now (MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg: TrainConfig) -> None:
    """Refuse, before anything is compiled, a run whose SEQLEN (and batch) cannot fit the host's memory (devices that
    compute in host memory: CPU, PYTHON)."""
    if not cfg.device.upper().startswith(("CPU", "PYTHON")) or (free := available_memory()) is None:
        return
    if (need := memory_needed(cfg)) > free:
        gib = 1 << 30
        raise ValueError(f"train: SEQLEN={cfg.seq_len} with BS={cfg.batch_size} needs at least {need / gib:.1f} GiB "
                         f"for the {cfg.preset} model, but only {free / gib:.1f} GiB of memory is available; lower "
                         "SEQLEN or BS")


# *** the loop ***
def train(cfg: TrainConfig, world: World | None = None) -> TrainResult:
    """Run one training job as `cfg` says, as this rank of `world` (default: the one mpirun started this process in,
    else a world of one); returns what happened (see TrainResult), the same on every rank.

    The untimed init phase (until `init_stop`) builds the dataset indices and compiles, or BEAM-searches
    (`cfg.beam`, kept for the whole run so every kernel finds its winner), every kernel of the step and the eval;
    `cfg.init_only` stops there (status "init", no MLLOG lines)."""
    cfg.validate()
    with beam_search(cfg.beam):
        return _train(cfg, world)


def _train(cfg: TrainConfig, world: World | None) -> TrainResult:
    world = world if world is not None else World.from_environment()
    root = world.is_root
    if cfg.checkpoint_dir:
        check_checkpoint_dir(cfg.checkpoint_dir)
        if root:
            clean_checkpoint_dir(Path(cfg.checkpoint_dir).expanduser())
    check_memory(cfg)
    ml = MLLogger((cfg.log_mlperf or None) if root and not cfg.init_only else None)
    ml.event("cache_clear", True)
    ml.start("init_start")
    log_submission(ml, cfg)
    trainer = Trainer(cfg, world)
    n_params = parameter_count(trainer.model_cfg)
    with world.root_first():  # rank 0 builds the dataset and index caches, the others read them
        data = load_data(cfg, trainer.model_cfg.vocab_size)
    log_hyperparameters(ml, cfg, n_params, include_train_samples=False, ranks=world.size)  # train_samples: at the end
    warm = warm_up(trainer)  # every kernel of the step and the eval compiled (or BEAM-searched), the steps captured
    if root and cfg.progress:
        print(f"ember-llama: init phase: kernels compiled{f' (BEAM={cfg.beam})' if cfg.beam else ''} and steps "
              f"captured in {warm:.1f} s", file=sys.stderr)
    if cfg.init_only:
        ml.close()
        return TrainResult("init", 0, 0, parameters=n_params)
    wandb = WandbLogger(cfg.wandb and root, cfg.wandb_project, cfg.to_dict(), mode=cfg.wandb_mode,
                        dir=cfg.checkpoint_dir or str(cfg.resolved_cache_dir))
    start_step, result = 0, TrainResult("aborted", 0, 0, parameters=n_params)
    if cfg.resume:
        if not cfg.checkpoint_dir:
            raise ValueError("TrainConfig.resume: needs checkpoint_dir")
        state = load_checkpoint(Path(cfg.checkpoint_dir), trainer)
        start_step = state["step"]
        result.evals = [tuple(e) for e in state.get("evals", [])]  # type: ignore[misc]
        if root:
            print(f"ember-llama: resumed from step {start_step} ({start_step * cfg.global_batch_size} samples) of "
                  f"{cfg.checkpoint_dir}", file=sys.stderr)
    ml.end("init_stop")
    ml.start("run_start")
    gbs = cfg.global_batch_size
    total_steps = cfg.benchmark or cfg.total_steps
    tokens_per_step = gbs * cfg.seq_len
    flops_per_step = flops_per_token(trainer.model_cfg, cfg.seq_len) * tokens_per_step
    peak = cfg.effective_peak_flops
    progress = Progress(total=total_steps * gbs, initial=start_step * gbs, enabled=cfg.progress and root)
    ml.start("epoch_start", metadata={"samples_count": start_step * gbs})
    ml.start("block_start", metadata={"samples_count": start_step * gbs})
    batch_iter = data.train_batches(cfg, start_step * gbs)
    step = start_step
    try:
        while step < total_steps:
            trainer.opt.lr = learning_rate(step, cfg.lr, cfg.end_learning_rate, cfg.warmup_steps, cfg.max_steps)
            t0 = time.perf_counter()
            loss = 0.0
            for _ in range(cfg.grad_acc_steps):
                out = trainer.micro_step(trainer.place(world.shard_rows(next(batch_iter))))
                loss += out[0].item() / cfg.grad_acc_steps
            trainer.allreduce_gradients()
            grad_norm = trainer.optimizer_step().item()
            loss = world.mean(loss)
            dt = time.perf_counter() - t0
            step += 1
            samples = step * gbs
            result.losses.append(loss)
            result.step_times.append(dt)
            tps = tokens_per_step / dt
            mfu = flops_per_step / dt / peak if peak else None
            progress.update(samples, loss=loss, tokens_per_s=tps, mfu=mfu, lr=trainer.opt.lr)
            wandb.log({"train/loss": loss, "train/lr": trainer.opt.lr, "train/grad_norm": grad_norm,
                       "train/tokens_per_s": tps, **({"train/mfu": mfu} if mfu is not None else {})}, step=samples)
            if not np.isfinite(loss):
                raise FloatingPointError(f"train: the loss is {loss} at step {step}: the run diverged and stopped "
                                         "(no checkpoint written); lower the learning rate (LR) or check the data")
            if cfg.benchmark:
                continue
            if step % cfg.eval_every_steps == 0 or step == total_steps:
                ml.end("block_stop", metadata={"samples_count": samples})
                ml.start("eval_start", metadata={"samples_count": samples})
                eval_loss = trainer.evaluate(data)
                ml.event("eval_accuracy", eval_loss, metadata={"samples_count": samples})
                ml.end("eval_stop", metadata={"samples_count": samples})
                result.evals.append((samples, eval_loss))
                wandb.log({"eval/log_perplexity": eval_loss}, step=samples)
                if root:
                    progress.write(f"step {step} samples {samples}: train loss {loss:.4f}, "
                                   f"validation log-perplexity {eval_loss:.4f}")
                if eval_loss <= cfg.eval_target:
                    result.status = "success"
                    break
                if step < total_steps:
                    ml.start("block_start", metadata={"samples_count": samples})
            if root and cfg.checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                save_checkpoint(Path(cfg.checkpoint_dir), trainer, step, {"evals": result.evals})
        if root and cfg.checkpoint_dir and cfg.checkpoint_every and step > start_step and step % cfg.checkpoint_every:
            save_checkpoint(Path(cfg.checkpoint_dir), trainer, step, {"evals": result.evals})  # where the run ended
    finally:
        progress.close()
    result.steps, result.samples = step, step * gbs
    warm = result.step_times[2:] or result.step_times
    result.tokens_per_s = tokens_per_step / statistics.median(warm) if warm else 0.0
    if cfg.benchmark:
        result.status = "benchmark"
        med = statistics.median(warm) if warm else float("nan")
        if root:
                print(f"benchmark: {len(result.step_times)} steps, median step {med * 1e3:.1f} ms, "
                  f"{result.tokens_per_s:.0f} tokens/s, first step {result.step_times[0]:.2f} s", file=sys.stderr)
    ml.end("epoch_stop", metadata={"samples_count": result.samples})
    ml.end("run_stop", metadata={"samples_count": result.samples,
                                 "status": "success" if result.status == "success" else "aborted"})
    ml.event("train_samples", result.samples)
    wandb.finish()
    return result


def evaluate(cfg: TrainConfig, checkpoint: str | None = None, world: World | None = None) -> float:
    """Validation log-perplexity of the model at `checkpoint` (a checkpoint dir holding `latest`), or of the freshly
    initialized model when None; over the ranks of `world` as `train` does."""
    cfg.validate()
    world = world if world is not None else World.from_environment()
    check_memory(cfg)
    trainer = Trainer(cfg, world)
    if checkpoint:
        try:
            load_checkpoint(Path(checkpoint), trainer)
        except (ValueError, FileNotFoundError) as e:  # the checks name the command they guard: here eval, not resume
            message = str(e)
            raise type(e)("eval:" + message[len("resume:"):] if message.startswith("resume:") else message) from None
    with world.root_first():
        data = load_data(cfg, trainer.model_cfg.vocab_size)
    return trainer.evaluate(data)
