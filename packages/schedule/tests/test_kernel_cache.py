"""Kernels of templates on disk: a later process (here: an emptied in-memory cache) reads the same ExecItems back
instead of running rangeify; CACHE=0, another constant of the rules, or a bad entry build them again."""

import pytest

import ember.schedule as sched
from ember.schedule import attention, schedule
from ember.uops import Ops, UOp, dtypes, files, gradient, settings

_n = iter(range(10**6))


def buf(*shape):
    return UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=next(_n)), UOp(Ops.DEVICE, arg="CPU")),
               shape[0] * shape[1]).reshape(shape)


def graph():
    """A matmul with a scaled epilogue, stored, and a row max of it: a few kernels."""
    a, b = buf(16, 32), buf(32, 8)
    prod = a.reshape((16, 32, 1)).expand((16, 32, 8)) * b.reshape((1, 32, 8)).expand((16, 32, 8))
    half = UOp.const(dtypes.float32, 0.5, "CPU").reshape((1, 1)).expand((16, 8))
    mm = prod.reduce_axis(Ops.ADD, (1,)).reshape((16, 8)) * half
    return UOp.sink(mm.contiguous(), mm.reduce_axis(Ops.MAX, (1,)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder and in-memory cache; `builds` counts the kernels rangeify builds."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CACHE", raising=False)
    monkeypatch.setattr(sched, "_templates", {})
    builds = []
    kernel_ast = sched.kernel_ast
    monkeypatch.setattr(sched, "kernel_ast", lambda *a: builds.append(a) or kernel_ast(*a))
    return tmp_path / "schedule", builds


def items(g):
    sched._templates.clear()  # (a new process: only the disk remembers)
    # each kernel's AST and its buffers' sizes (each schedule makes new buffers for what it computes)
    return [(it.ast, tuple(b.arg for b in it.bufs)) for it in schedule(g).items]


def test_second_process_reads_the_kernels_back(cache):
    folder, builds = cache
    g = graph()
    first = items(g)
    n = len(builds)
    assert n == len(first) >= 2 and len(files.entries(folder)) == n
    assert items(g) == first and len(builds) == n  # the same ASTs (hash-consed), not rebuilt
    other = graph()  # the same kernels over other buffers
    assert items(other) == first and len(builds) == n


def attention_step():
    """softmax(q k^T / 2) v at T = 128, head_dim 4 (the scores recomputed), and its gradients: a schedule with
    multi-output kernels (the forward with its row statistics, dk with dv)."""
    t, d = 128, 4
    q, k, v, up = buf(t, d), buf(t, d), buf(t, d), buf(t, d)

    def matmul_t(a, b):  # a @ b^T
        n, m = a.shape[0], b.shape[0]
        return (a.reshape((n, 1, d)).expand((n, m, d)) * b.reshape((1, m, d)).expand((n, m, d))) \
            .reduce_axis(Ops.ADD, (2,)).reshape((n, m))

    s = matmul_t(q, k) * 0.5
    mx = s.reduce_axis(Ops.MAX, (1,))
    e = (s + UOp(Ops.DETACH, mx.dtype, (mx,)).expand((t, t)) * -1.0).exp2()
    p = e * e.reduce_axis(Ops.ADD, (1,)).expand((t, t)).reciprocal()
    o = (p.reshape((t, t, 1)).expand((t, t, d)) * v.reshape((1, t, d)).expand((t, t, d))).reduce_axis(Ops.ADD, (1,))
    o = o.reshape((t, d))
    one = UOp.const(dtypes.float32, 1.0, "CPU").reshape((1, 1))
    grads = gradient((o * up).reduce_axis(Ops.ADD, (0, 1)), [q, k, v], one)
    return UOp.sink(o, *grads.values())


def test_multi_output_kernels_are_read_back(cache, monkeypatch):
    """A later process reads the multi-output kernels back too; only the groupings whose roots share no work (not
    stored: nothing to store) are asked of kernel_ast again."""
    _, builds = cache
    kernel_ast, failed = sched.kernel_ast, []
    monkeypatch.setattr(sched, "kernel_ast",
                        lambda x, b: (r := kernel_ast(x, b)) is None and failed.append(x) or r)
    g = attention_step()
    first = items(g)
    assert sorted(sum(u.op is Ops.STORE for u in ast.toposort()) for ast, _ in first)[-2:] == [2, 3]
    failed_first, n = list(failed), len(builds)
    assert items(g) == first
    assert len(builds) - n == len(failed_first) == len(failed) - len(failed_first)  # (only the failures asked again)


def test_cache_off_builds_again(cache, monkeypatch):
    folder, builds = cache
    g = graph()
    first = items(g)
    monkeypatch.setenv("CACHE", "0")
    assert not settings.CACHE.value
    assert items(g) == first and len(builds) == 2 * len(first)


def test_a_constant_of_the_rules_is_in_the_key(cache, monkeypatch):
    folder, builds = cache
    g = graph()
    n = len(items(g))
    monkeypatch.setattr(attention, "ONLINE_ONE_LOOP", not attention.ONLINE_ONE_LOOP)
    items(g)
    assert len(builds) == 2 * n and len(files.entries(folder)) == 2 * n


@pytest.mark.parametrize("damage", ["payload", "bufs"])
def test_bad_entry_is_a_warning_and_built_again(cache, damage):
    folder, builds = cache
    g = graph()
    first = items(g)
    for path in files.entries(folder):
        entry = files.read_entry(path, path.name)
        if damage == "payload":  # edited behind the header's back: fails verification
            path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
        else:  # well formed, but its buffers are not the template's placeholders
            files.write_entry(path, path.name, entry.payload.replace(b'"UNIQUE",["void",1],[],-1',
                                                                     b'"UNIQUE",["void",1],[],-9'))
    with pytest.warns(UserWarning, match="corrupt|unreadable"):
        assert items(g) == first
    assert len(builds) == 2 * len(first)
    assert items(g) == first and len(builds) == 2 * len(first)  # rebuilt entries read back
