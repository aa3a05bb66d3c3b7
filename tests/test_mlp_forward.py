"""Integration: a 3-layer MLP forward pass on the CPU, through schedule -> codegen -> runtime, against numpy."""

import numpy as np

from ember.tensor import Tensor


def test_three_layer_mlp_forward_matches_numpy():
    rng = np.random.default_rng(42)
    sizes = [33, 64, 32, 10]
    ws = [rng.standard_normal((i, o)).astype(np.float32) / np.sqrt(i) for i, o in zip(sizes, sizes[1:])]
    bs = [rng.standard_normal(o).astype(np.float32) * 0.1 for o in sizes[1:]]
    x = rng.standard_normal((17, sizes[0])).astype(np.float32)

    h, ref = Tensor(x, "CPU"), x
    for n, (w, b) in enumerate(zip(ws, bs)):
        h = h @ Tensor(w, "CPU") + Tensor(b, "CPU")
        ref = ref @ w + b
        if n < len(ws) - 1:
            h, ref = h.relu(), np.maximum(ref, 0)
    e = (h - h.max(-1, keepdim=True)).exp()
    out = e / e.sum(-1, keepdim=True)  # softmax over the logits
    ref_out = np.exp(ref - ref.max(-1, keepdims=True))
    ref_out = ref_out / ref_out.sum(-1, keepdims=True)
    np.testing.assert_allclose(h.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-4, atol=1e-6)
