"""A small tour of ember.uops: build a tensor view, turn it into index math, simplify it with the rewrite engine.

Run: python tools/demo_rewrite.py  (or `hatch run demo`)
"""

from ember.schedule.indexing import simplify_given_valid  # the scheduler's (a PAD's valid region narrows the ranges)
from ember.uops import (
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    render,
    render_expr,
    verify,
    view_index,
)


def main() -> None:
    # a float32 buffer of 24 elements, viewed as (4, 6), transposed, flattened and viewed back: a round trip
    buf = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="CPU")), 24)
    view = buf.reshape((4, 6)).permute((1, 0)).reshape((24,)).reshape((6, 4)).permute((1, 0)).pad(((1, 0), (0, 2)))
    verify(UOp.sink(view), "tensor")
    print(f"tensor graph of the view, shape {view.shape}:\n{render(view)}\n")

    idxs = tuple(UOp.range(s, i) for i, s in enumerate(view.shape))
    base, (flat,), valid = view_index(view, idxs)
    print(f"index into the buffer, raw ({len(flat.toposort())} nodes):\n  {render_expr(flat)}")
    print(f"simplified ({len(flat.simplify().toposort())} nodes):\n  {render_expr(flat.simplify())}")
    simple, simple_valid = simplify_given_valid(flat, valid), valid.simplify()
    print(f"simplified where valid ({len(simple.toposort())} nodes):\n  {render_expr(simple)}")
    print(f"valid where: {render_expr(simple_valid)}\n")

    # a rule table of your own: strength-reduce multiplication by a power of two into a shift
    def mul_to_shift(x: UOp, c: UOp) -> UOp | None:
        return x << (c.arg.bit_length() - 1) if c.arg > 1 and c.arg & (c.arg - 1) == 0 else None

    pm = PatternMatcher([(UPat.var("x", dtypes.index) * UPat.cvar("c"), mul_to_shift)])
    shifted = graph_rewrite(simple, pm)
    print(f"with a custom rule (x*2^k -> x<<k):\n  {render_expr(shifted)}")
    r0, r1 = idxs
    for v0 in range(1, 5):
        for v1 in range(6):
            assert shifted.evaluate({r0: v0, r1: v1}) == flat.evaluate({r0: v0, r1: v1})
    print("checked: the rewritten index gives the same element at every valid position")


if __name__ == "__main__":
    main()
