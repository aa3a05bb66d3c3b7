"""Multi-device sharding on CPU:n devices: every op family on sharded and replicated tensors against the same
computation on one device (numpy forward; PyTorch CPU for the gradients of sharded and replicated leaves), where each
result lands (its devices, its shard axis, each device's part), the device-handling API, and the clear errors at the
design's limits (an op that would move items between shards, an axis that does not split evenly, mixed device sets).

Tolerances: float32, rtol=1e-5 and atol=1e-5 against numpy/PyTorch (their exp/log and sum orders differ from ours; a
reduce over the shard axis sums per shard and then across devices). A sharded elementwise op runs the one-device kernel
on each shard, compared with the one-device run at rtol=atol=1e-6 (not bit for bit: a narrower shard splits its rows
differently between vector code and scalar tails, whose exp/log differ in the last bit).
"""

import re

import numpy as np
import pytest
import torch

from ember.schedule import schedule
from ember.tensor import Tensor, engine
from ember.tensor.nn import cross_entropy, sparse_categorical_crossentropy
from ember.uops import Ops, UOp, dtypes, settings

RTOL = ATOL = 1e-5


def devs(n: int) -> tuple[str, ...]:
    return ("CPU", *(f"CPU:{i}" for i in range(1, n)))  # (CPU:0 is CPU)


def parts(t: Tensor) -> list[np.ndarray]:
    """Each device's part of a multi-device tensor, as stored on that device."""
    t.realize()
    assert t.uop.op is Ops.MSTACK, t.uop.op
    return [engine.copyout(p) for p in t.uop.src]


def assert_laid_out(t: Tensor, want: np.ndarray, devices: tuple[str, ...], axis: int | None, exact: bool = False,
                    rtol: float = RTOL, atol: float = ATOL) -> None:
    """t is `want` over `devices` along `axis`: part i (on devices[i]) holds shard i, or all of it for axis None (every
    replica checked, not only the first); and `.numpy()` gathers it whole."""
    assert t.device == devices and t.shard_axis == axis and t.shape == want.shape
    shards = [want] * len(devices) if axis is None else np.split(want, len(devices), axis)
    for got, shard in zip(parts(t), shards, strict=True):
        assert got.dtype == want.dtype
        if exact:
            np.testing.assert_array_equal(got, shard)
        else:
            np.testing.assert_allclose(got, shard, rtol=rtol, atol=atol)
    np.testing.assert_allclose(t.numpy(), want, rtol=0 if exact else rtol, atol=0 if exact else atol)


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def leaf(a: np.ndarray, n: int, axis: int | None) -> Tensor:
    """A leaf to differentiate, sharded in place (shard_), as a parameter would be."""
    return Tensor(a.copy(), requires_grad=True).shard_(devs(n), axis)


def check_grads(fn, torch_fn, arrays: list[np.ndarray], axes: list[int | None], n: int, out_axis: int | None,
                rtol: float = RTOL, atol: float = ATOL) -> Tensor:
    """fn on leaves sharded along `axes` over n devices against torch_fn on one device: the value (laid out along
    out_axis) and the gradient of every leaf, backpropagated from a random upstream gradient. Returns the output."""
    leaves = [leaf(a, n, ax) for a, ax in zip(arrays, axes, strict=True)]
    out = fn(*leaves)
    refs = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = torch_fn(*refs)
    upstream = data(*out.shape, seed=99)
    out.backward(Tensor(upstream).shard_like(out))
    want.backward(torch.tensor(upstream))
    assert_laid_out(out, want.detach().numpy(), devs(n), out_axis, rtol=rtol, atol=atol)
    for i, (lf, ref) in enumerate(zip(leaves, refs)):
        assert lf.grad is not None, f"leaf {i} got no gradient"
        assert_laid_out(lf.grad, ref.grad.numpy(), devs(n), lf.grad.shard_axis, rtol=rtol, atol=atol)
    return out


def moves_items(what: str) -> str:
    return re.escape(what) + r" moves items between shards \(the value is sharded along axis \d over \d devices\); " \
        r"reshard it first"


