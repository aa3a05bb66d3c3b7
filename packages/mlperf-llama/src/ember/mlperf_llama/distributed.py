"""The process world: the ranks of a data-parallel run launched by `mpirun` (Open MPI, or any MPI through PMI), or
one process. A world of several processes talks through mpi4py, imported only then; a plain run is a world of 1.

    world = World.from_environment()        # mpirun -np 2 ... -> rank 0 and 1 of 2; a plain run -> rank 0 of 1
    world.allreduce_sum_(grads)             # in place, one MPI_Allreduce; identical on every rank afterwards
    with world.abort_on_error("ember-llama train"):
        ...                                 # a rank that raises prints its error and aborts every rank (no hang)
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

# (size, rank) variables of the launchers: Open MPI's mpirun, and PMI (MPICH/Intel MPI's hydra, Slurm's srun --mpi=pmi2)
LAUNCHER_VARS: tuple[tuple[str, str], ...] = (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                                              ("PMI_SIZE", "PMI_RANK"))

INSTALL_HINT = ("pip install 'ember-mlperf-llama[mpi]' (mpi4py), and Open MPI must be installed on every machine "
                "(Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev)")


@dataclass(frozen=True)
class World:
    """`size` processes, this one `rank`; `comm` is mpi4py's COMM_WORLD, None in a world of one process."""

    rank: int = 0
    size: int = 1
    comm: Any = None

    @property
    def is_root(self) -> bool:
        """Rank 0: the one process that logs, reports and writes checkpoints."""
        return self.rank == 0

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> World:
        """The world the launcher started this process in (its variables, `LAUNCHER_VARS`); none: a world of 1,
        without importing mpi4py. Raises ImportError (how to install it) when mpi4py or MPI is missing."""
        env = os.environ if env is None else env
        size = next((int(env[s]) for s, _ in LAUNCHER_VARS if env.get(s, "").strip()), 1)
        if size <= 1:
            return cls()
        mpi = _import_mpi(size)
        comm = mpi.COMM_WORLD
        assert comm.Get_size() == size, f"World: the launcher says {size} processes, MPI's COMM_WORLD has " \
                                        f"{comm.Get_size()}"
        return cls(comm.Get_rank(), size, comm)

    # *** collectives (no-ops in a world of one) ***
    def allreduce_sum_(self, array: np.ndarray) -> np.ndarray:
        """Sum a contiguous numpy array over the ranks in place (one MPI_Allreduce); returns it."""
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable):
            raise TypeError(f"World.allreduce_sum_: array must be a writeable C-contiguous numpy array, got "
                            f"{type(array).__name__}")
        if self.size > 1:
            self.comm.Allreduce(_mpi().IN_PLACE, array, op=_mpi().SUM)
        return array

    def sum(self, values: Sequence[float]) -> list[float]:
        """Python floats summed element-wise over the ranks (float64), in one allreduce."""
        if self.size == 1:
            return [float(v) for v in values]
        return self.allreduce_sum_(np.array(values, dtype=np.float64)).tolist()  # type: ignore[no-any-return]

    def mean(self, value: float) -> float:
        """The mean of a Python float over the ranks."""
        return value if self.size == 1 else self.sum([value])[0] / self.size

    def barrier(self) -> None:
        """Wait until every rank is here."""
        if self.size > 1:
            self.comm.Barrier()

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """Rank `root`'s value of a small picklable object, on every rank."""
        return obj if self.size == 1 else self.comm.bcast(obj, root=root)

    @contextmanager
    def root_first(self) -> Iterator[None]:
        """Rank 0 runs the block first, then the other ranks: a cache on disk is built once and then read."""
        if not self.is_root:
            self.barrier()
        yield
        if self.is_root:
            self.barrier()

    # *** data ***
    def row_range(self, rows: int) -> tuple[int, int]:
        """This rank's contiguous share [start, stop) of `rows` rows: rank r gets r*rows//size to (r+1)*rows//size
        (rows/size each when it divides)."""
        return self.rank * rows // self.size, (self.rank + 1) * rows // self.size

    def shard_rows(self, batch: np.ndarray) -> np.ndarray:
        """This rank's rows of a global batch (see `row_range`)."""
        start, stop = self.row_range(batch.shape[0])
        return batch[start:stop]

    # *** failure ***
    @contextmanager
    def abort_on_error(self, what: str) -> Iterator[None]:
        """In a world of several processes, an exception inside prints its traceback and rank and aborts every rank
        (MPI_Abort, exit code 1): the other ranks would otherwise wait in their next collective forever. In a world
        of one it propagates unchanged."""
        try:
            yield
        except BaseException as e:
            if self.size == 1 or (isinstance(e, SystemExit) and e.code in (0, None)):
                raise
            traceback.print_exc(file=sys.stderr)
            print(f"{what}: rank {self.rank} of {self.size} failed ({type(e).__name__}: {e}); aborting all ranks",
                  file=sys.stderr, flush=True)
            self.abort(1)

    def abort(self, code: int = 1) -> None:
        """End every rank now with exit code `code` (MPI_Abort); in a world of one, exit this process."""
        if self.size > 1:
            sys.stdout.flush()
            self.comm.Abort(code)
        raise SystemExit(code)


def _import_mpi(size: int) -> Any:
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as e:  # no mpi4py (ImportError), or no MPI library for it (RuntimeError)
        raise ImportError(f"World: launched as {size} processes, but MPI cannot be loaded ({e}); {INSTALL_HINT}") \
            from e
    return MPI


def _mpi() -> Any:
    from mpi4py import MPI  # loaded by from_environment already: a dictionary look-up

    return MPI
