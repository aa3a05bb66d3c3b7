"""CompileQueue: batches per device, between min_batch and max_batch sources, every Future resolved by close (with
the library or the batch's error)."""

import threading

import pytest

from ember.runtime import CompileError, CompileQueue, Device


def _wait_until(done, timeout: float = 10.0) -> None:
    """Poll `done()` until it is true (or the timeout: the test's asserts then say what did not happen)."""
    for _ in range(int(timeout / 0.01)):
        if done():
            return
        threading.Event().wait(0.01)


@pytest.fixture
def batches(monkeypatch):
    """The batches each device's compiler is handed: [(device, [function names])]; a source compiles to its bytes."""
    seen: list[tuple[str, list[str]]] = []
    lock = threading.Lock()
    for device in ("PYTHON", "PYTHON:1"):
        def compile_cached_many(programs, src_keys=None, device=device):
            with lock:
                seen.append((device, [name for name, _ in programs]))
            return [src.encode() for _, src in programs]
        monkeypatch.setattr(Device[device].compiler, "compile_cached_many", compile_cached_many)
    return seen


def test_batches_hold_one_device(batches):
    queue = CompileQueue(workers=1, min_batch=100)  # nothing is taken before close
    futs = [queue.submit("PYTHON" if i % 2 == 0 else "PYTHON:1", f"k{i}", f"src{i}") for i in range(6)]
    queue.close()
    assert batches == [("PYTHON", ["k0", "k2", "k4"]), ("PYTHON:1", ["k1", "k3", "k5"])]
    assert [f.result(timeout=0) for f in futs] == [f"src{i}".encode() for i in range(6)]


def test_a_batch_waits_for_min_batch_sources(batches):
    queue = CompileQueue(workers=1, min_batch=3)
    first = [queue.submit("PYTHON", f"k{i}", f"src{i}") for i in range(2)]
    assert not any(f.done() for f in first) and batches == []  # two are fewer than min_batch: nothing runs
    first.append(queue.submit("PYTHON", "k2", "src2"))
    assert [f.result(timeout=10) for f in first] == [b"src0", b"src1", b"src2"]
    assert batches == [("PYTHON", ["k0", "k1", "k2"])]
    queue.close()


def test_batches_hold_at_most_max_batch(batches):
    queue = CompileQueue(workers=1, min_batch=100, max_batch=4)
    futs = [queue.submit("PYTHON", f"k{i}", f"src{i}") for i in range(10)]
    queue.close()
    assert [len(names) for _, names in batches] == [4, 4, 2]
    assert [name for _, names in batches for name in names] == [f"k{i}" for i in range(10)]
    assert all(f.done() for f in futs)


def test_close_resolves_every_future(batches):
    queue = CompileQueue(workers=3)  # the default min_batch: 4
    futs = [queue.submit("PYTHON" if i < 5 else "PYTHON:1", f"k{i}", f"src{i}") for i in range(7)]
    queue.close()
    assert all(f.done() for f in futs)
    assert [f.result(timeout=0) for f in futs] == [f"src{i}".encode() for i in range(7)]
    assert sorted(name for _, names in batches for name in names) == sorted(f"k{i}" for i in range(7))
    assert not any(t.is_alive() for t in queue.threads)


def test_an_error_reaches_every_waiting_future(monkeypatch):
    def reject(programs, src_keys=None):
        raise CompileError("PYTHON: rejected")
    monkeypatch.setattr(Device["PYTHON"].compiler, "compile_cached_many", reject)
    queue = CompileQueue(workers=2, min_batch=100, max_batch=2)
    futs = [queue.submit("PYTHON", f"k{i}", f"src{i}") for i in range(5)]
    queue.close()
    for f in futs:
        with pytest.raises(CompileError, match="PYTHON: rejected"):
            f.result(timeout=0)


def test_a_batch_holds_each_function_name_once(batches):
    # one library cannot hold two functions of one name: a batch with a name twice would run the compiler twice
    queue = CompileQueue(workers=1, min_batch=100)
    names = ["f", "g", "f", "h", "f", "g"]
    futs = [queue.submit("PYTHON", name, f"src{i}") for i, name in enumerate(names)]
    queue.close()
    assert [names for _, names in batches] == [["f", "g", "h"], ["f", "g"], ["f"]]
    assert [f.result(timeout=0) for f in futs] == [f"src{i}".encode() for i in range(6)]