# *** elementwise: per shard, operands resharded to one axis (a sharded operand sets it) ***
UNARY = {
    "exp_log_sqrt": (lambda x: x.exp() + (x.abs() + 1).log() + (x * x + 1).sqrt(),
                     lambda x: x.exp() + (x.abs() + 1).log() + (x * x + 1).sqrt()),
    "sin_recip_neg": (lambda x: x.sin() - 1 / (x * x + 2), lambda x: x.sin() - 1 / (x * x + 2)),
    "activations": (lambda x: x.relu() + x.sigmoid() * x.tanh() + x.gelu(approximate="tanh"),
                    lambda x: x.relu() + x.sigmoid() * x.tanh() + torch.nn.functional.gelu(x, approximate="tanh")),
}


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op: str, axis: int | None, n: int) -> None:
    fn, torch_fn = UNARY[op]
    a = data(6, 12)
    check_grads(fn, torch_fn, [a], [axis], n, axis)
    np.testing.assert_allclose(fn(Tensor(a).shard(devs(n), axis)).numpy(), fn(Tensor(a)).numpy(), rtol=1e-6, atol=1e-6)


BINARY = {
    "arith": (lambda x, y: x * y - x / (y * y + 1) + (x - y) * 0.5,) * 2,  # (the same operators in PyTorch)
    "max_pow": (lambda x, y: x.maximum(y) + (x * x + 1).pow(y), lambda x, y: torch.maximum(x, y) + (x * x + 1).pow(y)),
    "where": (lambda x, y: (x < y).where(y.exp(), x * 2), lambda x, y: torch.where(x < y, y.exp(), x * 2)),
}
# (x's axis, y's axis) -> the result's axis: the first sharded operand's; a differently sharded one is gathered
LAYOUTS = [(0, 0, 0), (1, 1, 1), (0, None, 0), (None, 1, 1), (None, None, None), (0, 1, 0), (1, 0, 1)]


@pytest.mark.parametrize(("op", "x_axis", "y_axis", "out_axis", "n"),
                         [("arith", *layout, n) for layout in LAYOUTS for n in (2, 3)] +
                         [(op, *layout, 3) for op in ("max_pow", "where") for layout in LAYOUTS[::3]])
