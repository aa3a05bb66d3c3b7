"""A Python scalar in a kernel (`x * 0.37`) does not make a new program per value: the first kernel of a family
(kernels that differ only in constants, engine.scalar_constants) is compiled with its constants, the later ones run
one program that takes the constants they change as arguments."""

import math

import numpy as np
import pytest

import ember.tensor.engine as engine
from ember.tensor import Tensor
from ember.tensor.jit import jit
from ember.uops import Ops


@pytest.fixture
def codegens(monkeypatch):
    """The ASTs the engine generates programs for, from now on."""
    built = []
    original = engine.codegen

    def counting(ast, device):
        built.append(ast)
        return original(ast, device)

    monkeypatch.setattr(engine, "codegen", counting)
    return built


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_100_distinct_scalars_share_one_program(codegens, device):
    base = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    x = Tensor(base, device=device).realize()
    codegens.clear()
    for i in range(100):
        s = 0.37 + i * 0.013  # 100 values no kernel has seen
        out = (x * s + (1.5 - s)).numpy()
        np.testing.assert_allclose(out, base * np.float32(s) + np.float32(1.5 - s), rtol=1e-6, atol=1e-6)
    assert len(codegens) == 2  # the first kernel, then the family's program for the 99 others
    assert any(u.op is Ops.DEFINE_VAR for u in codegens[-1].toposort())  # the shared program takes arguments


def test_a_scalar_family_keeps_exact_float32_results(codegens):
    x = Tensor(np.array([1.0, 3.0, -7.5, 1e30, np.inf, np.nan], np.float32)).realize()
    for s in (0.1, 0.2, 0.3, 1 / 3, -0.0, float("inf"), 3.4e38):
        with np.errstate(all="ignore"):
            want = np.array([1.0, 3.0, -7.5, 1e30, np.inf, np.nan], np.float32) * np.float32(s)
        np.testing.assert_array_equal((x * s).numpy(), want)


def test_half_scalars_share_a_program_too(codegens):
    x = Tensor(np.arange(8, dtype=np.float16)).realize()
    codegens.clear()
    for s in (0.5, 0.25, 3.0, 1.5, 0.125):
        np.testing.assert_array_equal((x * s).numpy(), np.arange(8, dtype=np.float16) * np.float16(s))
    assert len(codegens) <= 2


def test_a_jitted_function_replays_its_scalars():
    x = Tensor(np.ones(4, np.float32)).realize()
    fns = [jit(lambda t, s=s: (t * s).realize()) for s in (2.0, 3.0, 4.0, 5.0)]
    for _ in range(3):  # capture, then replays: each keeps its own value
        assert [f(x).numpy().tolist() for f in fns] == [[2.0] * 4, [3.0] * 4, [4.0] * 4, [5.0] * 4]


def test_kernels_that_differ_in_constants_are_one_family():
    from ember.schedule import schedule
    from ember.uops import UOp

    x = Tensor(np.ones(4, np.float32)).realize()
    asts = [schedule(UOp.sink((x * s + 1.0).uop)).items[-1].ast for s in (0.25, 0.75)]
    (fa, ca, va), (fb, cb, vb) = (engine.scalar_constants(ast) for ast in asts)
    assert fa is fb and len(va) == len(vb) == 2 and va != vb
    assert sorted(np.int32(v).view(np.float32) for v in va) == [np.float32(0.25), np.float32(1.0)]
    # only the constants that differ become arguments; the others stay in the source
    differ = [i for i, (a, b) in enumerate(zip(va, vb)) if a != b]
    lifted, variables = engine.lift_scalars(asts[1], cb, differ)
    assert len(variables) == 1 and sum(u.op is Ops.DEFINE_VAR for u in lifted.toposort()) == 1


def test_a_program_of_a_family_is_exactly_the_compiled_in_constant(codegens):
    # a program takes as arguments only the constants a kernel changes, so it computes what the first kernel would
    x = Tensor(np.linspace(0.1, 2, 64, dtype=np.float32)).realize()
    for std in (0.02, 0.007071067811865475, 0.013):
        y = ((x * 6.2831855).cos() * (x.log() * -2.0).sqrt() * std).numpy()
        engine.ENGINE.kernels.clear()
        engine.ENGINE.sharing.clear()
        engine.ENGINE.families.clear()
        engine.ENGINE.family_programs.clear()
        alone = ((x * 6.2831855).cos() * (x.log() * -2.0).sqrt() * std).numpy()  # compiled with its constants
        np.testing.assert_array_equal(y, alone)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_int_scalars_share_a_program_and_stay_exact(codegens, dtype):
    base = np.arange(-6, 6).astype(dtype) if np.issubdtype(dtype, np.signedinteger) else np.arange(12).astype(dtype)
    x = Tensor(base).realize()
    codegens.clear()
    for s in range(3, 40):
        np.testing.assert_array_equal((x * s + 7).numpy(), (base * dtype(s) + dtype(7)).astype(dtype))
    assert len(codegens) <= 4  # (a power of two multiplies as a shift: its own family)
    for s in (3, 5, 7, 9, 11):  # a divisor made an argument divides exactly as a constant one
        np.testing.assert_array_equal((x // s).numpy(), base // dtype(s))
        np.testing.assert_array_equal((x % s).numpy(), base % dtype(s))


def test_a_family_program_is_built_with_the_schedules_other_kernels(monkeypatch, tmp_path):
    # a family's program is a kernel like the others: built (and compiled in a batch) with the rest of the schedule's
    # kernels, not compiled on its own while the schedule is still being made (a model's random init: 30 draws of one
    # family, each with its seed; two such compiles held up the tiny Llama's setup ~0.3 s)
    eng = engine.Engine()
    scheduling, during = [False], []
    schedule, codegen = engine.schedule, engine.codegen

    def tracked_schedule(*a, **k):
        scheduling[0] = True
        try:
            return schedule(*a, **k)
        finally:
            scheduling[0] = False

    def tracked_codegen(ast, device):
        during.append(scheduling[0])
        return codegen(ast, device)

    monkeypatch.setattr(engine, "schedule", tracked_schedule)
    monkeypatch.setattr(engine, "codegen", tracked_codegen)
    monkeypatch.setenv("CODEGEN_WORKERS", "0")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))  # (every program built: none read from disk)
    v = np.linspace(0.5, 3, 96, dtype=np.float32).reshape(8, 12)
    x = Tensor(v).realize()
    outs = [(x * 1.40625 + 0.25).exp(), (x * 1.65625 + 0.25).exp(), x.sum(0), x.max(1), (x * 3.0).sqrt()]
    try:
        becomes = eng.realize_uops([o.uop for o in outs], frozenset())
        assert len(eng.family_programs) == 1 and len(during) == 5 and not any(during)
        np.testing.assert_allclose(engine.copyout(becomes[outs[1].uop]), np.exp(v * 1.65625 + 0.25), rtol=1e-6)
        np.testing.assert_allclose(engine.copyout(becomes[outs[0].uop]), np.exp(v * 1.40625 + 0.25), rtol=1e-6)
    finally:
        eng.close()


def test_a_kernel_with_the_first_kernels_constants_is_compiled_itself():
    # a NaN constant is a node of its own each time (nan != nan): the same kernel written twice is two ASTs of one
    # family with equal constants, nothing to pass as arguments (it recursed into its own "family program")
    x = Tensor(np.arange(6, dtype=np.float32)).realize()
    a, b = (x * 0.5 + math.nan).numpy(), (x * 0.5 + float("nan")).numpy()
    assert np.isnan(a).all() and np.isnan(b).all()
