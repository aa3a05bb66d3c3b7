import pytest

from ember.uops import Ops, PatternMatcher, RewriteLoopError, UOp, UPat, dtypes, graph_rewrite

x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 10)


def test_named_capture_and_order():
    seen = []
    pm = PatternMatcher([
        (UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: seen.append(("first", a, c.arg))),
        (UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a * c.arg),
    ])
    # the first rule returns None, so the second one applies
    assert pm.rewrite(x + 3) is x * 3
    assert seen == [("first", x, 3)]
    assert pm.rewrite(x * 3) is None


def test_dispatch_by_op():
    pm = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: m.src[0]), (UPat(name="u"), lambda u: None)])
    assert set(pm.pdict) == set(Ops)  # an op-less pattern is tried on every op
    assert [len(pm.pdict[Ops.MUL]), len(pm.pdict[Ops.ADD])] == [2, 1]


def test_same_name_must_bind_same_uop():
    pm = PatternMatcher([(UPat.var("a") + UPat.var("a"), lambda a: a * 2)])
    assert pm.rewrite(x + x) is x * 2
    assert pm.rewrite(x + y) is None


def test_commutative_matching():
    pm = PatternMatcher([(UPat.var("a") * UPat.cvar("c"), lambda a, c: a + c.arg)])
    three = UOp.const(dtypes.index, 3)
    assert pm.rewrite(x * 3) is x + 3
    assert pm.rewrite(UOp(Ops.MUL, dtypes.index, (three, x))) is x + 3
    # a tuple src is ordered
    pm_ordered = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a + c.arg)])
    assert pm_ordered.rewrite(UOp(Ops.MUL, dtypes.index, (three, x))) is None


def test_rules_by_source_ops():
    # a node tries the rules whose sources' ops fit its own (by op, number and order of its sources' ops): one
    # matcher, nodes of several shapes in turn, each shape finding its own rules (and not another shape's)
    four = UOp.const(dtypes.index, 4)
    pm = PatternMatcher([
        (UPat(Ops.ADD, src=UPat(Ops.CONST), name="a"), lambda a: UOp.const(a.dtype, sum(s.arg for s in a.src))),
        (UPat.var("a") + UPat.cvar("c"), lambda a, c: a * c.arg),
        (UPat(Ops.ADD, src=(UPat(Ops.MUL, name="m"),), allow_any_len=True), lambda m: m),
    ])
    for _ in range(2):  # (the second time from what the first one found)
        assert pm.rewrite(UOp(Ops.ADD, dtypes.index, (four, four))) is UOp.const(dtypes.index, 8)
        assert pm.rewrite(x + 4) is x * 4
        assert pm.rewrite(UOp(Ops.ADD, dtypes.index, (four, x))) is x * 4
        assert pm.rewrite((x * 2) + y) is x * 2
        assert pm.rewrite((x * 2) + 4) is (x * 2) * 4
        assert pm.rewrite(x + y) is None
        assert pm.rewrite(UOp(Ops.ADD, dtypes.index, (x * 2, y, y))) is x * 2


def test_rules_by_dtype():
    # nodes of one op and sources' ops but other dtypes find their own rules (vectors by their scalar type)
    pm = PatternMatcher([(UPat(Ops.NEG, dtype=dtypes.float32, name="n"), lambda n: n.src[0])])
    f, h = UOp.const(dtypes.float32, 2.0), UOp.const(dtypes.float16, 2.0)
    for _ in range(2):
        assert pm.rewrite(UOp(Ops.NEG, dtypes.float16, (h,))) is None
        assert pm.rewrite(UOp(Ops.NEG, dtypes.float32, (f,))) is f
        v = UOp(Ops.VECTORIZE, dtypes.float32.vec(2), (f, f))
        assert pm.rewrite(UOp(Ops.NEG, dtypes.float32.vec(2), (v,))) is v


def test_dtype_and_arg_constraints():
    pm = PatternMatcher([
        (UPat(Ops.CONST, dtype=dtypes.float32, arg=1.0, name="c"), lambda c: c.const_like(2.0)),
        (UPat(Ops.CONST, dtype=(dtypes.int32, dtypes.int64), name="c"), lambda c: c.const_like(c.arg + 1)),
    ])
    assert pm.rewrite(UOp.const(dtypes.float32, 1.0)) is UOp.const(dtypes.float32, 2.0)
    assert pm.rewrite(UOp.const(dtypes.float32, 3.0)) is None
    assert pm.rewrite(UOp.const(dtypes.float16, 1.0)) is None
    assert pm.rewrite(UOp.const(dtypes.int64, 4)) is UOp.const(dtypes.int64, 5)
    # vectors match on their scalar type
    vec = UOp(Ops.VECTORIZE, dtypes.float32.vec(2), (UOp.const(dtypes.float32, 1.0),) * 2)
    assert PatternMatcher([(UPat(Ops.VECTORIZE, dtype=dtypes.float32), lambda: x)]).rewrite(vec) is x