def test_binary_and_where(op: str, x_axis: int | None, y_axis: int | None, out_axis: int | None, n: int) -> None:
    fn, torch_fn = BINARY[op]
    a, b = data(6, 12), data(6, 12, seed=1)
    check_grads(fn, torch_fn, [a, b], [x_axis, y_axis], n, out_axis)
    np.testing.assert_allclose(fn(Tensor(a).shard(devs(n), x_axis), Tensor(b).shard(devs(n), y_axis)).numpy(),
                               fn(Tensor(a), Tensor(b)).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_casts(axis: int | None) -> None:
    a = data(6, 12) * 50
    x = Tensor(a).shard(devs(3), axis)
    assert_laid_out(x.cast(dtypes.int32), a.astype(np.int32), devs(3), axis, exact=True)
    assert_laid_out(x.cast(dtypes.float16), a.astype(np.float16), devs(3), axis, exact=True)
    assert_laid_out((x > 0).cast(dtypes.float32) + x.int().float(), (a > 0) + a.astype(np.int32).astype(np.float32),
                    devs(3), axis, exact=True)
    assert_laid_out(x.cast(dtypes.bfloat16).float(), Tensor(a).cast(dtypes.bfloat16).float().numpy(), devs(3), axis,
                    exact=True)
    # and the gradient through a round trip to half precision
    check_grads(lambda t: t.cast(dtypes.float16).float() * t, lambda t: t.half().float() * t, [a / 50], [axis], 3, axis,
                rtol=1e-3)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("axis", [0, 1])
def test_replicated_bias_broadcast_onto_sharded_activation(axis: int, n: int) -> None:
    # (batch-sharded or feature-sharded activation) + a replicated (features,) bias: the bias shrinks to each shard
    # along features, or is used whole per batch shard; its gradient sums over the batch
    h, bias = data(6, 12), data(12, seed=1)
    check_grads(lambda x, b: (x + b).relu() * b, lambda x, b: (x + b).relu() * b, [h, bias], [axis, None], n, axis)


# *** reductions: over the shard axis = per-shard reduce + allreduce (replicated result); over others: stays sharded ***
def _reduced_axis(shard_axis: int | None, axes: tuple[int, ...], keepdim: bool) -> int | None:
    if shard_axis is None or shard_axis in axes:
        return None
    return shard_axis if keepdim else shard_axis - sum(a < shard_axis for a in axes)


REDUCES = {"sum": (Tensor.sum, torch.sum), "max": (Tensor.max, torch.amax), "mean": (Tensor.mean, torch.mean)}
REDUCE_AXES = [((0,), False), ((2,), True), ((1, 2), False), ((0, 1, 2), False)]


@pytest.mark.parametrize(("op", "n"), [("sum", 2), ("sum", 3), ("max", 3), ("mean", 3)])
@pytest.mark.parametrize("shard_axis", [None, 0, 2])
@pytest.mark.parametrize(("axes", "keepdim"), REDUCE_AXES)
def test_reduce(op: str, axes: tuple[int, ...], keepdim: bool, shard_axis: int | None, n: int) -> None:
    fn, torch_fn = REDUCES[op]
    a = data(6, 4, 6)
    check_grads(lambda x: fn(x, axes, keepdim=keepdim), lambda x: torch_fn(x, axes, keepdim=keepdim), [a],
                [shard_axis], n, _reduced_axis(shard_axis, axes, keepdim))


def test_integer_and_bool_reductions_over_the_shard_axis() -> None:
    a = np.random.default_rng(0).integers(-50, 50, (6, 12)).astype(np.int32)
    x = Tensor(a).shard(devs(3), 1)
    assert_laid_out(x.sum(1), a.sum(1), devs(3), None, exact=True)  # (int32 sums in int64, as numpy)
    assert_laid_out(x.sum(0), a.sum(0), devs(3), 0, exact=True)
    assert_laid_out(x.max(1), a.max(1), devs(3), None, exact=True)
    assert_laid_out(x.min(), np.array(a.min(), np.int32), devs(3), None, exact=True)
    assert_laid_out(x.argmax(1), a.argmax(1), devs(3), None, exact=True)
    assert_laid_out((x > 45).any(1), (a > 45).any(1), devs(3), None, exact=True)
    assert_laid_out((x > -45).all(0), (a > -45).all(0), devs(3), 0, exact=True)


# *** matmul: the three classic layouts ***
MATMUL_LAYOUTS = {  # (x (8, 12) axis, w (12, 6) axis, out axis)
    "data_parallel": (0, None, 0),  # batch-sharded x, replicated weight: no traffic
    "column_split": (None, 1, 1),  # replicated x, weight split by output columns: the output is sharded
    "row_split": (1, 0, None),  # x split along features, weight by rows: partial sums + allreduce
    "batch_x_column_split": (0, 1, 0),  # both sharded, differently: the weight is gathered
}


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("layout", list(MATMUL_LAYOUTS))
def test_matmul_layouts(layout: str, n: int) -> None:
    x_axis, w_axis, out_axis = MATMUL_LAYOUTS[layout]
    check_grads(lambda x, w: x @ w, lambda x, w: x @ w, [data(6, 12), data(12, 6, seed=1)], [x_axis, w_axis], n,
                out_axis)


def test_reductions_over_the_shard_axis_with_the_ring_allreduce() -> None:
    n = 3
    with settings.Context(MULTI_ALLREDUCE="ring"):  # (chosen by size otherwise: these are small)
        x, w = Tensor(data(8, 12)).shard(devs(n), 1).realize(), Tensor(data(12, 48, seed=1)).shard(devs(n), 0).realize()
        items = schedule(UOp.sink((x @ w).uop)).items  # 384 floats: n chunks, each around the ring twice
        assert sum(it.ast.op is Ops.COPY for it in items) == 2 * n * (n - 1)
        check_grads(lambda x, w: (x @ w).softmax(-1), lambda x, w: (x @ w).softmax(-1),
                    [data(8, 12), data(12, 48, seed=1)], [1, 0], n, None)
        check_grads(lambda x: x.max(0) * x.sum(0), lambda x: x.amax(0) * x.sum(0), [data(12, 256)], [0], n, None)


def test_matmul_on_four_devices() -> None:
    out = check_grads(lambda x, w: (x @ w).relu() @ w.T, lambda x, w: (x @ w).relu() @ w.T,
                      [data(8, 12), data(12, 8, seed=1)], [1, 0], 4, 1)  # row split, then column split (w.T)
    assert out.shape == (8, 12)


# *** softmax, log_softmax, cross-entropy over a sharded last axis (max and sum allreduced) ***
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_family(axis: int, n: int) -> None:
    a = data(6, 12) * 3
    check_grads(lambda x: x.softmax(-1), lambda x: x.softmax(-1), [a], [axis], n, axis)
    check_grads(lambda x: x.log_softmax(-1), lambda x: x.log_softmax(-1), [a], [axis], n, axis)
    check_grads(lambda x: x.logsumexp(-1), lambda x: x.logsumexp(-1), [a], [axis], n, 0 if axis == 0 else None)
    labels = np.random.default_rng(1).integers(0, 12, 6)
    check_grads(lambda x: sparse_categorical_crossentropy(x, Tensor(labels.astype(np.int32)).shard(devs(n), 0)),
                lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(labels)), [a], [axis], n, None)
    probs = np.random.default_rng(2).dirichlet(np.ones(12), 6).astype(np.float32)
    check_grads(lambda x: cross_entropy(x, Tensor(probs).shard(devs(n), axis)),
                lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(probs)), [a], [axis], n, None)


