"""Random tensors: threefry2x32 (a counter-based RNG) on an index ramp, so that a seed gives the same numbers on
every device; the stream state (seed, calls made) and the initializers built on rand/randn."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.tensor.ops.args import ArgumentError, shape_args, to_dtype
from ember.uops import DType, dtypes, prod

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


def _random_shape(shape: tuple[Any, ...], op: str) -> tuple[int, ...]:
    shape_t = shape_args(shape)
    if any(s < 0 for s in shape_t):
        raise ArgumentError(f"{op}: shape must be non-negative ints, got {shape_t}")
    return shape_t


_THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _threefry2x32(x0: Tensor, x1: Tensor, key: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011) on uint32 tensors: a counter-based RNG, pure integer ops.
    The key schedule is a 3-word buffer, not constants: every call of one shape is the same kernel (a model's
    weights of one shape are initialized by one compiled program)."""
    words = np.array([key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA], np.uint32)
    ktab = Tensor(words, x0.device)
    ks = [ktab[i].reshape(*(1,) * x0.ndim).expand(*x0.shape) for i in range(3)]
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for r in range(20):
        rot = _THREEFRY_ROTATIONS[r % 8]
        x0 = x0 + x1
        x1 = ((x1 << rot) | (x1 >> (32 - rot))) ^ x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0, x1 = x0 + ks[s % 3], x1 + (ks[(s + 1) % 3] + s)  # (uint32: wraps like the reference's mod 2^32)
    return x0, x1