def test_allow_any_len_and_repeat_src():
    s3 = UOp.sink(x, y, x + y)
    any_len = PatternMatcher([(UPat(Ops.SINK, src=(UPat.var("a"),), allow_any_len=True), lambda a: a)])
    strict = PatternMatcher([(UPat(Ops.SINK, src=(UPat.var("a"),)), lambda a: a)])
    assert any_len.rewrite(s3) is x
    assert strict.rewrite(s3) is None
    all_vars = PatternMatcher([(UPat(Ops.SINK, src=UPat(Ops.DEFINE_VAR)), lambda: UOp.sink())])
    assert all_vars.rewrite(UOp.sink(x, y)) is UOp.sink()
    assert all_vars.rewrite(s3) is None


def test_ctx_is_passed_when_declared():
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v, ctx: ctx.setdefault(v.arg[0], v) and None)])
    ctx: dict = {}
    graph_rewrite(x + y, pm, ctx=ctx)
    assert ctx == {"x": x, "y": y}


def test_pm_add_combines_in_order():
    a = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u.src[0])])
    b = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u.src[1])])
    assert (a + b).rewrite(x + y) is x
    assert (b + a).rewrite(x + y) is y
    with pytest.raises(TypeError, match="each rule is \\(UPat, callable\\)"):
        PatternMatcher([(Ops.ADD, lambda: None)])


def test_graph_rewrite_fixed_point_and_sources_first():
    # x*2 -> x+x, then (x+x) -> x*2 would loop; here: fold (a+1)+1 chains completely
    pm = PatternMatcher([((UPat.var("a") + UPat.cvar("c1")) + UPat.cvar("c2"),
                          lambda a, c1, c2: a + (c1.arg + c2.arg))])
    e = x
    for _ in range(50):
        e = e + 1
    assert graph_rewrite(e, pm) is x + 50
    order = []
    graph_rewrite((x + 1) * (y + 2), PatternMatcher([(UPat(name="u"), lambda u: order.append(u.op) and None)]))
    assert order.index(Ops.ADD) < order.index(Ops.MUL)  # sources before users


def test_graph_rewrite_bottom_up_sees_parents_first():
    order = []
    pm = PatternMatcher([(UPat(name="u"), lambda u: order.append(u.op) and None)])
    graph_rewrite((x + 1) * y, pm, bottom_up=True)
    assert order[0] is Ops.MUL
    # bottom-up rewrites a node before its sources: the MUL is gone before its ADD is looked at
    pm2 = PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.var())), lambda a: a.src[0]),
                          (UPat(Ops.ADD, name="a"), lambda a: a.src[1])])
    assert graph_rewrite((x + y) * y, pm2, bottom_up=True) is x
    assert graph_rewrite((x + y) * y, pm2) is y * y


def test_graph_rewrite_shared_nodes_once():
    calls = []
    pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: calls.append(a) and None)])
    s = x + 1
    graph_rewrite(UOp.sink(s * 2, s * 3, s), pm)
    assert calls == [s]


def test_graph_rewrite_loop_raises():
    pm = PatternMatcher([(UPat.var("a") * 2, lambda a: a + a), (UPat.var("a") + UPat.var("a"), lambda a: a * 2)])
    with pytest.raises(RewriteLoopError, match="no fixed point"):
        graph_rewrite(x * 2, pm, name="loop test")
    with pytest.raises(RewriteLoopError, match="no fixed point"):
        graph_rewrite(x * 2, pm, bottom_up=True)
    grow = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: UOp.variable(v.arg[0] + "'", 0, 1))])
    with pytest.raises(RewriteLoopError, match="more than 100 rewrites"):
        graph_rewrite(x + 1, grow, limit=100)


def test_graph_rewrite_deep_graph():
    e = x
    for i in range(20000):
        e = e * 1 if i % 2 else e + 0
    pm = PatternMatcher([(UPat.var("a") * 1, lambda a: a), (UPat.var("a") + 0, lambda a: a)])
    assert graph_rewrite(e, pm) is x
    assert graph_rewrite(e, pm, bottom_up=True) is x


def test_graph_rewrite_memo_reuses_results_across_calls():
    calls = []

    def fold(a: UOp, c1: UOp, c2: UOp) -> UOp:
        calls.append(a)
        return a + (c1.arg + c2.arg)

    pm = PatternMatcher([((UPat.var("a") + UPat.cvar("c1")) + UPat.cvar("c2"), fold)])
    shared = (x + 1) + 2
    memo: dict[UOp, UOp] = {}
    assert graph_rewrite(shared * y, pm, memo=memo) is (x + 3) * y
    assert memo[shared] is x + 3 and len(calls) == 1
    # the shared term's result comes from the memo: no rule runs on it again, and the result is the memo-less one
    assert graph_rewrite(shared * 5, pm, memo=memo) is graph_rewrite(shared * 5, pm) is (x + 3) * 5
    assert len(calls) == 2