# *** movement ops: keep or move the shard axis, or raise ***
RESHAPES = [  # (shape, shard axis, n, new shape, the new shard axis)
    ((6, 12), 0, 2, (6, 2, 6), 0),
    ((6, 12), 1, 2, (6, 2, 6), 1),  # shard i is the row block i: axis 1 of size 2 cuts the same blocks
    ((6, 12), 0, 3, (72,), 0),
    ((6, 12), 0, 3, (3, 24), 0),  # 2 rows per shard = 1 new row
    ((2, 6, 4), 1, 2, (2, 24), 1),
    ((6, 12), 1, 3, (1, 6, 12, 1), 2),
]


@pytest.mark.parametrize(("shape", "axis", "n", "new", "new_axis"), RESHAPES)
def test_reshape_keeps_the_shard_axis(shape, axis, n, new, new_axis) -> None:
    a = data(*shape)
    check_grads(lambda x: x.reshape(new), lambda x: x.reshape(new), [a], [axis], n, new_axis)


@pytest.mark.parametrize(("shape", "axis", "n", "new"), [((6, 12), 1, 2, (72,)), ((6, 12), 0, 2, (3, 24)),
                                                         ((6, 12), 1, 3, (6, 2, 6))])
def test_reshape_that_moves_items_between_shards_raises(shape, axis, n, new) -> None:
    x = Tensor(data(*shape)).shard(devs(n), axis).reshape(new)  # lazy: the multi stage raises when it is scheduled
    with pytest.raises(ValueError, match=moves_items(f"reshape {shape} -> {new}")):
        x.realize()
    assert_laid_out(Tensor(data(*shape)).shard(devs(n), axis).shard(devs(n), None).reshape(new),  # replicated first
                    data(*shape).reshape(new), devs(n), None, exact=True)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_permute_and_transpose_move_the_axis(axis: int) -> None:
    a = data(6, 6, 12)
    order = (2, 0, 1)
    check_grads(lambda x: x.permute(order) * 2, lambda x: x.permute(order) * 2, [a], [axis], 3, order.index(axis))
    check_grads(lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2), [a], [axis], 2, {0: 2, 1: 1, 2: 0}[axis])


