"""ember.schedule.allreduce on CPU:n devices: values against numpy for each strategy, op, dtype and odd size; the exact
copies and kernels each strategy schedules; the automatic choice and its settings; bad inputs."""

import re

import numpy as np
import pytest

from ember.schedule import allreduce, allreduce_strategy, schedule
from ember.tensor import Tensor
from ember.uops import Ops, UOp, dtypes, settings

NP_FOLD = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MULTI_ALLREDUCE", "RING_ALLREDUCE_THRESHOLD"):
        monkeypatch.delenv(name, raising=False)


def shards(op: Ops, dtype: str, shape: tuple[int, ...], n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":  # products of up to 8 values in [-3, 3] stay far inside int32
        lo, hi = (-3, 4) if op is Ops.MUL else (-1000, 1000)
        return [rng.integers(lo, hi, shape).astype(np.int32) for _ in range(n)]
    if op is Ops.MUL:  # near 1: the product of 8 stays well scaled
        return [rng.uniform(0.9, 1.1, shape).astype(np.float32) for _ in range(n)]
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def on_devices(xs: list[np.ndarray]) -> list[UOp]:
    return [Tensor(x, device=f"CPU:{i}").realize().uop for i, x in enumerate(xs)]


def run(results: list[UOp]) -> list[np.ndarray]:
    tensors = [Tensor(r) for r in results]
    Tensor.realize_all(*tensors)
    return [t.numpy() for t in tensors]


def check(op: Ops, xs: list[np.ndarray], results: list[UOp], parts: list[UOp]) -> None:
    assert [r.device for r in results] == [p.device for p in parts]
    want = NP_FOLD[op].reduce(np.stack(xs), axis=0, dtype=xs[0].dtype)
    got = run(results)
    for g in got:
        assert g.shape == want.shape and g.dtype == want.dtype
        if xs[0].dtype == np.float32 and op is not Ops.MAX:  # fold orders differ from numpy's (ring: per chunk)
            np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, want)
    for g in got[1:]:  # one fold order per element, whatever the device: the same bits everywhere
        np.testing.assert_array_equal(g, got[0])


@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (1001,), (5, 3)])
@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("strategy", ["naive", "ring"])
def test_allreduce_matches_numpy(strategy: str, n: int, shape: tuple[int, ...]) -> None:
    cases = [(op, dtype) for op in (Ops.ADD, Ops.MUL, Ops.MAX) for dtype in ("float32", "int32")]
    xs = {c: shards(*c, shape, n, seed=i) for i, c in enumerate(cases)}
    parts = {c: on_devices(xs[c]) for c in cases}
    for op, dtype in cases:
        check(op, xs[(op, dtype)], allreduce(op, parts[(op, dtype)], strategy), parts[(op, dtype)])


@pytest.mark.parametrize("strategy", ["naive", "ring"])
def test_allreduce_of_lazy_parts(strategy: str) -> None:
    xs = shards(Ops.ADD, "float32", (1001,), 4)
    ys = shards(Ops.ADD, "float32", (1001,), 4, seed=1)
    parts = [(Tensor(x, device=f"CPU:{i}") * Tensor(y, device=f"CPU:{i}") + 1).uop for i, (x, y) in
             enumerate(zip(xs, ys))]
    check(Ops.ADD, [x * y + np.float32(1) for x, y in zip(xs, ys)], allreduce(Ops.ADD, parts, strategy), parts)


def test_one_device_is_its_part() -> None:
    (part,) = on_devices([np.arange(5, dtype=np.float32)])
    assert allreduce(Ops.ADD, [part], "ring") == [part]


def test_a_bool_allreduce_is_any_and_all() -> None:
    xs = [np.random.default_rng(i).random(1000) < 0.3 for i in range(3)]
    parts = on_devices(xs)
    for op, want in ((Ops.MAX, np.logical_or.reduce(xs)), (Ops.MUL, np.logical_and.reduce(xs))):
        for strategy in ("naive", "ring"):
            for got in run(allreduce(op, parts, strategy)):
                np.testing.assert_array_equal(got, want)


# *** what is scheduled: copies and kernels, exactly ***
def counts(results: list[UOp]) -> tuple[int, int]:
    items = schedule(UOp.sink(*results)).items
    copies = sum(it.ast.op is Ops.COPY for it in items)
    return copies, len(items) - copies


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_naive_schedules_a_copy_per_pair_and_a_kernel_per_device(n: int) -> None:
    parts = on_devices(shards(Ops.ADD, "float32", (4096,), n))
    assert counts(allreduce(Ops.ADD, parts, "naive")) == (n * (n - 1), n)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_schedules_two_laps_of_copies_and_a_fold_per_hop(n: int) -> None:
    # n chunks, each folded at n-1 hops (a kernel each) and copied at 2(n-1) hops; then a kernel per device joins the
    # chunks. A chunk of a realized part is a BUFFER_VIEW: its first hop copies it in place, with no kernel
    parts = on_devices(shards(Ops.ADD, "float32", (4096,), n))
    assert counts(allreduce(Ops.ADD, parts, "ring")) == (2 * n * (n - 1), n * (n - 1) + n)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_lazy_parts_add_one_kernel_per_device(n: int) -> None:
    # naive: a lazy part is stored once on its own device (the source of its copies; the local fold reads it too).
    # ring: each device's first chunk is stored for its first hop; the other chunks fuse into the folds that read them
    xs = shards(Ops.ADD, "float32", (4096,), n)
    parts = [(Tensor(x, device=f"CPU:{i}") * 2).uop for i, x in enumerate(xs)]
    assert counts(allreduce(Ops.ADD, parts, "naive")) == (n * (n - 1), 2 * n)
    assert counts(allreduce(Ops.ADD, parts, "ring")) == (2 * n * (n - 1), n * (n - 1) + 2 * n)


