"""CodegenPool: programs built in helper processes are the programs built here; what a worker cannot build comes
back to the caller."""

import time
from collections import deque

import pytest

from ember.codegen import CodegenPool, CRenderer, to_program
from ember.uops import AxisType, Ops, UOp, dtypes, settings


def param(slot, n):
    return UOp(Ops.PARAM, dtypes.float32.ptr(n), (), slot)


def matvec_ast(n, m):
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load() * param(2, m).index(r1).load()
    return UOp.sink(param(0, n).index(r0).store(UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.ADD)).end(r0))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NOOPT", raising=False)


@pytest.fixture
def pool():
    p = CodegenPool(1)
    yield p
    p.close()


def run(pool, items, request):
    done = {}
    handle = pool.drain(deque(items), request, lambda item, spec: done.__setitem__(item, spec))
    return done, handle.join()


def test_the_pool_builds_what_to_program_builds(pool):
    shapes = [(64, 48), (33, 70), (128, 256), (5, 7)]
    done, returned = run(pool, shapes, lambda s: (matvec_ast(*s), CRenderer(), None))
    assert returned == [] and set(done) == set(shapes)
    for s in shapes:
        here = to_program(matvec_ast(*s), CRenderer())
        assert done[s].src == here.src and done[s].applied_opts == here.applied_opts and done[s].bufs == here.bufs


def test_the_caller_environment_goes_along(pool, monkeypatch):
    run(pool, [(64, 48)], lambda s: (matvec_ast(*s), CRenderer(), None))  # the worker is up
    monkeypatch.setenv("NOOPT", "1")  # set after the worker started: it still applies to the next request
    done, _ = run(pool, [(64, 48)], lambda s: (matvec_ast(*s), CRenderer(), None))
    assert done[(64, 48)].applied_opts == () and done[(64, 48)].src == to_program(matvec_ast(64, 48), CRenderer()).src


def test_context_overrides_go_along(pool):
    run(pool, [(64, 48)], lambda s: (matvec_ast(*s), CRenderer(), None))  # the worker is up
    with settings.Context(NOOPT=True):  # not in os.environ: the request carries settings.environ()
        done, _ = run(pool, [(64, 48)], lambda s: (matvec_ast(*s), CRenderer(), None))
    assert done[(64, 48)].applied_opts == ()


def test_what_a_worker_cannot_build_comes_back(pool):
    # an AST that is not a SINK fails in the worker; the caller builds it and sees the error itself
    done, returned = run(pool, [1, 2, 3], lambda i: (matvec_ast(8 * i, 16).src[0] if i != 2 else matvec_ast(8, 8),
                                                     CRenderer(), None))
    assert list(done) == [2] and sorted(returned) == [1, 3]


def test_a_dead_worker_gives_its_work_back_and_a_new_drain_restarts(pool):
    run(pool, [(8, 8)], lambda s: (matvec_ast(*s), CRenderer(), None))
    pool.workers[0].proc.kill()
    pool.workers[0].proc.wait()
    done, returned = run(pool, [(16, 16), (32, 32)], lambda s: (matvec_ast(*s), CRenderer(), None))
    assert done == {} and sorted(returned) == [(16, 16), (32, 32)]
    pool.close()
    done, returned = run(pool, [(16, 16)], lambda s: (matvec_ast(*s), CRenderer(), None))
    assert returned == [] and done[(16, 16)].src == to_program(matvec_ast(16, 16), CRenderer()).src


def test_no_python_to_start_means_building_here(monkeypatch):
    from ember.codegen import pool as pool_mod

    monkeypatch.setattr(pool_mod.sys, "executable", "/nonexistent/python")
    p = CodegenPool(1)
    work = deque([(8, 8), (16, 16)])
    with pytest.warns(UserWarning, match="cannot start a worker"):
        handle = p.drain(work, lambda s: (matvec_ast(*s), CRenderer(), None), lambda *a: pytest.fail("built"))
    assert handle.join() == [] and list(work) == [(8, 8), (16, 16)]  # all left to the caller


def test_a_worker_imports_what_the_caller_can(pool, tmp_path, monkeypatch):
    # a renderer from a module the caller found through sys.path alone (not $PYTHONPATH)
    (tmp_path / "pool_test_renderer.py").write_text(
        "from ember.codegen import CRenderer\nclass MyRenderer(CRenderer):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from pool_test_renderer import MyRenderer

    done, returned = run(pool, [(8, 24)], lambda s: (matvec_ast(*s), MyRenderer(), None))
    assert returned == [] and done[(8, 24)].src == to_program(matvec_ast(8, 24), MyRenderer()).src


def test_an_open_drain_waits_for_work_put_after_it_started(pool):
    done = {}
    handle = pool.drain(deque(), lambda s: (matvec_ast(*s), CRenderer(), None),
                        lambda item, spec: done.__setitem__(item, spec), more=True)
    time.sleep(0.05)  # the threads found nothing and wait
    shapes = [(16, 8), (24, 8), (32, 8)]
    for s in shapes:
        handle.put(s)
    handle.close()
    assert handle.join() == [] and set(done) == set(shapes)
    assert all(t.is_alive() is False for t in handle.threads)