@pytest.mark.parametrize("axis", [0, 2])
def test_expand(axis: int) -> None:
    a = data(6, 1, 12)
    check_grads(lambda x: x.expand(6, 4, 12) * 1.5, lambda x: x.expand(6, 4, 12) * 1.5, [a], [axis], 3, axis)


@pytest.mark.parametrize("n", [2, 3])
def test_pad_and_shrink_on_other_axes(n: int) -> None:
    a = data(6, 12)
    check_grads(lambda x: x.pad(((0, 0), (1, 2))), lambda x: torch.nn.functional.pad(x, (1, 2)), [a], [0], n, 0)
    check_grads(lambda x: x[:, 2:7], lambda x: x[:, 2:7], [a], [0], n, 0)
    check_grads(lambda x: x[1:4] * 3, lambda x: x[1:4] * 3, [a], [1], n, 1)


def test_pad_and_shrink_on_the_shard_axis_raise() -> None:
    x = Tensor(data(6, 12)).shard(devs(2), 1)
    with pytest.raises(ValueError, match=moves_items("pad ((0, 0), (1, 2)) of axis 1")):
        x.pad(((0, 0), (1, 2))).realize()
    with pytest.raises(ValueError, match=moves_items("shrink ((0, 6), (2, 7)) of axis 1")):
        x[:, 2:7].realize()
    with pytest.raises(ValueError, match=moves_items("shrink ((1, 3), (0, 12)) of axis 0")):
        Tensor(data(6, 12)).shard(devs(3), 0)[1:3].realize()


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("axis", [0, 1])
def test_flip(axis: int, n: int) -> None:
    # on the shard axis, shard i of the result is the flip of shard n-1-i: it moves to device i
    a = data(6, 12)
    check_grads(lambda x: x.flip(axis) * 2, lambda x: x.flip(axis) * 2, [a], [axis], n, axis)
    check_grads(lambda x: x.flip(1 - axis), lambda x: x.flip(1 - axis), [a], [axis], n, axis)


@pytest.mark.parametrize("n", [2, 3])
def test_cat_and_stack_on_a_non_shard_axis(n: int) -> None:
    a, b = data(6, 12), data(6, 12, seed=1)
    check_grads(lambda x, y: x.cat(y, dim=1), lambda x, y: torch.cat([x, y], 1), [a, b], [0, 0], n, 0)
    check_grads(lambda x, y: x.cat(y, dim=0), lambda x, y: torch.cat([x, y], 0), [a, b], [1, None], n, 1)
    check_grads(lambda x, y: Tensor.stack(x, y, dim=0), lambda x, y: torch.stack([x, y], 0), [a, b], [1, 1], n, 2)


def test_cat_on_the_shard_axis_raises() -> None:
    x = Tensor(data(6, 12)).shard(devs(2), 0)
    with pytest.raises(ValueError, match=moves_items("pad ((0, 6), (0, 0)) of axis 0")):
        x.cat(x, dim=0).realize()


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_indexing_and_gather(axis: int | None) -> None:
    # an integer index tensor picks by comparison and sum: it works on any axis, the shard axis too (allreduced)
    a = data(6, 12)
    rows = np.array([5, 0, 3, 3], np.int32)
    idx = np.random.default_rng(1).integers(0, 12, (6, 12)).astype(np.int32)
    check_grads(lambda x: x[Tensor(rows).to(devs(3))], lambda x: x[torch.tensor(rows, dtype=torch.long)], [a],
                [axis], 3, None if axis == 0 else axis)
    check_grads(lambda x: x.gather(1, Tensor(idx).shard(devs(3), axis)),
                lambda x: x.gather(1, torch.tensor(idx, dtype=torch.long)), [a], [axis], 3, axis)


def test_a_layer_of_ops_on_three_devices() -> None:
    # layernorm, a residual and a reduction of mixed layouts, end to end
    def block(x, w, g):
        h = x @ w
        mu = h.mean(-1, keepdim=True)
        var = ((h - mu) * (h - mu)).mean(-1, keepdim=True)
        return ((h - mu) * (var + 1e-5).rsqrt() * g + x).sum(0)

    def torch_block(x, w, g):
        h = x @ w
        return (torch.nn.functional.layer_norm(h, (12,)) * g + x).sum(0)

    check_grads(block, torch_block, [data(6, 12), data(12, 12, seed=1), data(12, seed=2)], [0, 1, None], 3, None,
                rtol=1e-4, atol=1e-4)


