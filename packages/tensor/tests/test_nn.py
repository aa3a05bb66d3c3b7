"""nn layers and functional forms against PyTorch, forward and backward."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, dtypes, nn

rng = np.random.default_rng(0)


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def check_fwd_bwd(ours_fn, theirs_fn, *arrays, rtol=1e-4, atol=1e-5):
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    o, t = ours_fn(*ours), theirs_fn(*theirs)
    np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
    up = arr(*t.shape) if t.shape else np.float32(1.0)
    (o * Tensor(up)).sum().backward()
    (t * torch.tensor(up)).sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=atol)


def test_linear_layernorm_rmsnorm():
    check_fwd_bwd(nn.linear, F.linear, arr(4, 7), arr(5, 7), arr(5))
    check_fwd_bwd(nn.layernorm, lambda x: F.layer_norm(x, (33,)), arr(6, 33))
    check_fwd_bwd(lambda x: nn.rmsnorm(x, eps=1e-5), lambda x: F.rms_norm(x, (33,), eps=1e-5), arr(6, 33))
    lin = nn.Linear(7, 5)
    assert lin.weight.shape == (5, 7) and lin.bias.shape == (5,)
    assert np.abs(lin.weight.numpy()).max() <= 1 / np.sqrt(7)


def test_embedding():
    w = arr(10, 4)
    idx = np.array([[1, 3, 9], [0, 0, 2]], np.int32)
    wt = torch.tensor(w, requires_grad=True)
    ours_w = Tensor(w, requires_grad=True)
    out = nn.embedding(Tensor(idx), ours_w)
    ref = F.embedding(torch.tensor(idx).long(), wt)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy())
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(ours_w.grad.numpy(), wt.grad.numpy())
    with pytest.raises(TypeError, match="integer tensor"):
        nn.embedding(Tensor(np.ones(3, np.float32)), ours_w)


def test_module_keywords_as_torch():
    # nn.Embedding(padding_idx=): that row starts at zeros and gets no gradient; LayerNorm(bias=False);
    # BatchNorm1d/2d/3d are BatchNorm (its statistics are over every axis but 1)
    emb = nn.Embedding(4, 3, padding_idx=-1)
    np.testing.assert_array_equal(emb.weight.numpy()[3], 0.0)
    emb.weight.requires_grad = True
    emb(Tensor([[3, 1], [1, 0]])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy(), [[1] * 3, [2] * 3, [0] * 3, [0] * 3])
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(4, 3, padding_idx=4)
    ln = nn.LayerNorm(4, bias=False)
    assert ln.bias is None
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(ln(Tensor(x)).numpy(), F.layer_norm(torch.tensor(x), (4,), bias=None).numpy(),
                               rtol=1e-5, atol=1e-6)
    assert nn.BatchNorm2d is nn.BatchNorm and nn.BatchNorm1d is nn.BatchNorm and nn.BatchNorm3d is nn.BatchNorm


@pytest.mark.parametrize("causal", [False, True])
def test_attention_gqa(causal):
    q, k, v = arr(2, 4, 5, 8), arr(2, 2, 5, 8), arr(2, 2, 5, 8)

    def theirs(q, k, v):
        return F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                              is_causal=causal)
    check_fwd_bwd(lambda q, k, v: nn.scaled_dot_product_attention(q, k, v, is_causal=causal), theirs, q, k, v)


def test_attention_explicit_mask():
    q, k, v = arr(1, 2, 4, 8), arr(1, 2, 6, 8), arr(1, 2, 6, 8)
    mask = rng.integers(0, 2, (4, 6)).astype(bool)
    mask[:, 0] = True
    out = nn.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), attn_mask=Tensor(mask))
    ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                         attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sparse_categorical_crossentropy(smoothing):
    logits = arr(6, 11)
    labels = np.array([1, 5, -1, 10, 0, -1], np.int32)
    lt = torch.tensor(logits, requires_grad=True)
    ref = F.cross_entropy(lt, torch.tensor(labels).long(), ignore_index=-1, label_smoothing=smoothing)
    ours_l = Tensor(logits, requires_grad=True)
    out = nn.sparse_categorical_crossentropy(ours_l, Tensor(labels), ignore_index=-1, label_smoothing=smoothing)
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)
    out.backward()
    ref.backward()
    np.testing.assert_allclose(ours_l.grad.numpy(), lt.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="differ in their leading dims"):
        nn.sparse_categorical_crossentropy(ours_l, Tensor(labels[:3]))


def test_other_losses():
    x, y = arr(5, 3), rng.random((5, 3)).astype(np.float32)
    check_fwd_bwd(lambda a: nn.binary_crossentropy_logits(a, Tensor(y)),
                  lambda a: F.binary_cross_entropy_with_logits(a, torch.tensor(y)), x)
    p = 1 / (1 + np.exp(-x))
    check_fwd_bwd(lambda a: nn.binary_crossentropy(a, Tensor(y)), lambda a: F.binary_cross_entropy(a, torch.tensor(y)),
                  p.astype(np.float32))
    check_fwd_bwd(lambda a, b: nn.mse(a, b), F.mse_loss, x, y)
    probs = rng.random((5, 3)).astype(np.float32)
    probs /= probs.sum(1, keepdims=True)
    check_fwd_bwd(lambda a: nn.cross_entropy(a, Tensor(probs)), lambda a: F.cross_entropy(a, torch.tensor(probs)), x)


def test_dropout():
    x = Tensor.ones(1000)
    assert nn.dropout(x, 0.5, training=False) is x
    kept = nn.dropout(x, 0.25).numpy()
    assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)} and 650 < (kept > 0).sum() < 850
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        nn.dropout(x, 1.0)
    assert nn.Embedding(7, 3).weight.dtype == dtypes.float32


@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(padding=1), dict(dilation=2), dict(groups=2),
                                dict(stride=(2, 1), padding=(1, 2))])
def test_conv2d(kw):
    check_fwd_bwd(lambda x, w, b: nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw),
                  arr(2, 4, 9, 8), arr(6, 4 // kw.get("groups", 1), 3, 3), arr(6))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2), dict(kernel_size=3, padding=1)])
def test_pools(kw):
    check_fwd_bwd(lambda x: nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), arr(2, 3, 9, 8))
    check_fwd_bwd(lambda x: nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), arr(2, 3, 9, 8))


def test_conv_errors():
    with pytest.raises(ValueError, match="do not match"):
        nn.conv2d(Tensor.ones(1, 3, 5, 5), Tensor.ones(4, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        nn.conv2d(Tensor.ones(1, 1, 2, 2), Tensor.ones(1, 1, 3, 3))
    assert nn.Conv2d(4, 6, 3)(Tensor.ones(1, 4, 5, 5)).shape == (1, 6, 3, 3)


def test_batchnorm_train_and_eval():
    x1, x2 = arr(4, 3, 5, 5), arr(4, 3, 5, 5)
    ours, ref = nn.BatchNorm(3), torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
    ours.weight = Tensor(np.array([1.0, 2.0, 0.5], np.float32), requires_grad=True)
    for x in (x1, x2):
        xt = torch.tensor(x, requires_grad=True)
        xo = Tensor(x, requires_grad=True)
        out, want = ours(xo), ref(xt)
        np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        (out * out).sum().backward()
        (want * want).sum().backward()
        np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-6)
    ours.training = False
    ref.eval()
    np.testing.assert_allclose(ours(Tensor(x1)).numpy(), ref(torch.tensor(x1)).detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"expected \(N, C, ...\)"):
        ours(Tensor.ones(3))


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (2, 8, 5, 7)])
def test_sdpa_grouped_query_heads_with_masks(mask_shape):
    import torch

    from ember.tensor.nn import layers

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 8, 5, 16), dtype=np.float32)
    k = rng.standard_normal((2, 4, 7, 16), dtype=np.float32)
    v = rng.standard_normal((2, 4, 7, 8), dtype=np.float32)
    m = rng.standard_normal(mask_shape).astype(np.float32)
    got = layers.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), attn_mask=Tensor(m)).numpy()
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                                            attn_mask=torch.tensor(m), enable_gqa=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
