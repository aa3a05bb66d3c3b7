"""`CompileQueue`: compiles in background threads, in batches per device, while the caller renders the next sources.

    queue = CompileQueue(workers=os.cpu_count() or 1)
    lib = queue.submit("CPU", spec.function, spec.src)   # a Future of the library bytes
    lib = queue.submit("CPU", spec.function, lambda: spec.src, spec.src_key)   # the same, maybe without rendering
    queue.close()                                    # compiles what is left; every Future is then resolved

A source named by a `src_key` is looked up by it at once (`Compiler.cached_library`): a library found that way needs
neither the source nor a compile, and its Future is resolved when `submit` returns.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from ember.runtime.compiler import Source
from ember.runtime.device import Device


class CompileQueue:
    """`submit` a rendered source, get a Future of its library. A worker thread takes what is waiting once there are
    `min_batch` sources (or the queue is closed), at most `max_batch`, all for one device and each function name once,
    and compiles them with one `compile_cached_many`: a compiler that batches then starts (and links) once for many
    kernels. (A library cannot hold two functions of one name: a batch with a name twice would run the compiler once
    per copy; the second waits for a later batch instead.) While sources are still coming, one worker fewer than
    `workers` compiles, and a batch stops at `max_text` characters of source: the caller that renders them keeps a
    core, and a close finds that worker near the end of a short batch, not at the start of everything that piled up
    meanwhile. Once closed, a worker takes its share of the work left, by source text (a compile's time): what is
    waiting plus what the other workers' batches still have to compile (estimated from the characters per second of
    the batches done so far), divided by `workers`, so that they finish together (the tiny Llama's cold first step:
    one worker took its share of what waited 12 ms after the other had started a 71k-character batch, and sat idle
    for the last 0.18 s). A batch's compile error is set on each of its Futures."""

    def __init__(self, workers: int, min_batch: int = 4, max_batch: int = 64, max_text: int = 65536):
        if workers < 1 or min_batch < 1 or max_batch < 1:
            raise ValueError(f"CompileQueue: workers, min_batch and max_batch must be >= 1, got {workers}, "
                             f"{min_batch}, {max_batch}")
        self.min_batch, self.max_batch, self.max_text = min_batch, max_batch, max_text
        # (device, name, src, src_key, its library)
        self.waiting: list[tuple[str, str, str, str | None, Future[bytes]]] = []
        self.closed = False
        self.cond = threading.Condition()
        self.busy: dict[int, tuple[int, float]] = {}  # worker -> the characters of its batch, when it started
        self.done_chars, self.done_secs = 0, 0.0  # compiled so far: the compile rate
        self.while_coming = max(workers - 1, 1)
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def submit(self, device: str, name: str, src: Source, src_key: str | None = None) -> Future[bytes]:
        """Queue the source of function `name` for `Device[device]`'s compiler; the Future holds its library. With a
        `src_key` naming the source, its library is first looked up by the key, here: `src` (a function that renders
        it) is called only when there is none, and the library compiled then is filed under the key."""
        fut: Future[bytes] = Future()
        if src_key is not None and (lib := Device[device].compiler.cached_library(src_key)) is not None:
            fut.set_result(lib)
            return fut
        text = src if isinstance(src, str) else src()
        with self.cond:
            self.waiting.append((device, name, text, src_key, fut))
            if len(self.waiting) >= self.min_batch:
                self.cond.notify_all()
        return fut

    def close(self) -> None:
        """Compile what is left and stop the threads (returns when every Future is resolved)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()

    def _take(self, worker: int) -> list[tuple[str, str, str, str | None, Future[bytes]]]:
        with self.cond:
            while not self.closed and (len(self.waiting) < self.min_batch or worker >= self.while_coming):
                self.cond.wait()
            if not self.waiting:
                return []
            device = self.waiting[0][0]
            share = self._share(worker) if self.closed else self.max_text
            same = [i for i, w in enumerate(self.waiting) if w[0] == device]
            taken: list[int] = []
            names: set[str] = set()
            size = 0
            for i in same:
                _, name, src, _, _ = self.waiting[i]
                if name in names:
                    continue
                if len(taken) == self.max_batch or (taken and size >= share):
                    break
                taken.append(i)
                names.add(name)
                size += len(src)
            batch = [self.waiting[i] for i in taken]
            taken_set = set(taken)
            self.waiting = [w for i, w in enumerate(self.waiting) if i not in taken_set]
            if len(self.waiting) >= self.min_batch:
                self.cond.notify_all()
            self.busy[worker] = (size, time.perf_counter())
            return batch

    def _share(self, worker: int) -> int:
        """After close: the characters `worker` takes now, its part of the waiting text and of what the other
        workers' batches have left (each one's text less what the rate so far says it compiled already)."""
        now, rate = time.perf_counter(), self.done_chars / self.done_secs if self.done_secs > 0 else 0.0
        left = sum(max(chars - rate * (now - start), 0.0) for w, (chars, start) in self.busy.items() if w != worker)
        return int(-(-(sum(len(w[2]) for w in self.waiting) + left) // len(self.threads)))

    def _work(self, worker: int) -> None:
        while batch := self._take(worker):
            try:
                libs = Device[batch[0][0]].compiler.compile_cached_many(
                    [(name, src) for _, name, src, _, _ in batch], src_keys=[src_key for *_, src_key, _ in batch])
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the kernel
                for *_, fut in batch:
                    fut.set_exception(e)
                continue
            finally:
                with self.cond:
                    chars, start = self.busy.pop(worker)
                    self.done_chars += chars
                    self.done_secs += time.perf_counter() - start
            for (*_, fut), lib in zip(batch, libs):
                fut.set_result(lib)