# *** gradients through resharding ***
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize(("src", "dst"), [(0, None), (1, None), (0, 1), (None, 0), ("one", 0), ("one", None)])
def test_gradient_through_a_reshard(src, dst, n: int) -> None:
    """A leaf resharded (or a one-device leaf sharded) and used: its gradient is the upstream gradient, laid out
    consistently: every replica of a replicated gradient holds all of it (a reshard to replicated once left zeros in all
    but the first)."""
    a, up = data(6, 12), data(6, 12, seed=1)
    x = Tensor(a.copy(), requires_grad=True)
    if src != "one":
        x.shard_(devs(n), src)
    y = x.shard(devs(n), dst)
    (y * Tensor(up).shard(devs(n), dst)).sum().backward()
    if src == "one":
        assert x.grad.device == "CPU"
        np.testing.assert_allclose(x.grad.numpy(), up, rtol=RTOL, atol=ATOL)
    else:
        assert_laid_out(x.grad, up, devs(n), x.grad.shard_axis)
        assert_laid_out(x.grad.shard_like(x), up, devs(n), src)  # as the optimizer reads it: in the leaf's layout


@pytest.mark.parametrize("n", [2, 3])
def test_gradient_of_a_leaf_used_sharded_and_replicated(n: int) -> None:
    a, up = data(6, 12), data(6, 12, seed=1)
    x = Tensor(a.copy(), requires_grad=True).shard_(devs(n), 0)
    ((x + x.shard(devs(n), None)) * Tensor(up).to(devs(n))).sum().backward()
    assert_laid_out(x.grad, 2 * up, devs(n), x.grad.shard_axis)
    assert_laid_out(x.grad.shard_like(x), 2 * up, devs(n), 0)


# *** devices ***
def test_to_round_trips_and_layouts() -> None:
    a = data(6, 12)
    rep = Tensor(a).to(("CPU:0", "CPU:1"))  # a tuple replicates
    assert_laid_out(rep, a, devs(2), None, exact=True)
    back = rep.to("CPU:1")  # a replicated tensor gathers from the part already there
    assert back.device == "CPU:1"
    np.testing.assert_array_equal(back.numpy(), a)
    sharded = Tensor(a).shard(devs(3), 1)
    assert sharded.to(devs(3)) is sharded  # on its devices already: unchanged (still sharded)
    np.testing.assert_array_equal(sharded.to("CPU:2").numpy(), a)
    np.testing.assert_array_equal(sharded.to("CPU:5").numpy(), a)  # gathered onto a device outside the set
    moved = sharded.to(("CPU:3", "CPU:4", "CPU:5"))  # as many devices: each part moves, the layout stays
    assert_laid_out(moved, a, ("CPU:3", "CPU:4", "CPU:5"), 1, exact=True)
    assert_laid_out(sharded.to(devs(2)), a, devs(2), None, exact=True)  # another count: gathered, replicated
    np.testing.assert_array_equal(Tensor(Tensor(a), device=devs(2)).numpy(), a)
    assert_laid_out((Tensor(a) * 2).to(devs(3)), a * 2, devs(3), None, exact=True)  # a lazy value: computed, copied


