"""Property tests of the symbolic simplifier: random integer expression trees over bounded variables.

For every tree: `evaluate` agrees with an independent reference evaluator (C division), `simplify()` keeps the value
and never grows the graph, and vmin/vmax bound every value a node takes.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ember.uops import Ops, UOp, dtypes, render_expr

# *** expression trees: plain tuples, so the same tree builds a UOp and runs through the reference evaluator ***
# ("var", i) | ("const", v) | ("add"|"sub"|"mul"|"max", l, r) | ("mulc", l, c) | ("div"|"mod", l, c)
# | ("where", ("lt"|"ge", l, r), t, f) | ("split", l, c): (l//c)*c + l%c | ("split3", l, c, n): ((l//c)%n)*c + l%c
Tree = tuple[Any, ...]
NAMES = ("a", "b", "c")
DIVISORS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, -1, -2, -3, -5]  # mostly positive: most folds need c > 0


def c_div(a: int, b: int) -> int:
    """C integer division: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """C remainder: a - b*trunc(a/b), which takes the sign of the dividend."""
    return a - b * c_div(a, b)


def ref_eval(t: Tree, env: tuple[int, ...]) -> int | bool:
    """The value of tree `t` with variable i set to env[i], computed without ember."""
    kind = t[0]
    if kind == "var":
        return env[t[1]]
    if kind == "const":
        return t[1]
    if kind == "add":
        return ref_eval(t[1], env) + ref_eval(t[2], env)
    if kind == "sub":
        return ref_eval(t[1], env) - ref_eval(t[2], env)
    if kind == "mul":
        return ref_eval(t[1], env) * ref_eval(t[2], env)
    if kind == "max":
        return max(ref_eval(t[1], env), ref_eval(t[2], env))
    if kind == "mulc":
        return ref_eval(t[1], env) * t[2]
    if kind == "div":
        return c_div(ref_eval(t[1], env), t[2])
    if kind == "mod":
        return c_mod(ref_eval(t[1], env), t[2])
    if kind == "lt":
        return ref_eval(t[1], env) < ref_eval(t[2], env)
    if kind == "ge":
        return ref_eval(t[1], env) >= ref_eval(t[2], env)
    if kind == "where":
        return ref_eval(t[2], env) if ref_eval(t[1], env) else ref_eval(t[3], env)
    if kind == "split":
        v, c = ref_eval(t[1], env), t[2]
        return c_div(v, c) * c + c_mod(v, c)
    if kind == "split3":
        v, c, n = ref_eval(t[1], env), t[2], t[3]
        return c_mod(c_div(v, c), n) * c + c_mod(v, c)
    raise AssertionError(f"unknown tree node {kind!r}")


