"""The MLPerf ``llama31_8b`` learning-rate schedule: linear warmup then cosine decay, as NeMo computes it.

NeMo's ``CosineAnnealing`` (``constant_steps=0``) with ``step`` = optimizer updates already done
(0 for the first update) and ``W`` = warmup steps:

* ``step <= W``: ``base * (step + 1) / (W + 1)``
* ``W < step <= max_steps``: ``end + (base - end) * 0.5 * (1 + cos(pi * (step - W) / (max_steps - W)))``
* ``step > max_steps``: ``end``
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.mlperf_llama.config import TrainConfig


def learning_rate(step: int, base_lr: float, end_lr: float, warmup_steps: int, max_steps: int) -> float:
    """The LR for the optimizer update made after ``step`` updates (NeMo's warmup + cosine formula).

    >>> learning_rate(0, 1e-3, 1e-4, warmup_steps=3, max_steps=100)
    0.00025
    """
    _check_schedule("learning_rate", base_lr, end_lr, warmup_steps, max_steps)
    if not _is_integer(step):
        raise TypeError(f"learning_rate: step must be an integer, got {type(step).__name__} {step!r}")
    if step < 0:
        raise ValueError(f"learning_rate: step must be a non-negative integer, got {step}")
    return _lr(int(step), float(base_lr), float(end_lr), int(warmup_steps), int(max_steps))


def _lr(step: int, base_lr: float, end_lr: float, warmup_steps: int, max_steps: int) -> float:
    if step <= warmup_steps:
        return base_lr * (step + 1) / (warmup_steps + 1)
    if step > max_steps:
        return end_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return end_lr + (base_lr - end_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _is_integer(value: object) -> bool:
    """Python or numpy integers (a checkpoint may hand back numpy scalars), never bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_schedule(where: str, base_lr: float, end_lr: float, warmup_steps: int, max_steps: int) -> None:
    for name, value in (("base_lr", base_lr), ("end_lr", end_lr)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"{where}: {name} must be a number, got {type(value).__name__} {value!r}")
    if not (math.isfinite(base_lr) and base_lr > 0):
        raise ValueError(f"{where}: base_lr must be a positive finite number, got {base_lr}")
    if not (math.isfinite(end_lr) and 0 <= end_lr <= base_lr):
        raise ValueError(f"{where}: end_lr must be in [0, base_lr={base_lr}], got {end_lr}")
    for name, value in (("warmup_steps", warmup_steps), ("max_steps", max_steps)):
        if not _is_integer(value):
            raise TypeError(f"{where}: {name} must be an integer, got {type(value).__name__} {value!r}")
    if warmup_steps < 0:
        raise ValueError(f"{where}: warmup_steps must be a non-negative integer, got {warmup_steps}")
    if max_steps <= warmup_steps:
        raise ValueError(f"{where}: max_steps must be greater than warmup_steps={warmup_steps}, got {max_steps}")


class WarmupCosine:
    """:func:`learning_rate` with a counter of updates done, saved in checkpoints.

    >>> sched = WarmupCosine(1e-3, 1e-4, warmup_steps=3, max_steps=100)
    >>> sched(), sched.advance(), sched()
    (0.00025, None, 0.0005)
    """

    def __init__(self, base_lr: float, end_lr: float, warmup_steps: int, max_steps: int) -> None:
        _check_schedule("WarmupCosine", base_lr, end_lr, warmup_steps, max_steps)
        self.base_lr = float(base_lr)
        self.end_lr = float(end_lr)
        self.warmup_steps = int(warmup_steps)
        self.max_steps = int(max_steps)
        self._steps_done = 0

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> WarmupCosine:
        """The schedule of a :class:`~ember.mlperf_llama.config.TrainConfig` (its lr, end LR, warmup and max_steps)."""
        return cls(cfg.lr, cfg.end_learning_rate, cfg.warmup_steps, cfg.max_steps)

    @property
    def steps_done(self) -> int:
        """Optimizer updates made so far."""
        return self._steps_done

    def __call__(self, step: int | None = None) -> float:
        """LR after ``step`` updates; by default for the next update (``step = steps_done``)."""
        return learning_rate(self._steps_done if step is None else step, self.base_lr, self.end_lr,
                             self.warmup_steps, self.max_steps)

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more optimizer updates as done."""
        if not _is_integer(n) or n < 0:
            raise ValueError(f"WarmupCosine.advance: n must be a non-negative integer, got {n!r}")
        self._steps_done += int(n)

    def state_dict(self) -> dict[str, Any]:
        """The counter and the hyperparameters, as plain Python numbers."""
        return {"steps_done": self._steps_done, "base_lr": self.base_lr, "end_lr": self.end_lr,
                "warmup_steps": self.warmup_steps, "max_steps": self.max_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the counter; the saved hyperparameters must equal this schedule's (a resume keeps the schedule)."""
        if not isinstance(state, Mapping):
            raise TypeError(f"WarmupCosine.load_state_dict: state must be a mapping, got {type(state).__name__}")
        current = self.state_dict()
        missing = [key for key in current if key not in state]
        if missing:
            raise ValueError(f"WarmupCosine.load_state_dict: state lacks keys {missing}; expected {list(current)}")
        for key in ("base_lr", "end_lr", "warmup_steps", "max_steps"):
            if state[key] != current[key]:
                raise ValueError(f"WarmupCosine.load_state_dict: saved {key}={state[key]!r} differs from this "
                                 f"schedule's {key}={current[key]!r}")
        steps_done = state["steps_done"]
        if not _is_integer(steps_done) or steps_done < 0:
            raise ValueError(f"WarmupCosine.load_state_dict: steps_done must be a non-negative integer, "
                             f"got {steps_done!r}")
        self._steps_done = int(steps_done)

    def __repr__(self) -> str:
        return (f"WarmupCosine(base_lr={self.base_lr}, end_lr={self.end_lr}, warmup_steps={self.warmup_steps}, "
                f"max_steps={self.max_steps}, steps_done={self._steps_done})")