def test_at_close_the_workers_share_the_source_text(monkeypatch):
    # two workers, one source as long as the six others together: it is one worker's share, the six the other's
    seen: list[list[str]] = []
    release = threading.Event()

    def compile_cached_many(programs, src_keys=None):
        seen.append([name for name, _ in programs])
        release.wait(timeout=10)  # (both workers take their batch before either finishes)
        return [src.encode() for _, src in programs]

    monkeypatch.setattr(Device["PYTHON"].compiler, "compile_cached_many", compile_cached_many)
    queue = CompileQueue(workers=2, min_batch=100)
    futs = [queue.submit("PYTHON", "big", "x" * 600)] + [queue.submit("PYTHON", f"k{i}", "y" * 100) for i in range(6)]
    closing = threading.Thread(target=queue.close)
    closing.start()
    _wait_until(lambda: len(seen) == 2)
    release.set()
    closing.join(timeout=10)
    assert sorted(seen) == [["big"], [f"k{i}" for i in range(6)]]
    assert all(f.done() for f in futs)


def test_at_close_a_batch_in_flight_counts_in_the_shares(monkeypatch):
    # one worker compiles a long source when the queue closes: the idle one takes what waits, not half of it (with
    # half, the busy one would compile the other half after its long batch while the idle one waited)
    seen: list[list[str]] = []
    release = threading.Event()

    def compile_cached_many(programs, src_keys=None):
        seen.append([name for name, _ in programs])
        if programs[0][0] == "big":
            release.wait(timeout=10)  # (in flight until the others are taken)
        return [src.encode() for _, src in programs]

    monkeypatch.setattr(Device["PYTHON"].compiler, "compile_cached_many", compile_cached_many)
    queue = CompileQueue(workers=2, min_batch=1)
    futs = [queue.submit("PYTHON", "big", "x" * 600)]
    _wait_until(lambda: seen)
    futs += [queue.submit("PYTHON", f"k{i}", "y" * 100) for i in range(6)]  # (waiting: one worker while they come)
    closing = threading.Thread(target=queue.close)
    closing.start()
    _wait_until(lambda: len(seen) == 2)
    release.set()
    closing.join(timeout=10)
    assert seen == [["big"], [f"k{i}" for i in range(6)]]
    assert all(f.done() for f in futs)


def test_while_sources_come_a_batch_stops_at_max_text(monkeypatch):
    # what piled up while the worker compiled is not taken all at once: a close would find one worker busy with it
    seen: list[list[str]] = []
    release = threading.Event()

    def compile_cached_many(programs, src_keys=None):
        seen.append([name for name, _ in programs])
        release.wait(timeout=10)  # (the first batch holds the worker until every source is waiting)
        return [src.encode() for _, src in programs]

    monkeypatch.setattr(Device["PYTHON"].compiler, "compile_cached_many", compile_cached_many)
    queue = CompileQueue(workers=2, min_batch=1, max_text=250)
    futs = [queue.submit("PYTHON", f"k{i}", "x" * 100) for i in range(8)]
    release.set()
    for f in futs:  # all compiled before close: by the one worker that compiles while sources come
        f.result(timeout=10)
    queue.close()
    assert max(len(names) for names in seen) <= 3  # the third source's text passes 250 characters
    assert sorted(name for names in seen for name in names) == sorted(f"k{i}" for i in range(8))


def test_a_source_found_by_its_key_is_neither_rendered_nor_queued(monkeypatch):
    compiler = Device["PYTHON"].compiler
    seen: list[tuple[list[str], list[str | None]]] = []

    def compile_cached_many(programs, src_keys=None):
        seen.append(([name for name, _ in programs], list(src_keys)))
        return [src.encode() for _, src in programs]

    monkeypatch.setattr(compiler, "compile_cached_many", compile_cached_many)
    monkeypatch.setattr(compiler, "cached_library", lambda src_key: b"lib of " + src_key.encode()
                        if src_key == "known" else None)
    renders: list[str] = []

    def render(text):
        return lambda: renders.append(text) or text

    queue = CompileQueue(workers=1, min_batch=100)
    known = queue.submit("PYTHON", "k0", render("src0"), "known")
    assert known.done() and known.result() == b"lib of known" and renders == []  # at submit, with no render
    futs = [queue.submit("PYTHON", "k1", render("src1"), "unknown"), queue.submit("PYTHON", "k2", "src2")]
    assert renders == ["src1"]  # a key with no library: rendered at once, compiled with its key
    queue.close()
    assert seen == [(["k1", "k2"], ["unknown", None])]
    assert [f.result(timeout=0) for f in futs] == [b"src1", b"src2"]


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"workers": 1, "min_batch": 0}, {"workers": 1, "max_batch": 0}])
def test_a_queue_without_workers_or_batches_is_refused(kwargs):
    # (no worker would resolve a Future: close would return with them pending)
    with pytest.raises(ValueError, match="CompileQueue: workers, min_batch and max_batch must be >= 1"):
        CompileQueue(**kwargs)