@pytest.mark.parametrize(("numel", "chunks"), [(200, 4), (64, 1), (7, 1)])
def test_ring_chunks_are_whole_aligned_units(numel: int, chunks: int) -> None:
    # float32 chunks are whole units of 64 elements (256 bytes): 200 elements on 8 devices make 4 chunks (3 units
    # and a short one), the rest stay empty and move nothing; one chunk is the whole part, with nothing to join
    n = 8
    parts = on_devices(shards(Ops.ADD, "float32", (numel,), n))
    join = n if chunks > 1 else 0
    assert counts(allreduce(Ops.ADD, parts, "ring")) == (2 * chunks * (n - 1), chunks * (n - 1) + join)


# *** the automatic choice ***
def test_strategy_by_size_and_device_count() -> None:
    threshold = settings.RING_ALLREDUCE_THRESHOLD.value
    assert threshold == 4 << 20
    assert allreduce_strategy(1 << 30, 2) == "naive"  # two devices: a ring moves as many bytes, in more steps
    assert allreduce_strategy(threshold - 1, 8) == "naive"
    assert allreduce_strategy(threshold, 3) == allreduce_strategy(threshold, 8) == "ring"


def test_strategy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RING_ALLREDUCE_THRESHOLD", "1000")
    assert (allreduce_strategy(999, 4), allreduce_strategy(1000, 4)) == ("naive", "ring")
    monkeypatch.setenv("MULTI_ALLREDUCE", "naive")
    assert allreduce_strategy(1 << 30, 8) == "naive"
    with settings.Context(MULTI_ALLREDUCE="ring"):
        assert allreduce_strategy(4, 2) == "ring"
    monkeypatch.setenv("MULTI_ALLREDUCE", "tree")
    with pytest.raises(ValueError, match=re.escape("MULTI_ALLREDUCE='tree': expected one of naive, ring")):
        allreduce_strategy(4, 2)
    monkeypatch.setenv("MULTI_ALLREDUCE", "")
    monkeypatch.setenv("RING_ALLREDUCE_THRESHOLD", "4k")
    with pytest.raises(ValueError, match=re.escape("RING_ALLREDUCE_THRESHOLD='4k': expected an integer >= 0")):
        allreduce_strategy(4, 3)


def test_allreduce_without_a_strategy_asks_allreduce_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 4
    parts = on_devices(shards(Ops.ADD, "float32", (4096,), n))  # 16 KiB: under the default threshold
    assert counts(allreduce(Ops.ADD, parts)) == (n * (n - 1), n)
    monkeypatch.setenv("RING_ALLREDUCE_THRESHOLD", str(4096 * 4))
    assert counts(allreduce(Ops.ADD, parts)) == (2 * n * (n - 1), n * n)
    assert counts(allreduce(Ops.ADD, parts, "naive")) == (n * (n - 1), n)  # an explicit strategy wins


# *** bad inputs ***
def test_bad_inputs() -> None:
    a, b, c = on_devices([np.ones(4, np.float32)] * 3)
    with pytest.raises(ValueError, match=r"allreduce: op must be one of \['ADD', 'MAX', 'MUL'\], got CMPLT"):
        allreduce(Ops.CMPLT, [a, b])
    with pytest.raises(ValueError, match="allreduce: no parts given"):
        allreduce(Ops.ADD, [])
    with pytest.raises(ValueError, match="allreduce: parts must share one shape and dtype"):
        allreduce(Ops.ADD, [a, Tensor(np.ones(5, np.float32), device="CPU:1").uop])
    with pytest.raises(ValueError, match="allreduce: parts must share one shape and dtype"):
        allreduce(Ops.ADD, [a, Tensor(np.ones(4, np.int32), device="CPU:1").uop])
    with pytest.raises(ValueError, match=re.escape("allreduce: parts must be on distinct devices, got "
                                                   "['CPU', 'CPU:1', 'CPU']")):
        allreduce(Ops.ADD, [a, b, Tensor(np.ones(4, np.float32), device="CPU:0").uop])
    both = UOp.const(dtypes.float32, 1.0, ("CPU:0", "CPU:1")).reshape((1,)).expand((4,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("allreduce: each part must be on one device, got devices "
                                                   "[('CPU:0', 'CPU:1'), 'CPU:2']")):
        allreduce(Ops.ADD, [both, c])
    with pytest.raises(ValueError, match="allreduce: parts must be tensors, got a CONST"):
        allreduce(Ops.ADD, [UOp.const(dtypes.float32, 1.0)])
    with pytest.raises(ValueError, match="allreduce: strategy must be one of naive, ring or None, got 'tree'"):
        allreduce(Ops.ADD, [a, b], "tree")
