"""Codegen in helper processes: a `CodegenPool` builds programs (`cached_program`) in other Python processes, so the
codegen of a schedule's many kernels (Python: one core, whatever the threads) uses the machine's other cores.

Each worker is a `python` running `worker_main`, fed requests on its stdin and answering on its stdout, in frames of an
8-byte little-endian length and a pickle. A request is `(environment, ast, renderer, opts)`: the caller's settings go
along (`settings.environ()`: its environment with the active `Context` overrides), so NOOPT, CACHE, EMBER_CACHE_DIR ...
mean in the worker what they mean in the caller at that moment. The answer is `(True, ProgramSpec)` or
`(False, message)`. What a worker prints (DEBUG=4 sources) goes to its stderr. A kernel a worker cannot build (an
error, a graph too deep to pickle, a dead worker) goes back to the caller, which builds it itself: an error surfaces
in the caller's process, with its traceback.

    pool = CodegenPool(1)
    handle = pool.drain(work, lambda key: (key.ast, renderer, None), on_done)   # threads pull from work's right end
    while work: on_done(key := work.popleft(), build_here(key))                 # the caller from its left end
    for key in handle.join(): on_done(key, build_here(key))                     # what the workers gave back

A drain opened with `more=True` waits for work still to come (`put`), until `close()`: the helpers build the kernels a
schedule has made while it makes the rest.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Generic, TypeVar

from ember.codegen.cache import cached_program
from ember.codegen.program import Opt, ProgramSpec
from ember.codegen.renderer import Renderer
from ember.uops import UOp, settings

T = TypeVar("T")
_WORKER = "from ember.codegen.pool import worker_main; worker_main()"


def _write_frame(out: IO[bytes], data: bytes) -> None:
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def _read_frame(inp: IO[bytes]) -> bytes | None:
    head = inp.read(8)
    if len(head) < 8:
        return None
    n = int.from_bytes(head, "little")
    data = inp.read(n)
    return data if len(data) == n else None


class _Worker:
    """One helper process and the lock that gives it one request at a time."""

    def __init__(self) -> None:
        # the caller's import path: a worker imports what the caller imported, however it found it
        env = {**settings.environ(), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env)
        self.lock = threading.Lock()

    def build(self, ast: UOp, renderer: Renderer, opts: list[Opt] | None) -> ProgramSpec | None:
        """The program, or None if this worker could not make it (the caller builds it then)."""
        try:
            request = pickle.dumps((settings.environ(), ast, renderer, opts), protocol=pickle.HIGHEST_PROTOCOL)
        except (RecursionError, pickle.PicklingError, TypeError, AttributeError):
            return None
        with self.lock:
            if self.proc.poll() is not None:
                return None
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                _write_frame(self.proc.stdin, request)
                answer = _read_frame(self.proc.stdout)
            except (BrokenPipeError, OSError):
                return None
        if answer is None:
            return None
        try:
            ok, spec = pickle.loads(answer)
        except Exception:  # noqa: BLE001 - an answer that does not unpickle: build it here
            return None
        return spec if ok and isinstance(spec, ProgramSpec) else None

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # EOF: the worker's loop ends
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Drain(Generic[T]):
    """Threads that pull work items until the work is gone (with `more`: gone and closed); `join()` waits and returns
    the items given back."""

    def __init__(self, workers: list[_Worker], work: deque[T],
                 request: Callable[[T], tuple[UOp, Renderer, list[Opt] | None]],
                 done: Callable[[T, ProgramSpec], None], more: bool = False):
        self.returned: list[T] = []
        self.work, self.more = work, more
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._pull, args=(w, request, done), daemon=True) for w in workers]
        for t in self.threads:
            t.start()

    def put(self, item: T) -> None:
        """Add an item to the work (at its right end: the threads take it next)."""
        with self.cond:
            self.work.append(item)
            self.cond.notify()

    def close(self) -> None:
        """No more `put`s: the threads stop once the work is gone."""
        with self.cond:
            self.more = False
            self.cond.notify_all()

    def _pull(self, worker: _Worker, request: Callable[[T], tuple[UOp, Renderer, list[Opt] | None]],
              done: Callable[[T, ProgramSpec], None]) -> None:
        while True:
            with self.cond:
                while not self.work and self.more:
                    self.cond.wait()
                try:
                    item = self.work.pop()
                except IndexError:
                    return
            spec = worker.build(*request(item))
            if spec is None:
                self.returned.append(item)
            else:
                done(item, spec)

    def join(self) -> list[T]:
        self.close()
        for t in self.threads:
            t.join()
        return self.returned


class CodegenPool:
    """`workers` helper processes (started on first use, stopped at exit) that build programs for the caller."""

    def __init__(self, workers: int):
        self.size = workers
        self.workers: list[_Worker] = []
        self.failed = False  # a worker could not be started: no more tries
        self.lock = threading.Lock()
        atexit.register(self.close)

    def drain(self, work: deque[T], request: Callable[[T], tuple[UOp, Renderer, list[Opt] | None]],
              done: Callable[[T, ProgramSpec], None], more: bool = False) -> Drain[T]:
        """Build programs for the items of `work`, taken from its right end while any are left (with `more`: and
        waiting for the Drain's `put`s until its `close`): `request(item)` is the (ast, renderer, opts) of an item,
        `done(item, spec)` is called (from a pool thread) with each program."""
        with self.lock:
            if not self.workers and not self.failed:
                try:
                    self.workers = [_Worker() for _ in range(self.size)]
                except OSError as e:  # no Python to start: the caller builds everything
                    self.failed = True
                    warnings.warn(f"CodegenPool: cannot start a worker ({e}); building programs in this process",
                                  stacklevel=2)
        return Drain(self.workers, work, request, done, more)

    def close(self) -> None:
        """Stop the workers (a later `drain` starts new ones)."""
        with self.lock:
            workers, self.workers = self.workers, []
        for w in workers:
            w.close()


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """A worker's loop: one program per request until end of input."""
    while (frame := _read_frame(inp)) is not None:
        try:
            env, ast, renderer, opts = pickle.loads(frame)
            if env != os.environ:
                os.environ.clear()
                os.environ.update(env)
            answer: Any = (True, cached_program(ast, renderer, opts))
            data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # noqa: BLE001 - any failure goes back as a message: the caller builds it
            data = pickle.dumps((False, f"{type(e).__name__}: {e}"))
        _write_frame(out, data)


def worker_main() -> None:
    """The worker process: answers on the original stdout; what it prints goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the caller's to handle; its exit ends our input
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))  # deep graphs unpickle recursively
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, protocol_out)
