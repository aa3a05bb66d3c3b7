"""The neural-network ops as Tensor methods (ember/tensor/ops/nn.py): forward and backward against PyTorch on random
inputs, edge cases (causal alignment, ceil_mode, probability targets, size-1 dims) and errors at the API boundary."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes, nn

rng = np.random.default_rng(0)


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(ours_fn, theirs_fn, *arrays, rtol=1e-4, atol=1e-5, device=None):
    """ours_fn on Tensors and theirs_fn on torch tensors of the same arrays: the same values, and the same gradients
    of (out * a random upstream).sum() for every float32 input."""
    floats = [a.dtype == np.float32 for a in arrays]
    ours = [Tensor(a, device, requires_grad=f or None) for a, f in zip(arrays, floats)]
    theirs = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, floats)]
    o, t = ours_fn(*ours), theirs_fn(*theirs)
    assert o.shape == tuple(t.shape)
    np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
    up = arr(*t.shape) if t.shape else np.float32(1.0)
    (o * Tensor(up, device)).sum().backward()
    (t * torch.tensor(up)).sum().backward()
    for a, b, f in zip(ours, theirs, floats):
        if f:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=atol)


# *** convolution ***
CONVS = [  # (input shape, weight shape, our kwargs, torch function, torch kwargs)
    ((2, 3, 9), (4, 3, 3), dict(stride=2, padding=1), F.conv1d, dict(stride=2, padding=1)),
    ((2, 4, 7, 8), (6, 2, 3, 2), dict(groups=2, dilation=2, padding=(1, 2)), F.conv2d,
     dict(groups=2, dilation=2, padding=(1, 2))),
    ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1)), F.conv3d, dict(stride=(1, 2, 1))),
    ((2, 5, 5), (3, 2, 3, 3), dict(), F.conv2d, dict()),  # unbatched
    ((1, 2, 6, 7), (3, 2, 4, 2), dict(padding="same", dilation=(1, 2)), F.conv2d,
     dict(padding="same", dilation=(1, 2))),  # an even total: the odd one after
    ((1, 2, 6, 7), (3, 2, 4, 2), dict(padding="valid"), F.conv2d, dict(padding="valid")),
    ((2, 1, 1, 5), (2, 1, 1, 1), dict(), F.conv2d, dict()),  # size-1 dims and kernel
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("x_shape, w_shape, kw, theirs, theirs_kw", CONVS)
def test_conv_nd(x_shape, w_shape, kw, theirs, theirs_kw):
    check(lambda x, w, b: x.conv2d(w, b, **kw), lambda x, w, b: theirs(x, w, b, **theirs_kw),
          arr(*x_shape), arr(*w_shape), arr(w_shape[0]))


def test_conv_asymmetric_and_negative_padding():
    # 4 ints: (left, right, top, bottom) as torch.nn.functional.pad; a negative amount cuts
    check(lambda x, w: x.conv2d(w, padding=(1, 0, -1, 2)), lambda x, w: F.conv2d(F.pad(x, (1, 0, -1, 2)), w),
          arr(1, 2, 6, 5), arr(3, 2, 3, 3))
    check(lambda x, w: nn.conv2d(x, w, stride=(2, 1), padding=(1, 2)),
          lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2)), arr(2, 2, 6, 5), arr(3, 2, 3, 3))


@pytest.mark.parametrize("x_shape, w_shape, kw, theirs", [
    ((2, 4, 3, 4), (4, 3, 3, 2), dict(groups=2, stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                      dilation=(1, 2)), F.conv_transpose2d),
    ((2, 3, 5), (3, 2, 3), dict(stride=2), F.conv_transpose1d),
    ((2, 3, 2, 3), (2, 2, 2, 3, 2), dict(stride=2, padding=1), F.conv_transpose3d),  # unbatched
])
def test_conv_transpose_nd(x_shape, w_shape, kw, theirs):
    check(lambda x, w, b: x.conv_transpose2d(w, b, **kw), lambda x, w, b: theirs(x, w, b, **kw),
          arr(*x_shape), arr(*w_shape), arr(w_shape[1] * kw.get("groups", 1)))
    check(lambda x, w: nn.conv_transpose2d(x, w, **kw), lambda x, w: theirs(x, w, **kw), arr(*x_shape), arr(*w_shape))


# *** pooling ***
@pytest.mark.parametrize("shape, ours_kw, theirs", [
    ((2, 3, 8, 7), dict(kernel_size=(3, 3), stride=2, padding=1, ceil_mode=True),
     lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True)),
    ((2, 3, 11), dict(kernel_size=(3,), stride=2, dilation=2, padding=1),
     lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2)),
    ((1, 2, 4, 4, 5), dict(kernel_size=(2, 2, 2)), lambda x: F.max_pool3d(x, 2)),
    ((1, 1, 1, 5), dict(kernel_size=(1, 2), ceil_mode=True), lambda x: F.max_pool2d(x, (1, 2), ceil_mode=True)),
])
def test_max_pool_nd(shape, ours_kw, theirs):
    check(lambda x: x.max_pool2d(**ours_kw), theirs, arr(*shape))


def test_max_pool_indices_and_unpool():
    x = arr(2, 3, 7, 6)
    values, indices = F.max_pool2d(torch.tensor(x), (3, 2), (2, 2), 1, ceil_mode=True, return_indices=True)
    out, idx = Tensor(x).max_pool2d((3, 2), stride=(2, 2), padding=1, ceil_mode=True, return_indices=True)
    assert idx.dtype == dtypes.int64
    np.testing.assert_array_equal(out.numpy(), values.numpy())
    np.testing.assert_array_equal(idx.numpy(), indices.numpy())
    edges = np.array([[[[np.nan, 1, 5, 2], [2, 3, -np.inf, np.inf], [0, 1, 2, 3], [1, 1, 1, 1]]]], np.float32)
    values, indices = F.max_pool2d(torch.tensor(edges), 2, return_indices=True)
    out, idx = Tensor(edges).max_pool2d(return_indices=True)
    np.testing.assert_array_equal(out.numpy(), values.numpy())  # NaN propagates, ties pick the first
    np.testing.assert_array_equal(idx.numpy(), indices.numpy())
    # unpool of non-overlapping windows (overlapping ones repeat indices: PyTorch leaves that undefined)
    y = arr(2, 3, 6, 6)
    values, indices = F.max_pool2d(torch.tensor(y), 2, return_indices=True)
    check(lambda v: v.max_unpool2d(Tensor(indices.numpy()), (2, 2)), lambda v: F.max_unpool2d(v, indices, 2),
          values.numpy())
    check(lambda v: nn.max_unpool2d(v, Tensor(indices.numpy()), 2, output_size=(7, 7)),
          lambda v: F.max_unpool2d(v, indices, 2, output_size=(7, 7)), values.numpy())


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_max_pool_of_ints_keeps_the_dtype(dtype):
    x = rng.integers(0, 120, (2, 3, 6, 6)).astype(dtype) - (0 if dtype == np.uint8 else 60)
    out = Tensor(x).max_pool2d((3, 3), stride=2, padding=1)
    assert out.numpy().dtype == dtype
    np.testing.assert_array_equal(out.numpy(), F.max_pool2d(torch.tensor(x).double(), 3, 2, 1).numpy())


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=1, count_include_pad=False), dict(ceil_mode=True),
                                dict(ceil_mode=True, padding=1),
                                dict(ceil_mode=True, padding=1, count_include_pad=False),
                                dict(padding=1, divisor_override=3)])
def test_avg_pool2d(kw):
    check(lambda x: x.avg_pool2d((3, 3), stride=2, **kw), lambda x: F.avg_pool2d(x, 3, 2, **kw), arr(2, 3, 8, 7))


def test_avg_pool_1d_3d():
    check(lambda x: x.avg_pool2d((3,), stride=2, padding=1, ceil_mode=True, count_include_pad=False),
          lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), arr(2, 3, 8))
    check(lambda x: x.avg_pool2d((2, 2, 2), padding=1), lambda x: F.avg_pool3d(x, 2, padding=1), arr(1, 2, 3, 4, 5))
    check(lambda x: nn.avg_pool2d(x, 2), lambda x: F.avg_pool2d(x, 2), arr(1, 2, 4, 4))


# *** attention ***
@pytest.mark.parametrize("lq, lk", [(3, 5), (5, 3), (4, 4)])
def test_sdpa_causal_is_aligned_top_left(lq, lk):
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          arr(2, 2, lq, 8), arr(2, 2, lk, 8), arr(2, 2, lk, 4))


def test_sdpa_masks_gqa_scale():
    mask = np.tril(np.ones((3, 5), bool))
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(mask), enable_gqa=True, scale=0.3),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(mask), enable_gqa=True,
                                                         scale=0.3),
          arr(1, 4, 3, 8), arr(1, 2, 5, 8), arr(1, 2, 5, 4))
    mask[1] = False  # a query that attends to no key: zeros, and zero gradients
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(mask)),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(mask)),
          arr(1, 3, 8), arr(1, 5, 8), arr(1, 5, 4))
    float_mask = arr(3, 5)
    float_mask[2] = -math.inf
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(float_mask)),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(float_mask)),
          arr(2, 3, 8), arr(2, 5, 8), arr(2, 5, 4))
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v), F.scaled_dot_product_attention,
          arr(1, 1, 8), arr(1, 1, 8), arr(1, 1, 2))  # one query, one key
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v), F.scaled_dot_product_attention,
          arr(2, 3, 4, 8), arr(1, 5, 8), arr(5, 2))  # leading dims broadcast, one key/value head too


def test_sdpa_dropout_keeps_the_expectation():
    q = Tensor(np.zeros((1, 48, 4), np.float32))
    v = Tensor(np.ones((1, 48, 1), np.float32))
    out = q.scaled_dot_product_attention(q, v, dropout_p=0.25).numpy()  # each row: (kept weights) * 4/3, E = 1
    assert not np.allclose(out, 1.0) and abs(out.mean() - 1.0) < 0.05


# *** interpolation ***
@pytest.mark.parametrize("mode, align_corners, shape, size", [
    ("nearest", False, (1, 2, 5, 7), (8, 3)), ("nearest-exact", False, (1, 2, 5, 7), (8, 3)),
    ("bilinear", False, (1, 2, 5, 7), (8, 3)), ("bilinear", True, (1, 2, 5, 7), (8, 3)),
    ("linear", False, (2, 3, 6), (13,)), ("trilinear", True, (1, 1, 3, 4, 2), (5, 2, 3)),
    ("bilinear", False, (1, 1, 4, 4), (1, 1)), ("bicubic", False, (1, 2, 5, 7), (8, 3)),
    ("bicubic", True, (1, 2, 5, 7), (9, 4)), ("area", False, (1, 2, 7, 5), (3, 4)), ("area", False, (2, 3, 7), (10,)),
])
def test_interpolate(mode, align_corners, shape, size):
    check(lambda x: x.interpolate(size, mode=mode, align_corners=align_corners),
          lambda x: F.interpolate(x, size=size, mode=mode,
                                  align_corners=align_corners if "linear" in mode or "cubic" in mode else None),
          arr(*shape))


def test_interpolate_scale_factor_and_ints():
    check(lambda x: nn.interpolate(x, scale_factor=1.7, mode="bilinear"),
          lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), arr(1, 2, 5, 4))
    check(lambda x: nn.interpolate(x, scale_factor=(2.5, 0.6)), lambda x: F.interpolate(x, scale_factor=(2.5, 0.6)),
          arr(1, 2, 5, 4))
    check(lambda x: nn.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
          lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True), arr(1, 2, 5, 4))
    img = rng.integers(0, 255, (1, 1, 3, 5)).astype(np.uint8)
    out = nn.interpolate(Tensor(img), size=(6, 7))
    assert out.dtype == dtypes.uint8
    np.testing.assert_array_equal(out.numpy(), F.interpolate(torch.tensor(img), size=(6, 7)).numpy())


# *** losses ***
N_CLASSES = 4
LOGITS = arr(5, N_CLASSES, 3)
LABELS = rng.integers(0, N_CLASSES, (5, 3)).astype(np.int64)
LABELS[0, 0] = -100  # ignored
CLASS_WEIGHT = np.abs(arr(N_CLASSES)) + 0.1
PROBS = rng.random((5, N_CLASSES, 3)).astype(np.float32)
PROBS /= PROBS.sum(1, keepdims=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_class_indices(reduction):
    check(lambda a: a.cross_entropy(Tensor(LABELS), reduction=reduction, label_smoothing=0.2,
                                    weight=Tensor(CLASS_WEIGHT)),
          lambda a: F.cross_entropy(a, torch.tensor(LABELS), weight=torch.tensor(CLASS_WEIGHT), reduction=reduction,
                                    label_smoothing=0.2), LOGITS)
    check(lambda a: a.log_softmax(1).nll_loss(Tensor(LABELS), weight=Tensor(CLASS_WEIGHT), reduction=reduction),
          lambda a: F.nll_loss(a.log_softmax(1), torch.tensor(LABELS), weight=torch.tensor(CLASS_WEIGHT),
                               reduction=reduction), LOGITS)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probabilities(reduction):
    check(lambda a: a.cross_entropy(Tensor(PROBS), reduction=reduction),
          lambda a: F.cross_entropy(a, torch.tensor(PROBS), reduction=reduction), LOGITS)
    check(lambda a: nn.cross_entropy(a, Tensor(PROBS), weight=Tensor(CLASS_WEIGHT), reduction=reduction,
                                     label_smoothing=0.2),
          lambda a: F.cross_entropy(a, torch.tensor(PROBS), weight=torch.tensor(CLASS_WEIGHT), reduction=reduction,
                                    label_smoothing=0.2), LOGITS)


def test_cross_entropy_unbatched_and_plain():
    check(lambda a: a.cross_entropy(Tensor(np.int64(2))), lambda a: F.cross_entropy(a, torch.tensor(2)), arr(4))
    check(lambda a: a.cross_entropy(Tensor(PROBS[0, :, 0].copy())),
          lambda a: F.cross_entropy(a, torch.tensor(PROBS[0, :, 0].copy())), arr(4))
    check(lambda a: a.cross_entropy(Tensor(LABELS)), lambda a: F.cross_entropy(a, torch.tensor(LABELS)), LOGITS)
    check(lambda a: nn.nll_loss(a, Tensor(np.array([3], np.int32))),
          lambda a: F.nll_loss(a, torch.tensor([3])), arr(1, 4))  # one sample


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_and_sparse_losses(reduction):
    target, pos_weight, weight = rng.random((4, 3)).astype(np.float32), np.abs(arr(3)) + 0.5, np.abs(arr(4, 3))
    check(lambda a: a.binary_crossentropy_logits(Tensor(target), reduction=reduction, pos_weight=Tensor(pos_weight),
                                                 weight=Tensor(weight)),
          lambda a: F.binary_cross_entropy_with_logits(a, torch.tensor(target), pos_weight=torch.tensor(pos_weight),
                                                       weight=torch.tensor(weight), reduction=reduction),
          arr(4, 3) * 3)
    check(lambda a: a.sigmoid().binary_crossentropy(Tensor(target), reduction=reduction, weight=Tensor(weight)),
          lambda a: F.binary_cross_entropy(a.sigmoid(), torch.tensor(target), weight=torch.tensor(weight),
                                           reduction=reduction), arr(4, 3))
    labels = np.array([1, -1, 3, 0], np.int32)
    check(lambda a: a.sparse_categorical_crossentropy(Tensor(labels), label_smoothing=0.1, reduction=reduction),
          lambda a: F.cross_entropy(a, torch.tensor(labels).long(), ignore_index=-1, label_smoothing=0.1,
                                    reduction=reduction), arr(4, 5))


# *** normalization, softmax and kin ***
def test_batch_norm_train_and_eval():
    x, weight, bias = arr(4, 3, 5, 2), arr(3), arr(3)
    ours_stats = [Tensor(np.zeros(3, np.float32)).contiguous().realize(),
                  Tensor(np.ones(3, np.float32)).contiguous().realize()]
    torch_stats = [torch.zeros(3), torch.ones(3)]
    check(lambda a: a.batch_norm(*ours_stats, Tensor(weight), Tensor(bias), training=True, momentum=0.2),
          lambda a: F.batch_norm(a, *torch_stats, torch.tensor(weight), torch.tensor(bias), training=True,
                                 momentum=0.2), x)
    for ours, theirs in zip(ours_stats, torch_stats):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    check(lambda a: a.batch_norm(*ours_stats, Tensor(weight), Tensor(bias)),
          lambda a: F.batch_norm(a, *torch_stats, torch.tensor(weight), torch.tensor(bias)), x)
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    check(lambda a: a.batchnorm(None, None, Tensor(mean), Tensor(1 / np.sqrt(var + 1e-5))),
          lambda a: F.batch_norm(a, torch.tensor(mean), torch.tensor(var)), x)


def test_layer_and_rms_norm():
    x = arr(4, 3, 5, 2)
    check(lambda a, w, b: a.layer_norm((5, 2), w, b, eps=1e-3), lambda a, w, b: F.layer_norm(a, (5, 2), w, b, eps=1e-3),
          x, arr(5, 2), arr(5, 2))
    check(lambda a: a.layernorm(-1), lambda a: F.layer_norm(a, (6,)), arr(4, 6))
    check(lambda a, w: a.rms_norm(2, w), lambda a, w: F.rms_norm(a, (2,), w), x, arr(2), atol=3e-5)
    check(lambda a: a.rms_norm((5, 2), eps=1e-2), lambda a: F.rms_norm(a, (5, 2), eps=1e-2), x)


def test_group_norm():
    check(lambda a, w, b: a.group_norm(2, w, b), lambda a, w, b: F.group_norm(a, 2, w, b), arr(3, 4, 5, 2), arr(4),
          arr(4))
    check(lambda a: a.group_norm(1, eps=1e-3), lambda a: F.group_norm(a, 1, eps=1e-3), arr(2, 3, 6))
    with pytest.raises(ValueError, match="do not split into num_groups=3"):
        Tensor.ones(2, 4, 5).group_norm(3)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, math.inf])
def test_normalize(p):
    x = arr(3, 4, 2)
    x[0, :, 0] = 0  # a zero vector: divided by eps, and no NaN in the gradient
    check(lambda a: a.normalize(p=p, dim=1), lambda a: F.normalize(a, p=p, dim=1), x, rtol=1e-4, atol=1e-5)


def test_softmax_family():
    x = arr(2, 3, 5)
    check(lambda a: a.softmax(1, dtype=dtypes.float64), lambda a: F.softmax(a, 1, dtype=torch.float64), x)
    check(lambda a: a.log_softmax(-1, dtype="float64"), lambda a: F.log_softmax(a, -1, dtype=torch.float64), x)
    check(lambda a: a.softmin(2), lambda a: F.softmin(a, 2), x)
    extreme = x * 40
    extreme[0, 0, :3] = [0.0, 100.0, -100.0]
    check(lambda a: a.logsigmoid(), F.logsigmoid, extreme)


# *** initializers ***
def test_initializers():
    Tensor.manual_seed(3)
    shape = (64, 32, 3, 3)
    fan_in, fan_out = 32 * 9, 64 * 9
    std = Tensor.kaiming_normal(*shape, a=0.0).numpy().std()
    assert abs(std - math.sqrt(2 / fan_in)) < 0.03 * math.sqrt(2 / fan_in)
    u = Tensor.scaled_uniform(64, 32).numpy()
    assert np.abs(u).max() <= 1 / math.sqrt(64 * 32) and np.abs(u).max() > 0.9 / math.sqrt(64 * 32)
    bound = math.sqrt(6 / (fan_in + fan_out)) * 2.0
    u = Tensor.xavier_uniform(*shape, gain=2.0).numpy()
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.95 * bound
    std = Tensor.xavier_normal(*shape).numpy().std()
    assert abs(std - math.sqrt(2 / (fan_in + fan_out))) < 0.03 * math.sqrt(2 / (fan_in + fan_out))
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(fan_in)  # tinygrad's default a=0.01
    u = Tensor.kaiming_uniform(*shape).numpy()
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.95 * bound
    bound = math.sqrt(6 / (64 + 32 * 9))  # tinygrad's glorot: fan_in = shape[0], fan_out = prod(shape[1:])
    u = Tensor.glorot_uniform(*shape).numpy()
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.95 * bound
    assert Tensor.kaiming_normal(3, 4, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.xavier_normal(3, 4, dtype="float16").dtype == dtypes.float16
    with pytest.raises(ValueError, match="at least 2 dims"):
        Tensor.xavier_uniform(5)


# *** half precision, empty batches, fusion ***
@pytest.mark.parametrize("dtype, torch_dtype, tol", [(dtypes.float16, torch.float16, 2e-2),
                                                     (dtypes.bfloat16, torch.bfloat16, 1e-1)])
def test_half_precision_forward(dtype, torch_dtype, tol):
    x, w = arr(2, 3, 6, 6), arr(4, 3, 3, 3)
    ours, theirs = Tensor(x).cast(dtype), torch.tensor(x).to(torch_dtype)
    ours_w, theirs_w = Tensor(w).cast(dtype), torch.tensor(w).to(torch_dtype)
    pairs = [(ours.conv2d(ours_w, padding=1), F.conv2d(theirs, theirs_w, padding=1)),
             (ours.max_pool2d((3, 3), stride=2, padding=1), F.max_pool2d(theirs, 3, 2, 1)),
             (ours.avg_pool2d((3, 3), stride=2, padding=1), F.avg_pool2d(theirs, 3, 2, 1)),
             (ours.scaled_dot_product_attention(ours, ours, is_causal=True),
              F.scaled_dot_product_attention(theirs, theirs, theirs, is_causal=True)),
             (ours.interpolate((8, 8)), F.interpolate(theirs, (8, 8), mode="bilinear")),
             (ours.layer_norm(6), F.layer_norm(theirs, (6,))), (ours.softmax(1), F.softmax(theirs, 1))]
    for o, t in pairs:
        assert o.dtype == dtype
        np.testing.assert_allclose(o.float().numpy(), t.float().numpy(), rtol=tol, atol=tol)
    assert ours.conv2d(ours_w, dtype=dtypes.float32).dtype == dtypes.float32


def test_empty_batch():
    x = Tensor(np.zeros((0, 3, 8, 8), np.float32))
    assert x.conv2d(Tensor.ones(4, 3, 3, 3)).numpy().shape == (0, 4, 6, 6)
    assert x.max_pool2d().numpy().shape == (0, 3, 4, 4)
    assert x.avg_pool2d(padding=1).numpy().shape == (0, 3, 5, 5)
    assert np.isnan(Tensor(np.zeros((0, 3), np.float32)).cross_entropy(Tensor(np.zeros((0,), np.int32))).item())


def test_windows_fuse_into_one_kernel():
    from ember.schedule import schedule
    from ember.uops import Ops, UOp

    def n_kernels(*ts):
        return len([it for it in schedule(UOp.sink(*(t.uop for t in ts))).items if it.ast.op is Ops.SINK])

    x, w = Tensor(arr(2, 3, 8, 8)), Tensor(arr(4, 3, 3, 3))
    assert n_kernels(x.conv2d(w, Tensor(arr(4)), padding=1, stride=2)) == 1  # windows, products, sum, bias
    assert n_kernels(x.conv_transpose2d(Tensor(arr(3, 4, 3, 3)), stride=2)) == 1
    assert n_kernels(x.max_pool2d((3, 3), stride=2, padding=1)) == 1
    assert n_kernels(x.avg_pool2d((3, 3), stride=2, padding=1)) == 1


# *** on the PYTHON device (the renderer's reference), tiny shapes ***
def test_on_the_python_device():
    check(lambda x, w: x.conv2d(w, padding=1).max_pool2d((2, 2)),
          lambda x, w: F.max_pool2d(F.conv2d(x, w, padding=1), 2), arr(1, 1, 4, 4), arr(2, 1, 3, 3), device="PYTHON")
    labels = np.array([1, 0], np.int32)
    check(lambda a: a.cross_entropy(Tensor(labels, "PYTHON"), label_smoothing=0.1),
          lambda a: F.cross_entropy(a, torch.tensor(labels).long(), label_smoothing=0.1), arr(2, 3), device="PYTHON")


# *** errors at the API boundary ***
def test_conv_and_pool_errors():
    x = Tensor.ones(1, 4, 5, 5)
    with pytest.raises(ValueError, match="groups=2 do not match"):
        x.conv2d(Tensor.ones(4, 3, 3, 3), groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3))
    with pytest.raises(ValueError, match="not supported for strided"):
        x.conv2d(Tensor.ones(2, 4, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match="'valid', 'same' or ints"):
        x.conv2d(Tensor.ones(2, 4, 3, 3), padding="full")
    with pytest.raises(ValueError, match="padding must be an int, 2 ints"):
        x.conv2d(Tensor.ones(2, 4, 3, 3), padding=(1, 1, 1))
    with pytest.raises(ValueError, match="expected \\(N, C, \\*spatial\\)"):
        Tensor.ones(5, 5).conv2d(Tensor.ones(2, 4, 3, 3))
    with pytest.raises(TypeError, match="weight must be a Tensor"):
        x.conv2d(np.ones((2, 4, 3, 3)))
    with pytest.raises(ValueError, match="bias must be a Tensor of shape \\(2,\\)"):
        x.conv2d(Tensor.ones(2, 4, 3, 3), Tensor.ones(3))
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        x.conv2d(Tensor.ones(2, 4, 3, 3), stride=0)
    with pytest.raises(ValueError, match="output_padding .* must be smaller"):
        x.conv_transpose2d(Tensor.ones(4, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="at most half the"):
        x.max_pool2d((2, 2), padding=2)
    with pytest.raises(ValueError, match="kernel_size must be an int >= 1"):
        x.avg_pool2d((0, 2))
    with pytest.raises(ValueError, match="indices must be an int tensor"):
        x.max_unpool2d(Tensor.ones(1, 4, 5, 5))


def test_attention_and_interpolate_errors():
    q, k = Tensor.ones(1, 4, 3, 8), Tensor.ones(1, 2, 5, 8)
    with pytest.raises(ValueError, match="pass enable_gqa=True"):
        q.scaled_dot_product_attention(k, k)
    with pytest.raises(ValueError, match="not a multiple of the key and value heads"):
        q.scaled_dot_product_attention(Tensor.ones(1, 3, 5, 8), Tensor.ones(1, 3, 5, 8), enable_gqa=True)
    with pytest.raises(ValueError, match="cannot both be given"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(3, 3), is_causal=True)
    with pytest.raises(ValueError, match="dropout_p must be in \\[0, 1\\)"):
        q.scaled_dot_product_attention(q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match="do not align"):
        q.scaled_dot_product_attention(Tensor.ones(1, 4, 5, 7), Tensor.ones(1, 4, 5, 7))
    with pytest.raises(TypeError, match="attn_mask must be bool or float"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(3, 3, dtype=dtypes.int32))
    img = Tensor.ones(1, 1, 4, 4)
    with pytest.raises(ValueError, match="'bicubic' resamples 2 dims"):
        img.interpolate((8,), mode="bicubic")
    with pytest.raises(ValueError, match="mode must be one of"):
        img.interpolate((8, 8), mode="cubic")
    with pytest.raises(ValueError, match="resamples 3 dims"):
        img.interpolate((8, 8), mode="trilinear")
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        img.interpolate()
    with pytest.raises(ValueError, match="align_corners applies to the linear and cubic modes"):
        img.interpolate((8, 8), mode="nearest", align_corners=True)
    with pytest.raises(TypeError, match="needs a float tensor"):
        Tensor.ones(1, 1, 4, 4, dtype=dtypes.int32).interpolate((8, 8))


def test_loss_and_norm_errors():
    logits = Tensor.ones(4, 3)
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none'"):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be in \\[0, 1\\]"):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="does not match the input"):
        logits.cross_entropy(Tensor([0, 1]))
    with pytest.raises(ValueError, match="probability targets must have the input's shape"):
        logits.cross_entropy(Tensor.ones(4, 2))
    with pytest.raises(ValueError, match="weight must be a Tensor of shape \\(3,\\)"):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), weight=Tensor.ones(4))
    with pytest.raises(TypeError, match="class-index targets must be an int tensor"):
        logits.nll_loss(Tensor([True, False, True, True]))
    with pytest.raises(TypeError, match="labels must be an int tensor"):
        logits.sparse_categorical_crossentropy(Tensor.ones(4))
    with pytest.raises(ValueError, match="differs from the input shape"):
        logits.binary_crossentropy_logits(Tensor.ones(4))
    with pytest.raises(ValueError, match="must be the last dims"):
        logits.layer_norm((4,))
    with pytest.raises(ValueError, match="weight must have shape \\(3,\\)"):
        logits.rms_norm(3, Tensor.ones(4))
    with pytest.raises(ValueError, match="running_mean and running_var are needed"):
        logits.batch_norm(None, None)
    with pytest.raises(ValueError, match="more than one value per channel"):
        Tensor.ones(1, 3).batch_norm(None, None, training=True)
    with pytest.raises(ValueError, match="p must be a positive number"):
        logits.normalize(p=0)


_RNG = np.random.default_rng(11)


def _sign(*shape):
    return np.where(_RNG.random(shape) > 0.5, 1.0, -1.0).astype(np.float32)


def _normal(*shape, scale=1.0):
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


# name: (torch loss, its inputs: differentiated arrays, then constant arrays, then keywords)
MARGIN_LOSSES = {
    "soft_margin_loss": ([_normal(4, 3, scale=30)], [_sign(4, 3)], {}),
    "hinge_embedding_loss": ([_normal(4, 3)], [_sign(4, 3)], {"margin": 0.5}),
    "margin_ranking_loss": ([_normal(5), _normal(5)], [_sign(5)], {"margin": 0.2}),
    "poisson_nll_loss": ([_normal(4, 3)], [np.abs(_normal(4, 3)) * 3], {}),
    "gaussian_nll_loss": ([_normal(4, 3), _normal(4, 3), np.abs(_normal(4)) * 1e-7], [], {"full": True}),
    "cosine_embedding_loss": ([_normal(4, 3), _normal(4, 3)], [_sign(4)], {"margin": 0.1}),
    "triplet_margin_loss": ([_normal(4, 3), _normal(4, 3), _normal(4, 3)], [], {"p": 1, "swap": True, "margin": 2.0}),
    "multi_margin_loss": ([_normal(4, 3)], [np.array([0, 2, 1, 2])], {"p": 2, "margin": 0.7}),
    "multilabel_soft_margin_loss": ([_normal(3, 4)], [(_normal(3, 4) > 0).astype(np.float32)], {}),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(MARGIN_LOSSES))
def test_margin_and_likelihood_losses_as_torch(name, reduction):
    # the rest of torch.nn.functional's losses, as methods and nn functions: forward and gradients vs torch
    diff, const, kw = MARGIN_LOSSES[name]
    ts = [torch.tensor(a, requires_grad=True) for a in diff]
    want = getattr(F, name)(*ts, *[torch.tensor(c) for c in const], reduction=reduction, **kw)
    want.sum().backward()
    es = [Tensor(a, requires_grad=True) for a in diff]
    got = getattr(nn, name)(*es, *[Tensor(c.astype(np.int32) if c.dtype.kind == "i" else c) for c in const],
                            reduction=reduction, **kw)
    got.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    for e, t in zip(es, ts):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nd, shape", [(1, (2, 3, 7)), (3, (1, 2, 4, 6, 4))])
def test_max_unpool_1d_3d(nd, shape):
    # F.max_unpool1d/3d (torch's argument order) invert max_pool1d/3d(return_indices=True); gradients vs torch
    x = _normal(*shape)
    xt = torch.tensor(x, requires_grad=True)
    out, idx = getattr(F, f"max_pool{nd}d")(xt, 2, return_indices=True)
    want = getattr(F, f"max_unpool{nd}d")(out, idx, 2, output_size=shape[2:])
    want.sum().backward()
    xe = Tensor(x, requires_grad=True)
    out, idx = getattr(xe, f"max_pool{nd}d")(2, return_indices=True)
    got = getattr(nn, f"max_unpool{nd}d")(out, idx, 2, output_size=shape[2:])
    got.sum().backward()
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(xe.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "area"])
@pytest.mark.parametrize("scale_factor", [1.7, (0.6, 2.3)])
def test_interpolate_recompute_scale_factor(mode, scale_factor):
    # recompute_scale_factor=True samples by the output size floor(in * scale) alone (torch's); forward and gradient
    x = _normal(1, 2, 5, 6)
    xt = torch.tensor(x, requires_grad=True)
    want = F.interpolate(xt, scale_factor=scale_factor, mode=mode, recompute_scale_factor=True)
    want.sum().backward()
    xe = Tensor(x, requires_grad=True)
    got = nn.interpolate(xe, scale_factor=scale_factor, mode=mode, recompute_scale_factor=True, antialias=False)
    got.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="antialias"):
        nn.interpolate(xe, size=3, mode="bilinear", antialias=True)