def test_a_copy_onto_devices_does_not_alias_its_source() -> None:
    # every part of a new multi-device value is its own memory: a part on the source's device once was the source's
    # buffer, so writing either changed that one replica (or shard) and not the others
    a, b, c = data(6, 12), data(6, 12, seed=1), data(6, 12, seed=2)
    x = Tensor(a).realize()
    y = x.to(devs(3)).realize()
    x.assign(Tensor(b)).realize()
    assert_laid_out(y, a, devs(3), None, exact=True)
    y.assign(Tensor(c).to(devs(3))).realize()
    np.testing.assert_array_equal(x.numpy(), b)
    for make, devices, axis in ((lambda t: t.shard(devs(2), 0), ("CPU", "CPU:5"), 0),  # a move sharing a device
                                (lambda t: t.to(devs(2)), devs(3), None)):  # a replica onto more devices
        x = make(Tensor(a)).realize()
        y = x.to(devices).realize()
        x.assign(make(Tensor(b))).realize()
        assert_laid_out(y, a, devices, axis, exact=True)
    x = Tensor(a).realize()
    old = engine.buffers_of(x.uop)[0]
    x.shard_(devs(2), None)  # in place: the tensor's own buffer stays its first replica, nothing copied
    assert engine.buffers_of(x.uop)[0] is old


def test_construction_and_creation_on_a_device_tuple() -> None:
    a = data(6, 12)
    assert_laid_out(Tensor(a, device=devs(3)), a, devs(3), None, exact=True)
    assert_laid_out(Tensor(a, device=["CPU:0", "CPU:1"]), a, devs(2), None, exact=True)
    assert_laid_out(Tensor.zeros(6, 4, device=devs(2)), np.zeros((6, 4), np.float32), devs(2), None, exact=True)
    assert_laid_out(Tensor.ones(6, 4, device=devs(3)) * 2, np.full((6, 4), 2, np.float32), devs(3), None, exact=True)
    assert_laid_out(Tensor.full((2, 3), 7, dtypes.int32, devs(2)), np.full((2, 3), 7, np.int32), devs(2), None,
                    exact=True)
    assert_laid_out(Tensor.arange(6, device=devs(3)), np.arange(6, dtype=np.int32), devs(3), None, exact=True)
    empty = Tensor.empty(6, 4, device=devs(2))
    assert empty.device == devs(2) and empty.shape == (6, 4)
    for make in (Tensor.rand, Tensor.randn):  # a seed gives the one-device numbers, on every device
        Tensor.manual_seed(3)
        one = make(6, 4).numpy()
        Tensor.manual_seed(3)
        assert_laid_out(make(6, 4, device=devs(3)), one, devs(3), None, exact=True)
    ref = Tensor(a).shard(devs(2), 1)
    assert_laid_out(Tensor.zeros(6, 12).shard_like(ref), np.zeros((6, 12), np.float32), devs(2), 1, exact=True)
    assert_laid_out(ref.zeros_like() + ref.ones_like(), np.ones((6, 12), np.float32), devs(2), 1, exact=True)
    assert_laid_out(Tensor(a).shard_like(Tensor.ones(6, 12, device=devs(3))), a, devs(3), None, exact=True)
    assert Tensor(a).shard_like(Tensor.ones(1, device="CPU:2")).device == "CPU:2"


def test_reshard_between_axes_and_device_sets() -> None:
    a = data(6, 12)
    x = Tensor(a).shard(devs(2), 0)
    assert_laid_out(x, a, devs(2), 0, exact=True)
    x = x.shard(devs(2), 1)
    assert_laid_out(x, a, devs(2), 1, exact=True)
    x = x.shard(devs(2), None)
    assert_laid_out(x, a, devs(2), None, exact=True)
    assert_laid_out(x.shard(devs(2), -1), a, devs(2), 1, exact=True)
    assert_laid_out(Tensor(a).shard(devs(2), 0).shard(("CPU:2", "CPU:3"), 1), a, ("CPU:2", "CPU:3"), 1, exact=True)
    assert_laid_out(Tensor(a).shard(devs(2), 0).shard(devs(3), 1), a, devs(3), 1, exact=True)  # another count
    assert_laid_out((Tensor(a).shard(devs(2), 0) * 2).shard(devs(4), 1), a * 2, devs(4), 1, exact=True)  # lazy
    assert_laid_out(Tensor(a, device="CPU:5").shard(devs(3), 0), a, devs(3), 0, exact=True)  # from outside the set
    assert_laid_out(Tensor(a).shard(("CPU:1",), 0), a, ("CPU:1",), 0, exact=True)  # one device is a (trivial) set


