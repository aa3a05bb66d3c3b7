"""time_program: BEAM's timer, one launch of a ProgramSpec on scratch buffers."""

import dataclasses

import numpy as np

from ember.codegen import to_program
from ember.runtime import Device, time_program
from ember.uops import AxisType, Ops, UOp, dtypes


def add_one_ast(n: int) -> UOp:
    out, inp = (UOp(Ops.PARAM, dtypes.float32.ptr(n), (), slot) for slot in (0, 1))
    i = UOp.range(n, 0, AxisType.GLOBAL)
    return UOp.sink(out.index(i).store(inp.index(i).load() + 1.0).end(i))


def test_time_program_on_scratch_buffers():
    spec = to_program(add_one_ast(64), Device["CPU"].renderer)
    scratch: dict = {}
    seconds = time_program("CPU", spec, scratch=scratch)
    assert 0 <= seconds < 1 and len(scratch) == 2
    bufs = dict(scratch)
    time_program("CPU", spec, runs=1, scratch=scratch)
    assert scratch == bufs  # the next candidate reuses the buffers
    (out,) = [b for (slot, _, _), b in scratch.items() if slot == 0]
    np.testing.assert_array_equal(out.numpy(), np.ones(64, np.float32))  # zeroed inputs, plus one


def test_time_program_is_inf_when_the_source_does_not_compile():
    spec = to_program(add_one_ast(8), Device["CPU"].renderer)
    broken = dataclasses.replace(spec, src=spec.src + "\n#error rejected\n")
    assert time_program("CPU", broken) == float("inf")
