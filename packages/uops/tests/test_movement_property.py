"""Property tests of the movement-op index maps against numpy, and the shape errors of the movement builders.

A random chain of movement ops is applied both to a BUFFER (as UOps) and to `np.arange(size)` (PAD fills with -1).
`view_index` must then map every output position to the flat buffer index numpy holds there, and be invalid exactly
where numpy holds the padding -1: for the raw index expressions and for the simplified ones.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ember.uops import Ops, UOp, broadcast_shape, dtypes, render_expr, view_index

Shape = tuple[int, ...]
Step = tuple[str, Any]  # ("reshape", shape) | ("permute", order) | ("expand", shape) | ("pad", pairs) | ...
MAX_ELEMENTS = 256  # no pad or expand grows the view past this: every output position is evaluated


def make_base(size: int) -> UOp:
    return UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="CPU")), size)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _reshape_step(draw: st.DrawFn, shape: Shape) -> Step:
    # a random factorization of the size: each prime factor goes to one of 1-4 dims, the rest stay 1
    ndim = draw(st.integers(1, 4))
    dims = [1] * ndim
    for p in _prime_factors(math.prod(shape)):
        dims[draw(st.integers(0, ndim - 1))] *= p
    return ("reshape", tuple(dims))


def _expand_steps(draw: st.DrawFn, shape: Shape) -> list[Step]:
    steps: list[Step] = []
    if 1 not in shape:  # nothing to expand: insert a size-1 dim first
        at = draw(st.integers(0, len(shape)))
        shape = shape[:at] + (1,) + shape[at:]
        steps.append(("reshape", shape))
    new = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)
    return [*steps, ("expand", new)]


@st.composite
def chains(draw: st.DrawFn) -> tuple[Shape, list[Step]]:
    """A start shape (1-4 dims of 1-6, at most MAX_ELEMENTS elements) and 1-6 movement ops valid on it in turn."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)
                       .filter(lambda s: math.prod(s) <= MAX_ELEMENTS)))
    steps: list[Step] = []
    cur = shape
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip"]))
        if kind == "reshape":
            new_steps = [_reshape_step(draw, cur)]
        elif kind == "permute":
            new_steps = [("permute", tuple(draw(st.permutations(range(len(cur))))))]
        elif kind == "expand":
            new_steps = _expand_steps(draw, cur)
        elif kind == "pad":
            new_steps = [("pad", tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur))]
        elif kind == "shrink":
            bounds = []
            for s in cur:
                begin = draw(st.integers(0, s - 1))
                bounds.append((begin, draw(st.integers(begin + 1, s))))
            new_steps = [("shrink", tuple(bounds))]
        else:
            new_steps = [("flip", tuple(draw(st.booleans()) for _ in cur))]
        new_shape = cur
        for step in new_steps:
            new_shape = numpy_step(np.zeros(new_shape), step).shape
        if math.prod(new_shape) <= MAX_ELEMENTS:  # a pad or expand that grows the view too much is left out
            cur = new_shape
            steps.extend(new_steps)
    if not steps:  # every drawn op grew the view too much
        steps.append(("flip", (True,) * len(shape)))
    return shape, steps


def numpy_step(a: np.ndarray, step: Step) -> np.ndarray:
    kind, arg = step
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "permute":
        return np.transpose(a, arg)
    if kind == "expand":
        return np.broadcast_to(a, arg)
    if kind == "pad":
        return np.pad(a, arg, constant_values=-1)
    if kind == "shrink":
        return a[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        return np.flip(a, axis=tuple(i for i, f in enumerate(arg) if f))
    raise AssertionError(f"unknown step {kind!r}")


def uop_step(u: UOp, step: Step) -> UOp:
    kind, arg = step
    return {"reshape": u.reshape, "permute": u.permute, "expand": u.expand, "pad": u.pad, "shrink": u.shrink,
            "flip": u.flip}[kind](arg)


def _describe(shape: Shape, steps: list[Step]) -> str:
    return f"np.arange({math.prod(shape)}).reshape({shape})" + "".join(f".{k}{a}" for k, a in steps)


# no explain phase: it re-runs the failing example many times (slow) and only prints which lines ran
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])
@given(chains())
def test_view_index_matches_numpy(chain):
    shape, steps = chain
    size = math.prod(shape)
    want = np.arange(size).reshape(shape)
    base = make_base(size)
    top = base.reshape(shape)
    for step in steps:
        want = numpy_step(want, step)
        top = uop_step(top, step)
    what = _describe(shape, steps)
    assert top.shape == want.shape, what

    ranges = tuple(UOp.range(n, axis) for axis, n in enumerate(want.shape))
    got_base, idxs, valid = view_index(top, ranges)
    assert got_base is base and len(idxs) == 1, what
    (idx,) = idxs
    forms = {"raw": (idx, valid), "simplified": (idx.simplify(), None if valid is None else valid.simplify())}
    for pos in np.ndindex(*want.shape):
        env = dict(zip(ranges, pos))
        expect = int(want[pos])
        for form, (i, v) in forms.items():
            is_valid = True if v is None else v.evaluate(env)
            assert is_valid == (expect != -1), \
                f"{what}: {form} valid {render_expr(v)} is {is_valid} at {pos}, numpy holds {expect}"
            if is_valid:
                assert i.evaluate(env) == expect, \
                    f"{what}: {form} index {render_expr(i)} is {i.evaluate(env)} at {pos}, numpy holds {expect}"


