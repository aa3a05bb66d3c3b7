"""Benchmark ember.uops: symbolic rewrite throughput and UOp construction (hash-consing) rate, against tinygrad.

Run: python tools/bench/bench_rewrite.py [--reps 5] [--quick] [--profile] [--scaling] [--gc] [--no-tinygrad]

Measurements (medians over repetitions, in input nodes per second; the backends take turns in each repetition):

  rewrite wide   graph_rewrite(sink, symbolic) on a SINK over thousands of random index expressions in four bounded
                 variables (+, *, //, % by positive constants). Default 2000 expressions, ~9k nodes: ember rewrites
                 ~5k nodes/s here and tinygrad ~2.5k, so a 100k-node graph takes 20-40 s per repetition; the rate
                 does not depend on the width (see --scaling, which runs ~100k nodes once).
  rewrite deep   graph_rewrite(sink, symbolic) on one chain x = (x*k + v + c) // d repeated (k < d keeps the range
                 of x bounded without ever narrowing it to one value; c is a multiple of d, so every step splits a
                 constant off its division and passes it on to the next: each step is rewritten, none vanishes).
                 Default 600 steps (~2.4k nodes): ember's cost grows quadratically with the depth (--scaling goes to
                 3000 steps, 12k nodes deep).
  build fresh    building N nodes that do not exist yet (unique constants), through the operators (x + c) * k // d.
  build cached   building the same N nodes again while the first copies are alive: every constructor call is a
                 hash-consing cache hit.
  build raw ...  the same two, calling the constructor UOp(op, dtype, src, arg) directly (no operator overhead).

Honesty rules: UOps are hash-consed and cache analysis on the node (ember: vmin/vmax; tinygrad: vmin/vmax, the
sources' ops, shape), so rewriting a graph again would find results and bounds already computed. Every repetition
builds a new graph from a new seed outside the timed region, after the previous one was freed and gc.collect()ed
(a node kept alive by a cycle would otherwise be found again by hash-consing); the "freshness check" line counts
input nodes that already carried cached analysis (0 expected). Neither graph_rewrite keeps a cache across calls
(tinygrad's RewriteContext is per call), but tinygrad's div/mod folding (divandmod.fold_divmod_general) is an
unbounded functools.cache keyed by the node: it is cleared before each repetition, so both sides start cold.
tinygrad compiles each rule lazily on first use: an untimed warm-up rewrite per side and graph kind runs first.
The cyclic GC is disabled during each timed region (the timeit convention); --gc leaves it on. Importing tinygrad
raises the recursion limit to 10000: ember runs under Python's default limit (1000), tinygrad under its own.

"nodes" is len(sink.toposort()) of the input graph (tinygrad's own count: a variable there is a BUFFER over a
shared STACK, one node more in all). "out" is the size of the rewritten graph, to show both rule sets did work.

tinygrad is optional (pip install tinygrad; never a dependency of any ember package). Its `//` and `%` are
FLOORDIV/FLOORMOD, ember's IDIV/MOD truncate: with non-negative variables and positive constants they agree, and
the graphs have the same structure.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import ember.uops  # noqa: F401
except ImportError:  # running from a checkout without the workspace installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "uops" / "src"))


# *** backends: the same builders run on either UOp ***
class Backend:
    name: str
    UOp: Any
    Ops: Any
    index: Any  # the index dtype
    div_op: Any  # the op `//` builds
    version: str
    limit: int  # the recursion limit it runs under
    vars: list[Any]
    elapsed: float  # wall time spent on this backend (building, rewriting, checking)

    def variable(self, name: str, lo: int, hi: int) -> Any: raise NotImplementedError
    def rewrite(self, sink: Any) -> Any: raise NotImplementedError

    def sink(self, *srcs: Any) -> Any:
        return self.UOp.sink(*srcs)

    def reset(self) -> None:
        """Drop any cache that outlives a graph_rewrite call (run untimed, before each repetition)."""

    def stale(self, sink: Any) -> int | None:
        """How many inner nodes of a freshly built graph already carry cached analysis (should be 0)."""
        return None


class Ember(Backend):
    name = "ember"

    def __init__(self) -> None:
        import ember.uops
        from ember.uops import Ops, UOp, dtypes, graph_rewrite, symbolic

        self.UOp, self.Ops, self.index = UOp, Ops, dtypes.index
        self.div_op = Ops.IDIV  # what `//` builds
        self._graph_rewrite, self._symbolic = graph_rewrite, symbolic
        self.version = ember.uops.__version__

    def variable(self, name: str, lo: int, hi: int) -> Any:
        return self.UOp.variable(name, lo, hi)

    def rewrite(self, sink: Any) -> Any:
        return self._graph_rewrite(sink, self._symbolic)

    def stale(self, sink: Any) -> int | None:
        try:  # _mm: the node's cached (vmin, vmax)
            return sum(1 for u in sink.toposort() if u.src and u._mm is not None)
        except AttributeError:
            return None


class Tinygrad(Backend):
    name = "tinygrad"

    def __init__(self) -> None:
        import tinygrad
        from tinygrad.dtype import dtypes
        from tinygrad.uop.ops import Ops, UOp, graph_rewrite
        from tinygrad.uop.symbolic import symbolic

        self.UOp, self.Ops, self.index = UOp, Ops, dtypes.weakint  # weakint: UOp.variable's default dtype in 0.14
        self.div_op = Ops.FLOORDIV  # what `//` builds in 0.14
        self._graph_rewrite, self._symbolic = graph_rewrite, symbolic
        try:
            from importlib.metadata import version

            self.version = version("tinygrad")
        except Exception:  # noqa: BLE001
            self.version = getattr(tinygrad, "__version__", "?")
        self.index = self.variable("probe", 0, 1).dtype
        # tinygrad's graph_rewrite keeps nothing across calls (RewriteContext is per call), but its div/mod folding,
        # fold_divmod_general, is an unbounded functools.cache keyed by the IDIV/MOD node: it keeps every div/mod
        # it has seen alive, with its result. Cleared before each repetition so both sides start cold.
        self._caches = []
        try:
            from tinygrad.uop import divandmod

            self._caches.append(divandmod.fold_divmod_general)
        except (ImportError, AttributeError):
            pass

    def variable(self, name: str, lo: int, hi: int) -> Any:
        return self.UOp.variable(name, lo, hi)

    def rewrite(self, sink: Any) -> Any:
        return self._graph_rewrite(sink, self._symbolic)

    def reset(self) -> None:
        for c in self._caches:
            c.cache_clear()

    def stale(self, sink: Any) -> int | None:
        # cached properties live in the node's __dict__ (_min_max, _src_ops, ...)
        return sum(1 for u in sink.toposort() if u.src and u.op is not self.Ops.BUFFER and u.__dict__)


# *** graph specs: plain tuples drawn from a seed, then built on a backend (identical structure on both sides) ***
NVARS = 4
VAR_BOUNDS = [(0, 15), (0, 255), (0, 1023), (0, 4095)]


def _const(rng: random.Random) -> int:
    # mostly small, sometimes 1 (identities fire), sometimes a larger one
    r = rng.random()
    return 1 if r < 0.05 else rng.randint(2, 16) if r < 0.8 else rng.randint(17, 200)


def wide_spec(seed: int, n_exprs: int, depth: int = 5) -> list[Any]:
    rng = random.Random(seed)

    def expr(d: int) -> Any:
        if d == 0 or rng.random() < 0.15:
            leaf = ("v", rng.randrange(NVARS))
            return leaf if rng.random() < 0.7 else ("+c", leaf, _const(rng))
        op = rng.choices(("+", "+c", "*", "//", "%"), (3, 2, 3, 2, 2))[0]
        if op == "+":
            return ("+", expr(d - 1), expr(d - 1))
        return (op, expr(d - 1), _const(rng))

    return [expr(depth) for _ in range(n_exprs)]


def build_spec(be: Backend, spec: list[Any], variables: list[Any]) -> Any:
    def build(s: Any) -> Any:
        tag = s[0]
        if tag == "v":
            return variables[s[1]]
        a = build(s[1])
        if tag == "+":
            return a + build(s[2])
        if tag == "+c":
            return a + s[2]
        if tag == "*":
            return a * s[2]
        if tag == "//":
            return a // s[2]
        return a % s[2]

    return be.sink(*(build(s) for s in spec))


# (k, d) pairs with k < d: x -> (x*k + v + c) // d keeps x in a bounded range (no overflow, and as every v spans
# more than d values the range never narrows to a single value, so the chain never folds to a constant)
KD = [(2, 3), (3, 4), (3, 5), (4, 7), (5, 8), (5, 7), (7, 9)]


def deep_spec(seed: int, steps: int) -> list[tuple[int, int, int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(steps):
        k, d = rng.choice(KD)
        out.append((rng.randrange(NVARS), d * rng.randint(1, 8), k, d))  # c a multiple of d
    return out


def build_deep(be: Backend, spec: list[tuple[int, int, int, int]], variables: list[Any]) -> Any:
    """x = (x*k + v + c) // d, repeated. Each step is rewritten but survives: the division splits off the constant
    part of its numerator, ((x'*k + v) + c') // d + q, and that q is folded into the next step's constant."""
    x = variables[0]
    for v, c, k, d in spec:
        x = (x * k + variables[v] + c) // d
    return be.sink(x)

def make_vars(be: Backend) -> list[Any]:
    return [be.variable(f"v{i}", lo, hi) for i, (lo, hi) in enumerate(VAR_BOUNDS)]


# *** timing ***
class Timer:
    def __init__(self, keep_gc: bool):
        self.keep_gc = keep_gc

    def __call__(self, fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
        gc.collect()
        was = gc.isenabled()
        if not self.keep_gc:
            gc.disable()
        try:
            t0 = time.perf_counter()
            ret = fn(*args)
            t1 = time.perf_counter()
        finally:
            if was:
                gc.enable()
        return t1 - t0, ret


class Result:
    """One benchmark row: per backend, the per-repetition (nodes, out nodes, seconds)."""

    def __init__(self, name: str):
        self.name = name
        self.runs: dict[str, list[tuple[int, int | None, float]]] = {}
        self.error: dict[str, str] = {}
        self.stale: dict[str, int] = {}  # the most nodes of a timed input graph found with cached analysis

    def add(self, be: str, nodes: int, out: int | None, t: float) -> None:
        self.runs.setdefault(be, []).append((nodes, out, t))

    def nodes(self, be: str) -> int | None:
        return int(statistics.median(r[0] for r in self.runs[be])) if self.runs.get(be) else None

    def out(self, be: str) -> int | None:
        outs = [r[1] for r in self.runs.get(be, []) if r[1] is not None]
        return int(statistics.median(outs)) if outs else None

    def rate(self, be: str) -> float | None:
        """Median over the repetitions of nodes/second (each repetition's graph differs a little in size)."""
        if be in self.error or not self.runs.get(be):
            return None
        return statistics.median(n / t for n, _, t in self.runs[be])

    def seconds(self, be: str) -> float | None:
        return statistics.median(r[2] for r in self.runs[be]) if self.runs.get(be) else None


def make_graph(be: Backend, kind: str, seed: int, size: int, variables: list[Any]) -> Any:
    if kind == "wide":
        return build_spec(be, wide_spec(seed, size), variables)
    return build_deep(be, deep_spec(seed, size), variables)


@contextlib.contextmanager
def running(be: Backend) -> Iterator[None]:
    """Run under the backend's own recursion limit (Python's default for ember, tinygrad raises it on import) and
    count the wall time spent on this backend."""
    sys.setrecursionlimit(be.limit)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        be.elapsed += time.perf_counter() - t0


def warm_up(be: Backend, kind: str, size: int) -> None:
    with running(be):  # untimed: tinygrad compiles each rule on first use
        be.rewrite(make_graph(be, kind, 10_000, min(size, 500), be.vars))
        be.reset()


def rewrite_rep(be: Backend, kind: str, seed: int, size: int, timer: Timer, res: Result) -> None:
    if be.name in res.error:
        return
    with running(be):
        be.reset()
        gc.collect()  # first: a node of an earlier graph still alive (in a cycle) would be found by hash-consing
        sink = make_graph(be, kind, seed, size, be.vars)  # a new graph per repetition (seed): nothing cached yet
        nodes = len(sink.toposort())
        if (st := be.stale(sink)) is not None:
            res.stale[be.name] = max(res.stale.get(be.name, 0), st)
        try:
            t, out = timer(be.rewrite, sink)
        except RecursionError as e:
            res.error[be.name] = f"RecursionError ({e})"
            return
        res.add(be.name, nodes, len(out.toposort()), t)


def build_rep(be: Backend, n: int, rep: int, raw: bool, timer: Timer, res_fresh: Result, res_hit: Result) -> None:
    UOp, Ops, idx, div = be.UOp, be.Ops, be.index, be.div_op
    base = 1_000_000 * (rep + 1) + (500_000 if raw else 0)  # unique constants per run: a fresh build is fresh
    params = [(be.vars[i % NVARS], base + 3 * i, base + 3 * i + 1, base + 3 * i + 2) for i in range(n)]

    def build_raw() -> list[Any]:
        out = []
        for v, c, k, d in params:
            a = UOp(Ops.ADD, idx, (v, UOp(Ops.CONST, idx, (), c)))
            m = UOp(Ops.MUL, idx, (a, UOp(Ops.CONST, idx, (), k)))
            out.append(UOp(div, idx, (m, UOp(Ops.CONST, idx, (), d))))
        return out

    def build_ops() -> list[Any]:
        return [(v + c) * k // d for v, c, k, d in params]

    with running(be):
        t1, first = timer(build_raw if raw else build_ops)
        t2, second = timer(build_raw if raw else build_ops)
        assert all(a is b for a, b in zip(first, second)), f"{be.name}: rebuilding did not return the same nodes"
        nodes = len(be.sink(*first).toposort()) - 1 - NVARS  # the nodes built: not the sink and the variables
        assert nodes >= 6 * n, f"{be.name}: expected {6 * n} distinct new nodes, got {nodes}"
        res_fresh.add(be.name, nodes, None, t1)
        res_hit.add(be.name, nodes, None, t2)


# *** report ***
E, T = "ember", "tinygrad"


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def markdown(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def table(results: list[Result], has_t: bool) -> str:
    head = ["benchmark", "nodes", "out ember"] + (["out tinygrad"] if has_t else []) + ["ember nodes/s"]
    head += ["tinygrad nodes/s", "ratio ember/tinygrad"] if has_t else []
    rows = [head]
    for r in results:
        nodes = str(r.nodes(E) or "-")
        if has_t and r.nodes(T) not in (None, r.nodes(E)):
            nodes += f" (tg {r.nodes(T)})"
        row = [r.name, nodes, str(r.out(E) or "-")] + ([str(r.out(T) or "-")] if has_t else [])
        re_, rt = r.rate(E), r.rate(T)
        row.append(r.error.get(E, fmt_rate(re_)))
        if has_t:
            row += [r.error.get(T, fmt_rate(rt)), "-" if re_ is None or rt is None else f"{re_ / rt:.2f}x"]
        rows.append(row)
    return markdown(rows)


def scaling_table(results: list[Result], has_t: bool) -> str:
    head = ["graph", "nodes", "ember s", "ember nodes/s"]
    head += ["tinygrad s", "tinygrad nodes/s", "ratio"] if has_t else []
    rows = [head]
    for r in results:
        row = [r.name, str(r.nodes(E) or "-"), f"{r.seconds(E):.2f}" if r.seconds(E) else "-",
               r.error.get(E, fmt_rate(r.rate(E)))]
        if has_t:
            rt, re_ = r.rate(T), r.rate(E)
            row += [f"{r.seconds(T):.2f}" if r.seconds(T) else "-", r.error.get(T, fmt_rate(rt)),
                    "-" if re_ is None or rt is None else f"{re_ / rt:.2f}x"]
        rows.append(row)
    return markdown(rows)


def stale_line(results: list[Result]) -> str:
    parts = [f"{r.name}: " + ", ".join(f"{be} {n}" for be, n in r.stale.items()) for r in results if r.stale]
    return "\nfreshness check, most inner nodes of a timed input graph that already had cached analysis (0 = all " \
           "fresh): " + ("; ".join(parts) if parts else "n/a")


def profile_ember(be: Backend, wide: int, deep: int, top: int = 15) -> None:
    variables = be.vars
    be.rewrite(make_graph(be, "wide", 10_000, 100, variables))
    for name, kind, size in (("(a) rewrite wide", "wide", wide), ("(b) rewrite deep", "deep", deep)):
        sink = make_graph(be, kind, 777, size, variables)
        prof = cProfile.Profile()
        gc.collect()
        prof.enable()
        be.rewrite(sink)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
        print(f"\n=== cProfile, ember {name}, {len(sink.toposort())} nodes, top {top} by tottime ===")
        root = str(Path(__file__).resolve().parents[2]) + "/"
        print("\n".join(line.replace(root, "") for line in s.getvalue().splitlines()
                        if line.strip() and "Ordered by" not in line and "List reduced" not in line))
        del sink


def make_backends(no_tinygrad: bool) -> list[Backend]:
    out: list[Backend] = [Ember()]
    out[0].limit = sys.getrecursionlimit()  # before tinygrad is imported: importing it raises the limit (to 10000)
    if not no_tinygrad:
        import importlib.util

        if importlib.util.find_spec("tinygrad") is None:
            print("tinygrad not installed: ember only (pip install tinygrad to compare)")
        else:
            out.append(Tinygrad())
            out[1].limit = sys.getrecursionlimit()
    for be in out:
        be.elapsed = 0.0
        with running(be):
            be.vars = make_vars(be)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the rewrite benchmarks (median reported)")
    ap.add_argument("--wide", type=int, default=2000, help="expressions in the wide graph (default 2000: ~9k nodes)")
    ap.add_argument("--deep", type=int, default=600, help="steps of the deep chain (default 600: ~2.4k nodes)")
    ap.add_argument("--build", type=int, default=5000, help="(x + c) * k // d groups built (6 new nodes each)")
    ap.add_argument("--build-reps", type=int, default=11, help="repetitions of the (short) build benchmarks")
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 reps (a smoke test)")
    ap.add_argument("--gc", action="store_true", help="leave the cyclic GC on during the timed regions")
    ap.add_argument("--no-tinygrad", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also cProfile ember's rewrite of (a) and (b)")
    ap.add_argument("--scaling", action="store_true",
                    help="instead: one repetition each at growing sizes (wide to ~100k nodes, deep to 3000 steps; "
                         "several minutes)")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.build_reps, args.wide, args.deep, args.build = 3, 3, 300, 150, 1000
    timer = Timer(args.gc)
    t_start = time.perf_counter()
    bes = make_backends(args.no_tinygrad)
    has_t = len(bes) > 1
    head = f"python {sys.version.split()[0]}, " + ", ".join(f"{b.name} {b.version}" for b in bes)

    def footer() -> str:
        per = ", ".join(f"{b.name} {b.elapsed:.1f}s (recursion limit {b.limit})" for b in bes)
        return f"time: {per}; total {time.perf_counter() - t_start:.1f}s"

    if args.scaling:
        sizes = [("wide", n) for n in (2000, 28000)] + [("deep", n) for n in (300, 1000, 2000, 3000)]
        results = [Result(f"{kind} {n} {'exprs' if kind == 'wide' else 'steps'}") for kind, n in sizes]
        for be in bes:
            warm_up(be, "wide", 500)
            warm_up(be, "deep", 500)
        for (kind, n), r in zip(sizes, results):
            for be in bes:
                rewrite_rep(be, kind, 100 + n, n, timer, r)
                print(f"  {be.name} {r.name}: {r.seconds(be.name) or 0:.2f}s", flush=True)
        print(f"{head}; one repetition each\n{footer()}\n")
        print(scaling_table(results, has_t))
        print(stale_line(results))
        return

    results = [Result("rewrite wide (a)"), Result("rewrite deep (b)"), Result("build fresh (c)"),
               Result("build cached (c)"), Result("build raw fresh (c)"), Result("build raw cached (c)")]
    # the backends take turns within each repetition, so a slow spell of the machine hits both alike
    for kind, size, res in (("wide", args.wide, results[0]), ("deep", args.deep, results[1])):
        for be in bes:
            warm_up(be, kind, size)
        for rep in range(args.reps):
            for be in bes:
                rewrite_rep(be, kind, rep + 1, size, timer, res)
    for rep in range(args.build_reps):
        for be in bes:
            build_rep(be, args.build, rep, False, timer, results[2], results[3])
            build_rep(be, args.build, rep, True, timer, results[4], results[5])
    print(f"{head}; median of {args.reps} (rewrite) and {args.build_reps} (build) repetitions; "
          f"gc {'on' if args.gc else 'off'} while timed\n{footer()}\n")
    print(table(results, has_t))
    print(stale_line(results[:2]))
    if args.profile:
        with running(bes[0]):
            profile_ember(bes[0], args.wide, args.deep)


if __name__ == "__main__":
    main()