def build(t: Tree, variables: tuple[UOp, ...]) -> UOp:
    """Tree `t` as a UOp over `variables`, with the operator builders."""
    kind = t[0]
    if kind == "var":
        return variables[t[1]]
    if kind == "const":
        return UOp.const(dtypes.index, t[1])
    if kind == "mulc":
        return build(t[1], variables) * t[2]
    if kind == "div":
        return build(t[1], variables) // t[2]
    if kind == "mod":
        return build(t[1], variables) % t[2]
    if kind == "split":
        x = build(t[1], variables)
        return (x // t[2]) * t[2] + x % t[2]
    if kind == "split3":
        x = build(t[1], variables)
        return ((x // t[2]) % t[3]) * t[2] + x % t[2]
    if kind == "where":
        return build(t[1], variables).where(build(t[2], variables), build(t[3], variables))
    left, right = build(t[1], variables), build(t[2], variables)
    return {"add": lambda: left + right, "sub": lambda: left - right, "mul": lambda: left * right,
            "max": lambda: left.maximum(right), "lt": lambda: left < right, "ge": lambda: left >= right}[kind]()


leaves = st.one_of(st.tuples(st.just("var"), st.integers(0, len(NAMES) - 1)),
                   st.tuples(st.just("const"), st.integers(-10, 10)))
divisors = st.sampled_from(DIVISORS)


def _extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    cond = st.tuples(st.sampled_from(["lt", "lt", "ge"]), children, children)
    return st.one_of(
        st.tuples(st.sampled_from(["add", "add", "sub", "mul", "max"]), children, children),
        st.tuples(st.just("mulc"), children, st.integers(-4, 8)),
        st.tuples(st.sampled_from(["div", "mod"]), children, divisors),
        st.tuples(st.just("where"), cond, children, children),
        st.tuples(st.just("split"), children, st.integers(1, 8)),
        st.tuples(st.just("split3"), children, st.integers(1, 6), st.integers(1, 6)),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)
# bounds (lo, hi) per variable: half of them non-negative, since most // and % folds need a non-negative numerator
# narrow ranges often: a remainder known to lie in [0, c) is what most folds look for
widths = st.one_of(st.integers(0, 4), st.integers(0, 40))
bounds = st.one_of(st.tuples(st.just(0), widths),
                   st.tuples(st.integers(0, 10), widths).map(lambda p: (p[0], p[0] + p[1])),
                   st.tuples(st.integers(-20, 5), widths).map(lambda p: (p[0], p[0] + p[1])))


@st.composite
def cases(draw: st.DrawFn) -> tuple[Tree, tuple[tuple[int, int], ...], list[tuple[int, ...]]]:
    """A tree, the bounds of each variable, and the assignments to check: a few random ones plus every corner."""
    tree = draw(trees)
    var_bounds = tuple(draw(bounds) for _ in NAMES)
    random_envs = draw(st.lists(st.tuples(*(st.integers(lo, hi) for lo, hi in var_bounds)), min_size=4, max_size=6))
    corners = list(itertools.product(*var_bounds))
    return tree, var_bounds, random_envs + corners


def _linear(draw: st.DrawFn) -> Tree:
    # sum(var_i * coeff_i) + k, the shape of index math
    tree: Tree = ("const", draw(st.integers(-10, 10)))
    for i in draw(st.lists(st.integers(0, len(NAMES) - 1), min_size=1, max_size=3)):
        tree = ("add", ("mulc", ("var", i), draw(st.integers(-6, 12))), tree)
    return tree


@st.composite
def divmod_cases(draw: st.DrawFn) -> tuple[Tree, tuple[tuple[int, int], ...], list[tuple[int, ...]]]:
    """Index-like trees: (linear // c or % c), nested once more at times, with the bounds and assignments to check."""
    tree = ("add", _linear(draw), ("mulc", draw(trees), draw(st.integers(0, 2)))) if draw(st.booleans()) else \
        _linear(draw)
    for _ in range(draw(st.integers(1, 2))):
        tree = (draw(st.sampled_from(["div", "mod"])), tree, draw(divisors))
        if draw(st.booleans()):
            tree = ("add", tree, _linear(draw))
    var_bounds = tuple(draw(bounds) for _ in NAMES)
    random_envs = draw(st.lists(st.tuples(*(st.integers(lo, hi) for lo, hi in var_bounds)), min_size=4, max_size=6))
    return tree, var_bounds, random_envs + list(itertools.product(*var_bounds))


def make_vars(var_bounds: tuple[tuple[int, int], ...]) -> tuple[UOp, ...]:
    return tuple(UOp.variable(name, lo, hi) for name, (lo, hi) in zip(NAMES, var_bounds))


def describe(e: UOp, var_bounds: tuple[tuple[int, int], ...], env: tuple[int, ...] | None = None) -> str:
    where = ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(NAMES, var_bounds))
    at = "" if env is None else " at " + ", ".join(f"{n}={v}" for n, v in zip(NAMES, env))
    return f"{render_expr(e)} with {where}{at}"


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Fail (rather than hang the suite) when `what` takes longer than `seconds`."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} did not finish in {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def simplified(e: UOp, var_bounds: tuple[tuple[int, int], ...]) -> UOp:
    with time_limit(10, f"simplify of {describe(e, var_bounds)}"):
        return e.simplify()


# no explain phase: it re-runs the failing example many times (slow) and only prints which lines ran
PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


# *** properties ***
@PROPERTY
@given(cases())
def test_evaluate_matches_reference(case):
    tree, var_bounds, envs = case
    variables = make_vars(var_bounds)
    e = build(tree, variables)
    for env in envs:
        assert e.evaluate(dict(zip(variables, env))) == ref_eval(tree, env), describe(e, var_bounds, env)


def check_simplify_keeps_value(case: tuple[Tree, tuple[tuple[int, int], ...], list[tuple[int, ...]]]) -> None:
    tree, var_bounds, envs = case
    variables = make_vars(var_bounds)
    e = build(tree, variables)
    got = simplified(e, var_bounds)
    for env in envs:
        want = ref_eval(tree, env)
        value = got.evaluate(dict(zip(variables, env)))
        assert value == want, f"{describe(e, var_bounds, env)}: want {want}, simplified to {render_expr(got)} = {value}"


@PROPERTY
@given(cases())
def test_simplify_keeps_value(case):
    check_simplify_keeps_value(case)


@PROPERTY
@given(divmod_cases())
def test_simplify_keeps_value_of_divmod(case):
    check_simplify_keeps_value(case)


@PROPERTY
@given(st.one_of(cases(), divmod_cases()))
def test_simplify_never_grows(case):
    tree, var_bounds, _ = case
    e = build(tree, make_vars(var_bounds))
    got = simplified(e, var_bounds)
    assert len(got.toposort()) <= len(e.toposort()), \
        f"{describe(e, var_bounds)}: {len(e.toposort())} nodes simplified to {len(got.toposort())}: {render_expr(got)}"


@PROPERTY
@given(st.one_of(cases(), divmod_cases()))
def test_vmin_vmax_bound_every_node(case):
    tree, var_bounds, envs = case
    variables = make_vars(var_bounds)
    e = build(tree, variables)
    for root in (e, simplified(e, var_bounds)):
        nodes = [u for u in root.toposort() if u.dtype in (dtypes.index, dtypes.bool)]
        for env in envs:
            var_vals = dict(zip(variables, env))
            for u in nodes:
                value = u.evaluate(var_vals)
                assert u.vmin <= value <= u.vmax, \
                    f"node {render_expr(u)} = {value} outside [{u.vmin}, {u.vmax}]; " \
                    f"in {describe(root, var_bounds, env)}"


def test_reference_evaluator_is_c_division():
    assert [c_div(a, b) for a, b in ((7, 2), (-7, 2), (7, -2), (-7, -2))] == [3, -3, -3, 3]
    assert [c_mod(a, b) for a, b in ((7, 2), (-7, 2), (7, -2), (-7, -2))] == [1, -1, 1, -1]


# *** the documented folds, exactly ***
N = 13
x = UOp.variable("x", 0, N - 1)


def test_fold_div_of_linear_with_small_remainder():
    assert ((x * 4 + 3) // 4).simplify() is x


def test_fold_mod_of_linear_with_small_remainder():
    assert ((x * 4 + 3) % 4).simplify() is UOp.const(dtypes.index, 3)


def test_fold_mod_drops_multiple_of_divisor():
    assert ((x + 8) % 4).simplify() is x % 4


def test_fold_div_by_one():
    assert (x // 1).simplify() is x


def test_fold_compare_known_by_range():
    assert x.vmax < N
    assert (x < N).simplify() is UOp.const(dtypes.bool, True)
    assert (x < N - 1).simplify() is (x < N - 1)  # not known: left alone


def test_fold_recombine_div_mod():
    assert ((x // 4) * 4 + x % 4).simplify() is x


def test_fold_mod_of_div_drops_multiples_of_both_divisors():
    # a reshape that merges (b, i) and splits the merged index again: ((b*256 + i)//32)%8 is i//32 for i < 256, and
    # the index it builds, b*8192 + ((b*256 + i)//32 % 8)*32 + i%32, is affine: b*8192 + i
    b, i = UOp.variable("b", 0, 3), UOp.variable("i", 0, 255)
    assert (((b * 256 + i) // 32) % 8).simplify() is i // 32
    assert (b * 8192 + (((b * 256 + i) // 32) % 8) * 32 + i % 32).simplify() is b * 8192 + i
    # the RoPE pair of a merged head index: ((((h*32 + d)//2) % 16)*2 + d%2 with d < 32 is d
    h, d = UOp.variable("h", 0, 7), UOp.variable("d", 0, 31)
    assert ((((h * 32 + d) // 2) % 16) * 2 + d % 2).simplify() is d
    # a remainder that may be negative is left alone: ((i - 5)//4)%2 with i in [0, 255]
    assert (((i + -5) // 4) % 2).simplify().op is Ops.MOD
    for vb, vi in itertools.product(range(4), range(0, 256, 7)):
        assert (((b * 256 + i + 3) // 32) % 8).simplify().evaluate({b: vb, i: vi}) == ((vb * 256 + vi + 3) // 32) % 8


# *** minimal reproducers of failures the properties found ***
def test_div_keeps_quotient_of_remainder_coefficient():
    # (a*5)//4 with 0 <= a <= 3 is a + a//4 = a (e.g. a=1: 5//4 == 1); fold_divmod once split 5 = 4*1 + 1 but dropped
    # the a*1 part of the quotient and folded the whole expression to 0 (fixed in acf70b8)
    a = UOp.variable("a", 0, 3)
    e = (a * 5) // 4
    got = e.simplify()
    assert [got.evaluate({a: v}) for v in range(4)] == [0, 1, 2, 3], render_expr(got)
    assert got.op is not Ops.CONST


def test_div_keeps_quotient_with_other_terms():
    # the same dropped quotient next to other terms: (a*5 + b*4)//4 was folded to b + a//4 (a=1, b=0: 1, not 0)
    a, b = UOp.variable("a", 0, 3), UOp.variable("b", 0, 3)
    e = (a * 5 + b * 4) // 4
    got = e.simplify()
    for va in range(4):
        for vb in range(4):
            assert got.evaluate({a: va, b: vb}) == (5 * va + 4 * vb) // 4, (va, vb, render_expr(got))


def test_nested_div_fold_does_not_grow_a_shared_graph():
    # (a//2)//2 + a//2 is 5 nodes (a, 2, a//2, (a//2)//2, +); folding (a//2)//2 -> a//4 keeps the shared a//2 and adds
    # a const 4 and a//4: 6 nodes
    a = UOp.variable("a", 0, 4)
    e = (a // 2) // 2 + a // 2
    got = e.simplify()
    assert len(got.toposort()) <= len(e.toposort()), render_expr(got)


def test_recombine_div_mod_of_a_div():
    # (y//2)*2 + y%2 is y for y = a//2 >= 0, but the inner (y//2) was folded to a//4 first, so the recombine rule no
    # longer saw its pattern: 7 nodes became 8, (((a//4)*2)+((a//2)%2)), instead of a//2
    a = UOp.variable("a", 0, 4)
    y = a // 2
    e = (y // 2) * 2 + y % 2
    assert e.simplify() is y, render_expr(e.simplify())


def test_recombine_div_mod_of_an_offset():
    # the documented (x//c)*c + x%c -> x, for x = a+3 >= 0 (an index with a shrink offset): fold_divmod first rewrites
    # the mod to (a+1)%2, the recombine pair no longer matches, the rewrite grows the graph (8 -> 10 nodes) and
    # simplify falls back to the unsimplified expression instead of a+3
    a = UOp.variable("a", 0, 5)
    x = a + 3
    e = (x // 2) * 2 + x % 2
    assert e.simplify() is x, render_expr(e.simplify())


def _shared_growth_cases() -> dict[str, UOp]:
    a, b = UOp.variable("a", 0, 5), UOp.variable("b", 1, 2)
    y, x, m2 = a + 1, a + 3, UOp.const(dtypes.index, -2)
    return {
        # (x + c) + y -> (x + y) + c while x + c is still used elsewhere: 5 -> 6 nodes, ((a+((a+1)*(a+1)))+1)
        "const_outside_of_shared_sum": y + y * y,
        # fold_divmod rewrites (a+3)%2 -> (a+1)%2 while a+3 is still used: 6 -> 8 nodes, ((a+((a+1)%2))+3)
        "mod_of_shared_numerator": x % 2 + x,
        # fold_divmod rewrites (b*3 + -2)%4 -> (b*3 + 2)%4 while the const -2 is the divisor too: 8 -> 9 nodes
        "mod_with_shared_const": ((b * 3) + m2) % 4 // m2,
        # fold_nested_div rewrites (a//2)//2 -> a//4 while a//2 is still used: 5 -> 6 nodes, ((a//4)+(a//2))
        "nested_div_of_shared_div": (a // 2) // 2 + a // 2,
    }


@pytest.mark.parametrize("name", list(_shared_growth_cases()))
def test_shared_graphs_do_not_grow(name):
    # each rule checks its size locally and cannot see that a sub-expression it replaces is shared elsewhere, so the
    # rule table alone may grow such a graph by a node or two; simplify() keeps the best result that is not larger
    e = _shared_growth_cases()[name]
    got = e.simplify()
    assert len(got.toposort()) <= len(e.toposort()), f"{render_expr(e)} -> {render_expr(got)}"
    for v in range(0, 6):
        env = {u: v if u.arg[0] == "a" else 1 + v % 2 for u in e.toposort() if u.op is Ops.DEFINE_VAR}
        assert got.evaluate(env) == e.evaluate(env)


def test_growth_elsewhere_does_not_block_other_folds():
    # simplify returns its input when the rewritten graph is larger, so one growing rule (the shared a+3 above) also
    # throws away the unrelated (b*2)*3 -> b*6
    a, b = UOp.variable("a", 0, 5), UOp.variable("b", 0, 5)
    x = a + 3
    e = (x % 2 + x) + (b * 2) * 3
    assert b * 6 in e.simplify().toposort(), render_expr(e.simplify())
