"""Settings: every knob Ember reads from the environment, declared once, parsed and validated in one place.

    from ember.uops import settings
    if settings.DEBUG.value >= 2: ...
    with settings.Context(BEAM=4, NOOPT=True): ...   # overrides for a block (tests, tools)

A flag reads its variable when asked (a test's `monkeypatch.setenv` applies at once) and parses each distinct raw
string once; a bad value raises `ValueError` naming the variable, what was given and what is accepted. An empty value
means the default (`DEBUG=` is `DEBUG=0`). `Context` overrides take precedence over the environment and nest.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_overrides: list[dict[str, Any]] = []  # the Context stack, innermost last


class Flag(Generic[T]):
    """One environment variable: its name, default, parser (raw string -> value, ValueError on a bad one), doc."""

    def __init__(self, name: str, default: T | Callable[[], T], parse: Callable[[str], T], doc: str):
        self.name, self.default, self.parse, self.doc = name, default, parse, doc
        self._parsed: dict[str, T] = {}

    @property
    def value(self) -> T:
        for layer in reversed(_overrides):
            if self.name in layer:
                return layer[self.name]  # type: ignore[no-any-return]
        raw = os.environ.get(self.name, "").strip()
        if not raw:
            return self.default() if callable(self.default) else self.default
        if (v := self._parsed.get(raw)) is None:
            try:
                v = self._parsed[raw] = self.parse(raw)
            except ValueError as e:
                raise ValueError(f"{self.name}={raw!r}: {e}") from None
        return v

    def __repr__(self) -> str:
        return f"<Flag {self.name}={self.value!r}>"


def _int(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"expected an integer >= {minimum}") from None
        if n < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        return n
    return parse


def _bool(raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _str(raw: str) -> str:
    return raw


def _choice(*accepted: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in accepted:
            raise ValueError(f"expected one of {', '.join(accepted)} (or empty: automatic)")
        return raw
    return parse


DEBUG = Flag("DEBUG", 0, _int(0), "1: schedules, 2: each kernel with its time, 4: kernel sources")
BEAM = Flag("BEAM", 0, _int(0), "width of the opts search timed on the device (0: the hand-coded heuristic)")
NOOPT = Flag("NOOPT", False, _bool, "kernels with no opts at all (the plain loops)")
TC = Flag("TC", True, _bool, "the GPU heuristic puts matmuls of 16-bit floats on tensor cores where a target has them")
SPEC = Flag("SPEC", False, _bool, "verify every stage's graph against its spec")
CACHE = Flag("CACHE", True, _bool, "read and write the on-disk caches (programs, compiles, BEAM winners)")
def _cgroup_cpu_limit(proc_cgroup: str, root: Path) -> float | None:
    """The CPUs a cgroup CPU quota allows (quota / period; a container's `--cpus`), the tightest of the process's
    cgroup and its ancestors, v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`); None when there is none. `proc_cgroup` is
    /proc/self/cgroup's text, `root` the cgroup mount (/sys/fs/cgroup)."""
    limits = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: the unified hierarchy
            files = [("cpu.max", None)]
            base = root
        elif "cpu" in controllers.split(","):
            files = [("cpu.cfs_quota_us", "cpu.cfs_period_us")]
            base = next((root / d for d in (controllers, "cpu", "cpu,cpuacct") if (root / d).is_dir()), root / "cpu")
        else:
            continue
        folder = base / path.lstrip("/")
        for parent in (folder, *folder.parents):
            if not parent.is_relative_to(base):
                break
            for quota_file, period_file in files:
                try:
                    if period_file is None:
                        quota, period = (parent / quota_file).read_text().split()
                    else:
                        quota = (parent / quota_file).read_text().strip()
                        period = (parent / period_file).read_text().strip()
                except (OSError, ValueError):
                    continue
                if quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit() and int(period) > 0:
                    limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a cpuset), capped by a cgroup CPU quota rounded
    up (a container run with `--cpus 1.5` gets 2), at least 1. The default of OMP_NUM_THREADS and CODEGEN_WORKERS:
    `os.cpu_count()` counts the machine's cores, which a container or `taskset` may not have."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        limit = _cgroup_cpu_limit(Path("/proc/self/cgroup").read_text(), Path("/sys/fs/cgroup"))
    except (OSError, ValueError):
        limit = None
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(cores, 1)


CODEGEN_WORKERS = Flag("CODEGEN_WORKERS", lambda: max(usable_cores() - 1, 0), _int(0),
                       "helper processes that codegen a schedule's kernels (default: usable cores - 1)")
DEV = Flag("DEV", "CPU", _str, "the default device (CPU, CPU:1, PYTHON, ...)")
CC = Flag("CC", "cc", _str, "the C compiler of the CPU device, with arguments")
def _omp_threads(raw: str) -> int:
    # OpenMP's own variable, read as libgomp does: a list for nested levels (the first is ours); no count: every core
    first = raw.split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else usable_cores()


def _wait_policy(raw: str) -> str:
    if raw.lower() not in ("active", "passive"):
        raise ValueError("expected active or passive (or empty: passive unless GOMP_SPINCOUNT is set)")
    return raw.lower()


OMP_NUM_THREADS = Flag("OMP_NUM_THREADS", usable_cores, _omp_threads,
                       "threads of a CPU kernel's THREAD loop (OpenMP's variable, first level; default: the usable "
                       "cores, `usable_cores()`: the CPU affinity capped by a cgroup CPU quota)")
OMP_WAIT_POLICY = Flag("OMP_WAIT_POLICY", "", _wait_policy,
                       "how an idle OpenMP thread of the CPU device waits for the next kernel (OpenMP's variable): "
                       "active spins (libgomp: minutes), passive sleeps at once; unset, the CPU device sets passive "
                       "(unless GOMP_SPINCOUNT is set), so that its threads do not starve other work on a shared "
                       "machine; on a machine of your own, active saves a futex wake per kernel "
                       "(tools/bench/bench_llama_step.py --load measures both)")
EMBER_CACHE_DIR = Flag("EMBER_CACHE_DIR", lambda: str(Path.home() / ".cache" / "ember"), _str,
                       "the root of Ember's on-disk caches")


def _size(raw: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = raw.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "")
    try:
        n = int(float(number) * units[unit])
    except ValueError:
        raise ValueError("expected a size in bytes, e.g. 500M, 4G or 1048576") from None
    if n < 0:
        raise ValueError("expected a size >= 0")
    return n


EMBER_CACHE_MAX_SIZE = Flag("EMBER_CACHE_MAX_SIZE", 4 << 30, _size,
                            "the most bytes one cache folder (compile, program, beam, ...) holds: beyond it the least "
                            "recently used entries are deleted (e.g. 500M, 4G; default 4G)")
MULTI_ALLREDUCE = Flag("MULTI_ALLREDUCE", "", _choice("naive", "ring"),
                       "the allreduce of the multi-device stage: naive or ring (empty: by size and device count)")
CHECK_INDICES = Flag("CHECK_INDICES", False, _bool,
                     "validate the ids of embedding/gather/scatter/index_select/one_hot/cross-entropy/indexing on the "
                     "device (a min/max reduce and a sync per op) where they are not known on the host")
RING_ALLREDUCE_THRESHOLD = Flag("RING_ALLREDUCE_THRESHOLD", 4 << 20, _int(0),
                                "bytes from which an automatic allreduce over 3 or more devices is a ring")

FLAGS: dict[str, Flag[Any]] = {f.name: f for f in (DEBUG, BEAM, NOOPT, TC, SPEC, CACHE, CODEGEN_WORKERS, DEV, CC,
                                                      OMP_NUM_THREADS, OMP_WAIT_POLICY, EMBER_CACHE_DIR,
                                                      EMBER_CACHE_MAX_SIZE, MULTI_ALLREDUCE, RING_ALLREDUCE_THRESHOLD,
                                                      CHECK_INDICES)}


@contextmanager
def Context(**values: Any) -> Iterator[None]:  # noqa: N802 - used like a class: `with Context(DEBUG=2):`
    """Override flags for the duration of a `with` block: `with Context(BEAM=2): ...` (values as the flag holds them,
    or raw strings; each validated as the environment's would be)."""
    layer = {}
    for name, v in values.items():
        if (flag := FLAGS.get(name)) is None:
            raise ValueError(f"Context: unknown setting {name!r}; known: {', '.join(sorted(FLAGS))}")
        try:  # through the string form environ() hands to helper processes: they must read the same value
            layer[name] = flag.parse(_raw(v))
        except ValueError as e:
            raise ValueError(f"Context: {name}={v!r}: {e}") from None
    _overrides.append(layer)
    try:
        yield
    finally:
        _overrides.remove(layer)


def environ() -> dict[str, str]:
    """os.environ with the active Context overrides written as strings: what a helper process must see to read the
    same settings."""
    env = dict(os.environ)
    for layer in _overrides:
        env.update({k: _raw(v) for k, v in layer.items()})
    return env


def _raw(v: Any) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)


def cache_root() -> Path:
    """The root folder of every on-disk cache (`EMBER_CACHE_DIR`, default ~/.cache/ember)."""
    return Path(EMBER_CACHE_DIR.value).expanduser()


__all__ = ["Flag", "Context", "environ", "cache_root", "FLAGS", "DEBUG", "BEAM", "NOOPT", "TC", "SPEC", "CACHE",
           "CODEGEN_WORKERS", "DEV", "CC", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "usable_cores", "EMBER_CACHE_DIR",
           "EMBER_CACHE_MAX_SIZE", "MULTI_ALLREDUCE",
           "RING_ALLREDUCE_THRESHOLD"]