def test_view_index_of_each_op():
    # one op at a time on a (2, 3) view, every output position, against numpy
    for step in [("reshape", (3, 2)), ("permute", (1, 0)), ("expand", (4, 2, 3)), ("pad", ((1, 0), (2, 1))),
                 ("shrink", ((1, 2), (0, 2))), ("flip", (True, False)), ("flip", (True, True))]:
        steps: list[Step] = [("reshape", (1, 2, 3))] if step[0] == "expand" else []
        shape: Shape = (2, 3)
        want = np.arange(6).reshape(shape)
        top = make_base(6).reshape(shape)
        for s in [*steps, step]:
            want, top = numpy_step(want, s), uop_step(top, s)
        ranges = tuple(UOp.range(n, axis) for axis, n in enumerate(want.shape))
        _, (idx,), valid = view_index(top, ranges)
        for pos in np.ndindex(*want.shape):
            env = dict(zip(ranges, pos))
            ok = True if valid is None else valid.evaluate(env)
            assert (int(idx.evaluate(env)) if ok else -1) == want[pos], (step, pos)


# *** shape errors: type and message fragment ***
t = make_base(24).reshape((4, 6))


def test_reshape_size_mismatch():
    with pytest.raises(ValueError, match=r"reshape: cannot view shape \(4, 6\) as \(5, 5\): sizes 24 and 25 differ"):
        t.reshape((5, 5))
    with pytest.raises(ValueError, match=r"sizes must be >= 0"):
        t.reshape((-4, -6))


def test_permute_bad_order():
    with pytest.raises(ValueError, match=r"permute: order \(0, 0\) is not a permutation of the 2 axes of \(4, 6\)"):
        t.permute((0, 0))
    with pytest.raises(ValueError, match=r"order \(0, 1, 2\) is not a permutation"):
        t.permute((0, 1, 2))
    with pytest.raises(ValueError, match=r"order \(1, 2\) is not a permutation"):
        t.permute((1, 2))


def test_expand_non_one_dim():
    with pytest.raises(ValueError, match=r"expand: cannot expand \(4, 6\) to \(8, 6\): only size-1 dims expand"):
        t.expand((8, 6))
    with pytest.raises(ValueError, match=r"different numbers of dims"):
        t.expand((2, 4, 6))


def test_pad_bad_amounts():
    with pytest.raises(ValueError, match=r"pad: padding amounts must be >= 0, got \(\(-1, 0\), \(0, 0\)\)"):
        t.pad(((-1, 0), (0, 0)))
    with pytest.raises(ValueError, match=r"pad: padding \(\(1, 1\),\) needs one \(before, after\) pair per dim"):
        t.pad(((1, 1),))
    with pytest.raises(ValueError, match=r"needs one \(before, after\) pair per dim"):
        t.pad(((1, 1, 1), (0, 0)))


def test_shrink_out_of_bounds():
    with pytest.raises(ValueError, match=r"shrink: bounds \(\(0, 5\), \(0, 6\)\) out of range for shape \(4, 6\)"):
        t.shrink(((0, 5), (0, 6)))
    with pytest.raises(ValueError, match=r"out of range for shape \(4, 6\)"):
        t.shrink(((3, 2), (0, 6)))  # begin > end
    with pytest.raises(ValueError, match=r"out of range for shape \(4, 6\)"):
        t.shrink(((-1, 2), (0, 6)))
    with pytest.raises(ValueError, match=r"need one \(begin, end\) pair per dim"):
        t.shrink(((0, 2),))


def test_flip_bad_arg():
    with pytest.raises(ValueError, match=r"flip: arg \(True,\) needs one bool per dim of \(4, 6\)"):
        t.flip((True,))


def test_broadcast_shape_incompatible():
    with pytest.raises(ValueError, match=r"broadcast: shapes \(3,\) and \(4,\) are not compatible"):
        broadcast_shape((3,), (4,))
    assert broadcast_shape((3, 1), (4,)) == (3, 4)


def test_view_index_wrong_number_of_indices():
    with pytest.raises(ValueError, match=r"view_index: need one index per dim of \(4, 6\), got 1"):
        view_index(t, (UOp.range(4, 0),))