class RandomMixin:
    """Random tensors from one stream: `Tensor.manual_seed(0); Tensor.rand(2, 3)`."""

    __slots__ = ()

    _seed: int = 0  # the stream: manual_seed's seed, and the calls made since
    _rng_counter: int = 0

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Restart the random stream: the same seed gives the same numbers afterwards, on every device."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
        RandomMixin._seed, RandomMixin._rng_counter = seed, 0

    @staticmethod
    def rng_state() -> tuple[int, int]:
        """(seed, calls made since manual_seed): with `set_rng_state` a checkpoint resumes the random stream."""
        return RandomMixin._seed, RandomMixin._rng_counter

    @staticmethod
    def set_rng_state(state: tuple[int, int]) -> None:
        seed, counter = state
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (seed, counter)):
            raise ValueError(f"set_rng_state: expected (seed, counter) of ints >= 0, got {state!r}")
        RandomMixin._seed, RandomMixin._rng_counter = seed, counter

    @staticmethod
    def _random_bits(n: int, device: str | None) -> Tensor:
        # n uint32 words: threefry2x32(key=(seed, call counter), counter=(i, 0)) for i < ceil(n/2), both words kept
        key = (RandomMixin._seed & 0xFFFFFFFF, ((RandomMixin._seed >> 32) ^ RandomMixin._rng_counter) & 0xFFFFFFFF)
        RandomMixin._rng_counter += 1
        half = (n + 1) // 2
        ctr = Tensor.arange(half, device=device).cast(dtypes.uint32)
        x0, x1 = _threefry2x32(ctr, Tensor.full(ctr.shape, 0, dtypes.uint32, device), key)
        return x0.cat(x1)[:n]

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uniform random numbers in [0, 1) (24 random bits each), from the stream set by manual_seed."""
        shape_t = _random_shape(shape, "rand")
        dt = to_dtype(dtype) or dtypes.float32
        if not dtypes.is_float(dt):
            raise TypeError(f"rand: dtype must be a float type, got {dt!r}")
        bits = Tensor._random_bits(int(prod(shape_t)), device)
        return ((bits >> 8).cast(dtypes.float32) * (1 / (1 << 24))).reshape(shape_t).cast(dt)

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal random numbers (Box-Muller on two uniforms)."""
        shape_t = _random_shape(shape, "randn")
        u = Tensor.rand(2, *shape_t, device=device)
        u1, u2 = u[0], u[1]
        out = (-2 * (1 - u1).log()).sqrt() * (2 * math.pi * u2).cos()
        return out.cast(to_dtype(dtype) or dtypes.float32)

    @staticmethod
    def randint(*shape: Any, low: int = 0, high: int = 10, dtype: DType | str | None = None,
                device: str | None = None, size: Any = None) -> Tensor:
        """Uniform random ints in [low, high): tinygrad's `randint(2, 3, low=0, high=5)`, and torch's
        `randint(high, size)`, `randint(low, high, size)`, `randint(low, high, size=(2, 3))`."""
        if size is not None or shape and isinstance(shape[-1], (tuple, list)):  # torch's form: the bounds come first
            *bounds, size = shape if size is None else (*shape, size)
            if len(bounds) not in (1, 2):
                raise ArgumentError(f"randint: torch's form is randint(high, size) or randint(low, high, size), got "
                                    f"{len(bounds)} bounds before the size")
            low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
            shape = tuple(size)
        if not isinstance(low, int) or not isinstance(high, int) or low >= high:
            raise ArgumentError(f"randint: need ints low < high, got low={low!r} high={high!r}")
        dt = to_dtype(dtype) or dtypes.int32
        if not dtypes.is_int(dt):
            raise TypeError(f"randint: dtype must be an int type, got {dt!r}")
        u = Tensor.rand(*shape, dtype=dtypes.float64, device=device)
        return ((u * (high - low)).floor() + low).cast(dt).minimum(high - 1)

    def rand_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uniform random numbers in [0, 1) of this tensor's shape (its float dtype and device unless given)."""
        dt = to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else dtypes.float32)
        return Tensor.rand(*self.shape, dtype=dt, device=device or self.device)

    def randn_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal random numbers of this tensor's shape (its float dtype and device unless given)."""
        dt = to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else dtypes.float32)
        return Tensor.randn(*self.shape, dtype=dt, device=device or self.device)

    @staticmethod
    def randperm(n: int, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A random permutation of 0..n-1 (int64 by default): the order that sorts n uniform numbers."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
        return Tensor.rand(n, device=device).argsort().cast(to_dtype(dtype) or dtypes.int64)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                device: str | None = None) -> Tensor:
        """Uniform random numbers in [low, high)."""
        return (Tensor.rand(*shape, device=device) * (high - low) + low).cast(to_dtype(dtype) or dtypes.float32)

    @staticmethod
    def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
               device: str | None = None) -> Tensor:
        """Normal random numbers of the given mean and std."""
        return (Tensor.randn(*shape, device=device) * std + mean).cast(to_dtype(dtype) or dtypes.float32)

    @staticmethod
    def kaiming_uniform(*shape: Any, a: float = 0.01, dtype: DType | str | None = None,
                        device: str | None = None) -> Tensor:
        """He-uniform init: U(-b, b) with b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in), fan_in = prod(shape[1:])."""
        shape_t = _random_shape(shape, "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(1, int(prod(shape_t[1:]))))
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def glorot_uniform(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Xavier-uniform init: U(-b, b) with b = sqrt(6 / (fan_in + fan_out)) (fan_in = shape[0], as tinygrad)."""
        shape_t = _random_shape(shape, "glorot_uniform")
        fans = shape_t[0] + int(prod(shape_t[1:])) if shape_t else 1
        bound = math.sqrt(6 / max(1, fans))
        return Tensor.uniform(*shape_t, low=-bound, high=bound, dtype=dtype, device=device)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """`num_samples` class indices (int64) drawn from the weights self ((n,) or (batch, n); non-negative, not all
        zero) by inverse transform sampling; without replacement only one sample (tinygrad's restriction)."""
        if self.ndim not in (1, 2) or not self.shape[-1]:
            raise ValueError(f"multinomial: weights must be 1-d or 2-d with at least one class, got {self.shape}")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
        if not replacement and num_samples > 1:
            raise ValueError("multinomial: without replacement only num_samples=1 is supported")
        w = self.float_() if self.ndim == 2 else self.float_().unsqueeze(0)
        cdf = w.cumsum(1)
        cdf = cdf / cdf[:, -1:]
        u = Tensor.rand(w.shape[0], num_samples, 1, device=self.device)
        # the first class whose cumulative weight exceeds u: the count of classes at or below u (a zero-weight
        # class never is: its cdf equals the one before it)
        picked = (cdf.unsqueeze(1) <= u).sum(2).minimum(w.shape[1] - 1).cast(dtypes.int64)
        return picked if self.ndim == 2 else picked.squeeze(0)

    def bernoulli(self, p: float | None = None) -> Tensor:
        """1 with probability self (or `p`), else 0, elementwise, in self's float dtype (torch.bernoulli)."""
        probs = self.float_() if p is None else self.float_().full_like(p)
        return (Tensor.rand(*self.shape, device=self.device) < probs).cast(probs.dtype)