def test_device_errors() -> None:
    a = data(6, 12)
    with pytest.raises(ValueError, match=re.escape("shard: axis 1 of shape (6, 12) has 12 items, which do not split "
                                                   "evenly over 5 devices; pad it to a multiple of 5 first")):
        Tensor(a).shard(devs(5), 1)
    with pytest.raises(ValueError, match=re.escape("shard: axis 2 is out of range for a tensor of 2 dims")):
        Tensor(a).shard(devs(2), 2)
    with pytest.raises(ValueError, match=re.escape("shard: a 0-d tensor has no axis 0 to split; use axis=None")):
        Tensor(np.float32(1)).shard(devs(2), 0)
    with pytest.raises(TypeError, match=re.escape("shard: devices must be a tuple or list of device names, got "
                                                  "'CPU:1'")):
        Tensor(a).shard("CPU:1", 0)
    with pytest.raises(ValueError, match=re.escape("Device: unknown device 'NOPE:1'; registered devices:")):
        Tensor(a).shard(("CPU:0", "NOPE:1"))
    with pytest.raises(ValueError, match=re.escape("device: a multi-device tensor needs distinct devices, got "
                                                   "('CPU:0', 'CPU')")):
        Tensor(a).shard(("CPU:0", "CPU"))
    with pytest.raises(ValueError, match=re.escape("device: a multi-device tensor needs distinct devices, got ()")):
        Tensor(a, device=())
    with pytest.raises(ValueError, match=re.escape("tensors are on different devices: ('CPU', 'CPU:1') and "
                                                   "('CPU:2', 'CPU:3')")):
        Tensor(a).shard(devs(2), 0) + Tensor(a).shard(("CPU:2", "CPU:3"), 0)
    with pytest.raises(ValueError, match=re.escape("tensors are on different devices: ('CPU', 'CPU:1') and CPU")):
        Tensor(a).shard(devs(2), 0) * Tensor(a)
    with pytest.raises(ValueError, match=re.escape("tensors are on different devices: ('CPU', 'CPU:1') and "
                                                   "('CPU', 'CPU:1', 'CPU:2')")):
        Tensor(a).to(devs(2)) @ Tensor(a.T.copy()).to(devs(3))
    with pytest.raises(ValueError, match=re.escape("shard_axis: the tensor is on one device (CPU)")):
        _ = Tensor(a).shard_axis


# *** empty and 0-d values on several devices ***
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_zero_size(axis: int | None) -> None:
    z = np.zeros((0, 4), np.float32)
    x = Tensor(z).shard(devs(2), axis)
    assert_laid_out(x + 1, z, devs(2), axis, exact=True)
    assert_laid_out(x.reshape(0, 2, 2), z.reshape(0, 2, 2), devs(2), axis, exact=True)
    assert_laid_out(x.reshape(-1), z.reshape(-1), devs(2), None if axis is None else 0, exact=True)
    assert_laid_out(x.sum(0), np.zeros(4, np.float32), devs(2), None if axis in (None, 0) else 0, exact=True)
    assert_laid_out(x.sum(), np.zeros((), np.float32), devs(2), None, exact=True)
    g = leaf(z, 2, axis)
    (g * 2).sum().backward()
    assert g.grad.shape == (0, 4) and g.grad.numpy().shape == (0, 4)


def test_zero_d() -> None:
    x = Tensor(np.float32(3.0)).to(devs(3))
    assert x.shape == () and x.shard_axis is None
    assert_laid_out(x * 2 + 1, np.array(7.0, np.float32), devs(3), None, exact=True)
    assert (x * 2).item() == 6.0
    assert_laid_out(Tensor(2.5, device=devs(2)) * Tensor(np.float32(2.0)).to(devs(2)), np.array(5.0, np.float32),
                    devs(2), None, exact=True)
    assert_laid_out(x.reshape(1, 1).expand(3, 2).sum(0), np.full(2, 9.0, np.float32), devs(3), None, exact=True)
    check_grads(lambda t: (t * t).exp(), lambda t: (t * t).exp(), [np.array(0.5, np.float32)], [None], 3, None)
